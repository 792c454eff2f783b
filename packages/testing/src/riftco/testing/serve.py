"""A deterministic stand-in engine, for testing HTTP clients without a model.

`ScriptedEngine` answers every request with the words of its prompt in
reverse order (``"a b c"`` → ``"c b a"``), one word per token, then stops with
``finish_reason="stop"``, or with ``"length"`` after ``max_tokens`` words. It
honours ``stop`` strings and ``truncate`` (a word per token), refuses requests beyond ``capacity`` with
`Overloaded`, and records the requests it saw and the ones closed early.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from riftco.serve.channel import EventChannel
from riftco.serve.engine import ChatMessage, EngineStats, Finished, GenerationRequest, TextDelta
from riftco.serve.errors import Overloaded, RequestError
from riftco.serve.fitting import fit_chat


def render_prompt(request: GenerationRequest) -> str:
    if request.messages is not None:
        return "\n".join(f"{m.role}: {m.content}" for m in request.messages)
    if isinstance(request.prompt, tuple):
        return " ".join(str(t) for t in request.prompt)
    return request.prompt or ""


def scripted_reply(request: GenerationRequest) -> list[str]:
    """The tokens `ScriptedEngine` produces before its end of text."""
    text = request.messages[-1].content if request.messages else render_prompt(request)
    words = text.split()[::-1]
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


@dataclass
class ScriptedEngine:
    model_id: str = "scripted"
    max_context: int = 1024
    capacity: int = 8
    token_delay: float = 0.0
    started: bool = False
    closed: bool = False
    seen: list[GenerationRequest] = field(default_factory=list)
    closed_early: int = 0
    active: int = 0
    rejected: int = 0
    generated: int = 0

    def start(self) -> None:
        self.started = True

    def close(self) -> None:
        self.closed = True

    def stats(self) -> EngineStats:
        return EngineStats(
            running=self.active,
            pages_in_use=self.active,
            pages_total=self.capacity,
            generated_tokens_total=self.generated,
            requests_rejected_total=self.rejected,
        )

    def submit(self, request: GenerationRequest) -> EventChannel:
        if not self.started or self.closed:
            raise RuntimeError("ScriptedEngine: submit before start or after close")
        prompt = render_prompt(request)
        dropped = 0
        if request.truncate and request.messages is not None:
            messages, dropped = _fit_words(request, self.max_context)
            request = dataclasses.replace(request, messages=messages)
            prompt = render_prompt(request)
        if len(prompt.split()) > self.max_context:
            raise RequestError(
                f"The prompt has more than {self.max_context} tokens",
                param="prompt",
                code="context_length_exceeded",
            )
        if self.active >= self.capacity:
            self.rejected += 1
            raise Overloaded(f"All {self.capacity} slots are busy", retry_after=2)
        self.seen.append(request)
        self.active += 1
        task: asyncio.Task[None] | None = None

        def on_close() -> None:
            self.closed_early += 1
            if task is not None:
                task.cancel()

        channel = EventChannel(asyncio.get_running_loop(), on_close)
        channel.dropped_messages = dropped
        task = asyncio.get_running_loop().create_task(self._run(request, channel))
        # The slot is freed when the task ends however it ends: a task cancelled
        # before it first runs never enters _run, so a `finally` there would leak it.
        task.add_done_callback(self._release)
        return channel

    def _release(self, task: asyncio.Task[None]) -> None:
        self.active -= 1

    async def _run(self, request: GenerationRequest, channel: EventChannel) -> None:
        options = request.options
        prompt_tokens = len(render_prompt(request).split())
        text, count, reason = "", 0, "stop"
        for token in scripted_reply(request):
            if count == options.max_new_tokens:
                reason = "length"
                break
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            count += 1
            self.generated += 1
            text += token
            found = [i for i in (text.find(s) for s in request.stop) if i >= 0]
            if found:
                cut = min(found)
                emitted = len(text) - len(token)
                if cut > emitted:
                    channel.put(TextDelta(text[emitted:cut]))
                break
            channel.put(TextDelta(token))
        channel.put(Finished(reason, prompt_tokens, count))  # type: ignore[arg-type]


def _fit_words(request: GenerationRequest, context: int) -> tuple[tuple[ChatMessage, ...], int]:
    """`fit_chat` with a word per token (the scripted engine's tokenizer)."""
    messages = request.messages or ()

    def encode(chat: Sequence[ChatMessage]) -> list[int]:
        text = render_prompt(dataclasses.replace(request, messages=tuple(chat)))
        return [0] * len(text.split())

    _, dropped = fit_chat(messages, encode, context, request.options.max_new_tokens)
    system = tuple(m for m in messages if m.role == "system")
    turns = tuple(m for m in messages if m.role != "system")
    return system + turns[dropped:], dropped


__all__ = ["ScriptedEngine", "render_prompt", "scripted_reply"]
