"""The Homebrew formula for the ``riftco`` command, generated from a release's sdists.

    python tools/homebrew.py generate --sdists dist [--pins packaging/homebrew/resources.txt]
                                      [--out packaging/homebrew/Formula/riftco.rb]
    python tools/homebrew.py check [FORMULA ...]

``generate`` reads the ``riftco`` sdist and every ``riftco-*`` sdist in ``--sdists`` (their
``PKG-INFO``), walks the requirements of ``riftco`` (extras and environment markers
evaluated for Python 3.11 on macOS and Linux), and writes a formula with one
``resource`` per distribution it reaches: the riftco-* ones at their PyPI source
addresses with the SHA-256 of the local file, the third-party ones from the pins file
(``name==version`` a line), each resolved to its sdist's address and SHA-256 through the
package index's simple API (network: a release-time step), or read from a local sdist of
that name and version in ``--sdists`` (no network). Every requirement must be met by a
resource (name and version), or nothing is written. The formula is replaced atomically.

``check`` checks a formula's shape (the virtualenv helper, python@3.11, rust at build
time, a resource with an address and a SHA-256 each, a test running ``riftco --help``)
and, where Ruby is installed, its syntax with ``ruby -c``; without Ruby it says so and
skips that part. Installing the formula cannot be tested here (no Homebrew).
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version
except ImportError:  # a bare venv: pip vendors packaging
    from pip._vendor.packaging.requirements import (  # type: ignore[no-redef]
        InvalidRequirement,
        Requirement,
    )
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
FORMULA = ROOT / "packaging/homebrew/Formula/riftco.rb"
PINS = ROOT / "packaging/homebrew/resources.txt"
MAIN = "riftco"
DESC = "Auditable decoder-only Transformer stack: train, post-train, convert, serve"
HOMEPAGE = "https://pypi.org/project/riftco/"
INDEX = "https://pypi.org/simple"
#: Where the formula runs: Homebrew's Python 3.11 on macOS (both CPUs) and Linux.
PLATFORMS = [
    {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"},
    {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "x86_64"},
    {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"},
]
PYTHON = {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "implementation_name": "cpython",
}
MAX_PKG_INFO = 1 << 20
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class HomebrewError(Exception):
    """The formula cannot be made or is malformed; nothing was written."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Source:
    """One distribution of the formula: where its sdist is and what it requires."""

    name: str
    version: str
    url: str
    sha256: str
    #: Requires-Dist, or None where the sdist does not say (dynamic metadata).
    requires: tuple[str, ...] | None
    summary: str = ""
    license: str = ""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_url(name: str, filename: str) -> str:
    """PyPI's address for an sdist by project and file name (it redirects to the file)."""
    return f"https://files.pythonhosted.org/packages/source/{name[0]}/{name}/{filename}"


def read_sdist(path: Path) -> Source:
    """An sdist's name, version and requirements from its PKG-INFO (bounded read)."""
    if not path.name.endswith(".tar.gz"):
        raise HomebrewError(f"{path}: expected an sdist named NAME-VERSION.tar.gz")
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
            ]
            if len(members) != 1 or not members[0].isfile() or members[0].size > MAX_PKG_INFO:
                raise HomebrewError(f"{path}: expected one top-level PKG-INFO of at most 1 MiB")
            handle = tar.extractfile(members[0])
            assert handle is not None
            text = handle.read(MAX_PKG_INFO).decode("utf-8")
    except (OSError, tarfile.TarError, UnicodeDecodeError) as exc:
        raise HomebrewError(f"{path}: cannot read it as an sdist: {exc}") from exc
    meta = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = meta.get("Name"), meta.get("Version")
    if not name or not version:
        raise HomebrewError(f"{path}: PKG-INFO has no Name or Version")
    dynamic = {d.strip().lower() for d in meta.get_all("Dynamic") or []}
    requires = meta.get_all("Requires-Dist")
    known = tuple(requires or ()) if "requires-dist" not in dynamic else None
    license_ = meta.get("License-Expression") or meta.get("License") or ""
    return Source(
        canonical(name),
        version,
        source_url(canonical(name), path.name),
        file_sha256(path),
        known,
        meta.get("Summary") or "",
        license_,
    )


