"""Start a new package from a template folder, wired into the build and the test envs.

    python3 tools/new_package.py NAME           # packages/NAME from templates/package
    python3 tools/new_package.py --native NAME  # packages/backend-NAME from templates/backend

A pure-Python package is ``riftco-NAME`` (import ``riftco.NAME``); a native backend is
``riftco-backend-NAME`` (import ``riftco.backends.NAME``, entry point ``NAME`` in
``riftco.backends``) with a pure-Rust kernel crate and a PyO3 binding crate, both added
to the root Cargo workspace, and its native module to tox.ini's ``stubs`` env (installed
and checked by stubtest). Either way the package's folder joins the factor list of
tox.ini's generated ``test-*`` envs and ``env_list``, its ``src`` joins mypy's
``mypy_path`` in the root pyproject.toml, and its namespace folders join ruff.toml's
``namespace-packages``, and its README and API reference page join the documentation
site's nav in mkdocs.yml: nothing outside the new folder needs a hand edit. Every file is
checked before any is written, and each is replaced atomically.
"""

from __future__ import annotations

import argparse
import keyword
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
TEXT_SUFFIXES = {".py", ".pyi", ".toml", ".md", ".rs"}
#: tox.ini's generated per-package section: ``[testenv:test-{a,b,...}]``.
TOX_SECTION = re.compile(r"^\[testenv:test-\{([^}]*)\}\]$", re.M)
API_LINE = re.compile(r"^API_VERSION = \(\d+, \d+\)$", re.M)
#: The root pyproject.toml's ``mypy_path = [...]``, one quoted folder a line.
MYPY_PATH = re.compile(r'^mypy_path = \[\n((?:    "[^"\n]*",\n)*)\]$', re.M)
#: ruff.toml's ``namespace-packages = [...]``, one quoted folder a line.
NAMESPACES = re.compile(r'^namespace-packages = \[\n((?:    "[^"\n]*",\n)*)\]$', re.M)
#: tox.ini's stubs env: the distributions it installs and the modules stubtest checks.
STUBS_INSTALL = re.compile(
    r"^(commands_pre = python tools/install_package\.py riftco-tensor[^\n]*)$", re.M
)
STUBS_CHECK = re.compile(
    r"^(commands = python -m mypy\.stubtest riftco\.tensor\._native[^\n]*)$", re.M
)
#: mkdocs.yml's nav sections a package joins: its README, and its API reference page.
NAV_SECTION = "  - {title}:\n((?:      - [^\n]*\n)+)"


class NewPackageError(Exception):
    """The package cannot be created; nothing was written."""


def check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name) or keyword.iskeyword(name):
        raise NewPackageError(
            f"{name!r} is not a package name: expected lowercase letters, digits and "
            "underscores, starting with a letter (it becomes a Python module name)"
        )


def class_name(name: str) -> str:
    """``my_device`` -> ``MyDeviceBackend``."""
    return "".join(part.title() for part in name.split("_")) + "Backend"


def api_version(root: Path) -> str:
    """riftco-tensor's current BACKEND_API_VERSION, as written in its source (whichever
    module of riftco.tensor assigns it)."""
    for module in sorted((root / "packages/tensor/src/riftco/tensor").glob("*.py")):
        found = re.search(r"^BACKEND_API_VERSION = (\(\d+, \d+\))$", module.read_text(), re.M)
        if found is not None:
            return found.group(1)
    raise NewPackageError("cannot find BACKEND_API_VERSION in riftco-tensor's sources")


def with_cargo_members(text: str, members: list[str]) -> str:
    """The root Cargo.toml with ``members`` added to ``[workspace] members``."""
    block = re.search(r"^members = \[\n(.*?)^\]", text, re.M | re.S)
    if block is None:
        raise NewPackageError("Cargo.toml: no multi-line `members = [...]` list to extend")
    lines = block.group(1).splitlines(keepends=True)
    present = {line.strip().strip(",").strip('"') for line in lines}
    clash = sorted(set(members) & present)
    if clash:
        raise NewPackageError(f"Cargo.toml already lists {', '.join(clash)}")
    packages = [i for i, line in enumerate(lines) if line.strip().startswith('"packages/')]
    at = packages[-1] + 1 if packages else len(lines)
    lines[at:at] = [f'    "{member}",\n' for member in members]
    return text[: block.start(1)] + "".join(lines) + text[block.end(1) :]


def with_tox_env(text: str, folder: str) -> str:
    """tox.ini with ``folder`` in the generated test envs' factors and in env_list."""
    section = TOX_SECTION.search(text)
    if section is None:
        raise NewPackageError("tox.ini: no generated [testenv:test-{...}] section to extend")
    factors = section.group(1).split(",")
    if folder in factors:
        raise NewPackageError(f"tox.ini already has test-{folder}")
    text = text[: section.start(1)] + ",".join([*factors, folder]) + text[section.end(1) :]
    # The factor sets the folder the env's commands use: one line after the last one.
    settings = list(re.finditer(r"^    [\w-]+: TOX_PACKAGE = [\w-]+\n", text, re.M))
    if not settings:
        raise NewPackageError("tox.ini: no `<factor>: TOX_PACKAGE = <folder>` lines")
    end = settings[-1].end()
    text = text[:end] + f"    {folder}: TOX_PACKAGE = {folder}\n" + text[end:]
    env_list = re.search(r"^env_list =\n((?:    .*\n)+)", text, re.M)
    if env_list is None:
        raise NewPackageError("tox.ini: no multi-line env_list to extend")
    end = env_list.end(1) - 1  # before the last newline
    return text[:end] + f",\n    test-{folder}" + text[end:]


