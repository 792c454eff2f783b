"""Build every distribution's sdist and wheel into dist/ and check them as PyPI and a user would.

``make release-check`` runs this with the pinned tools of tools/requirements-release.txt.
The steps, each timed:

1. **build**: each package's sdist (``maturin sdist`` for the native ones, carrying the
   Cargo workspace's sibling path crates and ``Cargo.lock``; ``python -m build --sdist``
   for the pure ones), then its wheel built *from that sdist*, unpacked into an empty
   folder outside the repository (native: ``maturin build --zig --compatibility
   manylinux_2_17``, abi3, with only Cargo.lock's versions; pure: ``python -m build --wheel``). So every wheel in
   dist/ is proof that its sdist builds alone.
2. **twine**: ``twine check --strict`` over dist/.
3. **auditwheel**: ``auditwheel show`` on every Linux platform wheel; it must name a
   manylinux policy no newer than manylinux_2_28 (the file's own tag must agree).
4. **contents**: ``check-wheel-contents`` on every wheel; native wheels are ``cp310-abi3``,
   pure ones ``py3-none-any``, and each native wheel holds its own module's library.
5. **install**: a fresh venv whose PATH has no ``cargo`` or ``rustc`` (checked inside it);
   third-party wheels are downloaded into a folder of their own first, then ``riftco``
   (the umbrella: the command, the CPU stack and serving) is installed with no index at all (``--no-index --find-links
   dist --find-links <deps> --only-binary :all:``), so every ``riftco-*`` comes from dist/
   and nothing is compiled; the installed versions and native build ids must be dist/'s.
6. **demo**: ``riftco demo --quick`` in that venv.
7. **serve**: ``riftco serve`` on the demo's chat bundle on a free port; one
   ``POST /v1/completions`` must answer 200 with a completion; then SIGTERM.
8. **sdists**: every other distribution (backends, cajal, testing) installed the same way
   and each distribution's modules imported; ``riftco backends`` runs.

A summary (each distribution's version, wheel files, native modules and auditwheel's
platform tag, and the step timings) is printed and written to
build/release-check/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import build_wheels  # noqa: E402
import install_package  # noqa: E402

DIST = ROOT / "dist"
WORK = ROOT / "build" / "release-check"
# The newest manylinux policy a Linux wheel may need; the build itself targets 2_17.
MAX_POLICY = (2, 28)
BUILD_POLICY = "manylinux_2_17"
# What `riftco` needs for the demo and one served request.
USER_INSTALL = ("riftco",)
TOOLCHAIN = ("cargo", "rustc")


class ReleaseCheckError(Exception):
    """A release check failed: what was expected and what was found."""


# --- pure helpers (tested in tools/tests/test_release_check.py) -------------------------


_POLICY_LINE = re.compile(r"consistent\s+with\s+the\s+following\s+platform\s+tag:\s*\"([^\"]+)\"")
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_([a-z0-9_]+)$")


def auditwheel_policy(report: str) -> str:
    """The platform tag ``auditwheel show`` names (its output wraps lines anywhere)."""
    found = _POLICY_LINE.search(" ".join(report.split()))
    if found is None:
        raise ReleaseCheckError(f"auditwheel named no platform tag; it said:\n{report.strip()}")
    return found.group(1)


def check_policy(tag: str, limit: tuple[int, int] = MAX_POLICY) -> tuple[int, int]:
    """(major, minor) of a ``manylinux_X_Y_arch`` tag; refuses plain linux or a newer glibc."""
    match = _MANYLINUX.match(tag)
    if match is None:
        raise ReleaseCheckError(f"expected a manylinux_X_Y policy, auditwheel found {tag!r}")
    version = (int(match.group(1)), int(match.group(2)))
    if version > limit:
        raise ReleaseCheckError(
            f"expected manylinux_{limit[0]}_{limit[1]} or older, auditwheel found {tag!r}"
        )
    return version


def wheel_tags(wheel_name: str) -> tuple[str, str, str]:
    """(python, abi, platform) tags of a wheel file name."""
    parts = wheel_name.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6):
        raise ReleaseCheckError(f"{wheel_name} is not a wheel file name")
    return parts[-3], parts[-2], parts[-1]


def without_toolchain(path: str, names: Sequence[str] = TOOLCHAIN) -> str:
    """PATH with every folder that holds one of ``names`` (cargo, rustc) left out."""
    kept = []
    for folder in path.split(os.pathsep):
        if not folder or any(os.path.exists(os.path.join(folder, n)) for n in names):
            continue
        if any(shutil.which(n, path=folder) for n in names):
            continue
        kept.append(folder)
    return os.pathsep.join(kept)


def wheel_modules(members: Iterable[str]) -> list[str]:
    """The import names a riftco wheel provides: each folder holding a ``py.typed``."""
    modules = sorted(
        member.removesuffix("/py.typed").replace("/", ".")
        for member in members
        if member.endswith("/py.typed") and ".dist-info/" not in member
    )
    if not modules:
        raise ReleaseCheckError("expected a py.typed marking the wheel's package, found none")
    return modules


def cargo_lock_packages(lock: Path) -> set[tuple[str, str]]:
    """(name, version) of every package a Cargo.lock pins."""
    if not lock.is_file():
        raise ReleaseCheckError(f"expected the sdist to carry {lock.name}, found none")
    with open(lock, "rb") as f:
        return {(p["name"], p["version"]) for p in tomllib.load(f).get("package", [])}


def check_lock_subset(locked: set[tuple[str, str]], used: set[tuple[str, str]], where: str) -> None:
    """The build resolved nothing the repository's Cargo.lock did not pin."""
    new = sorted(used - locked)
    if new:
        shown = ", ".join(f"{n} {v}" for n, v in new)
        raise ReleaseCheckError(f"{where}: expected only Cargo.lock's versions, found {shown}")


