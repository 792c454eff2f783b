"""GGUF files read safely: every size field is bounded before the ``gguf`` package reads.

The ``gguf`` package (llama.cpp's own Python reader) trusts the file: a string or
array length past the end of the file is quietly cut short, and a count of 2^60
items starts a loop of that length. :func:`scan_gguf` therefore walks the header
first with fixed limits, checking every length against the real file size, every
string as UTF-8, every key and tensor name as unique, every tensor's type, shape,
offset and size against the data section, with no overlap. Only then does
``gguf.GGUFReader`` map the file; anything it still rejects becomes a
:class:`ContainerError` too.

Layout (GGUF v2 and v3, little-endian): magic ``GGUF``, ``u32`` version, ``u64``
tensor count, ``u64`` key count, the key/value pairs, the tensor infos (name,
``u32`` dimension count, ``u64`` dimensions innermost first, ``u32`` ggml type,
``u64`` offset into the data section), padding to the alignment
(``general.alignment`` or 32), then the data.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from riftco.core import canonical_json, records_digest, require_regular_file
from riftco.interchange.errors import ContainerError, ConversionError
from riftco.interchange.optional import require

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_TENSORS = 1 << 16
MAX_KEYS = 1 << 16
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 64 << 20
MAX_ARRAY_ITEMS = 1 << 24
MAX_HEADER_BYTES = 1 << 30
MAX_TENSOR_NAME_BYTES = 63  # llama.cpp's GGML_MAX_NAME, less the terminating NUL
MAX_DIMS = 4
MAX_ALIGNMENT = 1 << 20

# GGUF value types: their codes, and the size of the fixed-size ones.
_UINT32, _STRING, _ARRAY = 4, 8, 9
#: ggml types whose bytes riftco's block-layout weights use as they are.
BLOCK_TYPES = ("Q8_0", "Q4_0", "F16")
_FIXED_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@dataclass(frozen=True)
class GgufTensorInfo:
    """One tensor as the header declares it; ``shape`` is in numpy order (ggml's
    ``ne`` reversed)."""

    name: str
    ggml_type: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass
class GgufFile:
    """A checked GGUF file: its metadata as Python values and its tensors as float32;
    ``stored`` also keeps the bytes of every Q8_0, Q4_0 and F16 tensor as written
    (uint8 ``[rows, row_bytes]``), for layers that run on them as they are."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GgufTensorInfo]
    arrays: dict[str, np.ndarray] = field(repr=False)
    digest: str = ""
    stored: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: The GGUF value type of every key (``STRING``, ``UINT32``, ``ARRAY/STRING``, ...).
    types: dict[str, str] = field(default_factory=dict)
    #: Each tensor's own :func:`tensors_digest`, by name.
    tensor_digests: dict[str, str] = field(default_factory=dict)

    @property
    def architecture(self) -> Any:
        return self.metadata.get("general.architecture")


@dataclass(frozen=True)
class _Layout:
    version: int
    alignment: int
    data_offset: int
    tensors: dict[str, GgufTensorInfo]


def scan_gguf(path: str | os.PathLike[str]) -> _Layout:
    """Check the header of a GGUF file against fixed limits and its own length."""
    path = Path(path)
    with _opened(path) as handle:
        return _Scanner(handle, path).layout()


def read_gguf(path: str | os.PathLike[str]) -> GgufFile:
    """A checked GGUF file, read through ``gguf.GGUFReader``; tensors widened to float32
    (F16 and BF16 exactly, quantized types through ``gguf``'s dequantizer)."""
    gguf = require("gguf")
    path = Path(path)
    layout = scan_gguf(path)
    try:
        reader = gguf.GGUFReader(path)
        fields = {n: item for n, item in reader.fields.items() if not n.startswith("GGUF.")}
        metadata = {name: item.contents() for name, item in fields.items()}
        types = {name: "/".join(t.name for t in item.types) for name, item in fields.items()}
        found = {t.name: t for t in reader.tensors}
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as exc:
        raise ContainerError(f"{path}: gguf rejects the file: {exc}") from None
    if set(found) != set(layout.tensors) or reader.data_offset != layout.data_offset:
        raise ContainerError(f"{path}: gguf reads a different layout than the header declares")
    digest, each = tensor_digests(
        (name, info.ggml_type, info.shape, found[name].data)
        for name, info in layout.tensors.items()
    )
    arrays, stored = {}, {}
    for name, info in layout.tensors.items():
        arrays[name] = _widen(path, name, info, found[name], gguf)
        if info.ggml_type in BLOCK_TYPES and len(info.shape) == 2:
            raw = np.array(found[name].data).reshape(-1).view(np.uint8)
            stored[name] = raw.reshape(info.shape[0], -1)
    del reader, found, fields
    return GgufFile(
        path, layout.version, metadata, layout.tensors, arrays, digest, stored, types, each
    )


