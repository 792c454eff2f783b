"""OpenAI response bodies and stream chunks, and server-sent event framing."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from riftco.serve.engine import Finished, TokenLogprob

SYSTEM_FINGERPRINT = "riftco-serve"


def new_id(prefix: str) -> str:
    """``cmpl-…`` / ``chatcmpl-…``: 24 random hex digits after the prefix."""
    return f"{prefix}-{secrets.token_hex(12)}"


def usage(finished: Finished) -> dict[str, int]:
    return {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
    }


def chat_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    """OpenAI's chat shape: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    return {
        "content": [
            {
                "token": e.token,
                "logprob": e.logprob,
                "bytes": list(e.bytes),
                "top_logprobs": [{"token": t, "logprob": p, "bytes": list(b)} for t, b, p in e.top],
            }
            for e in entries
        ],
        "refusal": None,
    }


def completion_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    """The legacy completions shape: ``{tokens, token_logprobs, top_logprobs,
    text_offset}`` (one ``{text: logprob}`` object per token)."""
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t: p for t, _, p in e.top} for e in entries],
        "text_offset": [e.offset for e in entries],
    }


@dataclass
class ChoiceResult:
    """One choice, collected: its text (an echoed prompt first), how it ended, and its
    tokens' log-probabilities (when asked for)."""

    text: str
    finished: Finished
    logprobs: list[TokenLogprob] = field(default_factory=list)


class Shapes:
    """Response shapes of one request (one id, one creation time, one model).
    ``logprobs``: whether the choices carry log-probabilities; ``n``: choices per
    prompt (usage counts each prompt once)."""

    def __init__(self, chat: bool, model: str, logprobs: bool = False, n: int = 1) -> None:
        self.chat = chat
        self.model = model
        self.logprobs = logprobs
        self.n = n
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

    def _logprobs(self, entries: Sequence[TokenLogprob]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        return chat_logprobs(entries) if self.chat else completion_logprobs(entries)

    def usage(self, finished: Sequence[Finished]) -> dict[str, int]:
        """Usage over every choice: each prompt counted once, every completion token."""
        prompt = sum(f.prompt_tokens for k, f in enumerate(finished) if k % self.n == 0)
        completion = sum(f.completion_tokens for f in finished)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def complete(
        self, text: str | Sequence[ChoiceResult], finished: Finished | None = None
    ) -> dict[str, Any]:
        """The whole (non-streamed) response: one text and its `Finished`, or the
        collected choices in order."""
        if isinstance(text, str):
            assert finished is not None
            results: Sequence[ChoiceResult] = [ChoiceResult(text, finished)]
        else:
            results = text
        choices = []
        for index, result in enumerate(results):
            choice: dict[str, Any] = {"index": index}
            if self.chat:
                calls = result.finished.tool_calls
                choice["message"] = {
                    "role": "assistant",
                    "content": result.text if result.text or not calls else None,
                }
                if calls:
                    choice["message"]["tool_calls"] = [c.to_openai() for c in calls]
            else:
                choice["text"] = result.text
            choice["logprobs"] = self._logprobs(result.logprobs)
            choice["finish_reason"] = result.finished.finish_reason
            choices.append(choice)
        body = self._head("chat.completion" if self.chat else "text_completion")
        return {**body, "choices": choices, "usage": self.usage([r.finished for r in results])}

    def chunk(
        self,
        text: str | None,
        finish_reason: str | None = None,
        first: bool = False,
        index: int = 0,
        logprobs: Sequence[TokenLogprob] = (),
    ) -> dict[str, Any]:
        """One streamed chunk of choice ``index``; the last carries ``finish_reason``
        and no text."""
        if self.chat:
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": index, "delta": delta}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": index, "text": text or ""}
            obj = "text_completion"
        choice["logprobs"] = self._logprobs(logprobs) if logprobs else None
        choice["finish_reason"] = finish_reason
        return {**self._head(obj), "choices": [choice]}

    def tool_calls_chunk(self, calls: Sequence[Any], index: int = 0) -> dict[str, Any]:
        """The streamed tool calls of choice ``index`` (whole, in one delta)."""
        delta = {"tool_calls": [c.to_openai(k) for k, c in enumerate(calls)]}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        return {**self._head("chat.completion.chunk"), "choices": [choice]}

    def usage_chunk(self, finished: Finished | Sequence[Finished]) -> dict[str, Any]:
        """The extra chunk of ``stream_options: {"include_usage": true}``."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        every = [finished] if isinstance(finished, Finished) else list(finished)
        return {**self._head(obj), "choices": [], "usage": self.usage(every)}


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: …`` and a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


SSE_DONE = sse("[DONE]")

__all__ = [
    "SSE_DONE",
    "ChoiceResult",
    "Shapes",
    "chat_logprobs",
    "completion_logprobs",
    "new_id",
    "sse",
    "usage",
]
