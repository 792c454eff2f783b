"""An ONNX export and its sidecar imported back: the first byte picks which one the
fuzzer's bytes replace; the other is a valid file from the seed script."""

import shutil

import atheris

with atheris.instrument_imports():
    from riftco.interchange import import_onnx

from common import SCRATCH, WORK, fuzz

VALID = WORK / "valid" / "onnx"


def target(data: bytes) -> None:
    if not data:
        return
    folder = SCRATCH / "onnx"
    if not folder.exists():
        shutil.copytree(VALID, folder)
    names = sorted(p.name for p in VALID.iterdir())
    replaced = names[data[0] % len(names)]
    for name in names:
        source = VALID / name
        (folder / name).write_bytes(data[1:] if name == replaced else source.read_bytes())
    onnx_file = next(p for p in folder.iterdir() if p.suffix == ".onnx")
    import_onnx(onnx_file)


if __name__ == "__main__":
    fuzz(target)
