"""The cuda backend's own ops and kernels, run on the host (tests only).

``EmulatedDevice`` stands in for ``_native.Device``: buffers are numpy memory,
kernels are the package's CUDA C sources compiled by the host C++ compiler over
``shim.h`` (threads and a barrier per block), and ``gemm`` follows cuBLAS's
column-major contract with numpy. Everything above the device -- the
``CudaBackend`` ops, their launch shapes and arguments, the kernels' arithmetic
and indexing -- is the code that runs on a GPU. What it cannot show: real
memory-model races, timing, cuBLAS itself, NVRTC/driver loading.

Loaded as a pytest plugin (``-p cuda_emulation``), it registers the backend
``cudaemu`` before the shared suite's ``backend`` fixture is built.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from importlib.metadata import EntryPoint
from pathlib import Path

import ml_dtypes
import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.backend import CudaBackend
from riftco.backends.cuda.errors import CudaError
from riftco.tensor.plugin import ENTRY_POINT_GROUP, BackendUnavailable
from riftco.testing.discovery import add_entry_points

HERE = Path(__file__).resolve().parent
CXX = os.environ.get("CXX", "g++")
#: Threads per block and blocks per axis of an emulated launch (kernels loop over the rest).
BLOCK, TILE, MAX_GRID = 16, 16, 3
KERNEL = re.compile(r'extern "C" EMU_GLOBAL void (\w+)\s*\(([^)]*)\)')
CACHE = Path(
    os.environ.get("RIFTCO_CUDA_EMU_CACHE", Path(tempfile.gettempdir()) / "riftco-cuda-emu")
)


def available() -> str | None:
    """None when the emulation can run, else why not."""
    return None if shutil.which(CXX) else f"no C++ compiler ({CXX}) to build the host emulation"


def _wrappers(preprocessed: str) -> str:
    lines = []
    for name, params in KERNEL.findall(preprocessed):
        unpacked = []
        for i, param in enumerate(p.strip() for p in params.split(",") if p.strip()):
            ptype = re.sub(r"\s*\b\w+\s*$", "", param)  # drop the parameter's name
            unpacked.append(f"*({ptype}*)args[{i}]")
        lines.append(
            f'extern "C" void emu_{name}(void** args) {{ {name}({", ".join(unpacked)}); }}'
        )
    return "\n".join(lines)


_libraries: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def library(module: str) -> ctypes.CDLL:
    with _lock:
        if module in _libraries:
            return _libraries[module]
        text = _native.program_text(module)
        shim = (HERE / "shim.h").read_text()
        runtime = (HERE / "runtime.cpp").read_text()
        key = hashlib.sha256((shim + runtime + text).encode()).hexdigest()[:16]
        CACHE.mkdir(parents=True, exist_ok=True)
        so = CACHE / f"{module}-{key}.so"
        if not so.exists():
            work = Path(tempfile.mkdtemp(dir=CACHE))
            (work / "shim.h").write_text(shim)
            source = work / f"{module}.cpp"
            source.write_text('#include "shim.h"\n' + text)
            # Preprocessed once only to find the kernels (macros make some of them).
            pre = subprocess.run(
                [CXX, "-std=c++17", "-E", "-P", "-D__global__=EMU_GLOBAL", str(source)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            full = work / f"{module}_full.cpp"
            body = runtime.replace("struct emu_dim3 { unsigned int x, y, z; };\n", "", 1)
            full.write_text(source.read_text() + "\n" + _wrappers(pre) + "\n" + body)
            out = work / "lib.so"
            subprocess.run(
                [
                    CXX,
                    "-std=c++17",
                    "-O1",
                    "-shared",
                    "-fPIC",
                    "-pthread",
                    "-w",
                    str(full),
                    "-o",
                    str(out),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            os.replace(out, so)
        lib = ctypes.CDLL(str(so))
        lib.emu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint] * 4
        _libraries[module] = lib
        return lib


class EmulatedBuffer:
    """Device memory stand-in: numpy bytes with an address."""

    def __init__(self, nbytes: int, dtype: str):
        self.array = np.zeros(max(nbytes, 8), dtype=np.uint8)
        self.nbytes, self.dtype = nbytes, dtype

    @property
    def ptr(self) -> int:
        return int(self.array.ctypes.data)


class EmulatedGraph:
    """A captured launch list (the kernel nodes of a CUDA graph, in stream order)."""

    def __init__(self, nodes: list) -> None:
        self.nodes = nodes


class EmulatedEvent:
    """A CUDA event: the emulation runs each call as it is made, so the host's clock
    when it is recorded is the stream's."""

    def __init__(self) -> None:
        self.seconds = time.perf_counter()

    def elapsed_ms(self, later: EmulatedEvent) -> float:
        return (later.seconds - self.seconds) * 1e3


