"""Release one distribution: bump its version everywhere it is written, date its changelog,
move the sibling ranges that name it, record it in packages/RELEASES.toml.

    python tools/release.py bump riftco-nn patch|minor|major [--date YYYY-MM-DD]
    python tools/release.py record riftco-nn ... | --all [--at HEAD]  # the tree is the release of its version
    python tools/release.py ranges                          # rewrite sibling ranges to the scheme
    python tools/release.py check                           # the version check (tools/check_versions.py)

``bump`` refuses (writing nothing) unless the version check passes for the
distribution and its changelog has entries under ``[Unreleased]``. It then sets the
new version in pyproject.toml, the ``__version__`` of its sources, the Cargo.toml of
its own crates and their Cargo.lock entries; moves the ``[Unreleased]`` entries under
``## [<new>] - <date>``; rewrites each sibling requirement that would exclude the new
version (in packages/*/ and templates/*/) to ``>=A.B,<N`` of the new version, adding an
``[Unreleased]`` entry to each released distribution so changed; records the release
in the manifest; and prints the ``git tag`` command to run after committing (it
neither commits, tags nor pushes). Every file is computed before any is written, and
each is replaced atomically. See docs/versioning.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_versions as cv

PARTS = ("major", "minor", "patch")


class ReleaseError(Exception):
    """The release cannot be made as asked; nothing was written."""


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a temporary file beside it, flushed, then renamed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def bumped(version: str, part: str) -> str:
    v = cv.Version(version)
    if v.pre or v.dev or v.post or v.local or len(v.release) != 3:
        raise ReleaseError(f"{version!r} is not a plain MAJOR.MINOR.PATCH version to bump")
    major, minor, patch = v.release
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


# --- edits, each on a file's text ----------------------------------------------------


def set_table_version(text: str, table: str, old: str, new: str, where: str) -> str:
    """``version = "<old>"`` inside ``[table]`` of a TOML file's text, set to ``new``."""
    head = re.search(rf"^\[{re.escape(table)}\]\s*$", text, re.M)
    if head is None:
        raise ReleaseError(f"{where}: no [{table}] table")
    end = re.search(r"^\[", text[head.end() :], re.M)
    stop = head.end() + end.start() if end else len(text)
    line = re.compile(rf'^version = "{re.escape(old)}"\s*$', re.M)
    found = list(line.finditer(text, head.end(), stop))
    if len(found) != 1:
        raise ReleaseError(f'{where}: expected one line version = "{old}" in [{table}]')
    return text[: found[0].start()] + f'version = "{new}"' + text[found[0].end() :]


def set_init_version(text: str, old: str, new: str, where: str) -> str:
    updated, count = re.subn(
        rf'^__version__ = "{re.escape(old)}"$', f'__version__ = "{new}"', text, flags=re.M
    )
    if count != 1:
        raise ReleaseError(f'{where}: expected one line __version__ = "{old}"')
    return updated


def set_lock_version(text: str, crate: str, old: str, new: str) -> str:
    entry = f'[[package]]\nname = "{crate}"\nversion = "{old}"\n'
    if text.count(entry) != 1:
        raise ReleaseError(f"Cargo.lock: expected one entry for {crate} {old}")
    return text.replace(entry, f'[[package]]\nname = "{crate}"\nversion = "{new}"\n')


def with_release_section(text: str, version: str, date: str, where: str) -> str:
    """The changelog with ``[Unreleased]``'s body moved under ``## [version] - date``."""
    log = cv.Changelog(text)
    for label, _, start, end in log.sections():
        if label.lower() == "unreleased":
            heading_end = text.index("\n", start) + 1 if "\n" in text[start:end] else end
            body = text[heading_end:end].strip("\n")
            section = f"## [Unreleased]\n\n## [{version}] - {date}\n\n{body}\n\n"
            return text[:start] + section + text[end:].lstrip("\n")
    raise ReleaseError(f"{where}: no '## [Unreleased]' heading")


