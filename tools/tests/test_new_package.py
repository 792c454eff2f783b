"""new_package.py: packages made from the templates, wired into Cargo and tox; and the
repository's own wiring (every package has its test env, every crate its workspace entry)."""

from __future__ import annotations

import configparser
import re
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import new_package

ROOT = new_package.ROOT


@pytest.fixture
def repo(tmp_path):
    """A copy of what new_package reads: the templates, tox.ini, Cargo.toml, pyproject.toml,
    ruff.toml, mkdocs.yml and the backend API version (set ahead of the template's, to see it
    substituted)."""
    shutil.copytree(ROOT / "templates", tmp_path / "templates")
    for name in ("tox.ini", "Cargo.toml", "pyproject.toml", "ruff.toml", "mkdocs.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    api = tmp_path / "packages/tensor/src/riftco/tensor/backend.py"
    api.parent.mkdir(parents=True)
    api.write_text("BACKEND_API_VERSION = (1, 99)\n")
    return tmp_path


def tox_envs(text: str) -> tuple[list[str], list[str], dict[str, str]]:
    """(env_list, the generated envs' factors, factor -> TOX_PACKAGE) of a tox.ini."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(text)
    env_list = [e.strip() for e in ini["tox"]["env_list"].replace("\n", " ").split(",")]
    (section,) = [s for s in ini.sections() if s.startswith("testenv:test-{")]
    factors = section[len("testenv:test-{") : -1].split(",")
    folders = dict(re.findall(r"^([\w-]+): TOX_PACKAGE = ([\w-]+)$", ini[section]["set_env"], re.M))
    return env_list, factors, folders


def mypy_path(text: str) -> list[str]:
    return tomllib.loads(text)["tool"]["mypy"]["mypy_path"]


def ruff_namespaces(text: str) -> list[str]:
    return tomllib.loads(text)["namespace-packages"]


def stubs_env(text: str) -> tuple[list[str], list[str]]:
    """(the distributions tox's stubs env installs, the modules its stubtest checks)."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(text)
    section = ini["testenv:stubs"]
    installed = section["commands_pre"].split()[2:]  # python tools/install_package.py ...
    checked = section["commands"].split()[3:]  # python -m mypy.stubtest ...
    return installed, checked


def wiring_problems(root: Path) -> list[str]:
    """What a package under root/packages lacks outside its own folder: its tox test env,
    mypy's path, ruff's namespace roots, its crates in the Cargo workspace and (a native
    package) the stubs env."""
    env_list, factors, folders = tox_envs((root / "tox.ini").read_text())
    members = set(tomllib.loads((root / "Cargo.toml").read_text())["workspace"]["members"])
    checked = mypy_path((root / "pyproject.toml").read_text())
    namespaces = set(ruff_namespaces((root / "ruff.toml").read_text()))
    installed, stubtested = stubs_env((root / "tox.ini").read_text())
    problems = []
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        package = pyproject.parent
        folder = package.name
        if (
            folder not in factors
            or folders.get(folder) != folder
            or f"test-{folder}" not in env_list
        ):
            problems.append(f"{folder}: no test-{folder} env in tox.ini")
        if f"packages/{folder}/src" not in checked:
            problems.append(f"{folder}: not in mypy_path")
        for namespace in ("riftco", "riftco/backends"):
            if (package / "src" / namespace).is_dir() and not (
                package / "src" / namespace / "__init__.py"
            ).exists():
                if f"packages/{folder}/src/{namespace}" not in namespaces:
                    problems.append(f"{folder}: src/{namespace} not in ruff's namespace-packages")
        for crate in package.glob("*/Cargo.toml"):
            if f"packages/{folder}/{crate.parent.name}" not in members:
                problems.append(f"{folder}: crate {crate.parent.name} not in the workspace")
        if (package / "native" / "Cargo.toml").is_file():
            project = tomllib.loads(pyproject.read_text())
            module = project["tool"]["maturin"]["module-name"]
            if project["project"]["name"] not in installed or module not in stubtested:
                problems.append(f"{folder}: {module} not in the stubs env")
    if set(factors) != set(folders):
        problems.append(f"tox factors {sorted(factors)} and TOX_PACKAGE lines disagree")
    return problems


def docs_nav(repo: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The entries mkdocs.yml's "Packages" and "API reference" sections gained over the
    repository's own (the page check in docs/hooks.py fails a build without them)."""

    def sections(text: str) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        title = ""
        for line in text.splitlines():
            if m := re.fullmatch(r"  - ([^:]+):", line):
                title = m.group(1)
            elif m := re.fullmatch(r"      - ([^:]+): (\S+)", line):
                found.setdefault(title, {})[m.group(1)] = m.group(2)
        return found

    before = sections((ROOT / "mkdocs.yml").read_text())
    after = sections((repo / "mkdocs.yml").read_text())
    new = [
        {k: v for k, v in after[t].items() if k not in before[t]}
        for t in ("Packages", "API reference")
    ]
    return new[0], new[1]


def every_file(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


def test_a_pure_python_package(repo, capsys):
    cargo = (repo / "Cargo.toml").read_text()
    assert new_package.main(["--root", str(repo), "widgets"]) == 0
    assert "tox -e test-widgets" in capsys.readouterr().out
    dest = repo / "packages" / "widgets"
    files = every_file(dest)
    assert set(files) == {
        "CHANGELOG.md",
        "README.md",
        "pyproject.toml",
        "src/riftco/widgets/__init__.py",
        "src/riftco/widgets/py.typed",
        "tests/test_import.py",
    }
    assert tomllib.loads(files["pyproject.toml"])["project"]["name"] == "riftco-widgets"
    assert "import riftco.widgets" in files["tests/test_import.py"]
    assert not any("NAME" in text for text in files.values())
    env_list, factors, folders = tox_envs((repo / "tox.ini").read_text())
    assert env_list[-1] == "test-widgets" and factors[-1] == "widgets"
    assert folders["widgets"] == "widgets"
    assert mypy_path((repo / "pyproject.toml").read_text())[-1] == "packages/widgets/src"
    assert (repo / "Cargo.toml").read_text() == cargo
    assert docs_nav(repo) == (
        {"riftco-widgets": "packages/widgets/README.md"},
        {"riftco.widgets": "reference/widgets.md"},
    )


def test_a_native_backend(repo):
    assert new_package.main(["--root", str(repo), "--native", "my_dev"]) == 0
    dest = repo / "packages" / "backend-my_dev"
    files = every_file(dest)
    package = "src/riftco/backends/my_dev"
    assert {
        "pyproject.toml",
        "README.md",
        "kernels/Cargo.toml",
        "kernels/src/lib.rs",
        "native/Cargo.toml",
        "native/build.rs",
        "native/src/lib.rs",
        f"{package}/__init__.py",
        f"{package}/backend.py",
        f"{package}/_native.pyi",
        f"{package}/py.typed",
        f"{package}/device.py",
        f"{package}/programs.py",
        f"{package}/storage.py",
        "tests/conftest.py",
        "tests/test_plugin.py",
        "tests/test_shared_suite.py",
        "tests/test_on_emulator.py",
        "tests/emulator/my_dev_emulation.py",
        "tests/device/check_model.py",
    } <= set(files)
    assert not any("NAME" in t or "PLUGINCLASS" in t for t in files.values())
    project = tomllib.loads(files["pyproject.toml"])
    assert project["project"]["name"] == "riftco-backend-my_dev"
    assert project["project"]["entry-points"]["riftco.backends"] == {
        "my_dev": "riftco.backends.my_dev:create_backend"
    }
    assert project["tool"]["maturin"]["module-name"] == "riftco.backends.my_dev._native"
    binding = tomllib.loads(files["native/Cargo.toml"])
    assert binding["lib"]["name"] == "riftco_backend_my_dev_native"
    assert "riftco-backend-my_dev-kernels" in binding["dependencies"]
    assert binding["build-dependencies"]["riftco-build-id"]["path"] == "../../../tools/build-id"
    assert (
        'emit("riftco.backends.my_dev._native", &["src", "../kernels/src"])'
        in files["native/build.rs"]
    )
    assert "use riftco_backend_my_dev_kernels as kernels;" in files["native/src/lib.rs"]
    assert "pyo3" not in files["kernels/Cargo.toml"]
    backend = files[f"{package}/backend.py"]
    assert "class MyDevBackend(Backend):" in backend and 'name = "my_dev"' in backend
    assert "API_VERSION = (1, 99)" in backend  # riftco-tensor's, not the template's
    for path, text in files.items():
        if path.endswith(".py"):
            compile(text, path, "exec")
    # The package's own modules are imported by their full name.
    for path in (f"{package}/__init__.py", f"{package}/backend.py"):
        imported = re.findall(r"^from ([\w.]+) import", files[path], re.M)
        assert all(m in ("__future__",) or m.startswith("riftco.") for m in imported), path
        assert "riftco.backends.my_dev" in imported, path
    members = tomllib.loads((repo / "Cargo.toml").read_text())["workspace"]["members"]
    crates = ["packages/backend-my_dev/kernels", "packages/backend-my_dev/native"]
    at = members.index(crates[0])
    # After the other packages' crates, before the shared tools/ crates.
    assert members[at : at + 2] == crates
    assert members[at + 2 :] and all(m.startswith("tools/") for m in members[at + 2 :])
    env_list, factors, folders = tox_envs((repo / "tox.ini").read_text())
    assert "test-backend-my_dev" in env_list and factors[-1] == "backend-my_dev"
    assert folders["backend-my_dev"] == "backend-my_dev"
    installed, stubtested = stubs_env((repo / "tox.ini").read_text())
    assert installed[-1] == "riftco-backend-my_dev"
    assert stubtested[-1] == "riftco.backends.my_dev._native"
    namespaces = ruff_namespaces((repo / "ruff.toml").read_text())
    assert "packages/backend-my_dev/src/riftco/backends" in namespaces
    assert namespaces == sorted(namespaces)
    assert docs_nav(repo) == (
        {"riftco-backend-my_dev": "packages/backend-my_dev/README.md"},
        {"riftco.backends.my_dev": "reference/backend-my_dev.md"},
    )


def test_a_fifth_backend_from_the_template_needs_no_edit_outside_its_folder(repo):
    """The template made into a package in a copy of the repository's wiring: every list
    outside the new folder already names it, and its code reaches riftco-tensor through
    the plugin face only (and riftco.tensor's public top level, in tests)."""
    assert new_package.main(["--root", str(repo), "--native", "rocm"]) == 0
    assert wiring_problems(repo) == []
    dest = repo / "packages" / "backend-rocm"
    for path in dest.rglob("*.py"):
        text = path.read_text()
        modules = re.findall(r"^\s*(?:from|import) (riftco\.tensor[\w.]*)", text, re.M)
        allowed = {"riftco.tensor.plugin"} | ({"riftco.tensor"} if "tests" in path.parts else set())
        assert set(modules) <= allowed, (path, modules)
        assert "NAME" not in text and "PLUGINCLASS" not in text, path
    binding = (dest / "native" / "src" / "lib.rs").read_text()
    assert "riftco_native_call::detached" in binding and "catch_unwind" not in binding
    assert (
        "riftco-native-call"
        in tomllib.loads((dest / "native" / "Cargo.toml").read_text())["dependencies"]
    )


@pytest.mark.parametrize("name", ["Widgets", "1x", "class", "a-b", ""])
def test_a_bad_name_writes_nothing(repo, name, capsys):
    before = every_file(repo)
    assert new_package.main(["--root", str(repo), "--native", name]) == 1
    assert "is not a package name" in capsys.readouterr().err
    assert every_file(repo) == before


def test_an_existing_package_or_an_unexpected_tox_ini_writes_nothing(repo, capsys):
    assert new_package.main(["--root", str(repo), "--native", "dev"]) == 0
    before = every_file(repo)
    assert new_package.main(["--root", str(repo), "--native", "dev"]) == 1
    assert "already exists" in capsys.readouterr().err
    (repo / "tox.ini").write_text("[tox]\nenv_list =\n    lint\n")
    before = every_file(repo)
    assert new_package.main(["--root", str(repo), "other"]) == 1
    assert "no generated [testenv:test-{...}] section" in capsys.readouterr().err
    assert every_file(repo) == before and not (repo / "packages" / "other").exists()


def test_every_package_of_the_repository_has_its_test_env_and_crates():
    assert wiring_problems(ROOT) == []
