"""OpenAI response bodies and stream chunks, and server-sent event framing."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from riftco.serve.engine import Finished

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


class Shapes:
    """Response shapes of one request (one id, one creation time, one model)."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.model = model
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

    def complete(self, text: str, finished: Finished) -> dict[str, Any]:
        """The whole (non-streamed) response."""
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finished.finish_reason,
            }
            body = self._head("chat.completion")
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finished.finish_reason,
            }
            body = self._head("text_completion")
        return {**body, "choices": [choice], "usage": usage(finished)}

    def chunk(
        self, text: str | None, finish_reason: str | None = None, first: bool = False
    ) -> dict[str, Any]:
        """One streamed chunk; the last carries ``finish_reason`` and no text."""
        if self.chat:
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or ""}
            obj = "text_completion"
        choice["logprobs"] = None
        choice["finish_reason"] = finish_reason
        return {**self._head(obj), "choices": [choice]}

    def usage_chunk(self, finished: Finished) -> dict[str, Any]:
        """The extra chunk of ``stream_options: {"include_usage": true}``."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage(finished)}


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: …`` and a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


SSE_DONE = sse("[DONE]")

__all__ = ["SSE_DONE", "Shapes", "new_id", "sse", "usage"]
