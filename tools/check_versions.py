"""The version check: every distribution's version, changelog and sibling ranges.

    python tools/check_versions.py [--root DIR] [--no-git]

Fails (exit status 1, one line per problem) when

- a distribution's release-relevant files changed since its last release while its
  version is still the released one and its CHANGELOG.md has no entry under
  ``## [Unreleased]``;
- the places that write a distribution's version disagree (``pyproject.toml``, the
  ``__version__`` in its sources, the Cargo.toml of each crate inside its folder, the
  crates' entries in Cargo.lock), or the version is below the released one;
- a CHANGELOG.md is missing, has no ``## [Unreleased]`` heading, or has no heading for
  the released version;
- a requirement on a sibling (a ``riftco-*`` distribution under packages/, in any
  ``pyproject.toml`` there or under templates/) is not of the form
  ``>=A.B[.C],<N`` with ``N`` the next breaking release after ``A.B`` (``0.(B+1)``
  while the major is 0, ``A+1`` after), or excludes the sibling's current version.

"Last release": the highest git tag ``<distribution>-v<version>`` when git and the tag
are there, else the entry of packages/RELEASES.toml (written by tools/release.py),
which records the released version and the content hash of the release-relevant
files. The hash (``content_hash``): SHA-256 over one line per file, sorted by path,
``<path from the repository root> NUL <SHA-256 hex of its bytes, CRLF read as LF> LF``,
over the distribution's folder without ``tests/``, ``README.md`` and ``CHANGELOG.md``
(nor caches, build outputs and compiled libraries), plus, for a native (maturin)
distribution, every crate its binding crate reaches through path dependencies (the
shared crates under tools/ too, without their ``tests/``, ``benches/`` and
``examples/``) and the root Cargo.toml's settings (everything but the workspace's
``members`` and ``exclude``). Cargo.lock is not hashed. See docs/versioning.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

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
MANIFEST = "packages/RELEASES.toml"
CHANGELOG = "CHANGELOG.md"

#: Not hashed anywhere: caches, build outputs, compiled libraries.
SKIP_DIRS = {"__pycache__", "target", "build", "dist", "node_modules"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dylib", ".dll", ".o", ".a", ".lib")
#: Not hashed at the top of a distribution's folder: what does not change what it installs.
SKIP_IN_PACKAGE = {"tests", "README.md", CHANGELOG}
#: Not hashed at the top of a crate's folder: what `cargo build` of the library skips.
SKIP_IN_CRATE = {"tests", "benches", "examples"}

HEADING = re.compile(r"^## \[(?P<label>[^\]]+)\](?P<rest>.*)$", re.M)
DATED = re.compile(r"^ - \d{4}-\d{2}-\d{2}\s*$")
ENTRY = re.compile(r"^\s*[-*+] \S", re.M)
INIT_VERSION = re.compile(r'^__version__ = "(?P<version>[^"]*)"$', re.M)
LOCK_ENTRY = re.compile(
    r'^\[\[package\]\]\nname = "(?P<name>[^"]+)"\nversion = "(?P<version>[^"]+)"$', re.M
)
TAG = re.compile(r"^(?P<dist>.+)-v(?P<version>\d[^\s]*)$")


class VersionCheckError(Exception):
    """The tree cannot be read as the check expects (not a finding about a package)."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def rel(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


def load_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise VersionCheckError(f"{path}: cannot read it as TOML: {exc}") from exc


# --- distributions -------------------------------------------------------------------


@dataclass
class Distribution:
    name: str
    folder: Path
    pyproject: dict
    #: Crate folders the native module is built from (own and shared), the binding first.
    crates: list[Path] = field(default_factory=list)

    @property
    def version(self) -> str:
        return str(self.pyproject["project"].get("version", ""))

    @property
    def native(self) -> bool:
        return bool(self.crates)

    def own_crates(self) -> list[Path]:
        """The crates inside this distribution's folder: their versions follow its version."""
        return [c for c in self.crates if c.resolve().is_relative_to(self.folder.resolve())]


