"""MkDocs hooks: the site is built from the repository's own READMEs at build time.

Nothing here copies text into ``docs/``: every page below is read from where it lives
when ``mkdocs build`` runs, so the site always shows the current files.

- Pages from the repository: the top ``README.md`` (the home page), every
  ``packages/*/README.md``, ``labs/README.md`` and each lab's README, reports and plots.
  A repository file keeps its repository path in the site (``packages/nn/README.md`` is
  the page ``packages/nn/``); a file under ``docs/`` drops the ``docs/`` prefix.
- Links: a relative link in any page is read as a path in the repository, relative to
  the file it is written in (as GitHub reads it), and rewritten to the site page that
  holds that file. A linked repository file that is no page of the site (a script, a
  README outside the nav) is published beside the pages at its repository path, so the
  link still resolves; a link to a file that does not exist is a warning, which
  ``mkdocs build --strict`` turns into a failure.
- ``reference/<folder>.md``: one API reference page per package, generated from the
  folder's import package (``::: riftco.nn``), rendered by mkdocstrings from the sources.
- ``<!-- riftco:package-graph -->`` in a page becomes an SVG graph of the packages'
  dependencies, read from each ``packages/*/pyproject.toml`` (``package_graph.py``);
  ``<!-- riftco:entry-points -->`` a table of the commands and backends each registers.
- The nav must name every package's README page and its API reference page: a package
  missing from either fails the build with the lines to add to ``mkdocs.yml``.
"""

from __future__ import annotations

import logging
import posixpath
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files, InclusionLevel

# mkdocs puts this folder on sys.path while it loads the hooks.
from package_graph import svg as package_graph_svg

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the docs env runs on 3.11 or later
    import tomli as tomllib

log = logging.getLogger("mkdocs.hooks.riftco")

#: A repository file published because a page links to it is at most this large.
MAX_PUBLISHED_BYTES = 2 * 1024 * 1024
GRAPH_MARKER = "<!-- riftco:package-graph -->"
ENTRY_POINTS_MARKER = "<!-- riftco:entry-points -->"
#: The target of an inline link or image, ``](target "title")`` (the link text may
#: start on an earlier line); the target is group 2.
INLINE_LINK = re.compile(r"(\]\(\s*)(<[^>\n]*>|[^\s)]+)")
#: A reference definition: ``[label]: target``.
REFERENCE_LINK = re.compile(r"^( {0,3}\[[^\]]+\]:\s*)(<[^>]*>|\S+)(.*)$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//|#|/)")


@dataclass
class Site:
    """What the hooks found in the repository for one build."""

    root: Path
    #: site path (``src_uri``) -> repository path, for every page and file of the site
    sources: dict[str, str] = field(default_factory=dict)
    #: repository path -> site path
    site_paths: dict[str, str] = field(default_factory=dict)
    #: package folder name -> its pyproject's [project] table
    packages: dict[str, dict[str, Any]] = field(default_factory=dict)


_site: Site | None = None


def _state() -> Site:
    if _site is None:
        raise PluginError("riftco hooks: on_config did not run")
    return _site


# -- the repository's packages -------------------------------------------------------


def _read_packages(root: Path) -> dict[str, dict[str, Any]]:
    packages: dict[str, dict[str, Any]] = {}
    for folder in sorted((root / "packages").iterdir()):
        pyproject = folder / "pyproject.toml"
        if not (folder / "README.md").is_file():
            continue
        if not pyproject.is_file():
            if (folder / "Cargo.toml").is_file():
                continue  # a crate-only package (libriftco): its README by _crate_readmes
            raise PluginError(
                f"packages/{folder.name}: a README.md but neither a pyproject.toml nor a Cargo.toml"
            )
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        except (tomllib.TOMLDecodeError, KeyError) as error:
            raise PluginError(
                f"packages/{folder.name}/pyproject.toml: expected a [project] table ({error})"
            ) from error
        packages[folder.name] = project
    return packages


def import_name(root: Path, folder: str) -> str:
    """The import package of ``packages/<folder>``: the first folder under ``src/`` that
    holds an ``__init__.py``, below the ``riftco`` namespace (``riftco.backends.cuda``)."""
    src = root / "packages" / folder / "src"
    found = sorted(
        init.parent.relative_to(src)
        for init in src.glob("riftco/**/__init__.py")
        if not any((parent / "__init__.py").is_file() for parent in init.parent.parents)
    )
    if not found:
        raise PluginError(f"packages/{folder}: no import package with an __init__.py under src/")
    return ".".join(found[0].parts)