def with_mypy_path(text: str, folder: str) -> str:
    """pyproject.toml with ``packages/<folder>/src`` last in ``[tool.mypy]``'s mypy_path."""
    block = MYPY_PATH.search(text)
    if block is None:
        raise NewPackageError("pyproject.toml: no multi-line mypy_path = [...] to extend")
    entry = f'    "packages/{folder}/src",\n'
    if entry in block.group(1):
        raise NewPackageError(f"pyproject.toml: mypy_path already has packages/{folder}/src")
    return text[: block.end(1)] + entry + text[block.end(1) :]


def with_namespaces(text: str, folder: str, *, native: bool) -> str:
    """ruff.toml with the package's PEP 420 namespace folders in ``namespace-packages``
    (``riftco``, and ``riftco/backends`` for a backend), kept sorted."""
    block = NAMESPACES.search(text)
    if block is None:
        raise NewPackageError("ruff.toml: no multi-line namespace-packages = [...] to extend")
    roots = [f"packages/{folder}/src/riftco"]
    if native:
        roots.append(f"packages/{folder}/src/riftco/backends")
    present = re.findall(r'"([^"]*)"', block.group(1))
    clash = sorted(set(roots) & set(present))
    if clash:
        raise NewPackageError(f"ruff.toml already lists {', '.join(clash)}")
    lines = "".join(f'    "{entry}",\n' for entry in sorted([*present, *roots]))
    return text[: block.start(1)] + lines + text[block.end(1) :]


def with_stubs(text: str, name: str) -> str:
    """tox.ini with ``riftco-backend-<name>`` installed in the stubs env and its
    ``_native`` module checked by stubtest."""
    install, check = STUBS_INSTALL.search(text), STUBS_CHECK.search(text)
    if install is None or check is None:
        raise NewPackageError("tox.ini: no [testenv:stubs] commands_pre / commands to extend")
    module = f"riftco.backends.{name}._native"
    if module in check.group(1).split():
        raise NewPackageError(f"tox.ini: the stubs env already checks {module}")
    # The later match first, so the earlier one's offsets still hold.
    for match, item in sorted(
        [(install, f"riftco-backend-{name}"), (check, module)], key=lambda m: -m[0].start()
    ):
        text = text[: match.end(1)] + f" {item}" + text[match.end(1) :]
    return text


def with_docs_nav(text: str, folder: str, *, native: bool) -> str:
    """mkdocs.yml with the package's README under "Packages" and its API page (written
    by docs/hooks.py at build time) under "API reference", each last in its section."""
    name = folder.removeprefix("backend-")
    dist = f"riftco-{folder}"
    module = f"riftco.backends.{name}" if native else f"riftco.{name}"
    for title, line in (
        ("Packages", f"      - {dist}: packages/{folder}/README.md\n"),
        ("API reference", f"      - {module}: reference/{folder}.md\n"),
    ):
        section = re.search(NAV_SECTION.format(title=re.escape(title)), text)
        if section is None:
            raise NewPackageError(f"mkdocs.yml: no nav section {title!r} to extend")
        if line in section.group(1):
            raise NewPackageError(f"mkdocs.yml already lists {line.strip()}")
        text = text[: section.end(1)] + line + text[section.end(1) :]
    return text


def write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create(name: str, *, native: bool, root: Path = ROOT) -> Path:
    """Create the package and wire it in; returns its folder."""
    check_name(name)
    folder = f"backend-{name}" if native else name
    dest = root / "packages" / folder
    if dest.exists():
        raise NewPackageError(f"{dest} already exists")
    template = root / "templates" / ("backend" if native else "package")
    replacements = {"PLUGINCLASS": class_name(name), "NAME": name}
    # Every edit is computed, and can fail, before anything is written.
    tox = with_tox_env((root / "tox.ini").read_text(), folder)
    if native:
        tox = with_stubs(tox, name)
    edits = {root / "tox.ini": tox}
    pyproject = root / "pyproject.toml"
    edits[pyproject] = with_mypy_path(pyproject.read_text(), folder)
    ruff = root / "ruff.toml"
    edits[ruff] = with_namespaces(ruff.read_text(), folder, native=native)
    mkdocs = root / "mkdocs.yml"
    edits[mkdocs] = with_docs_nav(mkdocs.read_text(), folder, native=native)
    if native:
        crates = [f"packages/{folder}/kernels", f"packages/{folder}/native"]
        cargo = root / "Cargo.toml"
        edits[cargo] = with_cargo_members(cargo.read_text(), crates)
        version = api_version(root)
    shutil.copytree(template, dest)
    for path in sorted(dest.rglob("*"), reverse=True):  # files before their folders
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            text = path.read_text()
            for placeholder, value in replacements.items():
                text = text.replace(placeholder, value)
            if native and path.name == "backend.py":
                text = API_LINE.sub(f"API_VERSION = {version}", text)
            path.write_text(text)
        if "NAME" in path.name:  # the package folder, and files named after the backend
            path.rename(path.with_name(path.name.replace("NAME", name)))
    for path, text in edits.items():
        write_atomically(path, text)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the package's module name, e.g. text or cuda")
    parser.add_argument(
        "--native",
        action="store_true",
        help="a backend plugin with Rust kernels (maturin) from templates/backend",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        dest = create(args.name, native=args.native, root=args.root)
    except NewPackageError as exc:
        print(f"new_package: {exc}", file=sys.stderr)
        return 1
    folder = dest.name
    print(f"created packages/{folder}; its tests run in `tox -e test-{folder}`")
    if args.native:
        print("its crates joined the Cargo workspace; build it with `make wheels`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
