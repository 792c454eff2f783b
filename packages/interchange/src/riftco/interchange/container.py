"""The generic container: atomic writes, canonical JSON identity, bounded safetensors.

Everything here is independent of models, so that any riftco file built on the
safetensors format (the ``.rift`` bundle, the ``.riftckpt`` training checkpoint)
shares one implementation of the parts that must never be wrong:

- atomic writes (:func:`riftco.core.atomic_write`): a file is written to a
  temporary name in the same folder, fsynced and renamed over the target, and
  the folder is fsynced, so a crash leaves either the old file or the whole new one.
- :func:`canonical_json` and :func:`content_id`: riftco.core's canonical JSON and
  identity (keys sorted, separators ``,`` and ``:``, UTF-8, no NaN), raising
  :class:`ContainerError` and excluding ``artifact_id`` by default.
- :func:`read_safetensors` and :func:`write_safetensors`: named numpy arrays
  plus ``str -> str`` metadata. The reader checks every size field against the
  file's real length and fixed limits *before* allocating anything, parses the
  header itself (no pickle, no eval, duplicate keys and NaN literals refused),
  and maps the data read-only.
- :func:`tensors_digest`: the SHA-256 of named arrays, independent of their
  order in the file.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from riftco import core
from riftco.core import JSONError, atomic_write, loads_strict, require_regular_file
from riftco.interchange.errors import ContainerError

MAX_HEADER_BYTES = 16 << 20
"""The largest safetensors header (JSON, metadata included) this reader accepts."""
MAX_TENSORS = 1 << 16
MAX_NDIM = 8
MAX_NAME_BYTES = 1024

# safetensors dtype codes and their little-endian numpy dtypes. numpy has no
# bfloat16: such tensors are widened to float32 when read.
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_CODES = {dtype.newbyteorder("="): code for code, dtype in DTYPES.items() if code != "BF16"}
_HEADER_KEYS = {"dtype", "shape", "data_offsets"}


# -- identity --------------------------------------------------------------------


def canonical_json(document: Any) -> bytes:
    """:func:`riftco.core.canonical_json`, raising :class:`ContainerError`."""
    try:
        return core.canonical_json(document)
    except JSONError as exc:
        raise ContainerError(str(exc)) from None


def strict_json(raw: bytes | str, where: str, error: type[Exception] = ContainerError) -> Any:
    """:func:`riftco.core.loads_strict` (UTF-8, no duplicate keys, no NaN or infinity,
    bounded nesting and integer digits), raising ``error`` naming ``where``."""
    try:
        return core.loads_strict(raw)
    except JSONError as exc:
        raise error(f"{where}: {exc}") from None


def content_id(document: Mapping[str, Any], exclude: str = "artifact_id") -> str:
    """SHA-256 (hex) of the canonical JSON of ``document`` without the key ``exclude``."""
    try:
        return core.content_id(document, exclude)
    except JSONError as exc:
        raise ContainerError(str(exc)) from None


def tensors_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 (hex) of named arrays (:func:`riftco.core.records_digest`): for each name
    in sorted order, the canonical JSON ``[name, dtype code, shape]`` followed by the
    array's little-endian bytes."""

    def records() -> Iterator[tuple[list[Any], memoryview]]:  # one array at a time
        for name in sorted(arrays):
            array = _little_endian(name, arrays[name])
            header = [name, dtype_code(name, array), list(array.shape)]
            yield header, array.reshape(-1).data.cast("B")

    return core.records_digest(records())


# -- writing safetensors -------------------------------------------------------------


def dtype_code(name: str, array: np.ndarray) -> str:
    """The safetensors code of ``array``'s dtype."""
    code = _CODES.get(array.dtype.newbyteorder("="))
    if code is None:
        raise ContainerError(f"{name}: expected a numeric or bool array; found dtype {array.dtype}")
    return code


