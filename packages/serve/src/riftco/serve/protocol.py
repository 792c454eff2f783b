"""OpenAI request bodies to `GenerationRequest`s, with OpenAI-style errors.

The sampling fields map onto riftco-nn's `SamplingConfig`: ``max_tokens`` (or
``max_completion_tokens``) is ``max_new_tokens``; OpenAI's disabled values
(``top_k`` 0 or -1, ``top_p`` 1) become ``None``; ``presence_penalty``,
``frequency_penalty``, ``logit_bias`` (string keys of token ids) and ``logprobs``
(chat: ``logprobs`` true and ``top_logprobs`` k; completions: ``logprobs`` k) map to
the fields of the same names. A request becomes one `GenerationRequest` per choice:
``n`` choices of each prompt (a list of prompts in completions), prompt-major, choice
i of a prompt seeded ``seed + i`` (riftco-nn's ``choice_seed``, vLLM's rule), so it
draws what a single request seeded ``seed + i`` draws. Fields we implement are
validated (wrong types and ranges raise `InvalidField`, 422). Parameters that would
change the result and that we do not implement (``best_of`` > 1, ``suffix``, audio,
...) raise `UnsupportedParameter` (400) naming them and why; harmless bookkeeping
fields (``user``, ``metadata``, ...) are accepted and ignored; anything else is
unrecognized (400).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from riftco.nn import SamplingConfig, choice_seed
from riftco.serve.config import ServerConfig
from riftco.serve.constraints import JsonOutput, ToolCalls
from riftco.serve.engine import ChatMessage, GenerationRequest
from riftco.serve.errors import InvalidField, RequestError, UnsupportedParameter
from riftco.text.grammar import GrammarError, check_tools

#: Accepted and ignored: they do not change what is generated.
IGNORED = frozenset({"user", "metadata", "store", "service_tier"})

_SAMPLING = frozenset(
    {
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "n",
        "logprobs",
    }
)
_COMMON = _SAMPLING | {"model", "stream", "stream_options", "response_format"}
COMPLETION_FIELDS = _COMMON | {"prompt", "echo"}
CHAT_FIELDS = _COMMON | {
    "messages",
    "max_completion_tokens",
    "truncation",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
}
#: The most entries of ``logit_bias`` (OpenAI documents no limit; this bounds the work).
MAX_LOGIT_BIAS = 1024
#: The most alternatives per token (``top_logprobs``; completions' ``logprobs``).
MAX_TOP_LOGPROBS = 20
#: ``truncation``: ``"auto"`` drops the oldest turns to fit the context (keeping the
#: system messages); ``"disabled"`` (the default) rejects a chat that does not fit.
TRUNCATION = ("disabled", "auto")

CHAT_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
MAX_MESSAGES = 1024


def _default(value: Any) -> bool:
    return value is None or value is False or value == 0 or value == [] or value == {}


#: Unsupported parameters, each with the test that its value leaves the result unchanged.
UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "best_of": lambda v: v is None or (type(v) is int and v == 1),
    "suffix": lambda v: v is None or v == "",
    "functions": _default,
    "function_call": lambda v: v is None or v == "none",
    "prediction": _default,
    "modalities": lambda v: v is None or v == ["text"],
    "audio": _default,
    "reasoning_effort": lambda v: v is None,
    "web_search_options": lambda v: v is None,
}


#: Why a parameter is refused on one route only.
_ROUTE_ONLY = {
    "echo": "'echo' is a /v1/completions parameter",
    "top_logprobs": "'top_logprobs' is a /v1/chat/completions parameter (completions "
    "take 'logprobs': k)",
    "tools": "'tools' is a /v1/chat/completions parameter",
    "tool_choice": "'tool_choice' is a /v1/chat/completions parameter",
    "parallel_tool_calls": "'parallel_tool_calls' is a /v1/chat/completions parameter",
}
#: Why the deprecated function-calling fields are refused.
_FUNCTIONS_WHY = "use 'tools' and 'tool_choice' (the deprecated 'functions' API is not served)"
#: A ``json_schema`` name (OpenAI's rule).
_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class ParsedRequest:
    """A validated request: what to generate (one `GenerationRequest` per choice,
    prompt-major: choice ``p * n + i`` is choice i of prompt p), and how to answer.
    ``logprobs`` is the number of alternatives per token to report (None: none asked
    for); ``n`` the choices per prompt."""

    model: str
    generations: tuple[GenerationRequest, ...]
    stream: bool
    include_usage: bool
    logprobs: int | None = None
    n: int = 1

    @property
    def generation(self) -> GenerationRequest:
        """The first choice (the only one when ``n`` is 1 and there is one prompt)."""
        return self.generations[0]


def parse_completion(body: Any, config: ServerConfig) -> ParsedRequest:
    """Validate a ``/v1/completions`` body."""
    fields = _check_fields(body, COMPLETION_FIELDS, chat=False)
    prompts = _prompts(fields.get("prompt"), config)
    echo = _bool(fields, "echo", False)
    logprobs = _int(fields, "logprobs", None, 0, MAX_TOP_LOGPROBS)
    if echo and logprobs is not None:
        raise UnsupportedParameter(
            "'echo' together with 'logprobs' is not supported: this server does not "
            "compute the prompt tokens' log-probabilities",
            param="echo",
            code="unsupported_parameter",
        )
    n = _choices(fields, config, len(prompts))
    options = _options(fields, config, logprobs)
    stop = _stop(fields.get("stop"), config)
    output = _response_format(fields.get("response_format"), chat=False)
    generations = tuple(
        GenerationRequest(
            prompt=prompt, options=_choice(options, i), stop=stop, echo=echo, constraint=output
        )
        for prompt in prompts
        for i in range(n)
    )
    return _build(fields, config, generations, logprobs, n)


def parse_chat(body: Any, config: ServerConfig) -> ParsedRequest:
    """Validate a ``/v1/chat/completions`` body."""
    fields = _check_fields(body, CHAT_FIELDS, chat=True)
    if "max_completion_tokens" in fields and fields["max_completion_tokens"] is not None:
        if fields.get("max_tokens") is not None:
            raise InvalidField(
                "Give max_tokens or max_completion_tokens, not both", param="max_tokens"
            )
        fields = {**fields, "max_tokens": fields["max_completion_tokens"]}
    messages = _messages(fields.get("messages"))
    truncation = fields.get("truncation")
    if truncation is not None and truncation not in TRUNCATION:
        raise InvalidField(
            f"'truncation' must be one of {', '.join(TRUNCATION)}, found {truncation!r}",
            param="truncation",
        )
    wants = _bool(fields, "logprobs", False)
    top = _int(fields, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top and not wants:
        raise InvalidField("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    logprobs = (top or 0) if wants else None
    n = _choices(fields, config, 1)
    options = _options(fields, config, logprobs)
    stop = _stop(fields.get("stop"), config)
    output = _response_format(fields.get("response_format"), chat=True)
    tools = _tools(fields)
    if output is not None and tools is not None and tools.offered:
        raise UnsupportedParameter(
            "'response_format' together with 'tools' is not supported: the reply is "
            "constrained by one grammar; give tool_choice 'none' or leave response_format out",
            param="response_format",
            code="unsupported_parameter",
        )
    constraint = output if output is not None else (tools if tools and tools.offered else None)
    generations = tuple(
        GenerationRequest(
            messages=messages,
            options=_choice(options, i),
            stop=stop,
            truncate=truncation == "auto",
            constraint=constraint,
            tools=tools,
        )
        for i in range(n)
    )
    return _build(fields, config, generations, logprobs, n)


def _response_format(value: Any, chat: bool) -> JsonOutput | None:
    """OpenAI's ``response_format``: ``text`` (none), ``json_object`` (any JSON object)
    or ``json_schema`` (``{"name", "schema", "strict", "description"}``; the schema is
    always enforced, ``strict`` or not)."""
    if value is None:
        return None
    where = "response_format"
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise InvalidField(f"'{where}' must be an object with a string 'type'", param=where)
    kind = value["type"]
    if kind == "text" and set(value) == {"type"}:
        return None
    if kind == "json_object" and set(value) == {"type"}:
        return JsonOutput(None, chat)
    if kind != "json_schema":
        raise InvalidField(
            f"'{where}.type' must be text, json_object or json_schema, found {_show(kind)}",
            param=where,
        )
    if set(value) != {"type", "json_schema"} or not isinstance(value["json_schema"], dict):
        raise InvalidField(
            f'\'{where}\' of type json_schema must be {{"type", "json_schema": {{...}}}}',
            param=where,
        )
    spec = value["json_schema"]
    unknown = sorted(set(spec) - {"name", "schema", "strict", "description"})
    if unknown:
        raise InvalidField(
            f"'{where}.json_schema' has unknown keys {unknown}", param=f"{where}.json_schema"
        )
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise InvalidField(
            f"'{where}.json_schema.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -, found "
            f"{_show(name)}",
            param=f"{where}.json_schema.name",
        )
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidField(
            f"'{where}.json_schema.strict' must be a boolean", param=f"{where}.json_schema.strict"
        )
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise InvalidField(
            f"'{where}.json_schema.schema' must be a JSON schema object",
            param=f"{where}.json_schema.schema",
        )
    return JsonOutput(schema, chat, param=f"{where}.json_schema.schema")


def _tools(fields: Mapping[str, Any]) -> ToolCalls | None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls``, checked."""
    tools = fields.get("tools")
    choice = fields.get("tool_choice")
    parallel = _bool(fields, "parallel_tool_calls", True)
    if tools is None or tools == []:
        if choice not in (None, "none"):
            raise InvalidField("'tool_choice' needs 'tools'", param="tool_choice")
        return None
    try:
        listed = check_tools(tools)
    except GrammarError as exc:
        raise InvalidField(f"'tools' is malformed: {exc}", param="tools") from None
    names = [t.name for t in listed]
    if choice is None:
        choice = "auto"
    elif isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or set(choice) != {"type", "function"}:
            raise InvalidField(
                "'tool_choice' must be none, auto, required or "
                '{"type": "function", "function": {"name": ...}}',
                param="tool_choice",
            )
        if name not in names:
            raise InvalidField(
                f"'tool_choice' names {_show(name)}, which is not among the tools {names}",
                param="tool_choice",
            )
    elif choice not in ("none", "auto", "required"):
        raise InvalidField(
            f"'tool_choice' must be none, auto, required or a function, found {_show(choice)}",
            param="tool_choice",
        )
    return ToolCalls(tuple(tools), choice, parallel)


