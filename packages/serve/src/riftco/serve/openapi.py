"""The OpenAPI 3.1 document of what the server accepts (``GET /openapi.json``).

It is built from the same field sets and bounds the request parser enforces
(`protocol`), so a schema-driven fuzzer's "valid" cases are the ones the server
serves and its "invalid" ones are refused with a 4xx.
"""

from __future__ import annotations

from typing import Any

from riftco.serve.config import ServerConfig
from riftco.serve.protocol import (
    CHAT_ROLES,
    IGNORED,
    MAX_LOGIT_BIAS,
    MAX_MESSAGES,
    MAX_TOP_LOGPROBS,
)

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def _sampling(config: ServerConfig) -> dict[str, Any]:
    return {
        "model": {"type": "string", "minLength": 1},
        "max_tokens": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": config.max_tokens_limit,
        },
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "top_p": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
        "top_k": {"type": ["integer", "null"], "minimum": -1, "maximum": 1 << 31},
        "seed": {"type": ["integer", "null"], "minimum": -(1 << 63), "maximum": (1 << 64) - 1},
        "repetition_penalty": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 100},
        "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
        "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
        "logit_bias": {
            "type": ["object", "null"],
            "maxProperties": MAX_LOGIT_BIAS,
            "propertyNames": {"pattern": "^[0-9]{1,12}$"},
            "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
        },
        "n": {"type": ["integer", "null"], "minimum": 1, "maximum": config.max_choices},
        "stop": {
            "oneOf": [
                {"type": "null"},
                {"type": "string", "minLength": 1, "maxLength": config.max_stop_length},
                {
                    "type": "array",
                    "maxItems": config.max_stop_strings,
                    "items": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": config.max_stop_length,
                    },
                },
            ]
        },
        "stream": {"type": ["boolean", "null"]},
        "response_format": _response_format(),
        **{name: {} for name in sorted(IGNORED)},
    }


def _tool_call() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "function"],
        "properties": {
            "id": {"type": "string"},
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "required": ["name", "arguments"],
                "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
            },
        },
    }


def _response_format() -> dict[str, Any]:
    return {
        "oneOf": [
            {"type": "null"},
            {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"enum": ["text", "json_object"]}},
                "additionalProperties": False,
            },
            {
                "type": "object",
                "required": ["type", "json_schema"],
                "properties": {
                    "type": {"const": "json_schema"},
                    "json_schema": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                            "schema": {"type": "object"},
                            "strict": {"type": ["boolean", "null"]},
                            "description": {"type": "string"},
                        },
                        "additionalProperties": False,
                    },
                },
                "additionalProperties": False,
            },
        ]
    }


def _tools() -> dict[str, Any]:
    function = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
            "description": {"type": "string"},
            "parameters": {"type": "object"},
            "strict": {"type": ["boolean", "null"]},
        },
        "additionalProperties": False,
    }
    tool = {
        "type": "object",
        "required": ["type", "function"],
        "properties": {"type": {"const": "function"}, "function": function},
        "additionalProperties": False,
    }
    return {
        "tools": {"type": ["array", "null"], "items": tool},
        "tool_choice": {
            "oneOf": [
                {"type": "null"},
                {"enum": ["none", "auto", "required"]},
                {
                    "type": "object",
                    "required": ["type", "function"],
                    "properties": {
                        "type": {"const": "function"},
                        "function": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": {"type": "string"}},
                        },
                    },
                    "additionalProperties": False,
                },
            ]
        },
        "parallel_tool_calls": {"type": ["boolean", "null"]},
    }


def _message() -> dict[str, Any]:
    text_part = {
        "type": "object",
        "required": ["type", "text"],
        "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    }
    return {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": sorted(CHAT_ROLES)},
            "content": {
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "items": text_part},
                    {"type": "null"},
                ]
            },
            "name": {"type": "string"},
            "tool_calls": {"type": "array", "minItems": 1, "items": _tool_call()},
            "tool_call_id": {"type": "string"},
        },
        "additionalProperties": False,
    }


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _answers(description: str) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": _ERROR}}}
    return {
        "200": {
            "description": description,
            "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {}}},
        },
        "4XX": {"description": "refused: an OpenAI error object", **error},
        "503": {"description": "loading, or too many connections", **error},
    }


def openapi_document(config: ServerConfig) -> dict[str, Any]:
    """The OpenAPI 3.1 document for a server under ``config``.

    Combinations the parser refuses are not spelled out here: ``echo`` with
    ``logprobs`` (400), more than ``max_choices`` prompts times ``n`` (422),
    ``top_logprobs`` without ``logprobs`` (422), a ``logit_bias`` id past the
    vocabulary (400), a schema or tools the grammar engine refuses (400), tools for a
    chat template without a tool-call syntax (400), ``tool_choice`` naming a function
    not in ``tools`` (422), ``tools`` with ``response_format`` (400)."""
    tokens = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}
    completion = {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {
            **_sampling(config),
            "prompt": {
                "oneOf": [
                    {"type": "string"},
                    tokens,
                    {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": config.max_choices,
                        "items": {"oneOf": [{"type": "string"}, tokens]},
                    },
                ]
            },
            "echo": {"type": ["boolean", "null"]},
            "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_TOP_LOGPROBS},
        },
        "additionalProperties": False,
    }
    chat = {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            **_sampling(config),
            "max_completion_tokens": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": config.max_tokens_limit,
            },
            "messages": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_MESSAGES,
                "items": _message(),
            },
            **_tools(),
            "logprobs": {"type": ["boolean", "null"]},
            "top_logprobs": {
                "type": ["integer", "null"],
                "minimum": 0,
                "maximum": MAX_TOP_LOGPROBS,
            },
        },
        "additionalProperties": False,
    }
    simple = {"200": {"description": "ok"}, "503": {"description": "not ready"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "riftco-serve", "version": "1"},
        "paths": {
            "/health": {"get": {"responses": simple}},
            "/v1/models": {"get": {"responses": {"200": {"description": "the served model"}}}},
            "/v1/completions": {
                "post": {"requestBody": _json_body(completion), "responses": _answers("text")}
            },
            "/v1/chat/completions": {
                "post": {"requestBody": _json_body(chat), "responses": _answers("a reply")}
            },
        },
    }


__all__ = ["openapi_document"]
