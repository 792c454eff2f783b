"""Post-training JSONL (prompt/response and chat messages)."""

import atheris

with atheris.instrument_imports():
    from riftco.train.instructions import load_jsonl

from common import fuzz, scratch


def target(data: bytes) -> None:
    load_jsonl(scratch("input.jsonl", data))


if __name__ == "__main__":
    fuzz(target)