def _choice(options: SamplingConfig, i: int) -> SamplingConfig:
    """Choice i's options: the seed ``seed + i`` (riftco-nn's ``choice_seed``)."""
    if i == 0 or options.seed is None:
        return options
    return dataclasses.replace(options, seed=choice_seed(options.seed, i))


def _choices(fields: Mapping[str, Any], config: ServerConfig, prompts: int) -> int:
    n = _int(fields, "n", 1, 1, config.max_choices)
    if n * prompts > config.max_choices:
        raise InvalidField(
            f"{prompts} prompts times n={n} is {n * prompts} choices; this server answers "
            f"at most {config.max_choices} per request",
            param="n",
        )
    return int(n)


def _check_fields(body: Any, known: frozenset[str], chat: bool) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(
            f"The request body must be a JSON object, found {type(body).__name__}",
            code="invalid_body",
        )
    for name, why in _ROUTE_ONLY.items():
        if name in body and name not in known and not _default(body[name]):
            raise UnsupportedParameter(why, param=name, code="unsupported_parameter")
    unsupported = [k for k, ok in UNSUPPORTED.items() if k in body and not ok(body[k])]
    if unsupported:
        raise UnsupportedParameter(
            f"Unsupported parameter(s): {', '.join(unsupported)}; this server does not "
            "implement them and they would change the result",
            param=unsupported[0],
            code="unsupported_parameter",
        )
    unknown = sorted(
        k
        for k in body
        if k not in known and k not in IGNORED and k not in UNSUPPORTED and k not in _ROUTE_ONLY
    )
    if unknown:
        raise UnsupportedParameter(
            f"Unrecognized request argument(s) supplied: {', '.join(unknown)}",
            param=unknown[0],
            code="unrecognized_parameter",
        )
    return body


