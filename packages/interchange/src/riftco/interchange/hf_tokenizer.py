"""Tokenizer files of a Hugging Face directory, both ways.

Export writes ``tokenizer.json`` (riftco-text's exporter: byte-level BPE with the
same ids), ``tokenizer_config.json`` (a ``PreTrainedTokenizerFast`` with the end
token, the chat template rendered as Jinja for ``apply_chat_template``, and the
exact riftco tokenizer state under ``riftco_tokenizer``).

Import prefers that exact state when it agrees with ``tokenizer.json``. Otherwise
it rebuilds the tokenizer from ``tokenizer.json`` when that file has riftco's
layout: byte-level BPE whose ids ``0..255`` are the bytes in order and whose
merge ``k`` makes id ``256 + k`` (or a byte vocabulary without merges), with
special tokens right after. Any other layout (the original GPT-2 vocabulary,
SentencePiece models) is refused with the reason; pass a tokenizer explicitly.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from riftco.core import JSONError, loads_strict, read_bounded, write_bytes_atomic
from riftco.interchange.errors import ConversionError
from riftco.text import (
    BpeTokenizer,
    ByteTokenizer,
    ChatTemplate,
    RoleFormat,
    Tokenizer,
    TokenizerError,
    ToolCallSyntax,
    bytes_to_unicode,
    to_hf_tokenizer_json,
    tokenizer_from_state,
)

MAX_TOKENIZER_JSON_BYTES = 64 << 20
STATE_KEY = "riftco_tokenizer"


def write_tokenizer_files(tokenizer: Tokenizer, folder: Path, context_length: int) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``."""
    try:
        document = to_hf_tokenizer_json(tokenizer)
    except TokenizerError as exc:
        raise ConversionError(f"tokenizer.json: {exc}") from None
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": context_length,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
    }
    if tokenizer.eos_token is not None:
        config["eos_token"] = tokenizer.eos_token
        config["bos_token"] = tokenizer.eos_token
    if tokenizer.chat_template is not None:
        config["chat_template"] = jinja_chat_template(tokenizer.chat_template)
    config[STATE_KEY] = tokenizer.to_state()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "tokenizer.json", document)
    write_json(folder / "tokenizer_config.json", config)


def read_tokenizer_files(folder: Path) -> Tokenizer:
    """The tokenizer of a Hugging Face directory; raises ConversionError when it has none
    that riftco can represent exactly."""
    document = read_json(folder / "tokenizer.json", MAX_TOKENIZER_JSON_BYTES)
    check_tokenizer_json(document)
    config_path = folder / "tokenizer_config.json"
    config = read_json(config_path, MAX_TOKENIZER_JSON_BYTES) if config_path.exists() else {}
    check_tokenizer_config(config)
    jinja_path = folder / "chat_template.jinja"  # where newer transformers save it
    if "chat_template" not in config and jinja_path.is_file():
        if jinja_path.stat().st_size > MAX_TOKENIZER_JSON_BYTES:
            raise ConversionError(
                f"{jinja_path}: expected at most {MAX_TOKENIZER_JSON_BYTES} bytes"
            )
        try:
            config = {**config, "chat_template": jinja_path.read_text(encoding="utf-8")}
        except (OSError, UnicodeDecodeError) as exc:
            raise ConversionError(f"{jinja_path}: cannot read: {exc}") from None
    state = config.get(STATE_KEY)
    if isinstance(state, Mapping):
        try:
            tokenizer = tokenizer_from_state(state)
        except TokenizerError as exc:
            raise ConversionError(f"tokenizer_config.json: {STATE_KEY}: {exc}") from None
        try:
            ours = to_hf_tokenizer_json(tokenizer)
        except TokenizerError as exc:
            raise ConversionError(f"tokenizer_config.json: {STATE_KEY}: {exc}") from None
        if _same_ids(ours, document):
            return tokenizer
    return tokenizer_from_hf_json(document, config)


def _show(value: Any) -> str:
    """A JSON value's type as the error names it, with the value when it is short."""
    kind = "null" if value is None else type(value).__name__
    if isinstance(value, (bool, float, str)) or (
        isinstance(value, int) and value.bit_length() < 64
    ):
        text = repr(value)
        return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"
    return kind