def third_party_requirements(dist: Path, roots: Iterable[str]) -> list[str]:
    """Non-riftco requirements of ``roots`` and their riftco dependencies in ``dist``."""
    index = install_package.wheel_index(dist)
    wanted: set[str] = set()
    for root in roots:
        _, reqs = install_package.closure(root, set(), index)
        wanted.update(reqs)
    return sorted(wanted)


# --- running things ---------------------------------------------------------------------


@dataclass
class Summary:
    steps: dict[str, float] = field(default_factory=dict)
    distributions: dict[str, dict[str, object]] = field(default_factory=dict)


def run(cmd: Sequence[str | Path], **kwargs) -> subprocess.CompletedProcess[str]:
    """Run a command, echoing it; a non-zero exit is a ReleaseCheckError with its output."""
    shown = " ".join(str(c) for c in cmd)
    print(f"  $ {shown}", flush=True)
    capture = kwargs.pop("capture", False)
    result = subprocess.run(
        [str(c) for c in cmd],
        text=True,
        capture_output=capture,
        **kwargs,
    )
    if result.returncode != 0:
        tail = ((result.stdout or "") + (result.stderr or ""))[-4000:] if capture else ""
        raise ReleaseCheckError(f"{shown} exited with {result.returncode}\n{tail}")
    return result


