"""Structure-aware mutation of JSON documents, with the fuzzer's bytes as the choice
source.

Byte mutations of a whole file rarely produce a valid JSON document with one wrong
field, so the readers' field-by-field checks go unexercised. ``mutate`` takes a parsed
document and applies a few edits chosen by the bytes: a value replaced by one of
another type (or by another node of the document), a key dropped or added, a list
shortened, lengthened or reordered, two values swapped. The result is re-serialized
and fed to the reader; a harness fails on anything but the reader's typed error.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import atheris

#: Values of every JSON type, with the edge cases readers trip on.
PALETTE: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    255,
    256,
    2**31,
    2**63,
    -(2**63),
    10**30,
    0.5,
    -0.0,
    1e308,
    "",
    "a",
    "a b",
    "a b c",
    " ",
    "\u0120",
    "\ud800",
    "<|endoftext|>",
    "BPE",
    "ByteLevel",
    [],
    [1],
    ["a", "b"],
    ["a", "b", "c"],
    [[]],
    {},
    {"a": 1},
    {"content": "x"},
    {"id": 0},
    {"id": "0", "content": "x", "special": True},
)
#: At most this many nodes are considered (the first ones, depth first).
MAX_NODES = 20_000


def _nodes(document: Any) -> list[tuple[Any, Any]]:
    """(container, key) for every value below ``document``, depth first."""
    found: list[tuple[Any, Any]] = []
    stack = [document]
    while stack and len(found) < MAX_NODES:
        node = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
        elif isinstance(node, list):
            items = list(enumerate(node))
        else:
            continue
        for key, value in items:
            found.append((node, key))
            if isinstance(value, (dict, list)):
                stack.append(value)
    return found


def _keys(document: Any) -> list[str]:
    keys = {key for node, key in _nodes(document) if isinstance(node, dict)}
    return sorted(keys)[:1000] or ["x"]


def _fresh(fdp: atheris.FuzzedDataProvider, nodes: list[tuple[Any, Any]]) -> Any:
    """A palette value, another node's value, or a short fuzzed string or integer."""
    choice = fdp.ConsumeIntInRange(0, 3)
    if choice == 0 and nodes:
        node, key = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
        return copy.deepcopy(node[key])
    if choice == 1:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12))
    if choice == 2:
        return fdp.ConsumeIntInRange(-(2**33), 2**33)
    return copy.deepcopy(PALETTE[fdp.ConsumeIntInRange(0, len(PALETTE) - 1)])


def _edit(document: Any, fdp: atheris.FuzzedDataProvider) -> Any:
    nodes = _nodes(document)
    if not nodes:
        return _fresh(fdp, nodes)
    node, key = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
    op = fdp.ConsumeIntInRange(0, 6)
    if op == 0:  # another value, often of another type
        node[key] = _fresh(fdp, nodes)
    elif op == 1:  # drop the key or the element
        del node[key]
    elif op == 2:  # add a key (one the document uses elsewhere, or a new one)
        target = node if isinstance(node, dict) else node[key]
        if isinstance(target, dict):
            keys = _keys(document) + ["x"]
            target[keys[fdp.ConsumeIntInRange(0, len(keys) - 1)]] = _fresh(fdp, nodes)
        elif isinstance(target, list):
            target.insert(fdp.ConsumeIntInRange(0, len(target)), _fresh(fdp, nodes))
    elif op == 3:  # a list's length: cut it or repeat an element
        value = node[key]
        if isinstance(value, list) and value:
            if fdp.ConsumeBool():
                del value[fdp.ConsumeIntInRange(0, len(value) - 1) :]
            else:
                value.extend([copy.deepcopy(value[-1])] * fdp.ConsumeIntInRange(1, 3))
        else:
            node[key] = [value] * fdp.ConsumeIntInRange(0, 3)
    elif op == 4:  # swap two values
        other, other_key = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
        node[key], other[other_key] = copy.deepcopy(other[other_key]), copy.deepcopy(node[key])
    elif op == 5:  # a list reordered
        value = node[key]
        if isinstance(value, list) and len(value) > 1:
            i = fdp.ConsumeIntInRange(0, len(value) - 1)
            j = fdp.ConsumeIntInRange(0, len(value) - 1)
            value[i], value[j] = value[j], value[i]
    else:  # wrap the value or unwrap a container
        value = node[key]
        if isinstance(value, list) and value:
            node[key] = value[0]
        elif isinstance(value, dict) and value:
            node[key] = next(iter(value.values()))
        else:
            node[key] = [value] if fdp.ConsumeBool() else {"value": value}
    return document


def mutate(document: Any, fdp: atheris.FuzzedDataProvider, most: int = 3) -> Any:
    """A deep copy of ``document`` with 1 to ``most`` edits chosen by ``fdp``."""
    document = copy.deepcopy(document)
    for _ in range(fdp.ConsumeIntInRange(1, most)):
        document = _edit(document, fdp)
    return document


def dumps(document: Any) -> bytes:
    """JSON as a Hugging Face or riftco writer would write it (lone surrogates escaped)."""
    return json.dumps(document, ensure_ascii=True).encode("ascii")


def loads_seed(data: bytes) -> Any:
    """A seed document, or None when the bytes are not JSON (a mutated seed file)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def split_input(data: bytes) -> tuple[bytes | None, bytes]:
    """A structured harness's input: an optional document, then ``NUL``, then the
    choice bytes (no ``NUL``: all of it is choices). A seed holding a hostile document
    and nothing after the ``NUL`` is fed as it is, unmutated."""
    document, sep, choices = data.partition(b"\0")
    return (document, choices) if sep else (None, data)


def document_from(data: bytes, base: Any) -> Any:
    """The document an input describes: its own (when it parses) or ``base``, edited
    by its choice bytes (none: unedited)."""
    raw, choices = split_input(data)
    document = loads_seed(raw) if raw else None
    if document is None:
        document = base
    if not choices:
        return copy.deepcopy(document)
    return mutate(document, atheris.FuzzedDataProvider(choices))


def seed(document: Any, choices: bytes = b"") -> bytes:
    """A seed input: ``document`` and the choice bytes that edit it."""
    return dumps(document) + b"\0" + choices
