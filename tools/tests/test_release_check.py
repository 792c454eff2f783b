"""The release check's own rules: manylinux policy, toolchain-free PATH, lock subsets, tags."""

from __future__ import annotations

import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import release_check as rc

# auditwheel 6 wraps its report at any space, the tag included.
REPORT_2_17 = """
riftco_tensor-0.1.0-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
is consistent with the following platform tag:
"manylinux_2_17_x86_64".

The wheel references external versioned symbols in these
system-provided shared libraries: libc.so.6 with versions {'GLIBC_2.17'}
"""
REPORT_2_34 = """riftco_tensor-0.1.0-cp310-abi3-linux_x86_64.whl is consistent with
the following platform tag: "manylinux_2_34_x86_64"."""
REPORT_LINUX = 'x.whl is consistent with the following platform\ntag: "linux_x86_64".'


def test_auditwheel_policy_reads_a_wrapped_report():
    assert rc.auditwheel_policy(REPORT_2_17) == "manylinux_2_17_x86_64"
    assert rc.auditwheel_policy(REPORT_2_34) == "manylinux_2_34_x86_64"
    assert rc.auditwheel_policy(REPORT_LINUX) == "linux_x86_64"


def test_auditwheel_policy_refuses_a_report_without_a_tag():
    with pytest.raises(rc.ReleaseCheckError, match="no platform tag"):
        rc.auditwheel_policy("This does not look like a platform wheel")


@pytest.mark.parametrize(
    "tag, version",
    [("manylinux_2_17_x86_64", (2, 17)), ("manylinux_2_28_aarch64", (2, 28))],
)
def test_policies_up_to_2_28_pass(tag, version):
    assert rc.check_policy(tag) == version


@pytest.mark.parametrize(
    "tag, message",
    [
        ("manylinux_2_34_x86_64", "manylinux_2_28 or older"),
        ("manylinux_3_0_x86_64", "manylinux_2_28 or older"),
        ("linux_x86_64", "expected a manylinux_X_Y policy"),
        ("musllinux_1_2_x86_64", "expected a manylinux_X_Y policy"),
    ],
)
def test_newer_or_unaudited_policies_fail(tag, message):
    with pytest.raises(rc.ReleaseCheckError, match=message):
        rc.check_policy(tag)


def test_wheel_tags():
    name = "riftco_tensor-0.1.0-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    assert rc.wheel_tags(name) == ("cp310", "abi3", "manylinux2014_x86_64.manylinux_2_17_x86_64")
    assert rc.wheel_tags("riftco-0.1.0-py3-none-any.whl") == ("py3", "none", "any")
    with pytest.raises(rc.ReleaseCheckError):
        rc.wheel_tags("riftco-0.1.0.whl")


def _executable(path: Path) -> None:
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_without_toolchain_drops_every_folder_holding_cargo_or_rustc(tmp_path):
    cargo_bin, rustc_bin, plain = tmp_path / "cargo", tmp_path / "rustup", tmp_path / "plain"
    for folder in (cargo_bin, rustc_bin, plain):
        folder.mkdir()
    _executable(cargo_bin / "cargo")
    _executable(rustc_bin / "rustc")
    _executable(plain / "python3")
    path = os.pathsep.join(map(str, (cargo_bin, plain, rustc_bin, "")))
    kept = rc.without_toolchain(path)
    assert kept == str(plain)
    assert all(__import__("shutil").which(n, path=kept) is None for n in ("cargo", "rustc"))


def test_wheel_modules_are_the_folders_with_py_typed():
    members = [
        "riftco/backends/metal/__init__.py",
        "riftco/backends/metal/py.typed",
        "riftco/backends/metal/_native.abi3.so",
        "riftco_backend_metal-0.1.0.dist-info/METADATA",
    ]
    assert rc.wheel_modules(members) == ["riftco.backends.metal"]
    with pytest.raises(rc.ReleaseCheckError, match="py.typed"):
        rc.wheel_modules(["riftco/x/__init__.py"])


def test_lock_subset(tmp_path):
    lock = tmp_path / "Cargo.lock"
    lock.write_text(
        'version = 4\n[[package]]\nname = "gemm"\nversion = "0.19.0"\n'
        '[[package]]\nname = "rayon"\nversion = "1.12.0"\n'
    )
    locked = rc.cargo_lock_packages(lock)
    assert locked == {("gemm", "0.19.0"), ("rayon", "1.12.0")}
    rc.check_lock_subset(locked, {("gemm", "0.19.0")}, "tensor")
    with pytest.raises(rc.ReleaseCheckError, match="rayon 1.13.0"):
        rc.check_lock_subset(locked, {("rayon", "1.13.0")}, "tensor")
    with pytest.raises(rc.ReleaseCheckError, match="Cargo.lock"):
        rc.cargo_lock_packages(tmp_path / "missing" / "Cargo.lock")


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    dist = name.replace("-", "_")
    meta = f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{dist}-{version}.dist-info/METADATA", meta)


def test_third_party_requirements_follow_riftco_dependencies_and_extras(tmp_path):
    _wheel(tmp_path, "riftco", "0.1.0", ["riftco-train[plot]>=0.1,<1"])
    _wheel(
        tmp_path,
        "riftco-train",
        "0.1.0",
        ["numpy>=1.24", "matplotlib; extra == 'plot'", "pyarrow>=14; extra == 'parquet'"],
    )
    assert rc.third_party_requirements(tmp_path, ["riftco"]) == ["matplotlib", "numpy>=1.24"]


def _package(root: Path, folder: str, name: str, version: str) -> Path:
    package = root / folder
    package.mkdir()
    text = f'[project]\nname = "{name}"\nversion = "{version}"\n'
    (package / "pyproject.toml").write_text(text)
    return package


def test_resolve_tag(tmp_path):
    packages = [
        _package(tmp_path, "nn", "riftco-nn", "0.2.0"),
        _package(tmp_path, "backend-cuda", "riftco-backend-cuda", "0.1.1"),
        _package(tmp_path, "riftco", "riftco", "1.0.0"),
    ]
    assert rc.resolve_tag("riftco-nn-v0.2.0", packages) == {
        "dist": "riftco-nn",
        "folder": "nn",
        "version": "0.2.0",
        "prefix": "riftco_nn-0.2.0",
    }
    assert rc.resolve_tag("riftco-backend-cuda-v0.1.1", packages)["prefix"] == (
        "riftco_backend_cuda-0.1.1"
    )
    assert rc.resolve_tag("riftco-v1.0.0", packages)["folder"] == "riftco"
    with pytest.raises(rc.ReleaseCheckError, match="packages/nn is 0.2.0"):
        rc.resolve_tag("riftco-nn-v0.3.0", packages)
    with pytest.raises(rc.ReleaseCheckError, match="no package"):
        rc.resolve_tag("riftco-text-v0.1.0", packages)
    with pytest.raises(rc.ReleaseCheckError, match="expected a tag"):
        rc.resolve_tag("v0.2.0", packages)
