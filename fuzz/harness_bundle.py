"""A .rift bundle, read and loaded as a runnable model."""

import atheris

with atheris.instrument_imports():
    from riftco.interchange import load_bundle

from common import fuzz, scratch


def target(data: bytes) -> None:
    model = load_bundle(scratch("input.rift", data))
    model.tokenizer.decode(model.tokenizer.encode("hi"))


if __name__ == "__main__":
    fuzz(target)
