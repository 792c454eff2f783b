"""Hostile training inputs: re-hashed checkpoints with wrong field types or sizes, JSONL
with line separators inside strings, corpora and JSONL that are devices or FIFOs."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from train_helpers import bigram_trainer

from riftco.interchange import canonical_json, content_id, read_safetensors, write_safetensors
from riftco.nn import TransformerConfig
from riftco.train.checkpoint import METADATA_KEY, read_checkpoint, save_checkpoint
from riftco.train.corpus import load_text, read_text_file
from riftco.train.errors import CheckpointError, DataError
from riftco.train.instructions import load_jsonl, parse_jsonl, to_jsonl


def _saved(tmp_path, run=None):
    path = tmp_path / "run.riftckpt"
    trainer = bigram_trainer()
    trainer.run(until=2)
    save_checkpoint(path, trainer, run or {})
    return path


def _rehash(path, change):
    """Apply ``change`` to the manifest and give it a matching identity, as an attacker can."""
    stored = read_safetensors(path)
    manifest = json.loads(stored.metadata[METADATA_KEY])
    change(manifest)
    manifest["checkpoint_id"] = content_id(manifest, exclude="checkpoint_id")
    arrays = {name: np.array(a) for name, a in stored.arrays().items()}
    write_safetensors(path, arrays, {METADATA_KEY: canonical_json(manifest).decode()})


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.update(step=10**12),
        lambda m: m.update(step="12"),
        lambda m: m.update(step=-1),
        lambda m: m.update(stage=["pretraining"]),
        lambda m: m.update(run=[1]),
        lambda m: m.update(state=None),
        lambda m: m["tensors"].update(count="3"),
        lambda m: m["state"]["optimizer"].update(state={"x": {"step": 1}}),
        lambda m: m["state"]["optimizer"].update(state={"0": {"step": "1"}}),
        lambda m: m["state"]["optimizer"].update(state=[]),
    ],
)
def test_rehashed_checkpoint_with_wrong_field_types(tmp_path, change):
    path = _saved(tmp_path)
    _rehash(path, change)
    with pytest.raises(CheckpointError):
        read_checkpoint(path)


def _model_config(**overrides) -> dict:
    sizes = dict(vocab_size=16, context_length=8, d_model=8, n_layers=1, n_heads=2, d_ff=16)
    return TransformerConfig.preset("gpt2", **{**sizes, **overrides}).to_dict()


@pytest.mark.parametrize(
    "overrides", [dict(d_model=65536, n_heads=2), dict(n_layers=10**7), dict(vocab_size=2**30)]
)
def test_rehashed_checkpoint_whose_config_outgrows_its_tensors(tmp_path, overrides):
    path = _saved(tmp_path)
    config = _model_config(**overrides)
    _rehash(path, lambda m: m["run"].update(config=config))
    start = time.monotonic()
    with pytest.raises(CheckpointError):
        read_checkpoint(path)
    assert time.monotonic() - start < 5


def test_checkpoint_manifest_with_a_5000_digit_integer(tmp_path):
    path = _saved(tmp_path)
    stored = read_safetensors(path)
    text = stored.metadata[METADATA_KEY].replace('"step":2', '"step":' + "9" * 5000, 1)
    arrays = {name: np.array(a) for name, a in stored.arrays().items()}
    write_safetensors(path, arrays, {METADATA_KEY: text})
    with pytest.raises(CheckpointError):
        read_checkpoint(path)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085", "\x1c", "\x0b"])
def test_jsonl_with_line_separators_inside_strings(tmp_path, separator):
    line = json.dumps(
        {"prompt": f"a{separator}b", "response": f"c{separator}d"}, ensure_ascii=False
    )
    examples = parse_jsonl(line + "\n")
    assert separator in examples[0].messages[0].content
    path = tmp_path / "data.jsonl"
    path.write_text(to_jsonl(examples), encoding="utf-8")
    assert load_jsonl(path) == examples


def test_jsonl_with_a_5000_digit_integer():
    with pytest.raises(DataError, match=":1:"):
        parse_jsonl('{"prompt": "a", "response": "b", "x": ' + "9" * 5000 + "}\n")


def _specials(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "zero.txt"
    link.symlink_to("/dev/zero")
    return [fifo, link, "/dev/zero", "/dev/urandom"]


def test_corpus_and_jsonl_that_are_devices_or_fifos_are_refused(tmp_path):
    for path in _specials(tmp_path):
        with pytest.raises(DataError, match="regular file"):
            read_text_file(path)
        with pytest.raises(DataError, match="regular file"):
            load_jsonl(path)


def test_corpus_folder_with_a_fifo_named_txt(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("hello world\n")
    os.mkfifo(folder / "b.txt")
    corpus = load_text(folder)  # the FIFO is not a file: skipped, never opened
    assert [d.name for d in corpus.documents] == ["a.txt"]
