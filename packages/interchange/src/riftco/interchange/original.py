"""Files written by the original Riftco Transformer (``riftco-transformer`` 0.6.1).

Its model is this stack's ``riftco_v1`` topology (learned positions, pre-LayerNorm
blocks, exact GELU, biased projections and head, untied embeddings) under the same
parameter names, except that a LayerNorm's gain is ``scale`` there and ``weight``
here. Its tokenizers are a byte tokenizer (id ``k`` is the ``k``-th byte of its
vocabulary) and a byte-level BPE without pre-tokenization whose merge ``k`` makes
id ``256 + k``, both without special tokens: they become riftco-text tokenizers with
no special tokens, no end-of-text and no chat template, encoding to the same ids.

:class:`OriginalModel` is what every reader of its formats (the ``.rift`` v1 bundle
here, its Hugging Face-style directory, GGUF file and ONNX export in
:mod:`riftco.interchange.original_exports`) returns: the configuration, the
weights under this stack's names and the tokenizer, plus the original identity
(``artifact_id``), ``parent_artifact_id``, ``stage`` and ``metadata``.
"""

from __future__ import annotations

import hashlib
import math
import re
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange.container import canonical_json, strict_json
from riftco.interchange.errors import (
    ContainerError,
    ConversionError,
    IntegrityError,
    ManifestError,
    WeightsError,
)
from riftco.nn import ConfigError, TransformerConfig
from riftco.text import BpeTokenizer, ByteTokenizer, Tokenizer, TokenizerError

#: The original's bundle format name and version, and its member files.
BUNDLE_FORMAT = "riftco-transformer-model-bundle"
BUNDLE_VERSION = 1
MANIFEST_NAME = "manifest.json"
WEIGHTS_NAME = "weights.f32le"
MAX_MANIFEST_BYTES = 1 << 20  # the original's own limit
MAX_PARAMETERS = 1 << 16
MAX_DIMENSION = 1 << 31
MAX_MERGES = 1 << 20

CONFIG_KEYS = (
    "vocabulary_size",
    "maximum_context",
    "model_width",
    "head_count",
    "block_count",
    "feed_forward_width",
    "random_seed",
    "layer_norm_epsilon",
)
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass
class OriginalModel:
    """A model the original package wrote, under this stack's names."""

    kind: str
    path: Path
    config: TransformerConfig
    arrays: dict[str, np.ndarray] = field(repr=False)
    tokenizer: Tokenizer
    artifact_id: str | None
    parent_artifact_id: str | None
    stage: str
    metadata: dict[str, Any] = field(default_factory=dict)
    original_config: dict[str, Any] = field(default_factory=dict)

    def lineage(self) -> dict[str, Any]:
        """Where this model came from, as a converted bundle's metadata records it."""
        return {
            "source": "riftco-transformer",
            "format": self.kind,
            "artifact_id": self.artifact_id,
            "parent_artifact_id": self.parent_artifact_id,
            "stage": self.stage,
            "metadata": self.metadata,
            "config": self.original_config,
        }

    def origin(self) -> dict[str, Any]:
        """The stage, parent and metadata a bundle converted from this model gets:
        the original's stage, the original artifact as its parent, and the original
        lineage under ``metadata["riftco_transformer"]``."""
        return {
            "stage": _stage(self.stage),
            "parent_id": self.artifact_id,
            "metadata": {"riftco_transformer": self.lineage()},
        }


# -- the pieces every format shares --------------------------------------------------