def _fault(where: str, expected: str, value: Any) -> ConversionError:
    return ConversionError(f"{where}: expected {expected}; found {_show(value)}")


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def check_tokenizer_json(document: Mapping[str, Any]) -> None:
    """The structure of a parsed ``tokenizer.json``, field by field, before anything
    reads it: ``model`` an object whose ``type`` is a string, ``vocab`` an object of
    token to integer id and ``merges`` a list of ``"left right"`` strings (one space) or
    ``[left, right]`` pairs; ``added_tokens`` a list of objects with an integer ``id``
    and a string ``content`` (``special`` a boolean), no id twice; ``normalizer``,
    ``pre_tokenizer`` and ``post_processor`` objects or null. Raises ConversionError
    naming the field, what it expected and what it found."""
    where = "tokenizer.json"
    model = document.get("model")
    if not isinstance(model, Mapping):
        raise _fault(f"{where}: model", "an object", model)
    if not isinstance(model.get("type"), str):
        raise _fault(f"{where}: model.type", "a string such as 'BPE'", model.get("type"))
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        if document.get(key) is not None and not isinstance(document[key], Mapping):
            raise _fault(f"{where}: {key}", "an object or null", document[key])
    if model["type"] == "BPE":
        vocab, merges = model.get("vocab"), model.get("merges", [])
        if not isinstance(vocab, Mapping):
            raise _fault(f"{where}: model.vocab", "an object of token to id", vocab)
        for token, token_id in vocab.items():
            if not _token_id(token_id):
                raise _fault(
                    f"{where}: model.vocab[{token[:40]!r}]", "an integer id in [0, 2**31)", token_id
                )
        if not isinstance(merges, list):
            raise _fault(f"{where}: model.merges", "a list", merges)
        for k, merge in enumerate(merges):
            if isinstance(merge, str):
                parts = merge.split(" ")
                if len(parts) != 2 or not all(parts):
                    raise _fault(
                        f"{where}: model.merges[{k}]",
                        "'left right' (two tokens joined by one space)",
                        merge,
                    )
            elif not (
                isinstance(merge, list)
                and len(merge) == 2
                and all(isinstance(part, str) and part for part in merge)
            ):
                raise _fault(
                    f"{where}: model.merges[{k}]",
                    "a 'left right' string or a [left, right] pair of strings",
                    merge,
                )
    added = document.get("added_tokens", [])
    if not isinstance(added, list):
        raise _fault(f"{where}: added_tokens", "a list", added)
    seen: set[int] = set()
    for k, entry in enumerate(added):
        if not isinstance(entry, Mapping):
            raise _fault(f"{where}: added_tokens[{k}]", "an object", entry)
        if not _token_id(entry.get("id")):
            raise _fault(
                f"{where}: added_tokens[{k}].id", "an integer id in [0, 2**31)", entry.get("id")
            )
        if not isinstance(entry.get("content"), str):
            raise _fault(f"{where}: added_tokens[{k}].content", "a string", entry.get("content"))
        if not isinstance(entry.get("special", True), bool):
            raise _fault(f"{where}: added_tokens[{k}].special", "true or false", entry["special"])
        if entry["id"] in seen:
            raise ConversionError(f"{where}: added_tokens[{k}]: id {entry['id']} appears twice")
        seen.add(entry["id"])


def check_tokenizer_config(config: Mapping[str, Any]) -> None:
    """The fields of ``tokenizer_config.json`` that import reads: ``eos_token`` a string,
    an object with a string ``content``, or null; ``chat_template`` a string, a list
    (named templates, which import does not use) or null; ``riftco_tokenizer`` an
    object or null."""
    where = "tokenizer_config.json"
    eos = config.get("eos_token")
    if isinstance(eos, Mapping):
        if not isinstance(eos.get("content"), str):
            raise _fault(f"{where}: eos_token.content", "a string", eos.get("content"))
    elif eos is not None and not isinstance(eos, str):
        raise _fault(f"{where}: eos_token", "a string, an object or null", eos)
    template = config.get("chat_template")
    if template is not None and not isinstance(template, (str, list)):
        raise _fault(f"{where}: chat_template", "a string, a list or null", template)
    state = config.get(STATE_KEY)
    if state is not None and not isinstance(state, Mapping):
        raise _fault(f"{where}: {STATE_KEY}", "an object or null", state)