def tool_env() -> dict[str, str]:
    """The environment for the build tools: this interpreter's folder first on PATH
    (maturin finds zig through ``python -m ziglang``)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["CARGO_TARGET_DIR"] = str(WORK / "cargo-target")
    env.pop("VIRTUAL_ENV", None)
    return env


def backend_of(package: Path) -> str:
    return build_wheels.build_backend(package)


def project_name(package: Path) -> str:
    with open(package / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["name"])


def unpack_sdist(sdist: Path, into: Path) -> Path:
    """Unpack an sdist into an empty folder; the one top folder it holds."""
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def build_package(package: Path, scratch: Path) -> tuple[Path, Path]:
    """sdist into dist/, then its wheel from the sdist unpacked in ``scratch``."""
    env = tool_env()
    before = set(DIST.glob("*.tar.gz"))
    if backend_of(package) == "maturin":
        run([sys.executable, "-m", "maturin", "sdist", "--out", DIST], cwd=package, env=env)
    else:
        run(
            [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", DIST],
            cwd=package,
            env=env,
        )
    made = sorted(set(DIST.glob("*.tar.gz")) - before)
    if len(made) != 1:
        raise ReleaseCheckError(f"{package.name}: expected one new sdist, found {made}")
    sdist = made[0]
    source = unpack_sdist(sdist, scratch)
    wheels_before = set(DIST.glob("*.whl"))
    if backend_of(package) == "maturin":
        # The sdist's Cargo.lock is the whole workspace's: cargo drops the entries its
        # crates do not use (so no --locked), and every version it keeps must be one the
        # repository locked.
        locked = cargo_lock_packages(source / "Cargo.lock")
        cmd: list[str | Path] = [sys.executable, "-m", "maturin", "build", "--release"]
        cmd += ["--out", DIST]
        if sys.platform == "linux":
            cmd += ["--zig", "--compatibility", BUILD_POLICY]
        run(cmd, cwd=source, env=env)
        check_lock_subset(locked, cargo_lock_packages(source / "Cargo.lock"), package.name)
    else:
        cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", DIST]
        run([*cmd, source], cwd=scratch, env=env)
    made = sorted(set(DIST.glob("*.whl")) - wheels_before)
    if len(made) != 1:
        raise ReleaseCheckError(f"{package.name}: expected one new wheel, found {made}")
    return sdist, made[0]


def step_build(summary: Summary, packages: list[Path]) -> None:
    shutil.rmtree(DIST, ignore_errors=True)
    DIST.mkdir(parents=True)
    for package in packages:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"riftco-sdist-{package.name}-") as scratch:
            sdist, wheel = build_package(package, Path(scratch))
        took = time.perf_counter() - start
        summary.steps[f"build {package.name}"] = round(took, 1)
        print(f"built {sdist.name} and {wheel.name} in {took:.1f} s", flush=True)


def step_twine() -> None:
    run([sys.executable, "-m", "twine", "check", "--strict", *sorted(DIST.iterdir())])


def step_auditwheel(summary: Summary) -> None:
    for wheel in sorted(DIST.glob("*.whl")):
        _, _, platform = wheel_tags(wheel.name)
        if platform == "any":
            continue
        if "linux" not in platform:
            continue  # macOS and Windows wheels come from the CI workflows, not here
        report = run([sys.executable, "-m", "auditwheel", "show", wheel], capture=True)
        tag = auditwheel_policy(report.stdout + report.stderr)
        check_policy(tag)
        if tag not in platform.split("."):
            raise ReleaseCheckError(
                f"{wheel.name}: auditwheel says {tag}, the file name says {platform}"
            )
        summary.distributions.setdefault(_dist_name(wheel), {})["auditwheel"] = tag
        print(f"  {wheel.name}: auditwheel: {tag}")


def _dist_name(wheel: Path) -> str:
    return install_package.canonical(wheel.name.split("-")[0])


def step_contents(summary: Summary, packages: list[Path]) -> None:
    run([sys.executable, "-m", "check_wheel_contents", *sorted(DIST.glob("*.whl"))])
    native = {project_name(p) for p in packages if backend_of(p) == "maturin"}
    for wheel in sorted(DIST.glob("*.whl")):
        name = _dist_name(wheel)
        python, abi, platform = wheel_tags(wheel.name)
        expected = ("cp310", "abi3") if name in native else ("py3", "none")
        if (python, abi) != expected:
            raise ReleaseCheckError(f"{wheel.name}: expected {'-'.join(expected)} tags")
        if name not in native and platform != "any":
            raise ReleaseCheckError(f"{wheel.name}: a pure package's wheel must be 'any'")
        modules = build_wheels.wheel_native_modules(wheel)
        if name in native and not modules:
            raise ReleaseCheckError(f"{wheel.name}: holds no native library")
        with zipfile.ZipFile(wheel) as zf:
            members = zf.namelist()
            meta_name = next(m for m in members if m.endswith(".dist-info/METADATA"))
            version = Parser().parsestr(zf.read(meta_name).decode())["Version"]
        summary.distributions.setdefault(name, {}).update(
            {
                "version": version,
                "wheel": wheel.name,
                "files": len(members),
                "bytes": wheel.stat().st_size,
                "modules": wheel_modules(members),
                "native": sorted(modules),
                "sdist": next((p.name for p in DIST.glob("*.tar.gz") if _sdist_of(p, name)), None),
            }
        )


def _sdist_of(sdist: Path, name: str) -> bool:
    return install_package.canonical(sdist.name.rsplit("-", 1)[0]) == name


# --- the user's venv --------------------------------------------------------------------


@dataclass
class UserVenv:
    folder: Path
    env: dict[str, str]

    @property
    def bin(self) -> Path:
        return self.folder / ("Scripts" if os.name == "nt" else "bin")

    @property
    def python(self) -> Path:
        return self.bin / ("python.exe" if os.name == "nt" else "python")

    def command(self, name: str) -> str:
        """The path of a console script the venv installed (``riftco``)."""
        found = shutil.which(name, path=str(self.bin))
        if found is None:
            raise ReleaseCheckError(f"expected the venv to hold the {name} command, found none")
        return found

    def run(self, *args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
        return run([self.python, *args], env=self.env, **kwargs)


def make_user_venv(base: Path, python: str) -> UserVenv:
    folder = base / "venv"
    run([python, "-m", "venv", folder])
    bin_dir = folder / ("Scripts" if os.name == "nt" else "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CARGO", "RUSTUP", "PIP_", "PYTHON", "MATURIN", "VIRTUAL_ENV"))
    }
    env["PATH"] = os.pathsep.join([str(bin_dir), without_toolchain(os.environ.get("PATH", ""))])
    env["VIRTUAL_ENV"] = str(folder)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    venv = UserVenv(folder, env)
    probe = (
        "import shutil, sys; found = {n: shutil.which(n) for n in ('cargo', 'rustc')}; "
        "print(found); sys.exit(any(found.values()))"
    )
    venv.run("-c", probe)
    return venv


def install_from_dist(venv: UserVenv, deps: Path, names: Sequence[str]) -> None:
    """Install ``names`` with no index: riftco-* from dist/, the rest from ``deps``."""
    env = dict(venv.env, PIP_NO_INDEX="1")
    cmd = ["-m", "pip", "install", "--quiet", "--no-index", "--only-binary", ":all:"]
    cmd += ["--find-links", str(DIST), "--find-links", str(deps), *names]
    run([venv.python, *cmd], env=env)


def check_installed(venv: UserVenv, names: Iterable[str]) -> None:
    """Each installed riftco-* is dist/'s version, imported from the venv, with dist/'s build id."""
    expected: dict[str, str] = {}
    for wheel in DIST.glob("*.whl"):
        expected[_dist_name(wheel)] = wheel.name.split("-")[1]
    ids = build_wheels.native_build_ids(DIST)
    code = (
        "import importlib, importlib.metadata as md, json, sys\n"
        "names = json.loads(sys.argv[1]); ids = json.loads(sys.argv[2]); out = {}\n"
        "for d in md.distributions():\n"
        "    n = d.metadata['Name'].lower()\n"
        "    if n.startswith('riftco'): out[n] = d.version\n"
        "built = {}\n"
        "for dist, modules in ids.items():\n"
        "    if dist not in out: continue\n"
        "    for module in modules:\n"
        "        m = importlib.import_module(module)\n"
        "        if not m.__file__.startswith(sys.prefix):\n"
        "            sys.exit(f'{module} imported from {m.__file__}, not the venv')\n"
        "        built[module] = m.BUILD_ID_MARKER.rsplit(':', 1)[1]\n"
        "print(json.dumps({'versions': out, 'built': built}))\n"
    )
    result = venv.run("-c", code, json.dumps(sorted(names)), json.dumps(ids), capture=True)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for dist, version in found["versions"].items():
        if expected.get(dist) != version:
            raise ReleaseCheckError(
                f"{dist} {version} is installed; dist/ holds {expected.get(dist, 'nothing')}"
            )
    for modules in ids.values():
        for module, build_id in modules.items():
            if module in found["built"] and found["built"][module] != build_id:
                raise ReleaseCheckError(
                    f"{module}: the venv's library has build id {found['built'][module]}, "
                    f"dist/'s wheel {build_id}"
                )


def download_deps(venv: UserVenv, deps: Path, roots: Iterable[str]) -> None:
    """Third-party wheels for ``roots`` from the index, into a folder of their own."""
    reqs = third_party_requirements(DIST, roots)
    if any(install_package.canonical(r).startswith("riftco") for r in reqs):
        raise ReleaseCheckError(f"a riftco requirement slipped into the third-party set: {reqs}")
    deps.mkdir(parents=True, exist_ok=True)
    cmd = ["-m", "pip", "download", "--quiet", "--only-binary", ":all:", "--dest", str(deps)]
    venv.run(*cmd, *reqs)
    strays = [p.name for p in deps.iterdir() if p.name.lower().startswith("riftco")]
    if strays:
        raise ReleaseCheckError(f"the third-party folder holds riftco files: {strays}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def serve_once(venv: UserVenv, bundle: Path, cwd: Path, deadline_s: float = 180.0) -> dict:
    """Start `riftco serve`, wait for /health, POST one completion, stop it."""
    port = free_port()
    log = (cwd / "serve.log").open("w")
    cmd = [venv.command("riftco"), "serve", str(bundle), "--port", str(port), "--threads", "2"]
    print(f"  $ {' '.join(cmd)}", flush=True)
    server = subprocess.Popen(cmd, env=venv.env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + deadline_s
        while True:
            if server.poll() is not None:
                raise ReleaseCheckError(f"riftco serve exited with {server.returncode} early")
            try:
                status, _ = _get(f"{base}/health", timeout=2.0)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > end:
                raise ReleaseCheckError(f"riftco serve: no healthy /health in {deadline_s:.0f} s")
            time.sleep(0.25)
        status, body = _get(f"{base}/v1/models")
        model = json.loads(body)["data"][0]["id"]
        payload = {"model": model, "prompt": "The while statement", "max_tokens": 8}
        request = urllib.request.Request(
            f"{base}/v1/completions",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        if status != 200:
            raise ReleaseCheckError(f"POST /v1/completions: expected 200, found {status}: {body!r}")
        answer = json.loads(body)
        text = answer["choices"][0]["text"]
        if not isinstance(text, str):
            raise ReleaseCheckError(f"POST /v1/completions: no completion text in {answer}")
        print(f"  POST /v1/completions -> 200, {answer.get('usage')}, text {text!r}")
        return answer
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=40)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        log.close()


def step_user(summary: Summary, python: str, keep: bool) -> None:
    base = Path(tempfile.mkdtemp(prefix="riftco-release-user-"))
    try:
        start = time.perf_counter()
        venv = make_user_venv(base, python)
        deps = WORK / "deps"
        all_names = sorted({_dist_name(w) for w in DIST.glob("*.whl")})
        download_deps(venv, deps, all_names)
        install_from_dist(venv, deps, USER_INSTALL)
        check_installed(venv, USER_INSTALL)
        summary.steps["install riftco (no Rust, no index)"] = round(time.perf_counter() - start, 1)

        start = time.perf_counter()
        out = base / "demo"
        riftco = venv.command("riftco")
        run([riftco, "demo", "--quick", "--out", out], env=venv.env, cwd=base)
        bundle = out / "chat.rift"
        if not bundle.is_file():
            raise ReleaseCheckError(f"riftco demo --quick wrote no {bundle}")
        summary.steps["riftco demo --quick"] = round(time.perf_counter() - start, 1)

        start = time.perf_counter()
        serve_once(venv, bundle, base)
        summary.steps["riftco serve, one request"] = round(time.perf_counter() - start, 1)

        start = time.perf_counter()
        install_from_dist(venv, deps, all_names)
        check_installed(venv, all_names)
        modules = sorted(
            {m for d in summary.distributions.values() for m in d.get("modules", [])}  # type: ignore[attr-defined]
        )
        venv.run("-c", f"import importlib; [importlib.import_module(m) for m in {modules!r}]")
        run([riftco, "backends"], env=venv.env, cwd=base)
        summary.steps["install and import every distribution"] = round(
            time.perf_counter() - start, 1
        )
    finally:
        if keep:
            print(f"kept the user venv and demo in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def print_summary(summary: Summary) -> None:
    print("\ndistribution            version  files  native modules                  platform")
    for name, info in sorted(summary.distributions.items()):
        native = ", ".join(info.get("native", [])) or "-"  # type: ignore[arg-type]
        tag = info.get("auditwheel") or wheel_tags(str(info["wheel"]))[2]
        print(f"{name:<23} {info['version']:<8} {info['files']:>5}  {native:<31} {tag}")
    print("\nstep timings (s):")
    for step, seconds in summary.steps.items():
        print(f"  {seconds:8.1f}  {step}")


def resolve_tag(tag: str, packages: Iterable[Path]) -> dict[str, str]:
    """A release tag (``riftco-nn-v0.2.0``) -> the distribution, its folder, version and
    the file-name prefix of its sdist and wheels; the tag must name a package's current
    version."""
    match = re.fullmatch(r"(riftco(?:-[a-z0-9]+)*)-v([0-9][0-9A-Za-z.+-]*)", tag)
    if match is None:
        raise ReleaseCheckError(f"expected a tag like riftco-nn-v0.2.0, found {tag!r}")
    dist, version = match.groups()
    for package in packages:
        with open(package / "pyproject.toml", "rb") as f:
            project = tomllib.load(f)["project"]
        if project["name"] != dist:
            continue
        if project["version"] != version:
            raise ReleaseCheckError(
                f"tag {tag} names {dist} {version}; packages/{package.name} is {project['version']}"
            )
        prefix = f"{dist.replace('-', '_')}-{version}"
        return {"dist": dist, "folder": package.name, "version": version, "prefix": prefix}
    raise ReleaseCheckError(f"tag {tag}: no package under packages/ is named {dist}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--build-only",
        action="store_true",
        help="build and check the files (twine, auditwheel, contents); no venv, demo or serve",
    )
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="no build: check the wheels already in dist/ and run the venv steps (CI platforms)",
    )
    mode.add_argument(
        "--resolve-tag",
        metavar="TAG",
        help="print dist=, folder=, version=, prefix= for a release tag (riftco-nn-v0.2.0)",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter of the user's venv (default: this one); abi3 wheels fit any >= 3.10",
    )
    parser.add_argument("--keep", action="store_true", help="keep the user venv and demo run")
    parser.add_argument("packages", nargs="*", help="package folders to build (default: all)")
    args = parser.parse_args(argv)
    packages = build_wheels.package_dirs()
    if args.packages:
        unknown = set(args.packages) - {p.name for p in packages}
        if unknown:
            parser.error(f"no such package folder: {sorted(unknown)}")
        packages = [p for p in packages if p.name in args.packages]
    WORK.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    started = time.perf_counter()
    steps: list[tuple[str, Callable[[], None]]] = []
    if not args.smoke:
        steps += [
            ("twine check", step_twine),
            ("auditwheel show", lambda: step_auditwheel(summary)),
        ]
    steps.append(("check-wheel-contents", lambda: step_contents(summary, packages)))
    if not args.build_only:
        steps.append(("user venv", lambda: step_user(summary, args.python, args.keep)))
    try:
        if args.resolve_tag:
            for key, value in resolve_tag(args.resolve_tag, packages).items():
                print(f"{key}={value}")
            return 0
        if not args.smoke:
            step_build(summary, packages)
        for name, step in steps:
            print(f"== {name}", flush=True)
            start = time.perf_counter()
            step()
            summary.steps[name] = round(time.perf_counter() - start, 1)
    except ReleaseCheckError as exc:
        print(f"release-check: {exc}", file=sys.stderr)
        return 1
    summary.steps["total"] = round(time.perf_counter() - started, 1)
    print_summary(summary)
    out = WORK / "summary.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary.__dict__, indent=2, sort_keys=True))
    os.replace(tmp, out)
    print(f"summary in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
