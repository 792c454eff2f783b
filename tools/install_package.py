"""Install one riftco distribution, and only what it declares, into this interpreter.

``riftco-*`` wheels come from the local wheelhouse only, never from an index;
third-party requirements come from the package index. A requirement a package
forgot to declare is therefore missing in its tox env, and its tests fail.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare venv: pip vendors packaging
    from pip._vendor.packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WHEELHOUSE = ROOT / "build" / "wheelhouse"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_index(wheelhouse: Path) -> dict[str, tuple[Path, list[Requirement]]]:
    index = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            meta = Parser().parsestr(zf.read(meta_name).decode())
        reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
        index[canonical(meta["Name"])] = (wheel, reqs)
    return index


def active(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    envs = [{"extra": e} for e in extras] or [{"extra": ""}]
    return any(req.marker.evaluate(env) for env in envs)


def closure(root: str, extras: set[str], index: dict) -> tuple[list[Path], list[str]]:
    """Wheel files of root and its riftco dependencies; third-party requirement strings."""
    wheels: list[Path] = []
    third_party: list[str] = []
    todo = [(canonical(root), extras)]
    seen: set[str] = set()
    while todo:
        name, wanted = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in index:
            raise SystemExit(
                f"install_package: {name} is not in the wheelhouse; run build_wheels.py"
            )
        wheel, reqs = index[name]
        wheels.append(wheel)
        for req in reqs:
            if not active(req, wanted):
                continue
            dep = canonical(req.name)
            if dep.startswith("riftco"):
                todo.append((dep, set(req.extras)))
            else:
                plain = Requirement(str(req))
                plain.marker = None
                third_party.append(str(plain))
    return wheels, third_party


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args], check=True)


def wheel_has_native_library(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as zf:
        return any(n.endswith((".so", ".pyd", ".dylib")) for n in zf.namelist())


def check_build_ids(wheelhouse: Path, wheels: list[Path]) -> None:
    """Each installed native module must be the one the wheelhouse built, and its own.

    ``BUILD_IDS.json`` (written by build_wheels.py) maps a distribution to its
    native modules and their build ids; the installed module must report the same
    id through its package's ``native_build_id()`` and name itself in its marker.
    A native wheel the file does not list is an error, never skipped.
    """
    ids_file = wheelhouse / "BUILD_IDS.json"
    expected = json.loads(ids_file.read_text()) if ids_file.exists() else {}
    for wheel in wheels:
        dist = canonical(wheel.name.split("-")[0])
        if not wheel_has_native_library(wheel):
            continue
        modules = expected.get(dist)
        if not isinstance(modules, dict) or not modules:
            raise SystemExit(
                f"install_package: {wheel.name} holds a native library but {ids_file} "
                "records no build id for it; rebuild with build_wheels.py"
            )
        for module, build_id in modules.items():
            package = module.rpartition(".")[0]
            code = (
                f"import importlib; p = importlib.import_module({package!r}); "
                f"m = importlib.import_module({module!r}); "
                "print(p.native_build_id()); print(m.BUILD_ID_MARKER)"
            )
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if run.returncode != 0:
                raise SystemExit(
                    f"install_package: {dist}: cannot read the build id of {module}:\n{run.stderr}"
                )
            found, marker = run.stdout.split()
            if found != build_id or marker != f"RIFTCO_BUILD_ID:{module}:{build_id}":
                raise SystemExit(
                    f"install_package: {dist}: {module} reports build id {found!r} "
                    f"(marker {marker!r}); the wheelhouse built {build_id!r}"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distributions", nargs="*", help="e.g. riftco-tensor")
    parser.add_argument("--all", action="store_true", help="every wheel in the wheelhouse")
    parser.add_argument("--extra", action="append", default=[], help="extras to install")
    parser.add_argument("--wheelhouse", type=Path, default=DEFAULT_WHEELHOUSE)
    args = parser.parse_args(argv)
    index = wheel_index(args.wheelhouse)
    roots = list(index) if args.all else args.distributions
    if not roots:
        parser.error("name a distribution or pass --all")
    wheels: list[Path] = []
    third_party: list[str] = []
    for root in roots:
        more_wheels, more_reqs = closure(root, set(args.extra), index)
        wheels += [w for w in more_wheels if w not in wheels]
        third_party += more_reqs
    if third_party:
        pip(*sorted(set(third_party)))
    pip("--no-deps", "--force-reinstall", *map(str, wheels))
    check_build_ids(args.wheelhouse, wheels)
    names = ", ".join(w.name.split("-")[0] for w in wheels)
    print(f"installed from the wheelhouse: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