def index_source(name: str, version: str, fetch: Callable[[str], bytes]) -> Source:
    """A pinned distribution's sdist address and SHA-256 from the index's simple API (PEP 691)."""
    page = json.loads(fetch(f"{INDEX}/{canonical(name)}/"))
    wanted = Version(version)
    for file in page.get("files", []):
        filename = file.get("filename", "")
        if not filename.endswith(".tar.gz") or file.get("yanked"):
            continue
        stem, _, found = filename[: -len(".tar.gz")].rpartition("-")
        try:
            if canonical(stem) == canonical(name) and Version(found) == wanted:
                sha = file.get("hashes", {}).get("sha256", "")
                if not SHA256.match(sha):
                    raise HomebrewError(f"{filename}: the index gives no SHA-256")
                return Source(canonical(name), version, file["url"], sha, None)
        except InvalidVersion:
            continue
    raise HomebrewError(f"{name}=={version}: the index lists no sdist of that version")


def http_get(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return bytes(response.read(64 << 20))


def read_pins(path: Path) -> list[tuple[str, str]]:
    pins = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        found = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line)
        if found is None:
            raise HomebrewError(f"{path}:{number}: expected NAME==VERSION, found {line!r}")
        pins.append((canonical(found[1]), found[2]))
    return pins


def active(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(
        req.marker.evaluate({**PYTHON, **platform, "extra": extra})
        for platform in PLATFORMS
        for extra in (extras or {""})
    )


def closure(sources: dict[str, Source]) -> list[Source]:
    """The resources of the formula: the riftco-* distributions ``riftco`` reaches and every
    third-party source; each requirement met is checked against the sources given."""
    if MAIN not in sources:
        raise HomebrewError(f"no sdist of {MAIN} among the sources")
    wanted: dict[str, set[str]] = {MAIN: set()}
    todo = [MAIN]
    problems = []
    while todo:
        name = todo.pop()
        source = sources[name]
        for text in source.requires or ():
            try:
                req = Requirement(text)
            except InvalidRequirement as exc:
                raise HomebrewError(f"{name} {source.version}: {text!r}: {exc}") from exc
            if not active(req, wanted[name]):
                continue
            dep = canonical(req.name)
            if dep not in sources:
                problems.append(f"{name} requires {text!r}, which no sdist or pin provides")
                continue
            if not req.specifier.contains(sources[dep].version, prereleases=True):
                problems.append(
                    f"{name} requires {text!r}, but the resource is {dep} {sources[dep].version}"
                )
                continue
            if dep not in wanted:
                wanted[dep] = set(req.extras)
                todo.append(dep)
            elif not set(req.extras) <= wanted[dep]:
                wanted[dep] |= set(req.extras)  # read its requirements again, with these extras
                todo.append(dep)
    if problems:
        unique = list(dict.fromkeys(problems))
        raise HomebrewError("the resources do not meet the requirements:\n  " + "\n  ".join(unique))
    # Every third-party source is a resource: the pins are the closure's third-party half
    # (an index entry does not list its requirements here, so it cannot be walked).
    names = {n for n in wanted if n != MAIN} | {n for n in sources if not n.startswith("riftco")}
    return [sources[n] for n in sorted(names)]


def ruby_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("#{", "\\#{") + '"'


def render(main: Source, resources: list[Source], desc: str = DESC) -> str:
    lines = [
        "# Generated by tools/homebrew.py from the release's sdists; do not edit by hand.",
        "class Riftco < Formula",
        "  include Language::Python::Virtualenv",
        "",
        f"  desc {ruby_string(desc)}",
        f"  homepage {ruby_string(HOMEPAGE)}",
        f"  url {ruby_string(main.url)}",
        f"  sha256 {ruby_string(main.sha256)}",
    ]
    if main.license:
        lines.append(f"  license {ruby_string(main.license)}")
    lines += [
        "",
        "  # riftco-tensor (and safetensors) build Rust extensions from their sdists.",
        '  depends_on "rust" => :build',
        '  depends_on "python@3.11"',
    ]
    for resource in resources:
        lines += [
            "",
            f"  resource {ruby_string(resource.name)} do",
            f"    url {ruby_string(resource.url)}",
            f"    sha256 {ruby_string(resource.sha256)}",
            "  end",
        ]
    lines += [
        "",
        "  def install",
        "    virtualenv_install_with_resources",
        "  end",
        "",
        "  test do",
        '    assert_match "demo", shell_output("#{bin}/riftco --help")',
        "  end",
        "end",
    ]
    return "\n".join(lines) + "\n"


def collect(
    sdists: Path, pins: Path | None, fetch: Callable[[str], bytes] = http_get
) -> tuple[Source, list[Source]]:
    local: dict[str, Source] = {}
    for path in sorted(sdists.glob("*.tar.gz")):
        source = read_sdist(path)
        if source.name in local and local[source.name].version != source.version:
            raise HomebrewError(
                f"{sdists}: two versions of {source.name} ({local[source.name].version}, {source.version})"
            )
        local[source.name] = source
    sources = {n: s for n, s in local.items() if n.startswith("riftco")}
    for name, version in read_pins(pins) if pins else []:
        if name.startswith("riftco"):
            raise HomebrewError(
                f"{pins}: {name} is a riftco distribution; its sdist comes from --sdists"
            )
        held = local.get(name)
        if held is not None and Version(held.version) == Version(version):
            sources[name] = held
        else:
            sources[name] = index_source(name, version, fetch)
    resources = closure(sources)
    return sources[MAIN], resources


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- check ---------------------------------------------------------------------------

REQUIRED = [
    ("include Language::Python::Virtualenv", "the virtualenv helper"),
    ('depends_on "python@3.11"', "Python 3.11"),
    ('depends_on "rust" => :build', "Rust at build time (native sdists)"),
    ("virtualenv_install_with_resources", "the install step"),
    ("riftco --help", "a test running `riftco --help`"),
]
RESOURCE = re.compile(
    r'^  resource "([^"]+)" do\n    url "([^"]+)"\n    sha256 "([^"]*)"\n  end$', re.M
)


def shape_problems(text: str) -> list[str]:
    problems = [f"lacks {what}: {line!r}" for line, what in REQUIRED if line not in text]
    if not re.search(r"^  test do$", text, re.M):
        problems.append("no `test do` block")
    if not re.search(r'^  sha256 "[0-9a-f]{64}"$', text, re.M):
        problems.append("no SHA-256 of the riftco sdist")
    opened = len(re.findall(r"^  resource ", text, re.M))
    resources = RESOURCE.findall(text)
    if opened != len(resources):
        problems.append(
            f"{opened} resource blocks, {len(resources)} of them with a url and a sha256 alone"
        )
    for name, url, sha in resources:
        if not url.startswith("https://"):
            problems.append(f"resource {name}: {url!r} is not an https address")
        if not SHA256.match(sha):
            problems.append(f"resource {name}: {sha!r} is not a SHA-256")
    return problems


def ruby_syntax(path: Path) -> str | None:
    """``ruby -c``'s complaint, or None when the syntax is fine; raises when Ruby is absent."""
    ruby = shutil.which("ruby")
    if ruby is None:
        raise FileNotFoundError("ruby")
    run = subprocess.run(
        [ruby, "-c", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    if run.returncode == 0 and "Syntax OK" in run.stdout:
        return None
    return (run.stderr or run.stdout).strip()


def check(paths: list[Path]) -> int:
    failed = False
    for path in paths:
        if not path.is_file():
            print(f"homebrew: {path}: no such formula", file=sys.stderr)
            failed = True
            continue
        for problem in shape_problems(path.read_text(encoding="utf-8")):
            print(f"homebrew: {path}: {problem}", file=sys.stderr)
            failed = True
        try:
            complaint = ruby_syntax(path)
        except FileNotFoundError:
            print(
                f"homebrew: {path}: ruby is not installed, so `ruby -c` is skipped "
                "(tools/ensure_ruby.sh installs it); its shape was checked"
            )
            continue
        if complaint is not None:
            print(f"homebrew: {path}: ruby -c: {complaint}", file=sys.stderr)
            failed = True
        else:
            print(f"homebrew: {path}: shape and `ruby -c` syntax OK")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="write the formula from a folder of sdists")
    gen.add_argument(
        "--sdists",
        type=Path,
        required=True,
        help="the riftco sdists (and any local third-party ones)",
    )
    gen.add_argument(
        "--pins",
        type=Path,
        default=None,
        help=f"third-party NAME==VERSION lines (e.g. {PINS.relative_to(ROOT)})",
    )
    gen.add_argument("--out", type=Path, default=FORMULA)
    gen.add_argument("--desc", default=DESC)
    chk = commands.add_parser("check", help="the formula's shape, and `ruby -c` where Ruby is")
    chk.add_argument("formulas", nargs="*", type=Path, default=[FORMULA])
    args = parser.parse_args(argv)
    if args.command == "check":
        return check(args.formulas)
    try:
        main_source, resources = collect(args.sdists, args.pins)
        text = render(main_source, resources, args.desc)
        problems = shape_problems(text)
        if problems:
            raise HomebrewError("the generated formula is malformed: " + "; ".join(problems))
        write_atomic(args.out, text)
    except (HomebrewError, OSError) as exc:
        print(f"homebrew: {exc}", file=sys.stderr)
        return 1
    print(
        f"homebrew: wrote {args.out}: riftco {main_source.version} and {len(resources)} resources"
    )
    return check([args.out])


if __name__ == "__main__":
    sys.exit(main())
