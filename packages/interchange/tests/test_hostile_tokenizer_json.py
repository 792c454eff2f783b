"""Hostile Hugging Face tokenizer files: a valid export's ``tokenizer.json`` or
``tokenizer_config.json`` with one field of the wrong type or shape (merges without a
space, as an integer or with three items; added tokens without ``content``; mixed id
types; junk beside a valid ``riftco_tokenizer`` state). Each is a ``ConversionError``
naming the field, what it expected and what it found, never a raw traceback."""

from __future__ import annotations

import json

import pytest

from riftco.core import RiftcoError
from riftco.interchange import ConversionError, export_huggingface_model, import_huggingface
from riftco.interchange.hf_tokenizer import STATE_KEY, read_tokenizer_files
from riftco.nn import DecoderOnlyTransformer, TransformerConfig


def _model(merges):
    return merges["model"]


def _drop_state(config):
    config.pop(STATE_KEY, None)


def _without_state(change):
    """``change`` to tokenizer.json, read with the riftco state removed (so that
    import rebuilds the tokenizer from tokenizer.json itself)."""
    return change, _drop_state


def _beside_state(change):
    """``change`` to tokenizer.json with the valid riftco state kept beside it."""
    return change, None


def _config_only(change):
    return None, change


def _added(document, k=0):
    return document["added_tokens"][k]