def path_dependencies(crate: Path, workspace: dict) -> list[Path]:
    """The crate folders that ``crate/Cargo.toml`` names by path (dependencies and
    build-dependencies, target-specific ones too; dev-dependencies are not built)."""
    manifest = load_toml(crate / "Cargo.toml")
    tables = [manifest.get("dependencies", {}), manifest.get("build-dependencies", {})]
    for target in manifest.get("target", {}).values():
        tables += [target.get("dependencies", {}), target.get("build-dependencies", {})]
    shared = workspace.get("workspace", {}).get("dependencies", {})
    found = []
    for table in tables:
        for name, spec in table.items():
            if isinstance(spec, dict) and spec.get("workspace") is True:
                spec = shared.get(spec.get("package", name), {})
            if isinstance(spec, dict) and "path" in spec:
                found.append((crate / spec["path"]).resolve())
    return found


def crate_closure(binding: Path, root: Path) -> list[Path]:
    workspace = load_toml(root / "Cargo.toml") if (root / "Cargo.toml").exists() else {}
    seen: list[Path] = []
    todo = [binding.resolve()]
    while todo:
        crate = todo.pop(0)
        if crate in seen:
            continue
        if not (crate / "Cargo.toml").is_file():
            raise VersionCheckError(f"{crate}: a path dependency with no Cargo.toml")
        seen.append(crate)
        todo += path_dependencies(crate, workspace)
    return seen


def discover(root: Path) -> dict[str, Distribution]:
    """Every distribution under ``root/packages``, by canonical name."""
    found: dict[str, Distribution] = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        data = load_toml(pyproject)
        project = data.get("project")
        if not isinstance(project, dict) or "name" not in project:
            raise VersionCheckError(f"{pyproject}: no [project] name")
        dist = Distribution(canonical(project["name"]), pyproject.parent, data)
        maturin = data.get("tool", {}).get("maturin", {})
        if data.get("build-system", {}).get("build-backend") == "maturin":
            manifest = pyproject.parent / maturin.get("manifest-path", "Cargo.toml")
            dist.crates = crate_closure(manifest.parent, root)
        if dist.name in found:
            raise VersionCheckError(f"{pyproject}: {dist.name} is also {found[dist.name].folder}")
        found[dist.name] = dist
    return found


# --- where a version is written ------------------------------------------------------


def version_sites(dist: Distribution, root: Path) -> list[tuple[str, str]]:
    """(where, version) for every place that writes ``dist``'s version."""
    sites = [(rel(dist.folder / "pyproject.toml", root), dist.version)]
    for module in sorted((dist.folder / "src").rglob("__init__.py")):
        found = INIT_VERSION.search(module.read_text(encoding="utf-8"))
        if found is not None:
            sites.append((f"{rel(module, root)} __version__", found["version"]))
    lock = (root / "Cargo.lock").read_text(encoding="utf-8") if dist.native else ""
    locked = {m["name"]: m["version"] for m in LOCK_ENTRY.finditer(lock)}
    for crate in dist.own_crates():
        manifest = crate / "Cargo.toml"
        package = load_toml(manifest).get("package", {})
        sites.append((rel(manifest, root), str(package.get("version", ""))))
        name = package.get("name")
        if name in locked:
            sites.append((f"Cargo.lock {name}", locked[name]))
    return sites


# --- the content hash ----------------------------------------------------------------


def hash_roots(dist: Distribution, root: Path) -> list[tuple[str, set[str]]]:
    """(folder from the root, names skipped at its top) whose files make the hash."""
    roots = [(rel(dist.folder, root), SKIP_IN_PACKAGE)]
    inside = dist.folder.resolve()
    for crate in dist.crates:
        if crate.resolve().is_relative_to(inside):
            # Inside the package folder: hashed with it, less the crate's own tests.
            continue
        roots.append((rel(crate, root), SKIP_IN_CRATE))
    return roots


