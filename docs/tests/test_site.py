"""docs/hooks.py on a small repository of its own: README links become site links, a
linked repository file is published, the package graph is drawn from pyproject.toml,
and a broken link or a package missing from the nav fails ``mkdocs build --strict``.

Each test writes a tree in a temporary folder and builds it with MkDocs' own theme (the
real site's theme and mkdocstrings are exercised by the strict build of the real site,
which runs beside these tests in the tox env ``docs``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HOOKS = Path(__file__).resolve().parent.parent / "hooks.py"

NAV = """
nav:
  - Home: README.md
  - Guide: guide.md
  - Packages:
      - alpha: packages/alpha/README.md
      - beta: packages/beta/README.md
  - API reference:
      - alpha: reference/alpha.md
      - beta: reference/beta.md
"""


def pyproject(name: str, dependencies: list[str]) -> str:
    listed = ", ".join(f'"{d}"' for d in dependencies)
    return f'[project]\nname = "{name}"\nversion = "0.1.0"\ndependencies = [{listed}]\n'


def write(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    config = (
        "site_name: fixture\ndocs_dir: docs\nstrict: true\n"
        f"hooks:\n  - {HOOKS.as_posix()}\n"
        "validation:\n  omitted_files: warn\n  unrecognized_links: warn\n  anchors: warn\n" + NAV
    )
    write(
        tmp_path,
        {
            "mkdocs.yml": config,
            "README.md": "# Home\n\nSee [alpha](packages/alpha/README.md), the "
            "[guide](docs/guide.md) and [the script](tools/run.py).\n\n"
            "```sh\ncat [not a link](missing.md)\n```\n",
            "docs/guide.md": "# Guide\n\n[beta's usage](../packages/beta/README.md#usage)\n\n"
            "<!-- riftco:package-graph -->\n",
            "packages/alpha/README.md": "# alpha\n\nUses [beta](../beta/README.md).\n",
            "packages/alpha/pyproject.toml": pyproject("riftco-alpha", ["riftco-beta ~= 0.1"]),
            "packages/alpha/src/riftco/alpha/__init__.py": '"""alpha."""\n',
            "packages/beta/README.md": "# beta\n\n## Usage\n\nIt is used.\n",
            "packages/beta/pyproject.toml": pyproject("riftco-beta", []),
            "packages/beta/src/riftco/beta/__init__.py": '"""beta."""\n',
            "tools/run.py": "print('run')\n",
        },
    )
    return tmp_path


def build(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(root / "site")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_links_resolve_to_site_pages_and_published_files(tree: Path) -> None:
    result = build(tree)
    assert result.returncode == 0, result.stderr
    site = tree / "site"
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="packages/alpha/"' in home
    assert 'href="guide/"' in home
    assert 'href="tools/run.py"' in home
    assert (site / "tools" / "run.py").read_text(encoding="utf-8") == "print('run')\n"
    assert "[not a link](missing.md)" in home  # code blocks are left alone
    guide = (site / "guide" / "index.html").read_text(encoding="utf-8")
    assert 'href="../packages/beta/#usage"' in guide
    alpha = (site / "packages" / "alpha" / "index.html").read_text(encoding="utf-8")
    assert 'href="../beta/"' in alpha


def test_the_package_graph_comes_from_pyproject(tree: Path) -> None:
    result = build(tree)
    assert result.returncode == 0, result.stderr
    guide = (tree / "site" / "guide" / "index.html").read_text(encoding="utf-8")
    assert "<title>riftco-alpha depends on riftco-beta</title>" in guide
    assert guide.count("<rect ") == 2
    reference = (tree / "site" / "reference" / "alpha" / "index.html").read_text(encoding="utf-8")
    assert "::: riftco.alpha" in reference


def test_a_link_to_a_missing_file_fails_the_build(tree: Path) -> None:
    readme = tree / "packages" / "beta" / "README.md"
    readme.write_text(readme.read_text() + "\nSee [the bench](../../bench/gone.py).\n")
    result = build(tree)
    assert result.returncode != 0
    assert "packages/beta/README.md: the link '../../bench/gone.py' names bench/gone.py" in (
        result.stderr
    )


def test_a_missing_anchor_fails_the_build(tree: Path) -> None:
    guide = tree / "docs" / "guide.md"
    guide.write_text(guide.read_text().replace("#usage", "#no-such-heading"))
    result = build(tree)
    assert result.returncode != 0
    assert "no-such-heading" in result.stderr


def test_a_package_missing_from_the_nav_fails_the_build(tree: Path) -> None:
    write(
        tree,
        {
            "packages/gamma/README.md": "# gamma\n",
            "packages/gamma/pyproject.toml": pyproject("riftco-gamma", []),
            "packages/gamma/src/riftco/gamma/__init__.py": '"""gamma."""\n',
        },
    )
    result = build(tree)
    assert result.returncode != 0
    assert "- riftco-gamma: packages/gamma/README.md" in result.stderr
    assert "- riftco-gamma: reference/gamma.md" in result.stderr


def test_a_crate_only_package_needs_its_readme_in_the_nav_and_no_api_page(tree: Path) -> None:
    """A package with a Cargo.toml and no pyproject.toml (the C ABI's) is a page in the
    nav, with its inner crates' READMEs, but has no API reference page."""
    write(
        tree,
        {
            "packages/capi/README.md": "# capi\n",
            "packages/capi/Cargo.toml": '[package]\nname = "capi"\n',
            "packages/capi/inner/README.md": "# inner\n",
            "packages/capi/inner/Cargo.toml": '[package]\nname = "inner"\n',
        },
    )
    result = build(tree)
    assert result.returncode != 0
    assert "<title>: packages/capi/README.md" in result.stderr
    assert "<title>: packages/capi/inner/README.md" in result.stderr
    assert "reference/capi.md" not in result.stderr
    config = (tree / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.replace(
        "      - beta: packages/beta/README.md\n",
        "      - beta: packages/beta/README.md\n"
        "      - capi: packages/capi/README.md\n"
        "      - inner: packages/capi/inner/README.md\n",
    )
    (tree / "mkdocs.yml").write_text(config, encoding="utf-8")
    assert build(tree).returncode == 0, build(tree).stderr
