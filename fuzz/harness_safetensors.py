"""A plain SafeTensors file: header, layout, every tensor's bytes."""

import atheris

with atheris.instrument_imports():
    from riftco.interchange import read_safetensors

from common import fuzz, scratch


def target(data: bytes) -> None:
    stored = read_safetensors(scratch("input.safetensors", data))
    for array in stored.arrays().values():
        array.sum()
    stored.digest()


if __name__ == "__main__":
    fuzz(target)
