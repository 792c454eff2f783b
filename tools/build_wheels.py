"""Build every distribution under packages/ into one local wheelhouse.

Native (maturin) packages are compiled once here; every tox env then installs
``riftco-*`` distributions from this folder only (see install_package.py).
The build id of each native module is recorded in ``BUILD_IDS.json`` so an
install can prove it got the wheel built in this run.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WHEELHOUSE = ROOT / "build" / "wheelhouse"


def package_dirs() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))


def build_backend(package: Path) -> str:
    with open(package / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["build-system"]["build-backend"]


def build_one(package: Path, wheelhouse: Path) -> None:
    if build_backend(package) == "maturin":
        cmd = ["maturin", "build", "--release", "--quiet", "--out", str(wheelhouse)]
        subprocess.run(cmd, cwd=package, check=True)
    else:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheelhouse),
            str(package),
        ]
        subprocess.run(cmd, check=True)


BUILD_ID_MARK = re.compile(rb"RIFTCO_BUILD_ID:([0-9a-f]{16})")


def native_build_ids(wheelhouse: Path) -> dict[str, str]:
    """Read the build id that each native extension module embeds in its binary."""
    ids = {}
    for wheel in wheelhouse.glob("*.whl"):
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.endswith((".so", ".pyd", ".dylib")):
                    found = BUILD_ID_MARK.search(zf.read(name))
                    if found:
                        dist = wheel.name.split("-")[0].replace("_", "-")
                        ids[dist] = found.group(1).decode()
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", type=Path, default=DEFAULT_WHEELHOUSE)
    parser.add_argument("packages", nargs="*", help="package folder names (default: all)")
    args = parser.parse_args(argv)
    wanted = set(args.packages)
    if not wanted:
        shutil.rmtree(args.wheelhouse, ignore_errors=True)
    args.wheelhouse.mkdir(parents=True, exist_ok=True)
    for package in package_dirs():
        if wanted and package.name not in wanted:
            continue
        start = time.perf_counter()
        build_one(package, args.wheelhouse)
        print(f"built {package.name:<16} {time.perf_counter() - start:6.1f} s", flush=True)
    ids = native_build_ids(args.wheelhouse)
    (args.wheelhouse / "BUILD_IDS.json").write_text(json.dumps(ids, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
