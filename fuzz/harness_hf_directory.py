"""A Hugging Face model directory: the first byte picks which file (config.json,
tokenizer.json, tokenizer_config.json, model.safetensors, ...) the fuzzer's bytes
replace; the rest come from a valid export made by the seed script."""

import shutil

import atheris

with atheris.instrument_imports():
    from riftco.interchange import import_huggingface

from common import SCRATCH, WORK, fuzz

VALID = WORK / "valid" / "hf"


def target(data: bytes) -> None:
    if not data:
        return
    folder = SCRATCH / "hf"
    if not folder.exists():
        shutil.copytree(VALID, folder)
    names = sorted(p.name for p in VALID.iterdir())
    replaced = names[data[0] % len(names)]
    for name in names:
        (folder / name).write_bytes(data[1:] if name == replaced else (VALID / name).read_bytes())
    import_huggingface(folder)


if __name__ == "__main__":
    fuzz(target)
