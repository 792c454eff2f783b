"""A .rift bundle whose manifest (configuration, tokenizer state, stage, lineage,
metadata, the weights' record) is a valid bundle's, edited field by field by the
fuzzer's bytes (see structure.py) and re-hashed (the artifact id anyone can
recompute); then loaded as a runnable model."""

import atheris

with atheris.instrument_imports():
    from riftco.interchange import (
        canonical_json,
        content_id,
        load_bundle,
        read_safetensors,
        write_safetensors,
    )
    from riftco.interchange.manifest import MANIFEST_KEY
    from riftco.tensor import RiftcoError

import structure
from common import WORK, fuzz, scratch

VALID = WORK / "valid" / "bundle.rift"
STORED = read_safetensors(VALID)
ARRAYS = {name: array.copy() for name, array in STORED.arrays().items()}
BASE = structure.loads_seed(STORED.metadata[MANIFEST_KEY].encode())


def target(data: bytes) -> None:
    manifest = structure.document_from(data, BASE)
    if isinstance(manifest, dict):
        try:
            manifest["artifact_id"] = content_id(manifest)
        except RiftcoError:
            pass
    try:
        text = canonical_json(manifest).decode("utf-8")
    except RiftcoError:
        text = structure.dumps(manifest).decode("ascii")
    path = scratch("manifest.rift", b"")
    write_safetensors(path, ARRAYS, {MANIFEST_KEY: text})
    model = load_bundle(path)
    model.tokenizer.decode(model.tokenizer.encode("hi"))


if __name__ == "__main__":
    fuzz(target)