def config_from_original(raw: Any, where: str) -> tuple[TransformerConfig, dict[str, Any]]:
    """The ``riftco_v1`` configuration of an original ``TransformerConfig`` dict."""
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: expected an object; found {type(raw).__name__}")
    missing = [k for k in CONFIG_KEYS if k not in raw]
    unexpected = sorted(set(raw) - set(CONFIG_KEYS))
    if missing or unexpected:
        raise ManifestError(f"{where}: missing keys {missing}, unexpected keys {unexpected}")
    for key in CONFIG_KEYS[:-1]:
        value = raw[key]
        if not _is_int(value) or value < 0 or value > MAX_DIMENSION:
            raise ManifestError(f"{where}.{key}: expected an integer in [0, 2^31]; found {value!r}")
    eps = raw["layer_norm_epsilon"]
    if not _is_number(eps) or not 0 < eps < 1:
        raise ManifestError(
            f"{where}.layer_norm_epsilon: expected a number in (0, 1); found {eps!r}"
        )
    try:
        config = TransformerConfig.preset(
            "riftco_v1",
            vocab_size=raw["vocabulary_size"],
            context_length=raw["maximum_context"],
            d_model=raw["model_width"],
            n_heads=raw["head_count"],
            n_layers=raw["block_count"],
            d_ff=raw["feed_forward_width"],
            norm_eps=float(eps),
        )
    except ConfigError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    return config, dict(raw)


def our_name(name: str) -> str:
    """This stack's name for an original parameter name."""
    return name[: -len(".scale")] + ".weight" if name.endswith("norm.scale") else name


def tokenizer_from_original(raw: Any, where: str) -> Tokenizer:
    """A riftco-text tokenizer with the same ids as an original tokenizer state."""
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: expected an object; found {type(raw).__name__}")
    method = raw.get("method")
    try:
        if method == "byte":
            vocab = raw.get("byte_vocabulary")
            if not _int_list(vocab, 256) or not vocab:
                raise ManifestError(f"{where}.byte_vocabulary: expected 1-256 byte values")
            if list(vocab) != sorted(set(vocab)):
                raise ConversionError(
                    f"{where}.byte_vocabulary: expected ascending distinct bytes (the "
                    "original's tokenizers write them so); found another order"
                )
            return ByteTokenizer(bytes(vocab))
        if method == "bpe":
            rules = raw.get("merge_rules")
            if not isinstance(rules, list) or len(rules) > MAX_MERGES:
                raise ManifestError(f"{where}.merge_rules: expected at most 2^20 merges")
            merges = []
            for k, rule in enumerate(rules):
                if not (_int_list(rule, 1 << 32) and len(rule) == 3 and rule[2] == 256 + k):
                    raise ManifestError(
                        f"{where}.merge_rules[{k}]: expected [left, right, {256 + k}]; found {rule!r}"
                    )
                merges.append((rule[0], rule[1]))
            return BpeTokenizer(merges, pretokenize="none")
    except TokenizerError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    raise ManifestError(f"{where}.method: expected 'byte' or 'bpe'; found {method!r}")


def check_lineage(raw: Mapping[str, Any], where: str) -> None:
    """The identity, parent, stage and metadata fields of an original artifact."""
    for key in ("artifact_id", "parent_artifact_id"):
        value = raw.get(key)
        if value is not None and not (isinstance(value, str) and _HEX64.fullmatch(value)):
            raise ManifestError(f"{where}.{key}: expected 64 lowercase hex digits; found {value!r}")
    stage = raw.get("stage")
    if not (isinstance(stage, str) and stage.strip() and len(stage) <= 256):
        raise ManifestError(f"{where}.stage: expected a non-empty string; found {stage!r}")
    if not isinstance(raw.get("metadata"), dict):
        raise ManifestError(f"{where}.metadata: expected an object")


# -- the .rift v1 bundle ------------------------------------------------------------


def is_original_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a zip whose first member is ``manifest.json`` (the original's
    bundle), by content: the local-file signature and the member name."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(30 + len(MANIFEST_NAME))
    except OSError:
        return False
    return (
        len(head) == 30 + len(MANIFEST_NAME)
        and head[:4] == b"PK\x03\x04"
        and head[30:] == MANIFEST_NAME.encode()
    )


