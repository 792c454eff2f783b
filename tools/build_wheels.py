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


BUILD_ID_MARK = re.compile(rb"RIFTCO_BUILD_ID:([A-Za-z0-9_.]+):([0-9a-f]{16})")
NATIVE_SUFFIXES = (".so", ".pyd", ".dylib")


def native_module_name(member: str) -> str:
    """``riftco/tensor/_native.abi3.so`` -> ``riftco.tensor._native``."""
    folder, _, file = member.rpartition("/")
    return ".".join([*folder.split("/"), file.split(".")[0]]) if folder else file.split(".")[0]


def wheel_native_modules(wheel: Path) -> dict[str, str]:
    """Each native library in a wheel: its module name -> the build id it embeds.

    The library must embed exactly one marker, and it must name the module the
    library is installed as; anything else means the wheel packed another
    package's library (or a stale one), and stops the build.
    """
    found = {}
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            if not member.endswith(NATIVE_SUFFIXES):
                continue
            module = native_module_name(member)
            marks = {(m.decode(), i.decode()) for m, i in BUILD_ID_MARK.findall(zf.read(member))}
            if len(marks) != 1:
                raise SystemExit(
                    f"build_wheels: {wheel.name}: {member} should embed one build-id marker "
                    f"for {module}, found {sorted(marks) or 'none'}"
                )
            ((marked, build_id),) = marks
            if marked != module:
                raise SystemExit(
                    f"build_wheels: {wheel.name}: {member} is the library of {marked}, "
                    f"not of {module}; another package's build was packed into this wheel"
                )
            found[module] = build_id
    return found


def native_build_ids(wheelhouse: Path) -> dict[str, dict[str, str]]:
    """Distribution -> {native module -> build id}, for every wheel with a library."""
    ids = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        modules = wheel_native_modules(wheel)
        if modules:
            ids[wheel.name.split("-")[0].replace("_", "-")] = modules
    return ids


def check_native_wheel(package: Path, wheelhouse: Path) -> None:
    """A maturin package's wheel must hold its own native module."""
    with open(package / "pyproject.toml", "rb") as f:
        config = tomllib.load(f)
    module = config["tool"]["maturin"]["module-name"]
    dist = config["project"]["name"].replace("-", "_")
    wheels = sorted(wheelhouse.glob(f"{dist}-*.whl"), key=lambda w: w.stat().st_mtime)
    if not wheels:
        raise SystemExit(f"build_wheels: maturin wrote no wheel for {package.name}")
    if module not in wheel_native_modules(wheels[-1]):
        raise SystemExit(f"build_wheels: {wheels[-1].name} has no native library for {module}")


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
        if build_backend(package) == "maturin":
            check_native_wheel(package, args.wheelhouse)
        print(f"built {package.name:<16} {time.perf_counter() - start:6.1f} s", flush=True)
    ids = native_build_ids(args.wheelhouse)
    (args.wheelhouse / "BUILD_IDS.json").write_text(json.dumps(ids, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
