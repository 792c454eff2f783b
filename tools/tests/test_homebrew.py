"""tools/homebrew.py: the formula generated from fixture sdists (no network), its shape
check, and `ruby -c` where Ruby is installed."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import homebrew

HAS_RUBY = shutil.which("ruby") is not None


def sdist(
    folder: Path, name: str, version: str, requires: list[str], *, dynamic: bool = False
) -> Path:
    stem = f"{name.replace('-', '_')}-{version}"
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", "Summary: a fixture"]
    lines += ["License-Expression: Apache-2.0"] + [f"Requires-Dist: {r}" for r in requires]
    if dynamic:
        lines.append("Dynamic: Requires-Dist")
    data = ("\n".join(lines) + "\n\n").encode()
    path = folder / f"{stem}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"{stem}/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        code = b"x = 1\n"
        info = tarfile.TarInfo(f"{stem}/src/mod.py")
        info.size = len(code)
        tar.addfile(info, io.BytesIO(code))
    return path


@pytest.fixture
def release(tmp_path):
    """A folder of sdists like a release's, and a pins file (every pin held locally)."""
    folder = tmp_path / "dist"
    folder.mkdir()
    sdist(folder, "riftco", "0.1.0", ["riftco-core>=0.1,<0.2", "riftco-train[plot]>=0.1,<0.2"])
    sdist(folder, "riftco-core", "0.1.2", [])
    sdist(
        folder,
        "riftco-train",
        "0.1.0",
        [
            "riftco-core>=0.1,<0.2",
            "numpy>=1.24",
            'matplotlib; extra == "plot"',
            'mpi4py; extra == "mpi"',
        ],
    )
    sdist(folder, "riftco-serve", "0.1.0", ["riftco-core>=0.1,<0.2"])  # not required by riftco
    sdist(folder, "numpy", "2.1.0", [])
    sdist(
        folder,
        "matplotlib",
        "3.9.0",
        ["numpy>=1.23", "pywin32; sys_platform == 'win32'"],
        dynamic=False,
    )
    pins = tmp_path / "resources.txt"
    pins.write_text("# third-party\nnumpy==2.1.0\nmatplotlib==3.9.0  # plots\n")
    return folder, pins


def no_network(url: str) -> bytes:
    raise AssertionError(f"the test went to the network: {url}")


