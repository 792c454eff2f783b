"""The version check (tools/check_versions.py), on a small tree made in a temporary folder
(the lint env runs it on this repository itself)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_versions
from release_tree import changelog, make_tree, problems, write


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "repo")


def only(found: list[str], *needles: str) -> None:
    assert len(found) == 1, found
    for needle in needles:
        assert needle in found[0], found[0]


def test_a_recorded_tree_passes(tree):
    assert problems(tree) == []
    assert check_versions.main(["--root", str(tree), "--no-git"]) == 0


def test_a_changed_source_without_an_entry_fails(tree, capsys):
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    only(problems(tree), "riftco-nn: packages/nn changed since its release 0.1.0", "[Unreleased]")
    assert check_versions.main(["--root", str(tree), "--no-git"]) == 1
    assert "riftco-nn" in capsys.readouterr().err


def test_a_new_file_counts_as_a_change(tree):
    write(tree, "packages/nn/src/riftco/nn/attention.py", "X = 1\n")
    only(problems(tree), "riftco-nn")


def test_an_entry_under_unreleased_passes(tree):
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    write(
        tree,
        "packages/nn/CHANGELOG.md",
        changelog("riftco-nn", "0.1.0", unreleased="### Fixed\n\n- linear returns 2.\n\n"),
    )
    assert problems(tree) == []


def test_a_subheading_alone_is_no_entry(tree):
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    write(
        tree,
        "packages/nn/CHANGELOG.md",
        changelog("riftco-nn", "0.1.0", unreleased="### Fixed\n\n"),
    )
    only(problems(tree), "riftco-nn")


def test_a_bumped_version_passes(tree):
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    pyproject = tree / "packages/nn/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.1.1"'))
    write(tree, "packages/nn/src/riftco/nn/__init__.py", '__version__ = "0.1.1"\n')
    write(tree, "packages/nn/CHANGELOG.md", changelog("riftco-nn", "0.1.1", "0.1.0"))
    assert problems(tree) == []


def test_a_bumped_version_needs_its_section_or_entries(tree):
    pyproject = tree / "packages/nn/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.1.1"'))
    write(tree, "packages/nn/src/riftco/nn/__init__.py", '__version__ = "0.1.1"\n')
    only(problems(tree), "riftco-nn: version 0.1.1 (released: 0.1.0) has neither")


def test_a_version_below_the_release_fails(tree):
    for path in ("packages/core/pyproject.toml", "packages/core/src/riftco/core/__init__.py"):
        file = tree / path
        file.write_text(file.read_text().replace("0.1.0", "0.0.9"))
    found = problems(tree)
    assert any("riftco-core: version 0.0.9 is below its last release, 0.1.0" in p for p in found), (
        found
    )
    # ...and the ranges naming it now exclude it.
    assert any("excludes riftco-core 0.0.9" in p for p in found), found


def test_tests_readme_and_build_outputs_are_not_release_relevant(tree):
    write(tree, "packages/nn/tests/test_new.py", "def test_x():\n    pass\n")
    write(tree, "packages/nn/README.md", "# riftco-nn, documented better\n")
    write(tree, "packages/tensor/src/riftco/tensor/_native.abi3.so", "\x7fELF")
    write(tree, "packages/nn/src/riftco/nn/__pycache__/layers.cpython-311.pyc", "x")
    write(tree, "packages/nn/.pytest_cache/v/x", "x")
    write(tree, "packages/tensor/kernels/examples/demo.rs", "fn main() { changed(); }\n")
    write(tree, "tools/native-call/tests/it.rs", "#[test]\nfn changed() {}\n")
    write(tree, "tools/unrelated/notes.txt", "changed\n")
    assert problems(tree) == []


def test_crlf_line_ends_hash_as_lf(tree):
    layers = tree / "packages/nn/src/riftco/nn/layers.py"
    layers.write_bytes(layers.read_bytes().replace(b"\n", b"\r\n"))
    assert problems(tree) == []


def test_a_shared_crate_change_flags_every_native_package_built_from_it(tree):
    write(tree, "tools/native-call/src/lib.rs", "pub fn call() { panic!() }\n")
    only(problems(tree), "riftco-tensor: packages/tensor changed")


def test_an_own_crate_change_flags_its_package(tree):
    write(tree, "packages/tensor/kernels/src/lib.rs", "pub fn add() { todo!() }\n")
    only(problems(tree), "riftco-tensor")


def test_workspace_settings_count_but_the_member_list_does_not(tree):
    cargo = tree / "Cargo.toml"
    text = cargo.read_text()
    cargo.write_text(
        text.replace('    "tools/native-call",\n', '    "tools/native-call",\n    "tools/other",\n')
    )
    assert problems(tree) == []
    cargo.write_text(text.replace('pyo3 = "0.29"', 'pyo3 = "0.30"'))
    only(problems(tree), "riftco-tensor")


def test_versions_written_elsewhere_must_agree(tree):
    write(tree, "packages/nn/src/riftco/nn/__init__.py", '__version__ = "0.1.1"\n')
    found = problems(tree)
    assert any(
        "riftco-nn: packages/nn/pyproject.toml has version '0.1.0'" in p
        and "__version__ has '0.1.1'" in p
        for p in found
    ), found


def test_crate_and_lock_versions_must_agree(tree):
    kernels = tree / "packages/tensor/kernels/Cargo.toml"
    kernels.write_text(kernels.read_text().replace("0.1.0", "0.2.0"))
    lock = tree / "Cargo.lock"
    lock.write_text(
        lock.read_text().replace(
            '"riftco-tensor-native"\nversion = "0.1.0"', '"riftco-tensor-native"\nversion = "0.0.1"'
        )
    )
    found = problems(tree)
    assert any(
        "packages/tensor/kernels/Cargo.toml has '0.2.0'" in p
        and "Cargo.lock riftco-tensor-native has '0.0.1'" in p
        for p in found
    ), found


@pytest.mark.parametrize(
    ("requirement", "why"),
    [
        ("riftco-tensor ~= 0.1", "is not of the form >=A.B,<N"),
        ("riftco-tensor>=0.1", "is not of the form >=A.B,<N"),
        ("riftco-tensor", "is not of the form >=A.B,<N"),
        (
            "riftco-tensor>=0.1,<1",
            "has upper bound 1, but the next breaking release after 0.1 is 0.2",
        ),
        ("riftco-tensor>=0.2,<0.3", "excludes riftco-tensor 0.1.0"),
        ("riftco-tensor>=0.1.1,<0.2", "excludes riftco-tensor 0.1.0"),
        ("riftco-tensr>=0.1,<0.2", "names riftco-tensr, which is no distribution"),
    ],
)
def test_a_bad_sibling_range_fails(tree, requirement, why):
    pyproject = tree / "templates/backend/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("riftco-tensor>=0.1,<0.2", requirement))
    only(problems(tree), "templates/backend/pyproject.toml", why)


def test_a_range_in_an_extra_with_a_marker_is_checked(tree):
    pyproject = tree / "packages/nn/pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            "riftco-core[extra]>=0.1,<0.2", "riftco-core[extra]>=0.2,<0.3"
        )
    )
    found = problems(tree)
    assert any("excludes riftco-core 0.1.0" in p for p in found), found


def test_a_patch_lower_bound_is_in_the_scheme(tree):
    for path in ("packages/core/pyproject.toml", "packages/core/src/riftco/core/__init__.py"):
        file = tree / path
        file.write_text(file.read_text().replace("0.1.0", "0.1.3"))
    write(tree, "packages/core/CHANGELOG.md", changelog("riftco-core", "0.1.3", "0.1.0"))
    pyproject = tree / "packages/nn/pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            "riftco-core[extra]>=0.1,<0.2", "riftco-core[extra]>=0.1.3,<0.2"
        )
    )
    write(
        tree,
        "packages/nn/CHANGELOG.md",
        changelog("riftco-nn", "0.1.0", unreleased="- Tests need core 0.1.3.\n\n"),
    )
    assert problems(tree) == []


def test_changelog_problems(tree):
    (tree / "packages/core/CHANGELOG.md").unlink()
    only(problems(tree), "riftco-core: no packages/core/CHANGELOG.md")
    write(tree, "packages/core/CHANGELOG.md", "# Changelog\n\n## [0.1.0] - 2025-12-01\n")
    only(problems(tree), "has no '## [Unreleased]' heading")
    write(
        tree,
        "packages/core/CHANGELOG.md",
        "# Changelog\n\n## [Unreleased]\n\n## [0.0.1] - 2025-12-01\n",
    )
    only(problems(tree), "has no '## [0.1.0] - <date>' section")
    write(tree, "packages/core/CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n## [0.1.0]\n")
    only(problems(tree), "should be '## [0.1.0] - YYYY-MM-DD'")


def test_a_manifest_entry_without_a_distribution_fails(tree):
    manifest = tree / check_versions.MANIFEST
    manifest.write_text(
        manifest.read_text()
        + '\n[riftco-gone]\nversion = "1.0.0"\ndate = "2025-01-01"\nhash = "sha256:0"\n'
    )
    only(problems(tree), "[riftco-gone] is no distribution")


def test_a_malformed_manifest_is_a_clear_error(tree):
    (tree / check_versions.MANIFEST).write_text("[riftco-nn]\nversion = 1\n")
    with pytest.raises(
        check_versions.VersionCheckError,
        match=r"\[riftco-nn\] must hold the strings version, date and hash",
    ):
        problems(tree)
    assert check_versions.main(["--root", str(tree), "--no-git"]) == 2


def test_a_distribution_never_released_needs_only_its_changelog(tree):
    manifest = tree / check_versions.MANIFEST
    text = manifest.read_text()
    start = text.index("[riftco-nn]")
    manifest.write_text(text[:start] + text[text.index("[riftco-tensor]") :])
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    assert problems(tree) == []


def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_release_tag_is_the_last_release(tree):
    manifest = tree / check_versions.MANIFEST
    manifest.unlink()  # a tag alone says what was released
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "release")
    git(tree, "tag", "riftco-nn-v0.1.0")
    assert problems(tree, use_git=True) == []
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    only(
        problems(tree, use_git=True),
        "(tag riftco-nn-v0.1.0) (git diff riftco-nn-v0.1.0 -- packages/nn)",
    )
    # Without git, nothing says nn was released: no finding.
    assert problems(tree, use_git=False) == []


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_newer_tag_wins_over_the_manifest(tree):
    git(tree, "init", "-q")
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    write(
        tree,
        "packages/nn/CHANGELOG.md",
        changelog("riftco-nn", "0.1.0", unreleased="- Returns 2.\n\n"),
    )
    git(tree, "add", "-A")
    git(
        tree,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "-m",
        "0.1.0 plus a change",
    )
    git(tree, "tag", "riftco-nn-v0.2.0")  # a release the manifest does not know of
    found = problems(tree, use_git=True)
    assert any(
        "riftco-nn: version 0.1.0 is below its last release, 0.2.0 (tag riftco-nn-v0.2.0)" in p
        for p in found
    )