def with_unreleased_entry(text: str, kind: str, entry: str, where: str) -> str:
    """The changelog with ``- entry`` under ``### kind`` of ``[Unreleased]`` (made if absent)."""
    log = cv.Changelog(text)
    for label, _, start, end in log.sections():
        if label.lower() != "unreleased":
            continue
        block = text[start:end]
        sub = re.search(rf"^### {re.escape(kind)}\s*\n", block, re.M)
        if sub is not None:
            after = re.search(r"^#", block[sub.end() :], re.M)
            stop = sub.end() + (after.start() if after else len(block) - sub.end())
            items = block[sub.end() : stop].rstrip("\n")
            items = (items + "\n" if items.strip() else "") + f"- {entry}\n\n"
            block = block[: sub.end()] + items.lstrip("\n") + block[stop:].lstrip("\n")
        else:
            block = block.rstrip("\n") + f"\n\n### {kind}\n\n- {entry}\n\n"
        return text[:start] + block + text[end:].lstrip("\n")
    raise ReleaseError(f"{where}: no '## [Unreleased]' heading")


REQUIREMENT = re.compile(
    r"^(?P<head>\s*[A-Za-z0-9._-]+\s*(?:\[[^\]]*\])?\s*)(?P<spec>[^;]*?)(?P<tail>\s*(?:;.*)?)$"
)


def with_range(requirement: str, spec: str) -> str:
    """A requirement string with its version specifier replaced (name, extras, marker kept)."""
    found = REQUIREMENT.match(requirement)
    if found is None:
        raise ReleaseError(f"cannot rewrite the requirement {requirement!r}")
    head = found["head"].rstrip()
    return f"{head}{spec}{found['tail']}"


def replace_requirement(text: str, old: str, new: str, where: str) -> str:
    for quote in ('"', "'"):
        quoted = f"{quote}{old}{quote}"
        if quoted in text:
            return text.replace(quoted, f"{quote}{new}{quote}")
    if f'"{new}"' in text or f"'{new}'" in text:  # the same string again: replaced already
        return text
    raise ReleaseError(f"{where}: cannot find the requirement {old!r} as written")


# --- the plan: every file's new text, before any is written --------------------------


class Plan:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.texts: dict[Path, str] = {}

    def text(self, path: Path) -> str:
        if path not in self.texts:
            self.texts[path] = path.read_text(encoding="utf-8")
        return self.texts[path]

    def edit(self, path: Path, text: str) -> None:
        self.texts[path] = text

    def changed(self) -> list[Path]:
        return [
            p for p, t in self.texts.items() if not p.exists() or p.read_text(encoding="utf-8") != t
        ]

    def write(self) -> list[Path]:
        changed = self.changed()
        for path in changed:
            write_atomic(path, self.texts[path])
        return changed


def plan_version(plan: Plan, dist: cv.Distribution, old: str, new: str) -> None:
    root = plan.root
    pyproject = dist.folder / "pyproject.toml"
    plan.edit(
        pyproject,
        set_table_version(plan.text(pyproject), "project", old, new, cv.rel(pyproject, root)),
    )
    for module in sorted((dist.folder / "src").rglob("__init__.py")):
        if cv.INIT_VERSION.search(plan.text(module)):
            plan.edit(module, set_init_version(plan.text(module), old, new, cv.rel(module, root)))
    lock = root / "Cargo.lock"
    for crate in dist.own_crates():
        manifest = crate / "Cargo.toml"
        plan.edit(
            manifest,
            set_table_version(plan.text(manifest), "package", old, new, cv.rel(manifest, root)),
        )
        name = cv.load_toml(manifest)["package"]["name"]
        if lock.exists() and f'name = "{name}"\n' in plan.text(lock):
            plan.edit(lock, set_lock_version(plan.text(lock), name, old, new))


def plan_ranges(
    plan: Plan,
    dists: dict[str, cv.Distribution],
    releases: dict[str, cv.Release],
    versions: dict[str, str],
    *,
    only: str | None = None,
) -> list[str]:
    """Rewrite sibling requirements that exclude a sibling's (new) version or are off the
    scheme; returns the released distributions whose requirements moved."""
    moved: list[str] = []
    by_file = {d.folder / "pyproject.toml": d for d in dists.values()}
    for sibling in cv.sibling_requirements(plan.root, dists):
        name = cv.canonical(sibling.requirement.name)
        if name not in dists or (only is not None and name != only):
            continue
        version = versions[name]
        fits = sibling.requirement.specifier.contains(version, prereleases=True)
        if fits and cv.range_problem(sibling.requirement) is None:
            continue
        spec = cv.scheme_range(cv.Version(version))
        new = with_range(sibling.text, spec)
        where = cv.rel(sibling.file, plan.root)
        plan.edit(
            sibling.file, replace_requirement(plan.text(sibling.file), sibling.text, new, where)
        )
        owner = by_file.get(sibling.file)
        if owner is not None and owner.name in releases and owner.name != name:
            log = owner.folder / cv.CHANGELOG
            written = REQUIREMENT.match(sibling.text)
            old_spec = (written["spec"].strip() if written else "") or "any version"
            entry = f"Requires {name} {spec} (was {old_spec})."
            if entry not in plan.text(log):
                plan.edit(
                    log,
                    with_unreleased_entry(plan.text(log), "Changed", entry, cv.rel(log, plan.root)),
                )
            if owner.name not in moved:
                moved.append(owner.name)
    return moved