def test_the_formula_holds_the_closure_with_local_hashes(release, tmp_path, capsys):
    folder, pins = release
    out = tmp_path / "tap/Formula/riftco.rb"
    main, resources = homebrew.collect(folder, pins, fetch=no_network)
    assert main.version == "0.1.0"
    assert [r.name for r in resources] == ["matplotlib", "numpy", "riftco-core", "riftco-train"]
    text = homebrew.render(main, resources)
    core = folder / "riftco_core-0.1.2.tar.gz"
    assert (
        '  resource "riftco-core" do\n'
        '    url "https://files.pythonhosted.org/packages/source/r/riftco-core/riftco_core-0.1.2.tar.gz"\n'
        f'    sha256 "{hashlib.sha256(core.read_bytes()).hexdigest()}"\n'
        "  end\n"
    ) in text
    main_sha = hashlib.sha256((folder / "riftco-0.1.0.tar.gz").read_bytes()).hexdigest()
    assert f'  sha256 "{main_sha}"\n' in text
    assert "riftco-serve" not in text and "mpi4py" not in text and "pywin32" not in text
    assert homebrew.shape_problems(text) == []
    # The command line writes it, and checks it.
    code = homebrew.main(
        ["generate", "--sdists", str(folder), "--pins", str(pins), "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    assert out.read_text() == text
    said = capsys.readouterr().out
    assert ("`ruby -c` syntax OK" if HAS_RUBY else "ruby is not installed") in said


def test_a_requirement_no_resource_meets_is_refused(release, tmp_path):
    folder, pins = release
    pins.write_text("numpy==2.1.0\n")
    (folder / "matplotlib-3.9.0.tar.gz").unlink()
    with pytest.raises(
        homebrew.HomebrewError,
        match=r"riftco-train requires 'matplotlib; extra == \"plot\"', which no sdist",
    ):
        homebrew.collect(folder, pins, fetch=no_network)
    out = tmp_path / "riftco.rb"
    assert (
        homebrew.main(["generate", "--sdists", str(folder), "--pins", str(pins), "--out", str(out)])
        == 1
    )
    assert not out.exists()


def test_a_resource_of_the_wrong_version_is_refused(release):
    folder, pins = release
    (folder / "numpy-2.1.0.tar.gz").unlink()
    sdist(folder, "numpy", "1.20.0", [])
    pins.write_text("numpy==1.20.0\nmatplotlib==3.9.0\n")
    with pytest.raises(
        homebrew.HomebrewError, match=r"requires 'numpy>=1.24', but the resource is numpy 1.20.0"
    ):
        homebrew.collect(folder, pins, fetch=no_network)


def test_a_missing_riftco_sdist_is_refused(release):
    folder, pins = release
    (folder / "riftco_core-0.1.2.tar.gz").unlink()
    with pytest.raises(
        homebrew.HomebrewError, match="riftco requires 'riftco-core>=0.1,<0.2', which no sdist"
    ):
        homebrew.collect(folder, pins, fetch=no_network)


def test_a_pin_not_held_locally_comes_from_the_index(release):
    folder, pins = release
    (folder / "matplotlib-3.9.0.tar.gz").unlink()
    sha = "ab" * 32
    page = {
        "files": [
            {
                "filename": "matplotlib-3.8.0.tar.gz",
                "url": "https://files.example/old.tar.gz",
                "hashes": {"sha256": "cd" * 32},
            },
            {
                "filename": "matplotlib-3.9.0-cp311-abi3.whl",
                "url": "https://files.example/w.whl",
                "hashes": {"sha256": sha},
            },
            {
                "filename": "matplotlib-3.9.0.tar.gz",
                "url": "https://files.example/m.tar.gz",
                "hashes": {"sha256": sha},
            },
        ]
    }
    asked = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        return json.dumps(page).encode()

    _, resources = homebrew.collect(folder, pins, fetch=fetch)
    assert asked == ["https://pypi.org/simple/matplotlib/"]
    (matplotlib,) = [r for r in resources if r.name == "matplotlib"]
    assert (matplotlib.url, matplotlib.sha256) == ("https://files.example/m.tar.gz", sha)
    pins.write_text("numpy==2.1.0\nmatplotlib==3.10.0\n")
    with pytest.raises(
        homebrew.HomebrewError, match=r"matplotlib==3.10.0: the index lists no sdist"
    ):
        homebrew.collect(folder, pins, fetch=fetch)


def test_bad_pins_and_bad_sdists_are_clear_errors(release, tmp_path):
    folder, pins = release
    pins.write_text("numpy>=2\n")
    with pytest.raises(
        homebrew.HomebrewError, match=r"resources.txt:1: expected NAME==VERSION, found 'numpy>=2'"
    ):
        homebrew.collect(folder, pins, fetch=no_network)
    pins.write_text("riftco-core==0.1.2\n")
    with pytest.raises(homebrew.HomebrewError, match="riftco-core is a riftco distribution"):
        homebrew.collect(folder, pins, fetch=no_network)
    broken = tmp_path / "broken-1.0.tar.gz"
    broken.write_bytes(b"not a tar")
    with pytest.raises(homebrew.HomebrewError, match="cannot read it as an sdist"):
        homebrew.read_sdist(broken)
    empty = tmp_path / "empty-1.0.tar.gz"
    with tarfile.open(empty, "w:gz"):
        pass
    with pytest.raises(homebrew.HomebrewError, match="expected one top-level PKG-INFO"):
        homebrew.read_sdist(empty)


def test_dynamic_requirements_are_not_walked(tmp_path):
    source = homebrew.read_sdist(sdist(tmp_path, "oldpkg", "1.0", [], dynamic=True))
    assert source.requires is None


def test_the_committed_formula_is_well_formed(capsys):
    assert homebrew.check([homebrew.FORMULA]) == 0
    said = capsys.readouterr().out
    assert ("`ruby -c` syntax OK" if HAS_RUBY else "ruby is not installed") in said


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (('  depends_on "rust" => :build\n', ""), "lacks Rust at build time"),
        (("  include Language::Python::Virtualenv\n", ""), "lacks the virtualenv helper"),
        (("    sha256 ", '    sha256 "00"\n    # '), "resource blocks"),
        (("riftco --help", "riftco"), "a test running `riftco --help`"),
    ],
)
def test_a_misshapen_formula_fails_the_check(tmp_path, capsys, edit, problem):
    text = homebrew.FORMULA.read_text()
    formula = tmp_path / "riftco.rb"
    formula.write_text(text.replace(*edit, 1))
    assert homebrew.check([formula]) == 1
    assert problem in capsys.readouterr().err


@pytest.mark.skipif(not HAS_RUBY, reason="ruby is not installed (tools/ensure_ruby.sh installs it)")
def test_ruby_finds_a_syntax_error(tmp_path, capsys):
    formula = tmp_path / "riftco.rb"
    formula.write_text(homebrew.FORMULA.read_text().replace("  end\nend\n", "  end\n"))
    assert homebrew.check([formula]) == 1
    assert "ruby -c" in capsys.readouterr().err


def test_ruby_strings_are_escaped():
    assert homebrew.ruby_string('a "b" #{c} \\') == '"a \\"b\\" \\#{c} \\\\"'