def tokenizer_from_hf_json(document: Mapping[str, Any], config: Mapping[str, Any]) -> Tokenizer:
    """Rebuild a riftco tokenizer from a ``tokenizer.json`` with riftco's id layout
    (``document`` and ``config`` checked by ``check_tokenizer_json`` and
    ``check_tokenizer_config`` first, as ``read_tokenizer_files`` does)."""
    check_tokenizer_json(document)
    check_tokenizer_config(config)
    model = document.get("model")
    if not isinstance(model, Mapping) or model.get("type") != "BPE":
        found = model.get("type") if isinstance(model, Mapping) else model
        raise ConversionError(f"tokenizer.json: expected a BPE model; found {found!r}")
    use_regex = _byte_level_regex(document)
    if document.get("normalizer") is not None:
        raise ConversionError(
            f"tokenizer.json: normalizer is not supported; found {document['normalizer']}"
        )
    if not _no_op_post_processor(document.get("post_processor")):
        raise ConversionError(
            "tokenizer.json: a post_processor that adds tokens is not supported; found "
            f"{document['post_processor']}"
        )
    for key in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix", "dropout"):
        if model.get(key):
            raise ConversionError(f"tokenizer.json: model.{key} is not supported")
    if model.get("byte_fallback"):
        raise ConversionError("tokenizer.json: model.byte_fallback is not supported")
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, Mapping) or not isinstance(merges, list):
        raise ConversionError("tokenizer.json: expected model.vocab (object), model.merges (list)")
    by_id = _tokens_by_id(vocab)
    special = _special_tokens(document.get("added_tokens", []), len(by_id))
    eos = config.get("eos_token")
    if isinstance(eos, Mapping):
        eos = eos.get("content")
    if eos not in special:
        eos = "<|endoftext|>" if "<|endoftext|>" in special else None
    template = _chat_template(config)
    try:
        if merges or use_regex:
            pairs = _merges(merges, vocab, by_id)
            return BpeTokenizer(
                pairs,
                pretokenize="gpt2" if use_regex else "none",
                special_tokens=special,
                eos_token=eos,
                chat_template=template,
            )
        ints = [b for b in by_id if isinstance(b, int)]
        if len(ints) == len(by_id) and ints == sorted(ints):
            return ByteTokenizer(
                ints, special_tokens=special, eos_token=eos, chat_template=template
            )
    except TokenizerError as exc:
        raise ConversionError(f"tokenizer.json: {exc}") from None
    raise ConversionError(
        "tokenizer.json: expected ids 0-255 to be the 256 bytes in order and merge k to make "
        "id 256 + k (riftco's layout); this vocabulary orders its ids differently, so pass "
        "the tokenizer explicitly"
    )


