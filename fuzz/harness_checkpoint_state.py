"""A training checkpoint whose manifest (the run: options, configuration, tokenizer;
the state: engine counters, optimizer, batch source) is a valid run's, edited field by
field by the fuzzer's bytes (see structure.py) and re-hashed, as anyone editing a
checkpoint can; then read, and taken through what ``--resume`` does before training:
the stage's checks, the options, the configuration and the tokenizer rebuilt.

The first two choice bytes may also drop one tensor (a first byte divisible by 8: the
second picks it; a missing moment, a missing weight), with the manifest's digest
recomputed to match."""

import atheris

with atheris.instrument_imports():
    from riftco.interchange import (
        canonical_json,
        content_id,
        read_safetensors,
        tensors_digest,
        write_safetensors,
    )
    from riftco.nn import TransformerConfig
    from riftco.tensor import RiftcoError
    from riftco.text import tokenizer_from_state
    from riftco.train.checkpoint import METADATA_KEY, read_checkpoint
    from riftco.train.post_training import PostTrainOptions
    from riftco.train.pretraining import PretrainOptions
    from riftco.train.stage import check_resume

import structure
from common import WORK, fuzz, scratch

VALID = WORK / "valid" / "checkpoint.riftckpt"
STORED = read_safetensors(VALID)
ARRAYS = {name: array.copy() for name, array in STORED.arrays().items()}
NAMES = sorted(ARRAYS)
BASE = structure.loads_seed(STORED.metadata[METADATA_KEY].encode())
OPTIONS = {"pretraining": PretrainOptions, "post_training": PostTrainOptions}


def target(data: bytes) -> None:
    raw, choices = structure.split_input(data)
    arrays = ARRAYS
    if len(choices) >= 2 and choices[0] % 8 == 0:  # drop one tensor; the rest edit
        dropped = NAMES[choices[1] % len(NAMES)]
        arrays = {name: a for name, a in ARRAYS.items() if name != dropped}
        choices = choices[2:]
    manifest = structure.document_from((raw or b"") + b"\0" + choices, BASE)
    if isinstance(manifest, dict):
        if arrays is not ARRAYS:
            manifest["tensors"] = {
                "sha256": tensors_digest(arrays),
                "count": len(arrays),
                "elements": sum(int(a.size) for a in arrays.values()),
            }
        try:  # the identity anyone can recompute
            manifest["checkpoint_id"] = content_id(manifest, exclude="checkpoint_id")
        except RiftcoError:
            pass
    try:
        text = canonical_json(manifest).decode("utf-8")
    except RiftcoError:
        text = structure.dumps(manifest).decode("ascii")
    path = scratch("state.riftckpt", b"")
    write_safetensors(path, arrays, {METADATA_KEY: text})
    checkpoint = read_checkpoint(path)
    checkpoint.trainer_state()
    checkpoint.weights()
    if checkpoint.stage in OPTIONS:
        check_resume(checkpoint, checkpoint.stage)
        OPTIONS[checkpoint.stage].from_dict(checkpoint.run["options"])
        TransformerConfig.from_dict(checkpoint.run["config"])
        tokenizer_from_state(checkpoint.run["tokenizer"])


if __name__ == "__main__":
    fuzz(target)
