"""A Hugging Face directory whose config.json, tokenizer.json or tokenizer_config.json
(the first byte picks which) is a valid export's, parsed and then edited field by
field by the fuzzer's bytes (see structure.py), re-serialized and imported."""

import shutil

import atheris

with atheris.instrument_imports():
    from riftco.interchange import import_huggingface

import structure
from common import SCRATCH, WORK, fuzz

VALID = WORK / "valid" / "hf"
#: The JSON files import reads, in the order the first byte picks them.
FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
BASES = {name: structure.loads_seed((VALID / name).read_bytes()) for name in FILES}


def target(data: bytes) -> None:
    if not data:
        return
    folder = SCRATCH / "hf_json"
    if not folder.exists():
        shutil.copytree(VALID, folder)
    chosen = FILES[data[0] % len(FILES)]
    document = structure.document_from(data[1:], BASES[chosen])
    for name in FILES:
        content = structure.dumps(document) if name == chosen else (VALID / name).read_bytes()
        (folder / name).write_bytes(content)
    import_huggingface(folder)


if __name__ == "__main__":
    fuzz(target)
