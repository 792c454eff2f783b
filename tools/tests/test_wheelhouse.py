"""The wheelhouse check: each native wheel must hold its own library, built in this run."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import build_wheels
import install_package

TENSOR_ID = "0123456789abcdef"
TPU_ID = "fedcba9876543210"


def wheel(folder: Path, dist: str, members: dict[str, bytes]) -> Path:
    path = folder / f"{dist}-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def library(module: str, build_id: str) -> bytes:
    return b"\x7fELF..." + f"RIFTCO_BUILD_ID:{module}:{build_id}".encode() + b"\0..."


def test_each_library_is_named_by_the_module_it_installs_as(tmp_path):
    w = wheel(
        tmp_path,
        "riftco_tensor",
        {"riftco/tensor/_native.abi3.so": library("riftco.tensor._native", TENSOR_ID)},
    )
    assert build_wheels.wheel_native_modules(w) == {"riftco.tensor._native": TENSOR_ID}
    assert build_wheels.native_build_ids(tmp_path) == {
        "riftco-tensor": {"riftco.tensor._native": TENSOR_ID}
    }


def test_a_wheel_that_packed_another_packages_library_stops_the_build(tmp_path):
    swapped = library("riftco.tensor._native", TENSOR_ID)
    w = wheel(tmp_path, "riftco_backend_tpu", {"riftco/backends/tpu/_native.abi3.so": swapped})
    with pytest.raises(
        SystemExit, match="library of riftco.tensor._native, not of riftco.backends.tpu._native"
    ):
        build_wheels.wheel_native_modules(w)


@pytest.mark.parametrize(
    "data",
    [
        b"\x7fELF no marker",
        library("riftco.x._native", TENSOR_ID) + library("riftco.x._native", TPU_ID),
    ],
    ids=["no marker", "two markers"],
)
def test_a_library_without_exactly_one_marker_stops_the_build(tmp_path, data):
    w = wheel(tmp_path, "riftco_x", {"riftco/x/_native.abi3.so": data})
    with pytest.raises(SystemExit, match="should embed one build-id marker"):
        build_wheels.wheel_native_modules(w)


def test_pure_python_wheels_have_no_native_modules(tmp_path):
    w = wheel(tmp_path, "riftco_nn", {"riftco/nn/__init__.py": b""})
    assert build_wheels.wheel_native_modules(w) == {}
    assert not install_package.wheel_has_native_library(w)


def test_install_refuses_a_native_wheel_the_wheelhouse_has_no_id_for(tmp_path):
    w = wheel(
        tmp_path,
        "riftco_backend_tpu",
        {"riftco/backends/tpu/_native.abi3.so": library("riftco.backends.tpu._native", TPU_ID)},
    )
    (tmp_path / "BUILD_IDS.json").write_text(
        json.dumps({"riftco-tensor": {"riftco.tensor._native": TENSOR_ID}})
    )
    with pytest.raises(SystemExit, match="records no build id"):
        install_package.check_build_ids(tmp_path, [w])