def jinja_chat_template(template: ChatTemplate) -> str:
    """``template`` as the Jinja text that ``transformers``' ``apply_chat_template`` runs.

    It renders what riftco-text renders, byte for byte, tool calls included: an assistant
    message's ``tool_calls`` (``function.arguments`` a mapping, written with transformers'
    ``tojson``, or JSON text, embedded as given) in the template's syntax, and
    ``tool_role`` messages inside the result markers. It opens
    with a comment holding the template's state, which ``chat_template_from_jinja``
    reads back (and checks by writing the Jinja again).
    """
    syntax = template.tool_call
    role = _literal(template.assistant_role)
    calls = "message['tool_calls'] is defined and message['tool_calls'] is not none"
    parts = [_HEADER_TEXT.format(_header_state(template))]
    if syntax is not None:
        parts.append(_tool_call_macros(syntax))
    parts.append("{% for message in messages %}")
    if syntax is None:
        refusal = "this chat template declares no tool-call syntax, so it cannot render tool_calls"
        parts.append(
            f"{{% if {calls} %}}{{{{ raise_exception({_literal(refusal)}) }}}}{{% endif %}}"
        )
    else:
        refusal = f"only {template.assistant_role} messages call tools"
        parts.append(
            f"{{% if {calls} and message['role'] != {role} %}}"
            f"{{{{ raise_exception({_literal(refusal)}) }}}}{{% endif %}}"
        )
    for index, (name, fmt) in enumerate(template.roles.items()):
        keyword = "if" if index == 0 else "elif"
        parts.append(f"{{% {keyword} message['role'] == {_literal(name)} %}}")
        content = "message['content']"
        if syntax is not None and name == syntax.tool_role:
            content = f"{_literal(syntax.result_start)} + {content} + {_literal(syntax.result_end)}"
        plain = f"{{{{ {_literal(fmt.prefix)} + {content} + {_literal(fmt.suffix)} }}}}"
        if syntax is not None and name == template.assistant_role:
            parts.append(
                f"{{% if {calls} %}}"
                f"{{{{ {_literal(fmt.prefix)} + riftco_tool_calls(message) + "
                f"{_literal(fmt.suffix)} }}}}{{% else %}}{plain}{{% endif %}}"
            )
        else:
            parts.append(plain)
    parts.append("{% else %}{{ raise_exception('unknown role ' + message['role']) }}")
    parts.append("{% endif %}{% endfor %}")
    parts.append(
        f"{{% if add_generation_prompt %}}{{{{ {_literal(template.generation_prompt)} }}}}"
        "{% endif %}"
    )
    return "".join(parts)


def _tool_call_macros(syntax: ToolCallSyntax) -> str:
    """The Jinja macro that writes an assistant message's tool calls as riftco-text does.

    ``riftco_tool_calls(message)`` writes the content (when there is any), then each
    call as ``start + '{"name": ' + name|tojson + ', "arguments": ' + arguments + '}' +
    end``, joined by the separator: arguments given as a string (JSON text) are embedded
    as given, a mapping goes through ``tojson``. The Jinja checks the shape of the
    calls but not the JSON text (riftco-text does).
    """
    sep = _literal(syntax.separator)
    opening = _literal(syntax.start + '{"name": ')
    calls = (
        "{% macro riftco_tool_calls(message) %}"
        "{% set calls = message['tool_calls'] %}"
        "{% if calls is string or calls is mapping or calls is not iterable "
        "or calls|length == 0 %}"
        "{{ raise_exception('tool_calls: expected a non-empty list') }}{% endif %}"
        "{% if message['content'] is defined and message['content'] is not none "
        "and message['content'] != '' %}"
        "{% if message['content'] is not string %}"
        "{{ raise_exception('expected content to be a string or null') }}{% endif %}"
        f"{{{{ message['content'] + {sep} }}}}{{% endif %}}"
        "{% for call in calls %}"
        f"{{% if not loop.first %}}{{{{ {sep} }}}}{{% endif %}}"
        "{% set function = call['function'] if call is mapping else none %}"
        "{% if function is not mapping %}"
        "{{ raise_exception('tool_calls: expected an object with a function object') }}"
        "{% endif %}"
        "{% if function['name'] is not string or function['name'] == '' %}"
        "{{ raise_exception('tool_calls: expected function.name to be a non-empty string') }}"
        "{% endif %}"
        "{% set arguments = function['arguments'] %}"
        f"{{{{ {opening} + function['name']|tojson + "
        "', \"arguments\": ' }}"
        "{% if arguments is string %}{{ arguments }}"
        "{% elif arguments is mapping %}{{ arguments|tojson }}"
        "{% else %}{{ raise_exception('tool_calls: expected function.arguments to be JSON "
        "text or a mapping') }}{% endif %}"
        f"{{{{ {_literal('}' + syntax.end)} }}}}"
        "{% endfor %}{% endmacro %}"
    )
    return calls