def find(dists: dict[str, cv.Distribution], name: str) -> cv.Distribution:
    dist = dists.get(cv.canonical(name))
    if dist is None:
        raise ReleaseError(
            f"{name!r} is no distribution under packages/; expected one of: {', '.join(sorted(dists))}"
        )
    return dist


def today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def check_date(date: str) -> str:
    try:
        datetime.date.fromisoformat(date)
    except ValueError as exc:
        raise ReleaseError(f"--date {date!r}: expected YYYY-MM-DD") from exc
    return date


def recorded_hashes(plan: Plan, names: list[str]) -> dict[str, str]:
    """The content hashes the plan will leave, read from a copy of the tree as planned."""
    # The hash reads the tree; the plan's files are not written yet, so hash a view of it.
    dists = cv.discover(plan.root)
    overlay = {cv.rel(p, plan.root): t.encode("utf-8") for p, t in plan.texts.items()}

    class Planned(cv.Tree):
        def files(self, folders):  # type: ignore[no-untyped-def]
            for path, data in super().files(folders):
                yield path, overlay.get(path, data)

        def read(self, path: str) -> bytes | None:
            return overlay[path] if path in overlay else super().read(path)

    tree = Planned(plan.root)
    result = {}
    for name in names:
        result[name] = cv.content_hash(dists[name], plan.root, tree)
    return result


def bump(
    root: Path, name: str, part: str, date: str, *, use_git: bool = True
) -> tuple[str, list[Path], list[str]]:
    """Release ``name``: (the new version, the files written, distributions whose ranges moved)."""
    dists = cv.discover(root)
    dist = find(dists, name)
    releases, _ = cv.last_releases(root, dists, use_git)
    problems = cv.check_distribution(dist, root, releases.get(dist.name))
    if problems:
        raise ReleaseError("fix these first:\n  " + "\n  ".join(problems))
    old = dist.version
    release = releases.get(dist.name)
    if release is not None and release.version != old:
        raise ReleaseError(
            f"{dist.name} is at {old} but its last release is {release.version} ({release.source}): "
            "bump works from the released version; set the version back, or use `record` "
            "if this version is the release"
        )
    log_path = dist.folder / cv.CHANGELOG
    log = cv.Changelog(log_path.read_text(encoding="utf-8"))
    if not log.unreleased_entries():
        raise ReleaseError(
            f"{cv.rel(log_path, root)} has no entry under [Unreleased]: say what {dist.name} {part} release holds"
        )
    new = bumped(old, part)
    plan = Plan(root)
    plan_version(plan, dist, old, new)
    plan.edit(
        log_path, with_release_section(plan.text(log_path), new, date, cv.rel(log_path, root))
    )
    versions = {n: d.version for n, d in dists.items()} | {dist.name: new}
    moved = plan_ranges(plan, dists, releases, versions, only=dist.name)
    manifest = cv.read_manifest(root)
    (hash_,) = recorded_hashes(plan, [dist.name]).values()
    manifest[dist.name] = cv.Release(new, hash_, date, cv.MANIFEST)
    plan.edit(root / cv.MANIFEST, cv.render_manifest(manifest))
    return new, plan.write(), moved