def entry_points_table(site: Site) -> str:
    """The commands and backends each package registers, from its entry points."""
    rows = ["| distribution | import | `riftco` subcommands | backends |", "|---|---|---|---|"]
    for folder, project in site.packages.items():
        groups = project.get("entry-points", {})
        commands = sorted(groups.get("riftco.commands", {}))
        backends = sorted(groups.get("riftco.backends", {}))
        rows.append(
            f"| `{project['name']}` | `{import_name(site.root, folder)}` | "
            + (", ".join(f"`{c}`" for c in commands) or "—")
            + " | "
            + (", ".join(f"`{b}`" for b in backends) or "—")
            + " |"
        )
    return "\n".join(rows)


# -- the nav check -------------------------------------------------------------------


def _nav_paths(nav: Any) -> set[str]:
    """Every page path named anywhere in the nav."""
    found: set[str] = set()
    if isinstance(nav, str):
        found.add(nav)
    elif isinstance(nav, list):
        for item in nav:
            found |= _nav_paths(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            found |= _nav_paths(value)
    return found


def _crate_readmes(root: Path) -> list[str]:
    """The READMEs of the crate-only packages (a Cargo.toml and no pyproject.toml, such as
    packages/capi) and of the crates inside them: pages with no API reference page."""
    found: list[str] = []
    for folder in sorted((root / "packages").iterdir()):
        if (folder / "pyproject.toml").is_file() or not (folder / "Cargo.toml").is_file():
            continue
        for readme in sorted(folder.glob("**/README.md")):
            if (readme.parent / "Cargo.toml").is_file():
                found.append(readme.relative_to(root).as_posix())
    return found


def check_nav(nav: Any, packages: dict[str, dict[str, Any]], crates: Iterable[str] = ()) -> None:
    """Fail unless the nav names each package's README page and API reference page, and
    each crate-only package's README."""
    named = _nav_paths(nav)
    missing: list[str] = [f"under Packages:      - <title>: {c}" for c in crates if c not in named]
    for folder, project in packages.items():
        if f"packages/{folder}/README.md" not in named:
            missing.append(f"under Packages:      - {project['name']}: packages/{folder}/README.md")
        if f"reference/{folder}.md" not in named:
            missing.append(f"under API reference: - {project['name']}: reference/{folder}.md")
    if missing:
        raise PluginError(
            "mkdocs.yml's nav does not list every package (packages/*/README.md); add:\n  "
            + "\n  ".join(missing)
        )


# -- links ---------------------------------------------------------------------------


def site_path(repo_path: str) -> str:
    """Where a repository file is in the site: ``docs/x.md`` is ``x.md``; anything
    else keeps its repository path."""
    return repo_path[len("docs/") :] if repo_path.startswith("docs/") else repo_path


def _resolve(site: Site, page_repo_path: str, target: str) -> str | None:
    """The repository path a relative link target names, or None when it leaves the
    repository. A folder stands for its README.md."""
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), target))
    if path == ".." or path.startswith("../"):
        return None
    if (site.root / path).is_dir() and (site.root / path / "README.md").is_file():
        path = posixpath.join(path, "README.md") if path != "." else "README.md"
    return path


def _split_target(target: str) -> tuple[str, str]:
    for mark in ("#", "?"):
        if mark in target:
            index = target.index(mark)
            return target[:index], target[index:]
    return target, ""


def _linked_repo_paths(site: Site, page_repo_path: str, markdown: str) -> list[str]:
    """The repository paths of the relative links in ``markdown`` that exist."""
    found: list[str] = []

    def collect(target: str) -> str:
        path, _ = _split_target(target.strip("<>"))
        if path and not EXTERNAL.match(path):
            resolved = _resolve(site, page_repo_path, path)
            if resolved is not None and (site.root / resolved).is_file():
                found.append(resolved)
        return target

    _map_link_targets(markdown, collect)
    return found


def _map_link_targets(markdown: str, change: Any) -> str:
    """``markdown`` with each link target passed through ``change``, outside fenced code
    blocks and inline code spans."""
    out: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines(keepends=True):
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            out.append(line)
            continue
        if opened:
            fence = opened.group(1)
            out.append(line)
            continue
        body = line.rstrip("\n")
        ending = line[len(body) :]
        reference = REFERENCE_LINK.match(body)
        if reference:
            head, target, tail = reference.groups()
            out.append(head + change(target) + tail + ending)
            continue
        # Links are rewritten only in the text between inline code spans.
        rebuilt: list[str] = []
        position = 0
        for span in INLINE_CODE.finditer(body):
            rebuilt.append(_rewrite_inline(body[position : span.start()], change))
            rebuilt.append(span.group(0))
            position = span.end()
        rebuilt.append(_rewrite_inline(body[position:], change))
        out.append("".join(rebuilt) + ending)
    return "".join(out)


def _rewrite_inline(text: str, change: Any) -> str:
    return INLINE_LINK.sub(lambda m: m.group(1) + change(m.group(2)), text)