def skipped(path: PurePosixPath, roots: list[tuple[str, set[str]]], crates: set[str]) -> bool:
    """Whether a file (path from the root) is left out of the hash."""
    if any(p.startswith(".") or p in SKIP_DIRS or p.endswith(".egg-info") for p in path.parts):
        return True
    if path.name.endswith(SKIP_SUFFIXES):
        return True
    for folder, names in roots:
        inner = path.relative_to(folder) if path.is_relative_to(folder) else None
        if inner is not None and inner.parts and inner.parts[0] in names:
            return True
    for crate in crates:
        inner = path.relative_to(crate) if path.is_relative_to(crate) else None
        if inner is not None and len(inner.parts) > 1 and inner.parts[0] in SKIP_IN_CRATE:
            return True
    return False


def workspace_settings(cargo_toml: bytes | None) -> bytes:
    """The root Cargo.toml as hashed: its canonical JSON less the member lists."""
    if cargo_toml is None:
        return b"null"
    data = tomllib.loads(cargo_toml.decode("utf-8"))
    workspace = dict(data.get("workspace", {}))
    workspace.pop("members", None)
    workspace.pop("exclude", None)
    data["workspace"] = workspace
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


class Tree:
    """Files of the working tree, or of a git revision."""

    def __init__(self, root: Path, revision: str | None = None) -> None:
        self.root = root
        self.revision = revision

    def files(self, folders: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        if self.revision is None:
            for folder in folders:
                base = self.root / folder
                for path in sorted(base.rglob("*")):
                    if path.is_file() and not path.is_symlink():
                        yield rel(path, self.root), path.read_bytes()
            return
        listing = git(
            self.root, "ls-tree", "-r", "-z", "--full-tree", self.revision, "--", *folders
        )
        entries = [e.split("\t", 1) for e in listing.split("\0") if e]
        # Links are not hashed (nor followed) in the working tree either.
        blobs = [
            (meta.split()[2], name)
            for meta, name in entries
            if meta.split()[1] == "blob" and meta.split()[0] != "120000"
        ]
        yield from zip([name for _, name in blobs], self.blobs([blob for blob, _ in blobs]))

    def blobs(self, ids: list[str]) -> list[bytes]:
        """The contents of git blobs, read in one ``git cat-file --batch``."""
        if not ids:
            return []
        run = subprocess.run(
            ["git", "-C", str(self.root), "cat-file", "--batch"],
            input="".join(f"{i}\n" for i in ids).encode(),
            capture_output=True,
            check=False,
        )
        if run.returncode != 0:
            raise VersionCheckError(
                f"git cat-file --batch: {run.stderr.decode(errors='replace').strip()}"
            )
        out, at, found = run.stdout, 0, []
        for blob in ids:
            end = out.index(b"\n", at)
            header = out[at:end].split()
            if len(header) != 3 or header[0].decode() != blob or header[1] != b"blob":
                raise VersionCheckError(
                    f"git cat-file --batch: unexpected {out[at:end]!r} for {blob}"
                )
            size = int(header[2])
            found.append(out[end + 1 : end + 1 + size])
            at = end + 1 + size + 1
        return found

    def read(self, path: str) -> bytes | None:
        if self.revision is None:
            file = self.root / path
            return file.read_bytes() if file.is_file() else None
        try:
            return git_bytes(self.root, "show", f"{self.revision}:{path}")
        except VersionCheckError:
            return None


def content_hash(dist: Distribution, root: Path, tree: Tree | None = None) -> str:
    """``sha256:<hex>`` of ``dist``'s release-relevant files (see the module docstring)."""
    tree = tree or Tree(root)
    roots = hash_roots(dist, root)
    crates = {rel(c, root) for c in dist.crates}
    lines = []
    for path, data in tree.files(folder for folder, _ in roots):
        if skipped(PurePosixPath(path), roots, crates):
            continue
        digest = hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()
        lines.append(f"{path}\0{digest}\n")
    if dist.native:
        settings = hashlib.sha256(workspace_settings(tree.read("Cargo.toml"))).hexdigest()
        lines.append(f"Cargo.toml [workspace settings]\0{settings}\n")
    return "sha256:" + hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


# --- git (optional) ------------------------------------------------------------------


def git_bytes(root: Path, *args: str) -> bytes:
    run = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)
    if run.returncode != 0:
        raise VersionCheckError(
            f"git {' '.join(args)}: {run.stderr.decode(errors='replace').strip()}"
        )
    return run.stdout