def read_original_bundle(path: str | Path) -> OriginalModel:
    """Read and fully check an original ``.rift`` v1 bundle (a zip of ``manifest.json``
    and ``weights.f32le``): the archive's layout and sizes first, then the manifest,
    the weights' SHA-256 and count, the identity, and finite float32 values."""
    path = Path(path)
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            names = [info.filename for info in infos]
            if names != [MANIFEST_NAME, WEIGHTS_NAME]:
                raise ContainerError(
                    f"{path}: expected the members {[MANIFEST_NAME, WEIGHTS_NAME]}; found {names[:8]}"
                )
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED:
                    raise ContainerError(f"{path}: {info.filename}: expected a stored member")
                if info.file_size > size or info.header_offset + info.file_size > size:
                    raise ContainerError(
                        f"{path}: truncated: {info.filename} claims {info.file_size} bytes; "
                        f"the file holds {size}"
                    )
            manifest_info, weights_info = infos
            if manifest_info.file_size > MAX_MANIFEST_BYTES:
                raise ContainerError(
                    f"{path}: manifest.json: expected at most {MAX_MANIFEST_BYTES} bytes; "
                    f"found {manifest_info.file_size}"
                )
            manifest = strict_json(
                archive.read(manifest_info), f"{path}: manifest.json", ManifestError
            )
            parsed = _parse_manifest(manifest, f"{path}: manifest.json")
            expected = parsed["count"] * 4
            if weights_info.file_size != expected:
                raise ContainerError(
                    f"{path}: weights.f32le: expected {expected} bytes for "
                    f"{parsed['count']} float32 values; found {weights_info.file_size}"
                )
            payload = archive.read(weights_info)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error) as exc:
        raise ContainerError(f"{path}: expected an original .rift bundle (a zip); {exc}") from None
    return _build(path, manifest, parsed, payload)


def _parse_manifest(manifest: Any, where: str) -> dict[str, Any]:
    if not isinstance(manifest, dict):
        raise ManifestError(f"{where}: expected an object; found {type(manifest).__name__}")
    if manifest.get("format") != BUNDLE_FORMAT or manifest.get("format_version") != BUNDLE_VERSION:
        raise ManifestError(
            f"{where}: expected format {BUNDLE_FORMAT!r} version {BUNDLE_VERSION}; found "
            f"{manifest.get('format')!r} version {manifest.get('format_version')!r}"
        )
    keys = {
        "artifact_id", "config", "format", "format_version", "metadata",
        "parameters", "parent_artifact_id", "stage", "tokenizer", "weights",
    }  # fmt: skip
    if set(manifest) != keys:
        raise ManifestError(
            f"{where}: missing keys {sorted(keys - set(manifest))}, "
            f"unexpected keys {sorted(set(manifest) - keys)}"
        )
    check_lineage(manifest, where)
    if manifest["artifact_id"] is None:
        raise ManifestError(f"{where}.artifact_id: expected 64 lowercase hex digits; found null")
    weights = manifest["weights"]
    expected_weights = {"file": WEIGHTS_NAME, "dtype": "float32", "byte_order": "little"}
    if not isinstance(weights, dict) or any(
        weights.get(k) != v for k, v in expected_weights.items()
    ):
        raise ManifestError(f"{where}.weights: expected little-endian float32 in {WEIGHTS_NAME}")
    if not (isinstance(weights.get("sha256"), str) and _HEX64.fullmatch(weights["sha256"])):
        raise ManifestError(f"{where}.weights.sha256: expected 64 lowercase hex digits")
    layout = parameter_layout(manifest["parameters"], f"{where}.parameters")
    count = sum(n for _, _, _, n in layout)
    if weights.get("count") != count:
        raise ManifestError(
            f"{where}.weights.count: the parameters hold {count} values; found {weights.get('count')!r}"
        )
    return {"layout": layout, "count": count}