def record(
    root: Path, names: list[str], date: str, *, use_git: bool = True, at: str | None = None
) -> list[Path]:
    """Record the tree (or, with ``at``, the files of that git revision) as the release of
    each distribution's current version: a first release (its ``[Unreleased]`` entries
    move under the version's heading), or an untagged release made again."""
    dists = cv.discover(root)
    chosen = [find(dists, n) for n in names]
    tagged = cv.release_tags(root) if use_git and cv.git_root(root) else {}
    known = cv.read_manifest(root)
    plan = Plan(root)
    problems = []
    for dist in chosen:
        where = cv.rel(dist.folder, root)
        log_path = dist.folder / cv.CHANGELOG
        first = dist.name not in known and dist.name not in tagged
        if first and log_path.is_file():
            # A first release: its [Unreleased] entries become the version's section.
            log = cv.Changelog(plan.text(log_path))
            if log.unreleased_entries() and dist.version not in log.versions():
                plan.edit(
                    log_path,
                    with_release_section(log.text, dist.version, date, cv.rel(log_path, root)),
                )
        sites = cv.version_sites(dist, root)
        if any(v != dist.version for _, v in sites):
            problems.append(
                f"{dist.name}: its versions disagree: " + ", ".join(f"{s} {v}" for s, v in sites)
            )
        if any(str(v) == str(cv.Version(dist.version)) for v, _ in tagged.get(dist.name, [])):
            problems.append(
                f"{dist.name} {dist.version} is tagged already: a tagged release is never recorded again"
            )
        log = cv.Changelog(plan.text(log_path)) if log_path.is_file() else None
        if log is None or dist.version not in log.versions():
            problems.append(
                f"{dist.name}: {where}/{cv.CHANGELOG} has no '## [{dist.version}] - <date>' section"
            )
        elif log.unreleased_entries():
            problems.append(
                f"{dist.name}: {where}/{cv.CHANGELOG} has entries under [Unreleased]; "
                "they belong to the next release (tools/release.py bump)"
            )
    if problems:
        raise ReleaseError("nothing recorded:\n  " + "\n  ".join(problems))
    manifest = dict(known)
    for dist in chosen:
        tree = cv.Tree(root, at) if at else None
        manifest[dist.name] = cv.Release(
            dist.version, cv.content_hash(dist, root, tree), date, cv.MANIFEST
        )
    plan.edit(root / cv.MANIFEST, cv.render_manifest(manifest))
    return plan.write()


def ranges(root: Path) -> list[Path]:
    dists = cv.discover(root)
    releases, _ = cv.last_releases(root, dists, use_git=False)
    plan = Plan(root)
    plan_ranges(plan, dists, releases, {n: d.version for n, d in dists.items()})
    return plan.write()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=cv.ROOT, help="the repository (default: this one)"
    )
    parser.add_argument(
        "--no-git", action="store_true", help="ignore release tags; use the manifest only"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    p_bump = commands.add_parser("bump", help="release one distribution")
    p_bump.add_argument("distribution")
    p_bump.add_argument("part", choices=PARTS)
    p_bump.add_argument("--date", default=None, help="the release date (default: today, UTC)")
    p_record = commands.add_parser("record", help="record the tree as the release of its versions")
    p_record.add_argument("distributions", nargs="*")
    p_record.add_argument("--all", action="store_true")
    p_record.add_argument("--date", default=None)
    p_record.add_argument(
        "--at", metavar="REV", help="hash the files of this git revision (HEAD: what is committed)"
    )
    commands.add_parser("ranges", help="rewrite sibling ranges to the scheme (>=A.B,<N)")
    commands.add_parser("check", help="the version check")
    args = parser.parse_args(argv)
    root: Path = args.root
    use_git = not args.no_git
    try:
        if args.command == "check":
            return cv.main(["--root", str(root), *(["--no-git"] if args.no_git else [])])
        if args.command == "bump":
            dist = cv.canonical(args.distribution)
            new, written, moved = bump(
                root, dist, args.part, check_date(args.date or today()), use_git=use_git
            )
            for path in written:
                print(f"release: wrote {cv.rel(path, root)}")
            for other in moved:
                print(
                    f"release: {other}'s range on {dist} moved; release {other} too once this is tagged"
                )
            paths = " ".join(cv.rel(p, root) for p in written)
            print(f"release: {dist} {new}. Commit, then tag:")
            print(f'  git commit -m "{dist} {new}" -- {paths}')
            print(f'  git tag -a {dist}-v{new} -m "{dist} {new}"')
            return 0
        if args.command == "record":
            names = sorted(cv.discover(root)) if args.all else args.distributions
            if not names:
                parser.error("record: name distributions or pass --all")
            date = check_date(args.date or today())
            written = record(root, names, date, use_git=use_git, at=args.at)
            print(f"release: recorded {', '.join(names)}" + ("" if written else " (unchanged)"))
            return 0
        written = ranges(root)
        for path in written:
            print(f"release: wrote {cv.rel(path, root)}")
        return 0
    except (ReleaseError, cv.VersionCheckError) as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