def safetensors_header(
    arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None
) -> bytes:
    """The header (length prefix included) for ``arrays`` laid out in sorted name order."""
    header: dict[str, Any] = {}
    if metadata:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ContainerError(f"metadata: expected str -> str; found {key!r}: {value!r}")
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in sorted(arrays):
        _check_name(name)
        array = arrays[name]
        header[name] = {
            "dtype": dtype_code(name, array),
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # keeps the data 8-byte aligned, as safetensors does
    if len(text) > MAX_HEADER_BYTES:
        raise ContainerError(
            f"header: expected at most {MAX_HEADER_BYTES} bytes; found {len(text)} "
            "(too much metadata or too many tensors)"
        )
    return struct.pack("<Q", len(text)) + text


def write_safetensors(
    path: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write named arrays and metadata as one safetensors file, atomically."""
    if len(arrays) > MAX_TENSORS:
        raise ContainerError(f"expected at most {MAX_TENSORS} tensors; found {len(arrays)}")
    ordered = {name: _little_endian(name, arrays[name]) for name in sorted(arrays)}
    header = safetensors_header(ordered, metadata)
    with atomic_write(path) as handle:
        handle.write(header)
        for array in ordered.values():
            handle.write(array.reshape(-1).data.cast("B"))


def _little_endian(name: str, array: Any) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise ContainerError(f"{name}: expected a numpy array; found {type(array).__name__}")
    return np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name or name == "__metadata__":
        raise ContainerError(f"expected a non-empty tensor name; found {name!r}")
    if len(name.encode("utf-8", "replace")) > MAX_NAME_BYTES:
        raise ContainerError(
            f"tensor name: expected at most {MAX_NAME_BYTES} bytes; found {name[:40]!r}..."
        )


# -- reading safetensors ----------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One header entry; ``begin`` and ``end`` are offsets into the data buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class SafetensorsFile:
    """A validated safetensors file, its data mapped read-only."""

    def __init__(
        self,
        path: Path,
        tensors: dict[str, TensorInfo],
        metadata: dict[str, str],
        data_start: int,
        data: mmap.mmap | None,
    ) -> None:
        self.path = path
        self.tensors = tensors
        self.metadata = metadata
        self.data_start = data_start
        self._data = data

    def raw(self, name: str) -> memoryview:
        """The bytes of tensor ``name``, without copying."""
        info = self._info(name)
        if self._data is None or info.begin == info.end:
            return memoryview(b"")
        start = self.data_start + info.begin
        return memoryview(self._data)[start : self.data_start + info.end]

    def array(self, name: str, copy: bool = False) -> np.ndarray:
        """Tensor ``name``: a read-only view of the mapping, or a writable copy.

        bfloat16 tensors are widened to (copied) float32.
        """
        info = self._info(name)
        raw = np.frombuffer(self.raw(name), dtype=DTYPES[info.dtype], count=info.size)
        if info.dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        array = raw.reshape(info.shape)
        return array.copy() if copy else array

    def arrays(self, copy: bool = False) -> dict[str, np.ndarray]:
        return {name: self.array(name, copy) for name in self.tensors}

    def digest(self) -> str:
        """:func:`tensors_digest` of the stored tensors, computed over the mapping."""
        return core.records_digest(
            ([name, self.tensors[name].dtype, list(self.tensors[name].shape)], self.raw(name))
            for name in sorted(self.tensors)
        )

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ContainerError(f"{self.path}: no tensor named {name!r}") from None

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self.path)!r}, tensors={len(self.tensors)})"


def read_safetensors(
    path: str | os.PathLike[str], max_header_bytes: int = MAX_HEADER_BYTES
) -> SafetensorsFile:
    """Open and validate ``path``; raises :class:`ContainerError` naming the file and the fault."""
    path = Path(path)
    require_regular_file(path, ContainerError)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            header_size, header = _read_header(handle, size, max_header_bytes)
            tensors, metadata = _parse_header(header)
            data_start = 8 + header_size
            _check_layout(tensors, size - data_start)
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None
    except ContainerError as exc:
        raise ContainerError(f"{path}: {exc}") from None
    except OSError as exc:
        raise ContainerError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return SafetensorsFile(path, tensors, metadata, data_start, data)


def _read_header(handle: BinaryIO, size: int, limit: int) -> tuple[int, bytes]:
    if size < 8:
        raise ContainerError(f"truncated: expected at least 8 bytes; found {size}")
    (header_size,) = struct.unpack("<Q", handle.read(8))
    if header_size > limit:
        raise ContainerError(f"header: expected at most {limit} bytes; found {header_size}")
    if 8 + header_size > size:
        raise ContainerError(
            f"truncated: the header needs {header_size} bytes; the file holds {size - 8} after the prefix"
        )
    return header_size, handle.read(header_size)


def _parse_header(raw: bytes) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    try:
        document = loads_strict(raw)
    except JSONError as exc:
        raise ContainerError(f"header: {exc}") from None
    if not isinstance(document, dict):
        raise ContainerError(f"header: expected a JSON object; found {type(document).__name__}")
    metadata = document.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ContainerError("__metadata__: expected an object of strings")
    if len(document) > MAX_TENSORS:
        raise ContainerError(f"expected at most {MAX_TENSORS} tensors; found {len(document)}")
    for name in document:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ContainerError(
                f"tensor names: expected valid Unicode; found a lone surrogate in {name!r}"
            ) from None
    return {name: _tensor_info(name, entry) for name, entry in document.items()}, metadata


def _tensor_info(name: str, entry: Any) -> TensorInfo:
    _check_name(name)
    if not isinstance(entry, dict) or set(entry) != _HEADER_KEYS:
        raise ContainerError(f"{name}: expected an object with keys {sorted(_HEADER_KEYS)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ContainerError(f"{name}: expected a dtype among {sorted(DTYPES)}; found {dtype!r}")
    if not (isinstance(shape, list) and len(shape) <= MAX_NDIM and all(map(_is_count, shape))):
        raise ContainerError(
            f"{name}: expected a shape of at most {MAX_NDIM} non-negative integers; found {shape!r}"
        )
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
        raise ContainerError(f"{name}: expected data_offsets [begin, end]; found {offsets!r}")
    begin, end = offsets
    expected = math.prod(shape) * DTYPES[dtype].itemsize
    if expected > 1 << 62:  # no file holds it (and its decimal form may be past Python's limit)
        raise ContainerError(f"{name}: the shape claims more than 2**62 bytes")
    if end < begin or end - begin != expected:
        raise ContainerError(
            f"{name}: expected {expected} bytes for {dtype} {shape}; data_offsets give {end - begin}"
        )
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _check_layout(tensors: Mapping[str, TensorInfo], available: int) -> None:
    position = 0
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if info.begin != position:
            what = "overlaps the tensor before it" if info.begin < position else "leaves a gap"
            raise ContainerError(
                f"{info.name}: data_offsets {what} (begins at {info.begin}, expected {position})"
            )
        position = info.end
    if position > available:
        raise ContainerError(
            f"truncated: tensors need {position} bytes of data; the file holds {available}"
        )
    if position < available:
        raise ContainerError(
            f"expected {position} bytes of data; found {available} (trailing bytes)"
        )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