def git(root: Path, *args: str) -> str:
    return git_bytes(root, *args).decode("utf-8", errors="replace")


def git_root(root: Path) -> bool:
    """Whether ``root`` is the top of a git work tree that a ``git`` on PATH can read."""
    if shutil.which("git") is None:
        return False
    try:
        top = git(root, "rev-parse", "--show-toplevel").strip()
    except VersionCheckError:
        return False
    return Path(top).resolve() == root.resolve()


def release_tags(root: Path) -> dict[str, list[tuple[Version, str]]]:
    """Release tags by distribution: (version, tag), highest first."""
    tags: dict[str, list[tuple[Version, str]]] = {}
    for tag in git(root, "tag", "--list", "*-v*").split():
        found = TAG.match(tag)
        if found is None:
            continue
        try:
            version = Version(found["version"])
        except InvalidVersion:
            continue
        tags.setdefault(canonical(found["dist"]), []).append((version, tag))
    for listed in tags.values():
        listed.sort(reverse=True)
    return tags


# --- the manifest --------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    version: str
    hash: str
    date: str
    #: Where it was read: the manifest, or the tag.
    source: str


def read_manifest(root: Path) -> dict[str, Release]:
    path = root / MANIFEST
    if not path.exists():
        return {}
    data = load_toml(path)
    releases = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) for k in ("version", "hash", "date")
        ):
            raise VersionCheckError(
                f"{MANIFEST}: [{name}] must hold the strings version, date and hash; found {entry!r}"
            )
        releases[canonical(name)] = Release(
            entry["version"], entry["hash"], entry["date"], MANIFEST
        )
    return releases


def render_manifest(releases: dict[str, Release]) -> str:
    lines = [
        "# The last release of each distribution under packages/: its version, its date and",
        "# the content hash of its release-relevant files (defined in tools/check_versions.py).",
        "# Written by tools/release.py; read by the version check (docs/versioning.md).",
    ]
    for name in sorted(releases):
        release = releases[name]
        lines += [
            "",
            f"[{name}]",
            f"version = {json.dumps(release.version)}",
            f"date = {json.dumps(release.date)}",
            f"hash = {json.dumps(release.hash)}",
        ]
    return "\n".join(lines) + "\n"


# --- changelogs ----------------------------------------------------------------------


@dataclass
class Changelog:
    text: str

    def sections(self) -> list[tuple[str, str, int, int]]:
        """(label, the heading's rest, start of the heading, end of the section)."""
        heads = list(HEADING.finditer(self.text))
        found = []
        for i, head in enumerate(heads):
            end = heads[i + 1].start() if i + 1 < len(heads) else len(self.text)
            # A link reference block (`[0.1.0]: https://...`) ends the last section.
            tail = re.search(r"^\[[^\]]+\]: ", self.text[head.end() : end], re.M)
            if tail is not None:
                end = head.end() + tail.start()
            found.append((head["label"], head["rest"], head.start(), end))
        return found

    def body(self, label: str) -> str | None:
        for name, _, start, end in self.sections():
            if name.lower() == label.lower():
                return (
                    self.text[start:end].split("\n", 1)[1] if "\n" in self.text[start:end] else ""
                )
        return None

    def unreleased_entries(self) -> list[str]:
        body = self.body("Unreleased") or ""
        return [line.strip() for line in body.splitlines() if ENTRY.match(line)]

    def versions(self) -> dict[str, str]:
        """Released version -> the heading's rest (`` - 2026-01-31``)."""
        return {
            label: rest for label, rest, _, _ in self.sections() if label.lower() != "unreleased"
        }