def rewrite_links(site: Site, page_site_path: str, markdown: str) -> str:
    """``markdown`` of the page at ``page_site_path`` with its relative links pointing at
    the site's pages and files."""
    page_repo_path = site.sources.get(page_site_path, "docs/" + page_site_path)

    def change(raw: str) -> str:
        bracketed = raw.startswith("<") and raw.endswith(">")
        target = raw[1:-1] if bracketed else raw
        path, rest = _split_target(target)
        if not path or EXTERNAL.match(path):
            return raw
        resolved = _resolve(site, page_repo_path, path)
        if resolved is None:
            log.warning(f"{page_repo_path}: the link '{target}' leaves the repository")
            return raw
        if resolved not in site.site_paths:
            if (site.root / resolved).is_dir():
                log.warning(
                    f"{page_repo_path}: the link '{target}' names the folder {resolved}/, "
                    "which has no README.md; link a file in it"
                )
            else:
                log.warning(
                    f"{page_repo_path}: the link '{target}' names {resolved}, "
                    "which does not exist in the repository"
                )
            return raw
        new = posixpath.relpath(site.site_paths[resolved], posixpath.dirname(page_site_path) or ".")
        new += rest
        return f"<{new}>" if bracketed else new

    return _map_link_targets(markdown, change)


# -- hooks ---------------------------------------------------------------------------


def on_config(config: Any) -> Any:
    global _site
    root = Path(config.config_file_path).resolve().parent
    site = Site(root=root, packages=_read_packages(root))
    check_nav(config.nav, site.packages, _crate_readmes(root))
    _site = site
    return config


def _add(site: Site, files: Files, config: Any, repo_path: str, **options: Any) -> None:
    target = site_path(repo_path)
    existing = files.get_file_from_path(target)
    if existing is not None:
        if site.sources.get(target, "docs/" + target) != repo_path:
            raise PluginError(
                f"{repo_path} and {site.sources.get(target, 'docs/' + target)} "
                f"would both be the site's {target}"
            )
        return
    files.append(File.generated(config, target, abs_src_path=str(site.root / repo_path), **options))
    site.sources[target] = repo_path
    site.site_paths[repo_path] = target


def on_files(files: Files, config: Any) -> Files:
    site = _state()
    root = site.root
    for file in files:
        site.site_paths["docs/" + file.src_uri] = file.src_uri
    _add(site, files, config, "README.md")
    for folder in site.packages:
        _add(site, files, config, f"packages/{folder}/README.md")
        reference = f"reference/{folder}.md"
        if files.get_file_from_path(reference) is None:
            files.append(File.generated(config, reference, content=_reference_page(site, folder)))
            site.site_paths["docs/" + reference] = reference
    for crate_readme in _crate_readmes(root):
        _add(site, files, config, crate_readme)
    if (root / "labs" / "README.md").is_file():
        _add(site, files, config, "labs/README.md")
    for readme in sorted(root.glob("labs/*/README.md")):
        _add(site, files, config, readme.relative_to(root).as_posix())
    for record in sorted(root.glob("labs/*/records/*")):
        if record.suffix in {".md", ".png", ".svg"}:
            _add(site, files, config, record.relative_to(root).as_posix())
    # Whatever the pages link to that is not a page yet: published at its repository
    # path, Markdown as a page outside the nav (its own links followed in turn).
    pending = [file for file in files if file.is_documentation_page()]
    while pending:
        file = pending.pop()
        repo_path = site.sources.get(file.src_uri, "docs/" + file.src_uri)
        for linked in _linked_repo_paths(site, repo_path, file.content_string):
            if linked in site.site_paths:
                continue
            size = (root / linked).stat().st_size
            if size > MAX_PUBLISHED_BYTES:
                log.warning(
                    f"{repo_path} links {linked} ({size} bytes): larger than the "
                    f"{MAX_PUBLISHED_BYTES} bytes the site publishes; link a smaller file"
                )
                continue
            _add(site, files, config, linked, inclusion=InclusionLevel.NOT_IN_NAV)
            added = files.get_file_from_path(site_path(linked))
            if added is not None and added.is_documentation_page():
                pending.append(added)
    return files


def _reference_page(site: Site, folder: str) -> str:
    project = site.packages[folder]
    module = import_name(site.root, folder)
    return (
        f"# {project['name']}\n\n"
        f"{project.get('description', '')}\n\n"
        f"The package's own page: [{project['name']}](../../packages/{folder}/README.md).\n\n"
        f"::: {module}\n"
    )


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    site = _state()
    if GRAPH_MARKER in markdown:
        markdown = markdown.replace(GRAPH_MARKER, package_graph_svg(list(site.packages.values())))
    if ENTRY_POINTS_MARKER in markdown:
        markdown = markdown.replace(ENTRY_POINTS_MARKER, entry_points_table(site))
    return rewrite_links(site, page.file.src_uri, markdown)