def tensors_digest(tensors: Iterable[tuple[str, str, tuple[int, ...], Any]]) -> str:
    """SHA-256 (hex) of tensors as stored (:func:`riftco.core.records_digest`): for each
    name in sorted order, the canonical JSON ``[name, ggml type, numpy shape]`` followed
    by the stored bytes."""
    return records_digest(
        ([name, ggml_type, list(shape)], np.ascontiguousarray(data).reshape(-1).view(np.uint8).data)
        for name, ggml_type, shape, data in sorted(tensors, key=lambda t: t[0])
    )


def tensor_digests(
    tensors: Iterable[tuple[str, str, tuple[int, ...], Any]],
) -> tuple[str, dict[str, str]]:
    """:func:`tensors_digest` of all the tensors, and of each one alone (by name), in
    one pass over the bytes."""
    whole = hashlib.sha256()
    each = {}
    for name, ggml_type, shape, data in sorted(tensors, key=lambda t: t[0]):
        header = canonical_json([name, ggml_type, list(shape)])
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
        one = hashlib.sha256(header)
        one.update(raw)
        whole.update(header)
        whole.update(raw)
        each[name] = one.hexdigest()
    return whole.hexdigest(), each


def layout_digest(tensors: Iterable[GgufTensorInfo]) -> str:
    """SHA-256 (hex) of the tensors' names, ggml types and shapes alone: whether a file's
    tensors are still encoded as they were written (another tool that re-quantizes
    changes their types)."""
    return records_digest(
        ([info.name, info.ggml_type, list(info.shape)], b"")
        for info in sorted(tensors, key=lambda t: t.name)
    )


def key_digest(key: str, value_type: str, value: Any) -> str:
    """SHA-256 (hex) of one metadata key: the canonical JSON ``[key, value type, value]``
    (the type as :attr:`GgufFile.types` names it). Raises ContainerError for a value
    canonical JSON cannot hold (NaN, infinity)."""
    try:
        return records_digest([([key, value_type, value], b"")])
    except (ValueError, TypeError) as exc:  # riftco.core's JSONError is a ValueError
        raise ContainerError(f"{key}: cannot encode the value canonically: {exc}") from None


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file that starts with the GGUF magic."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def _widen(path: Path, name: str, info: GgufTensorInfo, tensor: Any, gguf: Any) -> np.ndarray:
    qtype = tensor.tensor_type
    if qtype == gguf.GGMLQuantizationType.F32:
        values = np.array(tensor.data, dtype=np.float32)
    elif qtype == gguf.GGMLQuantizationType.F16:
        values = np.asarray(tensor.data).astype(np.float32)
    else:
        try:
            values = gguf.quants.dequantize(np.asarray(tensor.data), qtype).astype(np.float32)
        except NotImplementedError:
            raise ConversionError(
                f"{path}: {name}: tensors of type {info.ggml_type} cannot be read "
                "(gguf has no dequantizer for it)"
            ) from None
    return values.reshape(info.shape)


@contextmanager
def _opened(path: Path) -> Iterator[BinaryIO]:
    require_regular_file(path, ContainerError)
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise ContainerError(f"{path}: cannot open: {exc.strerror or exc}") from None
    with handle:
        yield handle


