"""A tokenizer state (the JSON inside .rift bundles, checkpoints and ONNX sidecars)."""

import atheris

with atheris.instrument_imports():
    from riftco.interchange import strict_json
    from riftco.text import tokenizer_from_state

from common import fuzz


def target(data: bytes) -> None:
    tokenizer = tokenizer_from_state(strict_json(data, "state"))
    ids = tokenizer.encode("hello, world")
    tokenizer.decode(ids)


if __name__ == "__main__":
    fuzz(target)
