import copy
import json
import os
import pickle

import pytest

from riftco.text import (
    FORMAT_VERSION,
    BpeTokenizer,
    ByteTokenizer,
    StateError,
    load,
    tokenizer_from_state,
)

CORPUS = "state must survive a round trip exactly; <|endoftext|> " * 30


def kinds():
    return [
        ByteTokenizer.train(CORPUS),
        BpeTokenizer.train(CORPUS, 320, 2, "none"),
        BpeTokenizer.train(CORPUS, 320, 2, "gpt2"),
    ]


@pytest.mark.parametrize("tok", kinds(), ids=["byte", "bpe-none", "bpe-gpt2"])
def test_round_trip_through_json(tok, tmp_path):
    path = tmp_path / "tokenizer.json"
    tok.save(path)
    restored = load(path)
    assert type(restored) is type(tok)
    assert restored == tok
    assert restored.to_state() == tok.to_state()
    text = "survive <|endoftext|> exactly"
    assert restored.encode(text, allow_special=True) == tok.encode(text, allow_special=True)
    assert json.loads(path.read_text())["format_version"] == FORMAT_VERSION


@pytest.mark.parametrize("tok", kinds(), ids=["byte", "bpe-none", "bpe-gpt2"])
def test_pickle_and_copy(tok):
    for other in (pickle.loads(pickle.dumps(tok)), copy.deepcopy(tok)):
        assert other == tok
        assert other.apply_chat_template([{"role": "user", "content": "exactly"}]).ids == (
            tok.apply_chat_template([{"role": "user", "content": "exactly"}]).ids
        )


def test_state_document():
    state = BpeTokenizer.train("abababab", vocab_size=258, pretokenize="gpt2").to_state()
    assert state["method"] == "bpe"
    assert state["options"] == {"pretokenize": "gpt2"}
    assert state["merges"] == [[97, 98, 256], [256, 256, 257]]
    assert state["special_tokens"][0] == {"id": 258, "content": "<|endoftext|>"}
    assert state["eos_token"] == "<|endoftext|>"


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "tok.json"
    tok = BpeTokenizer.train(CORPUS, 300)
    tok.save(path)
    before = path.read_bytes()

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        BpeTokenizer.train(CORPUS, 310).save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["tok.json"]


def test_load_names_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(StateError, match=r"bad\.json: expected JSON"):
        load(path)
    path.write_text("{}")
    with pytest.raises(StateError, match=r"bad\.json: format"):
        load(path)


def bpe_state():
    return BpeTokenizer.train("abababab cdcd", vocab_size=259).to_state()


def byte_state():
    return ByteTokenizer.train("abc").to_state()


def edit(state, path, value):
    state = copy.deepcopy(state)
    target = state
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return state


CASES = [
    (bpe_state, ["format"], "other", "format: expected 'riftco-text/tokenizer'"),
    (bpe_state, ["format_version"], 99, "written by a newer riftco-text"),
    (bpe_state, ["format_version"], True, "format_version: expected an integer"),
    (bpe_state, ["method"], "wordpiece", "method: expected one of"),
    (bpe_state, ["merges"], KeyError, r"missing keys \['merges'\]"),
    (bpe_state, ["extra"], 1, r"unexpected keys \['extra'\]"),
    (bpe_state, ["options", "pretokenize"], "words", "expected pretokenize in"),
    (bpe_state, ["options", "lowercase"], True, r"options: .*unexpected keys \['lowercase'\]"),
    (bpe_state, ["merges", 1], [256, 300, 257], r"merges\[1\]: expected operands that are earlier"),
    (bpe_state, ["merges", 1], [256, 257, 257], r"merges\[1\]: expected operands that are earlier"),
    (bpe_state, ["merges", 1], [97, 98, 300], r"merges\[1\]: expected result id 257"),
    (bpe_state, ["merges", 0], [97, 98], r"merges\[0\]: expected \[left, right, id\]"),
    (bpe_state, ["merges", 0], [97, True, 256], r"merges\[0\]: expected \[left, right, id\]"),
    (bpe_state, ["merges"], [[0, 0, 256 + k] for k in range(1 << 20)], "at most"),
    (bpe_state, ["special_tokens", 0, "id"], 5, r"special_tokens\[0\]: expected id 259"),
    (bpe_state, ["special_tokens", 1, "content"], "<|endoftext|>", "appears twice"),
    (bpe_state, ["special_tokens", 0], ["x"], r"special_tokens\[0\]: expected \{id, content\}"),
    (bpe_state, ["eos_token"], "<|nope|>", "eos_token among the special tokens"),
    (bpe_state, ["chat_template", "assistant_role"], "bot", "assistant_role among the roles"),
    (bpe_state, ["chat_template", "roles"], [], "roles: expected an object"),
    (byte_state, ["byte_vocab"], [99, 98], "strictly ascending"),
    (byte_state, ["byte_vocab"], [], "at least one byte"),
    (byte_state, ["byte_vocab"], [300], r"integers in \[0, 256\)"),
    (byte_state, ["byte_vocab"], "abc", "byte_vocab: expected a list"),
]


@pytest.mark.parametrize(("make", "path", "value", "message"), CASES)
def test_invalid_states_are_rejected(make, path, value, message):
    with pytest.raises(StateError, match=message):
        tokenizer_from_state(edit(make(), path, value))


def test_not_an_object():
    with pytest.raises(StateError, match="expected a JSON object; found list"):
        tokenizer_from_state([])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"format": 1, "format": 2}', "duplicate key 'format'"),
        ('{"format": NaN}', "standard JSON"),
        ("[" * 1000 + "]" * 1000, "nested too deeply"),
    ],
)
def test_load_reads_strict_json(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(StateError, match=rf"bad\.json: .*{match}"):
        load(path)