def read_changelog(dist: Distribution) -> Changelog | None:
    path = dist.folder / CHANGELOG
    return Changelog(path.read_text(encoding="utf-8")) if path.is_file() else None


# --- sibling ranges ------------------------------------------------------------------


def next_breaking(lower: Version) -> str:
    """The first release that may break what ``lower`` offers: ``0.(B+1)`` in 0.x, else ``A+1``."""
    if lower.major == 0:
        return f"0.{lower.minor + 1}"
    return f"{lower.major + 1}"


def scheme_range(version: Version) -> str:
    """The scheme's range for a sibling at ``version``: ``>=A.B,<N``."""
    return f">={version.major}.{version.minor},<{next_breaking(version)}"


def requirement_strings(pyproject: dict) -> Iterator[str]:
    project = pyproject.get("project", {})
    yield from project.get("dependencies", [])
    for group in project.get("optional-dependencies", {}).values():
        yield from group


def range_problem(req: Requirement) -> str | None:
    """Why a sibling requirement's specifier is not of the scheme's form, or None."""
    specs = {s.operator: s.version for s in req.specifier}
    if len(req.specifier) != 2 or set(specs) != {">=", "<"}:
        return "is not of the form >=A.B,<N"
    try:
        lower, upper = Version(specs[">="]), Version(specs["<"])
    except InvalidVersion:
        return "does not hold plain versions"
    if len(lower.release) not in (2, 3) or lower.pre or lower.dev or lower.post or lower.local:
        return f"has lower bound {lower}, expected A.B or A.B.C"
    if specs["<"] != next_breaking(lower):
        return f"has upper bound {upper}, but the next breaking release after {lower} is {next_breaking(lower)}"
    return None


@dataclass(frozen=True)
class SiblingRequirement:
    file: Path
    text: str
    requirement: Requirement


def sibling_requirements(root: Path, names: Iterable[str]) -> Iterator[SiblingRequirement]:
    """Every requirement on a riftco-* distribution, in packages/*/ and templates/*/."""
    files = sorted((root / "packages").glob("*/pyproject.toml"))
    files += sorted((root / "templates").glob("*/pyproject.toml"))
    for file in files:
        for text in requirement_strings(load_toml(file)):
            try:
                req = Requirement(text)
            except InvalidRequirement as exc:
                raise VersionCheckError(
                    f"{rel(file, root)}: {text!r} is no requirement: {exc}"
                ) from exc
            if canonical(req.name).startswith("riftco"):
                yield SiblingRequirement(file, text, req)


# --- the check -----------------------------------------------------------------------


def last_releases(
    root: Path, dists: dict[str, Distribution], use_git: bool
) -> tuple[dict[str, Release], list[str]]:
    """The last release of each distribution that has one, and problems found on the way."""
    releases = read_manifest(root)
    problems = [
        f"{MANIFEST}: [{name}] is no distribution under packages/ (remove the entry)"
        for name in sorted(set(releases) - set(dists))
    ]
    if use_git and git_root(root):
        for name, tags in release_tags(root).items():
            if name not in dists:
                continue
            version, tag = tags[0]
            recorded = releases.get(name)
            if recorded is None or Version(recorded.version) <= version:
                tagged_hash = content_hash(dists[name], root, Tree(root, tag))
                releases[name] = Release(str(version), tagged_hash, "", f"tag {tag}")
    return releases, problems


