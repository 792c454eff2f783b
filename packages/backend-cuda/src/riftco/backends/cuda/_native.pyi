"""Stub of the compiled module riftco.backends.cuda._native (crate riftco-backend-cuda-native)."""

from os import PathLike
from pathlib import Path
from typing import final

__all__ = [
    "BUILD_ID",
    "BUILD_ID_MARKER",
    "NVRTC_OPTIONS",
    "Buffer",
    "Device",
    "Event",
    "Graph",
    "__version__",
    "cache_key",
    "compile_module",
    "compile_source",
    "default_cache_dir",
    "device_count",
    "kernel_modules",
    "nvrtc_archs",
    "nvrtc_version",
    "probe_libraries",
    "program_text",
]

import numpy as np
import numpy.typing as npt

__version__: str
BUILD_ID: str
BUILD_ID_MARKER: str
NVRTC_OPTIONS: list[str]

_Operand = tuple[Buffer, int, int, int, bool]
_LtOperand = tuple[Buffer, int, int, bool]

@final
class Buffer:
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int: ...
    @property
    def dtype(self) -> str: ...

@final
class Graph:
    @property
    def nodes(self) -> int: ...

@final
class Event:
    def elapsed_ms(self, later: Event) -> float: ...

@final
class Device:
    def __new__(cls, ordinal: int, cache_dir: str | PathLike[str] | None) -> Device: ...
    @property
    def ordinal(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def total_memory(self) -> int: ...
    @property
    def cache_dir(self) -> Path | None: ...
    def pool_stats(self) -> tuple[int, int]: ...
    def cache_stats(self) -> tuple[int, int, int]: ...
    def load_all(self) -> None: ...
    def synchronize(self) -> None: ...
    def trim(self) -> None: ...
    def alloc(self, nbytes: int, dtype: str) -> Buffer: ...
    def upload(self, data: npt.NDArray[np.uint8], dtype: str) -> Buffer: ...
    def download(self, src: Buffer, offset: int, nbytes: int) -> npt.NDArray[np.uint8]: ...
    def copy(
        self, dst: Buffer, dst_offset: int, src: Buffer, src_offset: int, nbytes: int
    ) -> None: ...
    def zero(self, dst: Buffer) -> None: ...
    def record_event(self) -> Event: ...
    def write(self, dst: Buffer, offset: int, data: npt.NDArray[np.uint8]) -> None: ...
    def begin_capture(self) -> None: ...
    def end_capture(self) -> Graph: ...
    def graph_launch(self, graph: Graph) -> None: ...
    def launch(
        self,
        module: str,
        kernel: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        args: list[object],
    ) -> None: ...
    def gemm(
        self,
        element: str,
        m: int,
        n: int,
        k: int,
        a: _Operand,
        b: _Operand,
        c: _Operand,
        batch: int,
        compute: str = "float32",
        accumulate: bool = False,
    ) -> None: ...
    def gemm_epilogue(
        self,
        element: str,
        m: int,
        n: int,
        k: int,
        a: _LtOperand,
        b: _LtOperand,
        c: _LtOperand,
        epilogue: str,
        bias: tuple[Buffer, int] | None = None,
        compute: str = "float32",
    ) -> None: ...

def probe_libraries() -> list[tuple[str, bool, list[str]]]: ...
def device_count() -> int: ...
def nvrtc_version() -> str: ...
def nvrtc_archs() -> list[str]: ...
def kernel_modules() -> list[str]: ...
def program_text(module: str) -> str: ...
def compile_module(module: str, arch: str) -> tuple[bytes, str]: ...
def compile_source(text: str, name: str, arch: str) -> tuple[bytes, str]: ...
def cache_key(module: str, arch: str, nvrtc_version: str) -> str: ...
def default_cache_dir() -> Path | None: ...