class _Scanner:
    """A cursor over the header that raises ContainerError instead of reading past the end."""

    def __init__(self, handle: BinaryIO, path: Path) -> None:
        self.handle, self.path, self.pos = handle, path, 0
        self.size = os.fstat(handle.fileno()).st_size

    def fail(self, message: str) -> ContainerError:
        return ContainerError(f"{self.path}: {message}")

    def skip(self, n: int, what: str) -> None:
        end = self.pos + n
        if end > self.size:
            raise self.fail(
                f"truncated: {what} needs {n} bytes at offset {self.pos}; the file has {self.size}"
            )
        if end > MAX_HEADER_BYTES:
            raise self.fail(f"expected a header of at most {MAX_HEADER_BYTES} bytes")
        self.pos = end

    def take(self, n: int, what: str) -> bytes:
        start = self.pos
        self.skip(n, what)
        self.handle.seek(start)
        return self.handle.read(n)

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]

    def string(self, what: str, limit: int) -> str:
        length = self.u64(f"the length of {what}")
        if length > limit:
            raise self.fail(f"{what}: expected at most {limit} bytes; found a length of {length}")
        raw = self.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what}: expected UTF-8; {exc.reason} at byte {exc.start}") from None

    def layout(self) -> _Layout:
        if self.size == 0:
            raise self.fail("expected a GGUF file; found an empty file")
        magic = self.take(4, "the magic number")
        if magic != MAGIC:
            raise self.fail(f"expected the GGUF magic b'GGUF'; found {magic!r}")
        version = self.u32("the version")
        if version not in VERSIONS:
            hint = " (a big-endian file?)" if version & 0xFFFF == 0 else ""
            raise self.fail(f"expected GGUF version 2 or 3, little-endian; found {version}{hint}")
        n_tensors, n_keys = self.u64("the tensor count"), self.u64("the key count")
        if n_tensors > MAX_TENSORS or n_keys > MAX_KEYS:
            raise self.fail(
                f"expected at most {MAX_TENSORS} tensors and {MAX_KEYS} keys; "
                f"found {n_tensors} and {n_keys}"
            )
        alignment = DEFAULT_ALIGNMENT
        keys: set[str] = set()
        for _ in range(n_keys):
            key = self.string(f"key {len(keys)}", MAX_KEY_BYTES)
            if key in keys:
                raise self.fail(f"key {key!r} appears twice")
            keys.add(key)
            kind = self.u32(f"the type of {key}")
            if key == "general.alignment":
                if kind != _UINT32:
                    raise self.fail(f"general.alignment: expected a uint32; found type {kind}")
                alignment = self.u32(key)
                if not 0 < alignment <= MAX_ALIGNMENT or alignment & (alignment - 1):
                    raise self.fail(
                        f"general.alignment: expected a power of two up to {MAX_ALIGNMENT}; "
                        f"found {alignment}"
                    )
            else:
                self.value(key, kind)
        infos = [self.tensor_info(k) for k in range(n_tensors)]
        data_offset = -(-self.pos // alignment) * alignment
        tensors = self.check_data(infos, alignment, data_offset)
        return _Layout(version, alignment, data_offset, tensors)

    def value(self, key: str, kind: int) -> None:
        if kind in _FIXED_SIZES:
            self.skip(_FIXED_SIZES[kind], key)
        elif kind == _STRING:
            self.string(key, MAX_STRING_BYTES)
        elif kind == _ARRAY:
            item = self.u32(f"the item type of {key}")
            count = self.u64(f"the length of {key}")
            if count > MAX_ARRAY_ITEMS:
                raise self.fail(f"{key}: expected at most {MAX_ARRAY_ITEMS} items; found {count}")
            if item in _FIXED_SIZES:
                self.skip(_FIXED_SIZES[item] * count, key)
            elif item == _STRING:
                for index in range(count):
                    self.string(f"{key}[{index}]", MAX_STRING_BYTES)
            else:
                raise self.fail(f"{key}: expected an array of numbers or strings; item type {item}")
        else:
            raise self.fail(f"{key}: unknown value type {kind}")

    def tensor_info(self, index: int) -> tuple[str, int, tuple[int, ...], int]:
        name = self.string(f"the name of tensor {index}", 1 << 16)
        if len(name.encode("utf-8")) > MAX_TENSOR_NAME_BYTES:
            raise self.fail(
                f"tensor {name[:80]!r}: expected a name of at most {MAX_TENSOR_NAME_BYTES} bytes"
            )
        n_dims = self.u32(f"the dimension count of {name}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"{name}: expected 1 to {MAX_DIMS} dimensions; found {n_dims}")
        ne = tuple(self.u64(f"a dimension of {name}") for _ in range(n_dims))
        kind = self.u32(f"the type of {name}")
        offset = self.u64(f"the offset of {name}")
        return name, kind, ne, offset

    def check_data(
        self, infos: list[tuple[str, int, tuple[int, ...], int]], alignment: int, start: int
    ) -> dict[str, GgufTensorInfo]:
        gguf = require("gguf")
        available = self.size - start
        if available < 0:
            raise self.fail("truncated: the file ends inside the padding before the data")
        tensors: dict[str, GgufTensorInfo] = {}
        for name, kind, ne, offset in infos:
            if name in tensors:
                raise self.fail(f"tensor {name!r} appears twice")
            try:
                qtype = gguf.GGMLQuantizationType(kind)
                block, type_size = gguf.GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise self.fail(f"{name}: unknown ggml type {kind}") from None
            if any(d == 0 for d in ne) or ne[0] % block:
                raise self.fail(
                    f"{name}: expected positive dimensions, the first a multiple of {block} "
                    f"for {qtype.name}; found ne={list(ne)}"
                )
            elements = int(np.prod(ne, dtype=object))
            nbytes = elements // block * type_size
            if offset % alignment or offset + nbytes > available:
                raise self.fail(
                    f"{name}: {nbytes} bytes at data offset {offset} do not fit the "
                    f"{available} data bytes (alignment {alignment})"
                    if offset % alignment == 0
                    else f"{name}: offset {offset} is not a multiple of the alignment {alignment}"
                )
            shape = tuple(int(d) for d in reversed(ne))
            tensors[name] = GgufTensorInfo(name, qtype.name, shape, offset, nbytes)
        ordered = sorted(tensors.values(), key=lambda t: t.offset)
        for before, after in pairwise(ordered):
            if before.offset + before.nbytes > after.offset:
                raise self.fail(f"tensors {before.name} and {after.name} overlap")
        return tensors
