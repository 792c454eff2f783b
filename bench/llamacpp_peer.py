"""llama.cpp as a benchmark peer: an opt-in build from the vendored source of the
``llama-cpp-python`` sdist into a cache folder, GGUF files at each weight type, and
``llama-bench`` runs parsed from its JSON output.

The build is done once (``--build-peer``): ``pip download`` of the sdist, then CMake
with Ninja (both from PyPI when missing) for the targets llama-bench, llama-server
and llama-quantize. Later runs find the binaries in the cache folder and never
rebuild. Nothing here is imported by the packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"
TARGETS = ("llama-bench", "llama-server", "llama-quantize")
DEFAULT_CACHE = Path(
    os.environ.get("RIFTCO_LLAMACPP_DIR", Path.home() / ".cache" / "riftco" / "llamacpp")
)


def binary(cache: Path, name: str) -> Path | None:
    path = cache / "bin" / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def available(cache: Path) -> bool:
    return all(binary(cache, t) for t in ("llama-bench", "llama-quantize"))


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    scripts = Path(sys.executable).parent
    if not (scripts / name).exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", name], check=True)
    return str(scripts / name)


def build(cache: Path, jobs: int = 2) -> None:
    """Build llama.cpp into ``cache/bin`` (a few minutes on two cores)."""
    if available(cache):
        return
    cmake, ninja = _tool("cmake"), _tool("ninja")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        work = Path(tmp)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                # The sdist only (its build backend may come as wheels).
                "--no-binary",
                "llama-cpp-python",
                SDIST,
                "-d",
                str(work),
            ],
            check=True,
        )
        archive = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        out = work / "build"
        subprocess.run(
            [
                cmake,
                "-S",
                str(source),
                "-B",
                str(out),
                "-G",
                "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={ninja}",
                "-DCMAKE_BUILD_TYPE=Release",
                "-DGGML_NATIVE=ON",
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_OPENSSL=OFF",
                "-DBUILD_SHARED_LIBS=OFF",
            ],
            check=True,
        )
        subprocess.run(
            [cmake, "--build", str(out), "-j", str(jobs), "--target", *TARGETS], check=True
        )
        (cache / "bin").mkdir(exist_ok=True)
        for target in TARGETS:
            shutil.copy2(out / "bin" / target, cache / "bin" / target)


def quantize(cache: Path, src: Path, dst: Path, kind: str) -> Path:
    """``llama-quantize src dst KIND`` (kept when ``dst`` already exists)."""
    if not dst.exists():
        subprocess.run(
            [str(binary(cache, "llama-quantize")), str(src), str(dst), kind.upper()],
            check=True,
            capture_output=True,
        )
    return dst


def bench(cache: Path, model: Path, threads: int, *, prompt: int, gen: int, depth: int = 0) -> dict:
    """One llama-bench run (one repetition): ``{"prefill": tok/s, "decode": tok/s}``."""
    command = [
        str(binary(cache, "llama-bench")),
        "-m",
        str(model),
        "-t",
        str(threads),
        "-p",
        str(prompt),
        "-n",
        str(gen),
        "-r",
        "1",
        "-o",
        "json",
    ]
    if depth:
        command += ["-d", str(depth)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    figures = {}
    for row in json.loads(done.stdout):
        if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
            figures["prefill"] = float(row["avg_ts"])
        elif row.get("n_gen", 0) > 0 and row.get("n_prompt", 0) == 0:
            figures["decode"] = float(row["avg_ts"])
    return figures


def start_server(
    cache: Path, model: Path, port: int, *, threads: int, parallel: int, context: int
) -> subprocess.Popen:
    """``llama-server`` on 127.0.0.1:``port`` with ``parallel`` slots of ``context``
    positions each (its ``-c`` is the total); the caller waits for ``/health``."""
    command = [
        str(binary(cache, "llama-server")),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(threads),
        "--parallel",
        str(parallel),
        "-c",
        str(context * parallel),
        "--log-disable",
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