def _build(
    fields: Mapping[str, Any],
    config: ServerConfig,
    generations: tuple[GenerationRequest, ...],
    logprobs: int | None,
    n: int,
) -> ParsedRequest:
    model = fields.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidField("'model' is required and must be a non-empty string", param="model")
    stream = _bool(fields, "stream", False)
    options = fields.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise InvalidField(
                "'stream_options' is only allowed with stream: true", param="stream_options"
            )
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise InvalidField(
                "'stream_options' must be an object with only 'include_usage'",
                param="stream_options",
            )
        include_usage = _bool(options, "include_usage", False, param="stream_options.include_usage")
    return ParsedRequest(model, generations, stream, include_usage, logprobs, n)


def _options(
    fields: Mapping[str, Any], config: ServerConfig, logprobs: int | None = None
) -> SamplingConfig:
    max_tokens = _int(fields, "max_tokens", config.default_max_tokens, 1, config.max_tokens_limit)
    temperature = _number(fields, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(fields, "top_p", 1.0, 0.0, 1.0)
    if top_p <= 0.0:
        raise InvalidField("'top_p' must be greater than 0", param="top_p")
    top_k = _int(fields, "top_k", 0, -1, 1 << 31)
    penalty = _number(fields, "repetition_penalty", 1.0, 0.0, 100.0)
    if penalty <= 0.0:
        raise InvalidField(
            "'repetition_penalty' must be greater than 0", param="repetition_penalty"
        )
    seed = _int(fields, "seed", None, -(1 << 63), (1 << 64) - 1)
    presence = _number(fields, "presence_penalty", 0.0, -2.0, 2.0)
    frequency = _number(fields, "frequency_penalty", 0.0, -2.0, 2.0)
    return SamplingConfig(
        max_new_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p if top_p < 1.0 else None,
        top_k=top_k if top_k > 0 else None,
        seed=None if seed is None else seed % (1 << 64),
        repetition_penalty=penalty,
        presence_penalty=presence,
        frequency_penalty=frequency,
        logit_bias=_logit_bias(fields.get("logit_bias")),
        logprobs=logprobs,
    )


def _logit_bias(value: Any) -> dict[int, float]:
    """OpenAI's ``logit_bias``: an object of token ids (as strings) to biases in
    [-100, 100]; the ids are checked against the vocabulary by the engine."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidField(
            f"'logit_bias' must be an object of token ids to numbers, found {type(value).__name__}",
            param="logit_bias",
        )
    if len(value) > MAX_LOGIT_BIAS:
        raise InvalidField(
            f"'logit_bias' holds more than {MAX_LOGIT_BIAS} entries", param="logit_bias"
        )
    out: dict[int, float] = {}
    for key in value:
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 12):
            raise InvalidField(
                f"'logit_bias' keys must be token ids (decimal strings), found {_show(key)}",
                param="logit_bias",
            )
        out[int(key)] = _number(value, key, 0.0, -100.0, 100.0, param="logit_bias")
    return out


def _prompts(value: Any, config: ServerConfig) -> list[str | tuple[int, ...]]:
    """One prompt (a string or a list of token ids) or a list of them (OpenAI's batch)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(type(t) is int for t in value):
        return [_token_prompt(value, "prompt")]
    if isinstance(value, list) and value and all(isinstance(p, (str, list)) for p in value):
        if len(value) > config.max_choices:
            raise InvalidField(
                f"'prompt' holds {len(value)} prompts; this server answers at most "
                f"{config.max_choices} choices per request",
                param="prompt",
            )
        return [
            p if isinstance(p, str) else _token_prompt(p, f"prompt[{i}]")
            for i, p in enumerate(value)
        ]
    raise InvalidField(
        "'prompt' must be a string, a non-empty list of non-negative token ids, or a list of those",
        param="prompt",
    )


def _token_prompt(value: list[Any], where: str) -> tuple[int, ...]:
    if not value or not all(type(t) is int and t >= 0 for t in value):
        raise InvalidField(
            f"'{where}' must be a non-empty list of non-negative token ids", param="prompt"
        )
    return tuple(value)


def _messages(value: Any) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidField("'messages' must be a non-empty list", param="messages")
    if len(value) > MAX_MESSAGES:
        raise InvalidField(f"'messages' holds more than {MAX_MESSAGES} messages", param="messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidField(f"{where} must be an object", param=where)
        role = message.get("role")
        if not isinstance(role, str):
            raise InvalidField(
                f"{where}.role must be a string (one of {', '.join(CHAT_ROLES)}), "
                f"found {type(role).__name__}",
                param=f"{where}.role",
            )
        if role == "function" or "function_call" in message:
            raise UnsupportedParameter(
                f"{where}: function messages are not supported; {_FUNCTIONS_WHY}",
                param=f"{where}.role",
                code="unsupported_parameter",
            )
        if role not in CHAT_ROLES:
            raise InvalidField(
                f"{where}.role must be one of {', '.join(CHAT_ROLES)}, found {_show(role)}",
                param=f"{where}.role",
            )
        calls = message.get("tool_calls")
        if calls is not None:
            if role != "assistant" or not isinstance(calls, list) or not calls:
                raise InvalidField(
                    f"{where}.tool_calls must be a non-empty list on an assistant message",
                    param=f"{where}.tool_calls",
                )
            content = message.get("content")
            text = "" if content is None else _content(content, where)
            out.append(ChatMessage("assistant", text, tuple(calls)))
            continue
        out.append(ChatMessage(CHAT_ROLES[role], _content(message.get("content"), where)))
    return tuple(out)


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise UnsupportedParameter(
                    f"{where}.content[{j}]: only text content parts are supported",
                    param=f"{where}.content",
                    code="unsupported_parameter",
                )
            if not isinstance(part.get("text"), str):
                raise InvalidField(
                    f"{where}.content[{j}].text must be a string", param=f"{where}.content"
                )
            texts.append(part["text"])
        return "".join(texts)
    raise InvalidField(
        f"{where}.content must be a string or a list of text parts", param=f"{where}.content"
    )


def _stop(value: Any, config: ServerConfig) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise InvalidField("'stop' must be a non-empty string or a list of them", param="stop")
    if len(stops) > config.max_stop_strings:
        raise InvalidField(
            f"'stop' holds more than {config.max_stop_strings} strings", param="stop"
        )
    if any(len(s) > config.max_stop_length for s in stops):
        raise InvalidField(
            f"'stop' strings are limited to {config.max_stop_length} characters", param="stop"
        )
    return tuple(dict.fromkeys(stops))


def _bool(fields: Mapping[str, Any], name: str, default: bool, param: str | None = None) -> bool:
    value = fields.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidField(f"'{name}' must be a boolean", param=param or name)
    return value


def _int(fields: Mapping[str, Any], name: str, default: Any, lo: int, hi: int) -> Any:
    value = fields.get(name)
    if value is None:
        return default
    if type(value) is not int:
        raise InvalidField(f"'{name}' must be an integer, found {_show(value)}", param=name)
    if not lo <= value <= hi:
        raise InvalidField(f"'{name}' must be in [{lo}, {hi}], found {_show(value)}", param=name)
    return value


def _number(
    fields: Mapping[str, Any],
    name: str,
    default: float,
    lo: float,
    hi: float,
    param: str | None = None,
) -> float:
    value = fields.get(name)
    if value is None:
        return default
    label = f"{param}[{name!r}]" if param else f"'{name}'"
    # an int is compared exactly (float() of a 400-digit integer would overflow)
    if type(value) not in (int, float) or (type(value) is float and not math.isfinite(value)):
        raise InvalidField(f"{label} must be a number, found {_show(value)}", param=param or name)
    if not lo <= value <= hi:
        raise InvalidField(
            f"{label} must be in [{lo}, {hi}], found {_show(value)}", param=param or name
        )
    return float(value)


def _show(value: Any, limit: int = 60) -> str:
    """A bounded ``repr`` for error messages (a body may hold megabytes in one field)."""
    if type(value) is int and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["ParsedRequest", "parse_chat", "parse_completion"]
