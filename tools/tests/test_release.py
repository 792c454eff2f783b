"""tools/release.py: bump, record and ranges on a small tree made in a temporary folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_versions
import release
from release_tree import DATE, changelog, make_tree, problems, write


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "repo")


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def change_nn(tree: Path, entry: str = "### Fixed\n\n- linear returns 2.\n\n") -> None:
    write(tree, "packages/nn/src/riftco/nn/layers.py", "def linear():\n    return 2\n")
    write(tree, "packages/nn/CHANGELOG.md", changelog("riftco-nn", "0.1.0", unreleased=entry))


def manifest(tree: Path) -> dict:
    return tomllib.loads((tree / check_versions.MANIFEST).read_text())


def test_bump_patch_sets_the_version_everywhere_and_dates_the_changelog(tree, capsys):
    change_nn(tree)
    code = release.main(
        ["--root", str(tree), "--no-git", "bump", "riftco-nn", "patch", "--date", DATE]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert 'git tag -a riftco-nn-v0.1.1 -m "riftco-nn 0.1.1"' in out
    assert 'version = "0.1.1"' in (tree / "packages/nn/pyproject.toml").read_text()
    assert (tree / "packages/nn/src/riftco/nn/__init__.py").read_text() == '__version__ = "0.1.1"\n'
    log = (tree / "packages/nn/CHANGELOG.md").read_text()
    assert (
        log.index("## [Unreleased]")
        < log.index(f"## [0.1.1] - {DATE}")
        < log.index("- linear returns 2.")
    )
    assert log.index("- linear returns 2.") < log.index("## [0.1.0]")
    assert check_versions.Changelog(log).unreleased_entries() == []
    assert manifest(tree)["riftco-nn"]["version"] == "0.1.1"
    assert manifest(tree)["riftco-nn"]["date"] == DATE
    # Nothing else moved: a patch release stays inside every range.
    assert "riftco-nn" not in (tree / "templates/backend/pyproject.toml").read_text()
    assert problems(tree) == []
    # A second release needs new entries.
    with pytest.raises(release.ReleaseError, match=r"no entry under \[Unreleased\]"):
        release.bump(tree, "riftco-nn", "patch", DATE, use_git=False)


def test_bump_minor_of_a_native_package_moves_its_crates_lock_and_the_ranges_naming_it(
    tree, capsys
):
    write(tree, "packages/tensor/kernels/src/lib.rs", "pub fn add() { faster() }\n")
    write(
        tree,
        "packages/tensor/CHANGELOG.md",
        changelog("riftco-tensor", "0.1.0", unreleased="- Breaks add.\n\n"),
    )
    code = release.main(
        ["--root", str(tree), "--no-git", "bump", "riftco-tensor", "minor", "--date", DATE]
    )
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "riftco-nn's range on riftco-tensor moved" in out
    for crate in ("native", "kernels"):
        assert 'version = "0.2.0"' in (tree / f"packages/tensor/{crate}/Cargo.toml").read_text()
    lock = (tree / "Cargo.lock").read_text()
    assert 'name = "riftco-kernels"\nversion = "0.2.0"' in lock
    assert 'name = "riftco-tensor-native"\nversion = "0.2.0"' in lock
    # The shared crate is no one package's: its version stays.
    assert 'name = "riftco-native-call"\nversion = "0.1.0"' in lock
    assert (
        '__version__ = "0.2.0"'
        in (tree / "packages/tensor/src/riftco/tensor/__init__.py").read_text()
    )
    nn = tomllib.loads((tree / "packages/nn/pyproject.toml").read_text())["project"]
    assert nn["dependencies"][0] == "riftco-tensor>=0.2,<0.3"
    template = tomllib.loads((tree / "templates/backend/pyproject.toml").read_text())["project"]
    assert template["dependencies"] == ["riftco-tensor>=0.2,<0.3"]
    nn_log = check_versions.Changelog((tree / "packages/nn/CHANGELOG.md").read_text())
    assert nn_log.unreleased_entries() == ["- Requires riftco-tensor >=0.2,<0.3 (was >=0.1,<0.2)."]
    assert "### Changed" in nn_log.body("Unreleased")
    # riftco-core's range is untouched, and the tree passes the check as it stands.
    assert "riftco-core>=0.1,<0.2" in (tree / "packages/tensor/pyproject.toml").read_text()
    assert problems(tree) == []


def test_bump_major_in_0x_goes_to_1_0_0_and_ranges_to_the_next_major(tree):
    write(
        tree,
        "packages/core/CHANGELOG.md",
        changelog("riftco-core", "0.1.0", unreleased="- Stable.\n\n"),
    )
    new, _, moved = release.bump(tree, "riftco-core", "major", DATE, use_git=False)
    assert new == "1.0.0"
    assert sorted(moved) == ["riftco-nn", "riftco-tensor"]
    assert "riftco-core>=1.0,<2" in (tree / "packages/tensor/pyproject.toml").read_text()
    # The extra and the marker survive the rewrite.
    nn = tomllib.loads((tree / "packages/nn/pyproject.toml").read_text())["project"]
    assert (
        nn["optional-dependencies"]["test"][1]
        == "riftco-core[extra]>=1.0,<2; sys_platform != 'emscripten'"
    )
    assert problems(tree) == []


def test_bump_refuses_a_failing_package_and_writes_nothing(tree):
    write(tree, "packages/nn/src/riftco/nn/__init__.py", '__version__ = "0.3.0"\n')
    change_nn(tree)
    before = snapshot(tree)
    with pytest.raises(release.ReleaseError, match="fix these first"):
        release.bump(tree, "riftco-nn", "patch", DATE, use_git=False)
    assert snapshot(tree) == before


def test_bump_refuses_without_entries_and_an_unknown_name(tree, capsys):
    before = snapshot(tree)
    assert release.main(["--root", str(tree), "--no-git", "bump", "riftco-nn", "minor"]) == 1
    assert "no entry under [Unreleased]" in capsys.readouterr().err
    with pytest.raises(
        release.ReleaseError,
        match="'riftco-nm' is no distribution under packages/; expected one of",
    ):
        release.bump(tree, "riftco-nm", "patch", DATE, use_git=False)
    assert snapshot(tree) == before


def test_bump_refuses_a_version_already_moved_by_hand(tree):
    for path in ("packages/nn/pyproject.toml", "packages/nn/src/riftco/nn/__init__.py"):
        file = tree / path
        file.write_text(file.read_text().replace('"0.1.0"', '"0.2.0"'))
    write(
        tree, "packages/nn/CHANGELOG.md", changelog("riftco-nn", "0.1.0", unreleased="- More.\n\n")
    )
    with pytest.raises(release.ReleaseError, match="bump works from the released version"):
        release.bump(tree, "riftco-nn", "patch", DATE, use_git=False)


def test_a_bad_date_is_refused(tree, capsys):
    change_nn(tree)
    assert (
        release.main(
            ["--root", str(tree), "--no-git", "bump", "riftco-nn", "patch", "--date", "2026-13-01"]
        )
        == 1
    )
    assert "expected YYYY-MM-DD" in capsys.readouterr().err


def test_record_refuses_unreleased_entries_and_tagged_versions(tree):
    change_nn(tree)
    with pytest.raises(release.ReleaseError, match="they belong to the next release"):
        release.record(tree, ["riftco-nn"], DATE, use_git=False)
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the tagged case is not checked")
    subprocess.run(["git", "-C", str(tree), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
    commit = [
        "git",
        "-C",
        str(tree),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "-m",
        "x",
    ]
    subprocess.run(commit, check=True)
    subprocess.run(["git", "-C", str(tree), "tag", "riftco-core-v0.1.0"], check=True)
    with pytest.raises(release.ReleaseError, match="riftco-core 0.1.0 is tagged already"):
        release.record(tree, ["riftco-core"], DATE, use_git=True)


def test_record_makes_a_changed_tree_the_release(tree):
    write(tree, "packages/core/src/riftco/core/errors.py", "class E(Exception): ...\n")
    assert len(problems(tree)) == 1
    release.record(tree, ["riftco-core"], DATE, use_git=False)
    assert problems(tree) == []
    assert manifest(tree)["riftco-core"]["date"] == DATE


def test_ranges_rewrites_off_scheme_requirements(tree):
    pyproject = tree / "packages/nn/pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace("riftco-tensor>=0.1,<0.2", "riftco-tensor ~= 0.1")
    )
    assert problems(tree)
    release.ranges(tree)
    assert "riftco-tensor>=0.1,<0.2" in pyproject.read_text()
    log = check_versions.Changelog((tree / "packages/nn/CHANGELOG.md").read_text())
    assert log.unreleased_entries() == ["- Requires riftco-tensor >=0.1,<0.2 (was ~= 0.1)."]
    assert problems(tree) == []


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("riftco-nn ~= 0.1", "riftco-nn>=0.2,<0.3"),
        ("riftco-train[plot] ~= 0.1", "riftco-train[plot]>=0.2,<0.3"),
        (
            "riftco-nn>=0.1,<0.2; python_version >= '3.11'",
            "riftco-nn>=0.2,<0.3; python_version >= '3.11'",
        ),
        ("riftco-nn", "riftco-nn>=0.2,<0.3"),
    ],
)
def test_with_range_keeps_name_extras_and_marker(before, after):
    assert release.with_range(before, ">=0.2,<0.3") == after


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "f.toml"
    target.write_text("old\n")
    target.chmod(0o640)
    release.write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["f.toml"]


def test_bumped_versions():
    assert release.bumped("0.1.0", "patch") == "0.1.1"
    assert release.bumped("0.1.7", "minor") == "0.2.0"
    assert release.bumped("1.4.2", "major") == "2.0.0"
    with pytest.raises(release.ReleaseError, match="not a plain MAJOR.MINOR.PATCH"):
        release.bumped("0.1.0rc1", "patch")


def test_check_is_the_version_check(tree, capsys):
    assert release.main(["--root", str(tree), "--no-git", "check"]) == 0
    change_nn(tree, entry="")
    assert release.main(["--root", str(tree), "--no-git", "check"]) == 1
    assert "riftco-nn" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_record_at_a_revision_hashes_what_is_committed(tree):
    subprocess.run(["git", "-C", str(tree), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
    commit = [
        "git",
        "-C",
        str(tree),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "-m",
        "x",
    ]
    subprocess.run(commit, check=True)
    write(tree, "packages/core/src/riftco/core/wip.py", "WORK = 'in progress'\n")  # not committed
    release.record(tree, ["riftco-core"], DATE, use_git=True, at="HEAD")
    only_core = [p for p in problems(tree) if "riftco-core" in p]
    assert len(only_core) == 1 and "changed since its release" in only_core[0]
    (tree / "packages/core/src/riftco/core/wip.py").unlink()
    assert problems(tree) == []


def test_record_of_a_first_release_dates_its_unreleased_entries(tree):
    manifest_path = tree / check_versions.MANIFEST
    text = manifest_path.read_text()
    manifest_path.write_text(
        text[: text.index("[riftco-nn]")] + text[text.index("[riftco-tensor]") :]
    )
    write(
        tree,
        "packages/nn/CHANGELOG.md",
        "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- Layers.\n",
    )
    release.record(tree, ["riftco-nn"], DATE, use_git=False)
    log = check_versions.Changelog((tree / "packages/nn/CHANGELOG.md").read_text())
    assert log.unreleased_entries() == []
    assert log.versions() == {"0.1.0": f" - {DATE}"}
    assert "- Layers." in (log.body("0.1.0") or "")
    assert manifest(tree)["riftco-nn"]["version"] == "0.1.0"
    assert problems(tree) == []


@pytest.mark.parametrize("template", ["package", "backend"])
def test_the_templates_start_a_changelog(template):
    log = check_versions.Changelog(
        (check_versions.ROOT / "templates" / template / "CHANGELOG.md").read_text()
    )
    assert log.body("Unreleased") is not None
    assert log.versions() == {}