class EmulatedDevice:
    ordinal, name, arch, total_memory = 0, "host emulation", "sm_90", 1 << 30

    def __init__(self) -> None:
        self.launches = 0
        self.graph_launches = 0
        self._capture: list | None = None

    # CUDA graphs: launches between begin_capture and end_capture are recorded, not run
    # (as stream capture does); graph_launch replays the recorded kernels in order.
    def begin_capture(self) -> None:
        if self._capture is not None:
            raise CudaError("a stream capture is already under way")
        self._capture = []

    def end_capture(self) -> EmulatedGraph:
        if self._capture is None:
            raise CudaError("end_capture without begin_capture")
        graph, self._capture = EmulatedGraph(self._capture), None
        return graph

    def graph_launch(self, graph: EmulatedGraph) -> None:
        for call in graph.nodes:
            self._run(*call)
        self.graph_launches += 1

    def alloc(self, nbytes: int, dtype: str) -> EmulatedBuffer:
        buf = EmulatedBuffer(nbytes, dtype)
        buf.array[:] = 0xA5  # garbage, as cuMemAlloc gives
        return buf

    def upload(self, data: np.ndarray, dtype: str) -> EmulatedBuffer:
        buf = EmulatedBuffer(data.size, dtype)
        buf.array[: data.size] = data
        return buf

    def download(self, src: EmulatedBuffer, offset: int, nbytes: int) -> np.ndarray:
        if offset + nbytes > src.nbytes:
            raise CudaError(f"reading {nbytes} bytes at {offset} of a {src.nbytes}-byte buffer")
        return src.array[offset : offset + nbytes].copy()

    def write(self, dst: EmulatedBuffer, offset: int, data: np.ndarray) -> None:
        if offset + data.size > dst.nbytes:
            raise CudaError(f"writing {data.size} bytes at {offset} of a {dst.nbytes}-byte buffer")
        dst.array[offset : offset + data.size] = data

    def copy(self, dst, dst_offset, src, src_offset, nbytes) -> None:
        assert dst_offset + nbytes <= dst.nbytes and src_offset + nbytes <= src.nbytes
        dst.array[dst_offset : dst_offset + nbytes] = src.array[src_offset : src_offset + nbytes]

    def zero(self, dst) -> None:
        dst.array[:] = 0

    def synchronize(self) -> None:
        pass

    def record_event(self) -> EmulatedEvent:
        return EmulatedEvent()

    def launch(self, module, kernel, grid, block, shared_bytes, args) -> None:
        if self._capture is not None:
            self._capture.append((module, kernel, grid, block, shared_bytes, list(args)))
            return
        self._run(module, kernel, grid, block, shared_bytes, args)

    def _run(self, module, kernel, grid, block, shared_bytes, args) -> None:
        if 0 in grid:
            return
        keep = []
        for a in args:
            if a is None:
                keep.append(ctypes.c_uint64(0))
            elif isinstance(a, EmulatedBuffer):
                keep.append(ctypes.c_uint64(a.ptr))
            elif isinstance(a, float):
                keep.append(ctypes.c_float(a))
            elif isinstance(a, (tuple, list)):
                keep.append((ctypes.c_int64 * len(a))(*a))
            elif isinstance(a, int):
                keep.append(ctypes.c_uint64(a) if a > (1 << 63) - 1 else ctypes.c_int64(a))
            else:
                raise CudaError(f"a kernel argument of type {type(a).__name__}")
        pointers = (ctypes.c_void_p * max(1, len(keep)))(*[ctypes.addressof(k) for k in keep])
        lib = library(module)
        fn = getattr(lib, f"emu_{kernel}")
        g = [min(int(x), MAX_GRID) for x in grid]
        lib.emu_launch(ctypes.cast(fn, ctypes.c_void_p), pointers, g[0], g[1], g[2], int(block[0]))
        self.launches += 1

    def gemm(self, element, m, n, k, a, b, c, batch, compute="float32", accumulate=False) -> None:
        """cuBLAS's strided-batched product: float64 sums of the (exact) products,
        rounded once to float32. ``compute="bfloat16"`` (``CUBLAS_COMPUTE_32F_FAST_16BF``)
        rounds float32 operands to bfloat16 (to nearest, ties to even) first: then the
        bits equal those of bfloat16 operands. ``accumulate`` (``beta = 1``) adds the
        rounded product to what ``c`` holds, a float32 add."""
        if compute not in ("float32", "bfloat16"):
            raise CudaError(f"gemm: no compute type {compute!r}")
        if compute == "bfloat16" and element != "float32":
            raise CudaError(f"gemm: bfloat16 products take float32 operands, found {element}")

        def matrices(op, rows, cols, size):
            buf, offset, ld, stride, transpose = op
            dtype = np.float32 if size == 4 else np.uint16
            flat = buf.array[: buf.nbytes].view(dtype)
            stored = (cols, rows) if transpose else (rows, cols)
            out = []
            for i in range(batch):
                first = offset + i * stride
                mat = np.lib.stride_tricks.as_strided(
                    flat[first:], shape=stored, strides=(size, ld * size)
                )
                if size == 4 and compute == "bfloat16":
                    mat = mat.astype(ml_dtypes.bfloat16).astype(np.float64)
                elif size == 4:
                    mat = mat.astype(np.float64)
                else:
                    mat = (mat.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
                out.append(mat.T if transpose else mat)
            return out

        size = 4 if element == "float32" else 2
        for i, (x, y) in enumerate(zip(matrices(a, m, k, size), matrices(b, k, n, size))):
            product = (x @ y).astype(np.float32)
            buf, offset, ld, stride, _ = c
            flat = buf.array[: buf.nbytes].view(np.float32)
            first = offset + i * stride
            view = np.lib.stride_tricks.as_strided(flat[first:], shape=(m, n), strides=(4, ld * 4))
            view[...] = view + product if accumulate else product

    def gemm_epilogue(
        self, element, m, n, k, a, b, c, epilogue, bias=None, compute="float32"
    ) -> None:
        """cuBLASLt's product with an epilogue, as ``gemm`` computes the product:
        ``bias`` adds the float32 bias to the float32 result (one rounding each, as a
        product then an add); ``bgrada`` / ``bgradb`` write the column sums of op(A)
        rows / op(B) columns over k, summed in float64 and rounded once. ``compute``
        bfloat16: float32 operands multiplied as their bfloat16 roundings (no bias
        gradient: what cuBLASLt sums there is not documented)."""
        if compute == "bfloat16" and (element != "float32" or epilogue.startswith("bgrad")):
            raise CudaError(f"gemm_epilogue: bfloat16 products of {element} with {epilogue}")
        if m <= 0 or n <= 0 or k <= 0:
            raise CudaError(f"gemm_epilogue: expected positive dims, found {m} {n} {k}")
        if epilogue not in ("none", "bias", "bgrada", "bgradb"):
            raise CudaError(f"gemm_epilogue: no epilogue {epilogue!r}")
        if (epilogue == "none") != (bias is None):
            raise CudaError(f"gemm_epilogue: epilogue {epilogue} with bias {bias!r}")
        size = 4 if element == "float32" else 2

        def matrix(op, rows, cols):
            buf, offset, ld, transpose = op
            stored = (cols, rows) if transpose else (rows, cols)
            if ld < stored[0] or offset + (stored[1] - 1) * ld + stored[0] > buf.nbytes // size:
                raise CudaError("gemm_epilogue: an operand reaches past its buffer")
            flat = buf.array[: buf.nbytes].view(np.float32 if size == 4 else np.uint16)
            mat = np.lib.stride_tricks.as_strided(
                flat[offset:], shape=stored, strides=(size, ld * size)
            )
            if size == 4 and compute == "bfloat16":
                mat = _round_to_bf16_bits(mat)
            wide = (
                mat.astype(np.float64)
                if size == 4 and compute != "bfloat16"
                else (mat.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            )
            return wide.T if transpose else wide

        x, y = matrix(a, m, k), matrix(b, k, n)
        product = (x @ y).astype(np.float32)
        if bias is not None:
            vec_buf, vec_offset = bias
            length = n if epilogue == "bgradb" else m
            if (vec_offset + length) * 4 > vec_buf.nbytes:
                raise CudaError("gemm_epilogue: the bias reaches past its buffer")
            vec = vec_buf.array[: vec_buf.nbytes].view(np.float32)[vec_offset : vec_offset + length]
            if epilogue == "bias":
                product = product + vec[:, None]
            elif epilogue == "bgrada":
                vec[:] = x.sum(axis=1).astype(np.float32)
            else:
                vec[:] = y.sum(axis=0).astype(np.float32)
        buf, offset, ld, _ = c
        flat = buf.array[: buf.nbytes].view(np.float32)
        view = np.lib.stride_tricks.as_strided(flat[offset:], shape=(m, n), strides=(4, ld * 4))
        view[...] = product


def _round_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even; NaN kept quiet),
    as their 16-bit patterns (the device's f32_to_bf16)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.ascontiguousarray(values, dtype=np.float32))
    quiet = (((u >> 16) & 0x8000) | 0x7FC0).astype(np.uint16)
    return np.where(nan, quiet, rounded)


class CountingDevice(EmulatedDevice):
    """The emulated device, counting what the plans ask of it: transfers (and the bytes
    read), launches outside a capture, captures and graph launches."""

    def __init__(self) -> None:
        super().__init__()
        self.reset()

    def reset(self) -> None:
        self.counts = dict.fromkeys(
            ("upload", "download", "download_bytes", "launch", "graph_launch", "capture"), 0
        )

    def upload(self, data, dtype):
        self.counts["upload"] += 1
        return super().upload(data, dtype)

    def write(self, dst, offset, data):
        self.counts["upload"] += 1
        return super().write(dst, offset, data)

    def download(self, src, offset, nbytes):
        self.counts["download"] += 1
        self.counts["download_bytes"] += nbytes
        return super().download(src, offset, nbytes)

    def launch(self, *a):
        if self._capture is None:
            self.counts["launch"] += 1
        super().launch(*a)

    def begin_capture(self):
        self.counts["capture"] += 1
        super().begin_capture()

    def graph_launch(self, graph):
        self.counts["graph_launch"] += 1
        super().graph_launch(graph)


class EmulatedCudaBackend(CudaBackend):
    name = "cudaemu"
    runs_on_host = True

    #: keys per split-KV attention block (small, so a short cache has several splits)
    decode_chunk = 4

    def __init__(self) -> None:
        super().__init__(EmulatedDevice(), {})  # type: ignore[arg-type]
        self.kernels.block, self.kernels.tile = BLOCK, TILE

    def describe(self) -> str:
        return "the cuda backend's kernels on the host (tests only)"


def create_backend() -> EmulatedCudaBackend:
    reason = available()
    if reason:
        raise BackendUnavailable(reason)
    return EmulatedCudaBackend()


ENTRY_POINT = EntryPoint(
    name="cudaemu", value="cuda_emulation:create_backend", group=ENTRY_POINT_GROUP
)

# Loaded with -p, before any conftest builds the `backend` fixture from discovery.
add_entry_points(ENTRY_POINT)
