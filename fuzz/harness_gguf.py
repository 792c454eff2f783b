"""A GGUF file imported as a riftco model (metadata, tokenizer, tensors)."""

import atheris

with atheris.instrument_imports():
    from riftco.interchange import import_gguf

from common import fuzz, scratch


def target(data: bytes) -> None:
    import_gguf(scratch("input.gguf", data), require_tokenizer=False)


if __name__ == "__main__":
    fuzz(target)