#: (name, (change to tokenizer.json, change to tokenizer_config.json), what the error names)
CASES = [
    (
        "merge without a space",
        _without_state(lambda d: _model(d)["merges"].__setitem__(0, "ab")),
        "merges[0]",
    ),
    (
        "merge with two spaces",
        _without_state(lambda d: _model(d)["merges"].__setitem__(0, "a b c")),
        "merges[0]",
    ),
    (
        "merge of a space alone",
        _without_state(lambda d: _model(d)["merges"].__setitem__(0, " ")),
        "merges[0]",
    ),
    (
        "merge as an int",
        _without_state(lambda d: _model(d)["merges"].__setitem__(0, 7)),
        "merges[0]",
    ),
    (
        "merge of three items",
        _without_state(lambda d: _model(d)["merges"].__setitem__(0, ["a", "b", "c"])),
        "merges[0]",
    ),
    (
        "merge of one item",
        _without_state(lambda d: _model(d)["merges"].__setitem__(0, ["a"])),
        "merges[0]",
    ),
    (
        "merge pair with an int",
        _without_state(lambda d: _model(d)["merges"].__setitem__(0, ["a", 1])),
        "merges[0]",
    ),
    (
        "merges an object",
        _without_state(lambda d: _model(d).__setitem__("merges", {"a": "b"})),
        "model.merges",
    ),
    (
        "added token without content",
        _without_state(lambda d: _added(d).pop("content")),
        "added_tokens[0].content",
    ),
    (
        "added token content an int",
        _without_state(lambda d: _added(d).__setitem__("content", 5)),
        "added_tokens[0].content",
    ),
    (
        "added token id a string",
        _without_state(lambda d: _added(d).__setitem__("id", str(_added(d)["id"]))),
        "added_tokens[0].id",
    ),
    (
        "added token id null",
        _without_state(lambda d: _added(d).__setitem__("id", None)),
        "added_tokens[0].id",
    ),
    (
        "added token id true",
        _without_state(lambda d: _added(d).__setitem__("id", True)),
        "added_tokens[0].id",
    ),
    (
        "added token a string",
        _without_state(lambda d: d["added_tokens"].__setitem__(0, "<|x|>")),
        "added_tokens[0]",
    ),
    (
        "added token a list",
        _without_state(lambda d: d["added_tokens"].__setitem__(0, [1])),
        "added_tokens[0]",
    ),
    (
        "added token special a string",
        _without_state(lambda d: _added(d).__setitem__("special", "yes")),
        "special",
    ),
    (
        "added token id twice",
        _without_state(lambda d: d["added_tokens"].append(dict(_added(d)))),
        "appears twice",
    ),
    (
        "added tokens an object",
        _without_state(lambda d: d.__setitem__("added_tokens", {"a": 1})),
        "added_tokens",
    ),
    (
        "vocab id a string",
        _without_state(lambda d: _model(d)["vocab"].__setitem__("a", "97")),
        "model.vocab['a']",
    ),
    (
        "vocab id a float",
        _without_state(lambda d: _model(d)["vocab"].__setitem__("a", 97.0)),
        "model.vocab['a']",
    ),
    (
        "vocab id negative",
        _without_state(lambda d: _model(d)["vocab"].__setitem__("a", -1)),
        "model.vocab['a']",
    ),
    (
        "vocab a list",
        _without_state(lambda d: _model(d).__setitem__("vocab", [["a", 0]])),
        "model.vocab",
    ),
    ("model a list", _without_state(lambda d: d.__setitem__("model", ["BPE"])), "model"),
    ("model type an int", _without_state(lambda d: _model(d).__setitem__("type", 1)), "model.type"),
    (
        "pre_tokenizer a string",
        _without_state(lambda d: d.__setitem__("pre_tokenizer", "ByteLevel")),
        "pre_tokenizer",
    ),
    (
        "post_processor a list",
        _without_state(lambda d: d.__setitem__("post_processor", [])),
        "post_processor",
    ),
    (
        "junk merges beside a valid state",
        _beside_state(lambda d: _model(d)["merges"].__setitem__(0, 3)),
        "merges[0]",
    ),
    (
        "junk added token beside a valid state",
        _beside_state(lambda d: d["added_tokens"].__setitem__(0, "x")),
        "added_tokens[0]",
    ),
    (
        "mixed id types beside a valid state",
        _beside_state(lambda d: _added(d).__setitem__("id", "280")),
        "added_tokens[0].id",
    ),
    (
        "added tokens without content beside a valid state",
        _beside_state(lambda d: [e.pop("content") for e in d["added_tokens"]]),
        "content",
    ),
    (
        # Found by the hf_json harness: another model type skips the BPE checks, and the
        # comparison with the riftco state must not trip over its merges.
        "another model type with junk merges beside a valid state",
        _beside_state(
            lambda d: (_model(d).__setitem__("type", "1.0"), _model(d)["merges"].__setitem__(0, 3))
        ),
        "BPE model",
    ),
    (
        "model a string beside a valid state",
        _beside_state(lambda d: d.__setitem__("model", "BPE")),
        "model",
    ),
    (
        "eos_token a list",
        _config_only(lambda c: (_drop_state(c), c.__setitem__("eos_token", ["<|endoftext|>"]))),
        "eos_token",
    ),
    (
        "eos_token object without content",
        _config_only(lambda c: (_drop_state(c), c.__setitem__("eos_token", {"id": 1}))),
        "eos_token.content",
    ),
    (
        "chat_template an int",
        _config_only(lambda c: (_drop_state(c), c.__setitem__("chat_template", 3))),
        "chat_template",
    ),
    ("riftco state a list", _config_only(lambda c: c.__setitem__(STATE_KEY, [1])), STATE_KEY),
    ("riftco state broken", _config_only(lambda c: c[STATE_KEY].update(merges="x")), STATE_KEY),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("hf") / "model"
    config = TransformerConfig.preset(
        "gpt2",
        vocab_size=tokenizer.vocab_size,
        context_length=16,
        d_model=8,
        n_layers=1,
        n_heads=2,
        d_ff=16,
    )
    export_huggingface_model(DecoderOnlyTransformer(config, seed=0), folder, tokenizer)
    return folder


def _copy(source, target):
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def _edit(folder, name, change):
    if change is None:
        return
    document = json.loads((folder / name).read_text(encoding="utf-8"))
    change(document)
    (folder / name).write_text(json.dumps(document), encoding="utf-8")


@pytest.mark.parametrize(("changes", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_tokenizer_files_are_refused_by_field(tmp_path, exported, changes, field):
    folder = _copy(exported, tmp_path / "model")
    document_change, config_change = changes
    _edit(folder, "tokenizer.json", document_change)
    _edit(folder, "tokenizer_config.json", config_change)
    with pytest.raises(ConversionError) as caught:
        read_tokenizer_files(folder)
    message = str(caught.value)
    assert field in message
    assert "expected" in message or "appears twice" in message
    with pytest.raises(ConversionError):
        import_huggingface(folder)
    assert isinstance(caught.value, RiftcoError)


def test_the_unedited_export_still_imports(tmp_path, exported, tokenizer):
    folder = _copy(exported, tmp_path / "model")
    assert read_tokenizer_files(folder) == tokenizer
    _edit(folder, "tokenizer_config.json", _drop_state)
    assert read_tokenizer_files(folder).vocab_size == tokenizer.vocab_size


def test_merges_as_pairs_import_like_strings(tmp_path, exported, tokenizer):
    folder = _copy(exported, tmp_path / "model")
    _edit(folder, "tokenizer_config.json", _drop_state)
    plain = read_tokenizer_files(folder)
    _edit(
        folder,
        "tokenizer.json",
        lambda d: _model(d).__setitem__("merges", [m.split(" ") for m in _model(d)["merges"]]),
    )
    text = "hello there, the lazy dog"
    assert read_tokenizer_files(folder).encode(text) == plain.encode(text)
