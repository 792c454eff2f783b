"""A .riftckpt training checkpoint, read and validated."""

import atheris

with atheris.instrument_imports():
    from riftco.train.checkpoint import read_checkpoint

from common import fuzz, scratch


def target(data: bytes) -> None:
    checkpoint = read_checkpoint(scratch("input.riftckpt", data))
    checkpoint.trainer_state()
    checkpoint.weights()


if __name__ == "__main__":
    fuzz(target)