def write_json(path: Path, document: Any) -> None:
    write_bytes_atomic(path, json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8"))


def read_json(path: Path, limit: int) -> dict[str, Any]:
    """A strict JSON object from ``path`` (no duplicate keys, no NaN), at most ``limit`` bytes
    of a regular file."""
    raw = read_bounded(path, limit, ConversionError)
    try:
        document = loads_strict(raw)
    except JSONError as exc:
        raise ConversionError(f"{path}: expected UTF-8 JSON; {exc}") from None
    if not isinstance(document, dict):
        raise ConversionError(f"{path}: expected a JSON object; found {type(document).__name__}")
    return document


@cache
def _unicode_to_byte() -> dict[str, int]:
    return {char: byte for byte, char in enumerate(bytes_to_unicode())}


def _token_bytes(token: str) -> bytes:
    table = _unicode_to_byte()
    try:
        return bytes(table[c] for c in token)
    except KeyError as exc:
        raise ConversionError(
            f"tokenizer.json: token {token!r} is not byte-level (character {exc.args[0]!r})"
        ) from None


def _tokens_by_id(vocab: Mapping[str, Any]) -> list[int] | list[bytes]:
    ids = sorted(vocab.values()) if all(isinstance(i, int) for i in vocab.values()) else None
    if ids != list(range(len(vocab))):
        raise ConversionError("tokenizer.json: expected model.vocab ids 0, 1, ... without gaps")
    by_id: list[Any] = [None] * len(vocab)
    for token, token_id in vocab.items():
        by_id[token_id] = _token_bytes(token)
    if all(len(b) == 1 for b in by_id):
        return [b[0] for b in by_id]
    return by_id


def _merges(merges: list[Any], vocab: Mapping[str, int], by_id: list[Any]) -> list[tuple[int, int]]:
    if len(by_id) != 256 + len(merges) or any(by_id[b] not in (b, bytes([b])) for b in range(256)):
        raise ConversionError(
            "tokenizer.json: expected ids 0-255 to be the 256 bytes in order and merge k to "
            "make id 256 + k (riftco's layout); this vocabulary orders its ids differently, "
            "so pass the tokenizer explicitly"
        )
    pairs = []
    for k, merge in enumerate(merges):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        if vocab.get(left + right) != 256 + k or left not in vocab or right not in vocab:
            raise ConversionError(
                f"tokenizer.json: merge {k} ({left!r}, {right!r}) does not make id {256 + k}"
            )
        pairs.append((vocab[left], vocab[right]))
    return pairs


def _byte_level_regex(document: Mapping[str, Any]) -> bool:
    pre = document.get("pre_tokenizer")
    if not isinstance(pre, Mapping) or pre.get("type") != "ByteLevel":
        raise ConversionError(f"tokenizer.json: expected a ByteLevel pre_tokenizer; found {pre}")
    if pre.get("add_prefix_space"):
        raise ConversionError("tokenizer.json: pre_tokenizer.add_prefix_space is not supported")
    return bool(pre.get("use_regex", True))


def _special_tokens(added: Any, first_id: int) -> list[str]:
    if not isinstance(added, list):
        raise ConversionError("tokenizer.json: expected added_tokens to be a list")
    tokens = []
    for k, entry in enumerate(
        sorted(added, key=lambda e: e.get("id", -1) if isinstance(e, Mapping) else -1)
    ):
        if (
            not isinstance(entry, Mapping)
            or entry.get("id") != first_id + k
            or not entry.get("special", True)
        ):
            raise ConversionError(
                f"tokenizer.json: expected special added tokens with ids from {first_id} on; "
                f"found {entry!r}"
            )
        tokens.append(entry["content"])
    return tokens


def _no_op_post_processor(processor: Any) -> bool:
    """Whether a ``post_processor`` leaves the ids alone: none, ``ByteLevel`` (it only
    trims offsets), a ``TemplateProcessing`` that adds no tokens (what
    ``save_pretrained`` writes), or a ``Sequence`` of those."""
    if processor is None:
        return True
    if not isinstance(processor, Mapping):
        return False
    kind = processor.get("type")
    if kind == "ByteLevel":
        return True
    if kind == "Sequence":
        parts = processor.get("processors")
        return isinstance(parts, list) and all(_no_op_post_processor(p) for p in parts)
    if kind == "TemplateProcessing":
        pieces = [*(processor.get("single") or []), *(processor.get("pair") or [])]
        return not processor.get("special_tokens") and all(
            isinstance(p, Mapping) and set(p) == {"Sequence"} for p in pieces
        )
    return False


_LITERAL = r'("(?:[^"\\]|\\.)*")'
_ROLE = re.compile(
    r"\{% (?:if|elif) message\['role'\] == " + _LITERAL + r" %\}"
    r"\{\{ " + _LITERAL + r" \+ message\['content'\] \+ " + _LITERAL + r" \}\}"
)
_JINJA = re.compile(
    r"\{% for message in messages %\}((?:" + _ROLE.pattern + r")+)"
    r"\{% else %\}\{\{ raise_exception\('unknown role ' \+ message\['role'\]\) \}\}"
    r"\{% endif %\}\{% endfor %\}"
    r"\{% if add_generation_prompt %\}\{\{ " + _LITERAL + r" \}\}\{% endif %\}"
)


def chat_template_from_jinja(text: str) -> ChatTemplate | None:
    """The `ChatTemplate` that ``jinja_chat_template`` wrote as ``text`` (as transformers
    saves it again), tool-call syntax and assistant role included, or None for any other
    Jinja template. The state in the opening comment counts only when writing it again
    gives ``text`` exactly; Jinja written before that comment existed (roles alone) reads
    back with the syntax its roles imply."""
    text = text.strip()
    header = _HEADER.match(text)
    if header is not None:
        try:
            template = ChatTemplate.from_state(loads_strict(header.group(1)))
        except (TokenizerError, JSONError):
            return None
        return template if jinja_chat_template(template) == text else None
    match = _JINJA.fullmatch(text)
    if match is None:
        return None
    try:
        roles = {
            json.loads(role): RoleFormat(json.loads(prefix), json.loads(suffix))
            for role, prefix, suffix in _ROLE.findall(match.group(1))
        }
        return ChatTemplate(roles, json.loads(match.group(5)))  # after the 1 + 3 role groups
    except (TokenizerError, ValueError):
        return None


# The opening comment of the exported Jinja: the template's state as compact JSON, every
# "#" written as its escape so that the comment cannot end early.
_HEADER_TEXT = "{{# riftco chat template {} #}}"
_HEADER = re.compile(r"\{# riftco chat template (\{[^#]*\}) #\}")


def _header_state(template: ChatTemplate) -> str:
    state = json.dumps(template.to_state(), ensure_ascii=False, separators=(",", ":"))
    return state.replace("#", "\\u0023")


def _chat_template(config: Mapping[str, Any]) -> ChatTemplate | None:
    state = config.get(STATE_KEY)
    if isinstance(state, Mapping) and isinstance(state.get("chat_template"), Mapping):
        try:
            return ChatTemplate.from_state(state["chat_template"])
        except TokenizerError:
            return None
    jinja = config.get("chat_template")
    if isinstance(jinja, str) and jinja:
        template = chat_template_from_jinja(jinja)
        if template is None:
            warnings.warn(
                "tokenizer: the chat template is Jinja that riftco cannot represent (riftco "
                "templates are a prefix and suffix per role); imported without one",
                stacklevel=3,
            )
        return template
    return None


def _same_ids(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether two tokenizer.json documents give the same ids. A part of ``theirs`` of
    another shape than ours (a model other than BPE, a merge that is neither a string
    nor a pair of strings, an added token that is not an object) means they do not."""

    def key(document: Mapping[str, Any]) -> tuple[Any, ...] | None:
        model = document.get("model")
        if not isinstance(model, Mapping) or model.get("type", "BPE") != "BPE":
            return None
        merges = []
        for m in model.get("merges") or []:
            if isinstance(m, str):
                merges.append(m)
            elif isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
                merges.append(" ".join(m))
            else:
                return None
        tokens = document.get("added_tokens") or []
        if not isinstance(tokens, list) or not all(isinstance(t, Mapping) for t in tokens):
            return None
        added = sorted((repr(t.get("id")), repr(t.get("content"))) for t in tokens)
        return model.get("vocab"), merges, added

    mine = key(ours)
    return mine is not None and mine == key(theirs)


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
