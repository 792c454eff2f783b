"""A small repository shaped like this one, for the version check and release.py tests.

riftco-core (pure Python), riftco-tensor (maturin: a binding crate over a kernel crate
and the shared crate tools/native-call, with Cargo.lock entries), riftco-nn (requires
tensor and, in its test extra, core) and a backend template requiring tensor.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import check_versions
import release

DATE = "2026-01-15"


def changelog(name: str, *versions: str, unreleased: str = "") -> str:
    text = f"# Changelog of {name}\n\n## [Unreleased]\n\n{unreleased}"
    for version in versions:
        text += f"## [{version}] - 2025-12-01\n\n### Added\n\n- Everything.\n\n"
    return text


def write(root: Path, path: str, text: str) -> Path:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text)
    return file


def hatch_pyproject(name: str, version: str, deps: list[str], test: list[str]) -> str:
    return (
        '[build-system]\nrequires = ["hatchling>=1.25"]\nbuild-backend = "hatchling.build"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = ">=3.10"\n'
        f"dependencies = {json.dumps(deps)}\n\n"
        f"[project.optional-dependencies]\ntest = {json.dumps(test)}\n"
    )


def make_tree(root: Path) -> Path:
    """The tree, with every distribution at 0.1.0 and recorded as released."""
    write(
        root,
        "Cargo.toml",
        '[workspace]\nresolver = "2"\nmembers = [\n    "packages/tensor/kernels",\n'
        '    "packages/tensor/native",\n    "tools/native-call",\n]\n\n'
        '[workspace.package]\nedition = "2021"\n\n[workspace.dependencies]\npyo3 = "0.29"\n',
    )
    write(
        root,
        "Cargo.lock",
        "version = 4\n\n"
        '[[package]]\nname = "pyo3"\nversion = "0.29.0"\n\n'
        '[[package]]\nname = "riftco-kernels"\nversion = "0.1.0"\n\n'
        '[[package]]\nname = "riftco-native-call"\nversion = "0.1.0"\n\n'
        '[[package]]\nname = "riftco-tensor-native"\nversion = "0.1.0"\n'
        'dependencies = [\n "riftco-kernels",\n]\n',
    )
    write(
        root,
        "tools/native-call/Cargo.toml",
        '[package]\nname = "riftco-native-call"\nversion = "0.1.0"\n\n'
        "[dependencies]\npyo3.workspace = true\n",
    )
    write(root, "tools/native-call/src/lib.rs", "pub fn call() {}\n")
    write(root, "tools/native-call/tests/it.rs", "#[test]\nfn works() {}\n")
    write(root, "tools/unrelated/notes.txt", "not a crate anyone builds from\n")

    # riftco-core: pure Python.
    write(
        root,
        "packages/core/pyproject.toml",
        hatch_pyproject("riftco-core", "0.1.0", [], ["pytest>=8"]),
    )
    write(
        root, "packages/core/src/riftco/core/__init__.py", '"""Core."""\n\n__version__ = "0.1.0"\n'
    )
    write(root, "packages/core/README.md", "# riftco-core\n")
    write(root, "packages/core/tests/test_core.py", "def test_nothing():\n    pass\n")
    write(root, "packages/core/CHANGELOG.md", changelog("riftco-core", "0.1.0"))

    # riftco-tensor: maturin, a binding crate over a kernel crate and the shared crate.
    write(
        root,
        "packages/tensor/pyproject.toml",
        '[build-system]\nrequires = ["maturin>=1.9.4,<2"]\nbuild-backend = "maturin"\n\n'
        '[project]\nname = "riftco-tensor"\nversion = "0.1.0"\n'
        'dependencies = ["numpy>=1.24", "riftco-core>=0.1,<0.2"]\n\n'
        '[tool.maturin]\nmanifest-path = "native/Cargo.toml"\npython-source = "src"\n',
    )
    write(
        root,
        "packages/tensor/src/riftco/tensor/__init__.py",
        'from riftco.tensor import _native\n\n__version__ = "0.1.0"\n',
    )
    write(root, "packages/tensor/CHANGELOG.md", changelog("riftco-tensor", "0.1.0"))
    write(
        root,
        "packages/tensor/native/Cargo.toml",
        '[package]\nname = "riftco-tensor-native"\nversion = "0.1.0"\nedition.workspace = true\n\n'
        '[dependencies]\nriftco-kernels = { path = "../kernels" }\n'
        'riftco-native-call = { path = "../../../tools/native-call" }\npyo3.workspace = true\n',
    )
    write(root, "packages/tensor/native/src/lib.rs", "// the binding\n")
    write(
        root,
        "packages/tensor/kernels/Cargo.toml",
        '[package]\nname = "riftco-kernels"\nversion = "0.1.0"\nedition.workspace = true\n',
    )
    write(root, "packages/tensor/kernels/src/lib.rs", "pub fn add() {}\n")
    write(root, "packages/tensor/kernels/examples/demo.rs", "fn main() {}\n")

    # riftco-nn: requires tensor, and core in its test extra (with a marker).
    write(
        root,
        "packages/nn/pyproject.toml",
        hatch_pyproject(
            "riftco-nn",
            "0.1.0",
            ["riftco-tensor>=0.1,<0.2", "numpy>=1.24"],
            ["pytest>=8", "riftco-core[extra]>=0.1,<0.2; sys_platform != 'emscripten'"],
        ),
    )
    write(root, "packages/nn/src/riftco/nn/__init__.py", '__version__ = "0.1.0"\n')
    write(root, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 1\n")
    write(root, "packages/nn/CHANGELOG.md", changelog("riftco-nn", "0.1.0"))

    write(
        root,
        "templates/backend/pyproject.toml",
        hatch_pyproject("riftco-backend-NAME", "0.1.0", ["riftco-tensor>=0.1,<0.2"], []),
    )
    release.record(root, sorted(check_versions.discover(root)), "2025-12-01", use_git=False)
    return root


def problems(root: Path, *, use_git: bool = False) -> list[str]:
    return check_versions.check(root, use_git=use_git)