def check_distribution(dist: Distribution, root: Path, release: Release | None) -> list[str]:
    where = rel(dist.folder, root)
    problems = []
    sites = version_sites(dist, root)
    disagree = [f"{site} has {v!r}" for site, v in sites[1:] if v != dist.version]
    if disagree:
        problems.append(
            f"{dist.name}: {sites[0][0]} has version {dist.version!r} but " + "; ".join(disagree)
        )
    try:
        current = Version(dist.version)
    except InvalidVersion:
        return [*problems, f"{dist.name}: {dist.version!r} is not a version"]
    changelog = read_changelog(dist)
    if changelog is None:
        return [*problems, f"{dist.name}: no {where}/{CHANGELOG}"]
    if changelog.body("Unreleased") is None:
        problems.append(f"{dist.name}: {where}/{CHANGELOG} has no '## [Unreleased]' heading")
    released_versions = changelog.versions()
    for label, rest in released_versions.items():
        if not DATED.match(rest):
            problems.append(
                f"{dist.name}: {where}/{CHANGELOG}: '## [{label}]{rest}' should be '## [{label}] - YYYY-MM-DD'"
            )
    if release is None:
        return problems
    released = Version(release.version)
    if release.version not in released_versions:
        problems.append(
            f"{dist.name}: {where}/{CHANGELOG} has no '## [{release.version}] - <date>' "
            f"section for the release recorded in {release.source}"
        )
    if current < released:
        problems.append(
            f"{dist.name}: version {current} is below its last release, {released} ({release.source})"
        )
    elif current > released:
        if dist.version not in released_versions and not changelog.unreleased_entries():
            problems.append(
                f"{dist.name}: version {current} (released: {released}) has neither a "
                f"'## [{current}]' section nor entries under [Unreleased] in {where}/{CHANGELOG}"
            )
    elif content_hash(dist, root) != release.hash and not changelog.unreleased_entries():
        hint = (
            f" (git diff {release.source[4:]} -- {where})"
            if release.source.startswith("tag ")
            else ""
        )
        problems.append(
            f"{dist.name}: {where} changed since its release {released} ({release.source}){hint}, "
            f"but the version is still {current} and {where}/{CHANGELOG} has no entry under "
            "[Unreleased]: add one saying what changed, or release it with "
            f"`python tools/release.py bump {dist.name} patch|minor|major`"
        )
    return problems


def check_ranges(root: Path, dists: dict[str, Distribution]) -> list[str]:
    problems = []
    for sibling in sibling_requirements(root, dists):
        name = canonical(sibling.requirement.name)
        where = f"{rel(sibling.file, root)}: {sibling.text!r}"
        if name not in dists:
            problems.append(f"{where} names {name}, which is no distribution under packages/")
            continue
        why = range_problem(sibling.requirement)
        target = dists[name]
        if why is not None:
            problems.append(
                f"{where} {why} (siblings are required as '{name} {scheme_range(Version(target.version))}'; "
                "docs/versioning.md)"
            )
        if not sibling.requirement.specifier.contains(target.version, prereleases=True):
            problems.append(
                f"{where} excludes {name} {target.version}, its version in {rel(target.folder, root)}"
            )
    return problems


def check(root: Path, *, use_git: bool = True) -> list[str]:
    """Every problem found in the tree at ``root`` (empty: the check passes)."""
    dists = discover(root)
    releases, problems = last_releases(root, dists, use_git)
    for name, dist in dists.items():
        problems += check_distribution(dist, root, releases.get(name))
    return problems + check_ranges(root, dists)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the repository (default: this one)"
    )
    parser.add_argument(
        "--no-git", action="store_true", help="ignore release tags; use the manifest only"
    )
    args = parser.parse_args(argv)
    try:
        problems = check(args.root, use_git=not args.no_git)
        count = len(discover(args.root))
    except VersionCheckError as exc:
        print(f"check_versions: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"check_versions: {problem}", file=sys.stderr)
    if problems:
        print(
            f"check_versions: {len(problems)} problem(s); see docs/versioning.md", file=sys.stderr
        )
        return 1
    print(f"check_versions: {count} distributions: versions, changelogs and sibling ranges agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