def parameter_layout(raw: Any, where: str) -> list[tuple[str, tuple[int, ...], int, int]]:
    """``(name, shape, offset, count)`` of an original parameter list, which must be
    contiguous from offset 0 in order."""
    if not isinstance(raw, list) or len(raw) > MAX_PARAMETERS:
        raise ManifestError(f"{where}: expected a list of at most {MAX_PARAMETERS} parameters")
    layout, offset, names = [], 0, set()
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or set(entry) != {"name", "shape", "offset", "count"}:
            raise ManifestError(f"{where}[{i}]: expected keys count, name, offset, shape")
        name, shape = entry["name"], entry["shape"]
        if not isinstance(name, str) or not name or name in names or len(name) > 1024:
            raise ManifestError(f"{where}[{i}].name: expected a new non-empty name; found {name!r}")
        if not (_int_list(shape, MAX_DIMENSION) and 1 <= len(shape) <= 8 and min(shape) > 0):
            raise ManifestError(
                f"{where}[{i}] {name}: expected a shape of positive sizes; found {shape!r}"
            )
        count = math.prod(shape)
        if entry["offset"] != offset or entry["count"] != count:
            raise ManifestError(
                f"{where}[{i}] {name}: expected offset {offset} and count {count}; found "
                f"{entry['offset']!r} and {entry['count']!r}"
            )
        names.add(name)
        layout.append((name, tuple(shape), offset, count))
        offset += count
    return layout


def arrays_from_flat(
    layout: list[tuple[str, tuple[int, ...], int, int]], values: np.ndarray, where: str
) -> dict[str, np.ndarray]:
    """Named float32 arrays (this stack's names) cut from one flat float32 vector."""
    arrays = {}
    for name, shape, offset, count in layout:
        array = np.array(values[offset : offset + count], dtype=np.float32).reshape(shape)
        finite = np.isfinite(array)
        if not finite.all():
            index = tuple(int(i) for i in np.argwhere(~finite)[0])
            raise WeightsError(
                f"{where}: {name}: expected finite values; found {array[index]} at {index}"
            )
        arrays[our_name(name)] = array
    return arrays


def check_expected(config: TransformerConfig, arrays: Mapping[str, np.ndarray], where: str) -> None:
    """The tensors must be exactly those of ``config``'s model, in shape."""
    from riftco.interchange.layout import check_shapes

    try:
        check_shapes(config, {name: array.shape for name, array in arrays.items()})
    except (WeightsError, ConversionError) as exc:
        raise type(exc)(f"{where}: {exc}") from None


def _build(
    path: Path, manifest: dict[str, Any], parsed: dict[str, Any], payload: bytes
) -> OriginalModel:
    where = f"{path}: manifest.json"
    digest = hashlib.sha256(payload).hexdigest()
    if digest != manifest["weights"]["sha256"]:
        raise IntegrityError(
            f"{path}: weights.f32le: SHA-256 is {digest}; the manifest records "
            f"{manifest['weights']['sha256']} (the weights were changed or corrupted)"
        )
    body = {k: v for k, v in manifest.items() if k != "artifact_id"}
    identity = hashlib.sha256(canonical_json(body)).hexdigest()
    if identity != manifest["artifact_id"]:
        raise IntegrityError(
            f"{where}: artifact_id: the manifest hashes to {identity}; the file claims "
            f"{manifest['artifact_id']} (the manifest was changed after it was written)"
        )
    config, original_config = config_from_original(manifest["config"], f"{where}.config")
    tokenizer = tokenizer_from_original(manifest["tokenizer"], f"{where}.tokenizer")
    if tokenizer.vocab_size != config.vocab_size:
        raise ManifestError(
            f"{where}: the tokenizer has {tokenizer.vocab_size} ids; the model's vocabulary "
            f"is {config.vocab_size}"
        )
    values = np.frombuffer(payload, dtype="<f4")
    arrays = arrays_from_flat(parsed["layout"], values, str(path))
    check_expected(config, arrays, str(path))
    return OriginalModel(
        kind="rift-v1",
        path=path,
        config=config,
        arrays=arrays,
        tokenizer=tokenizer,
        artifact_id=manifest["artifact_id"],
        parent_artifact_id=manifest["parent_artifact_id"],
        stage=manifest["stage"],
        metadata=manifest["metadata"],
        original_config=original_config,
    )


def _stage(stage: str) -> str:
    """The original's stage as this stack's lowercase identifier."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", stage.strip().lower()).strip("_")
    return cleaned if re.fullmatch(r"[a-z][a-z0-9_]*", cleaned or "") else "imported"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _int_list(value: Any, limit: int) -> bool:
    return isinstance(value, list) and all(_is_int(v) and 0 <= v < limit for v in value)
