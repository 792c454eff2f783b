"""GGUF import: llama.cpp ``gpt2`` and ``llama`` files as riftco configurations and weights.

The file is checked completely first (:func:`riftco.interchange.gguf_file.read_gguf`),
then read as llama.cpp would read it: the architecture's keys give the
configuration, the tensors under llama.cpp's names give the weights (F16, BF16
and quantized types widened to float32), and the ``tokenizer.ggml`` section gives
the tokenizer when riftco can represent it. Keys whose math riftco does not
implement are refused by name (rotary scaling and ``rope_freqs``, experts,
partial rotary dimensions, key or value lengths other than ``d_model / heads``).

A file riftco wrote also holds ``riftco.config`` and ``riftco.tokenizer``: they
must agree with llama.cpp's keys and tokens, and then restore what those cannot
say (a bias-free GPT, the attention kernel, the chat template), so export then
import gives back the same model.

The ``riftco.*`` keys are checked as a set before any is used (a GGUF reader sees
a key it does not look for as absent, so one flipped byte in a name would otherwise
turn the tensor checksum off or drop the chat template):

- no ``riftco.*`` key (llama.cpp, other tools): read as llama.cpp reads it; nothing
  is verified beyond the container, the layout and the shapes.
- ``riftco.digest``: every key it covers must be present, every ``riftco.*`` key
  must be covered, and each value must have the recorded digest (checked last, so a
  value that disagrees with llama.cpp's keys is named by that disagreement first).
- ``riftco.*`` keys without ``riftco.digest``: a file from a riftco release before
  the digest, accepted when it holds exactly the six keys every such release wrote
  and a ``riftco.tensors`` record of that age; its tensors are verified, its keys'
  values are ``not verified``. A record that names the digest, a missing key or an
  unknown one is refused as a renamed or removed key.

The tensor checksum applies unless another tool has re-encoded the tensors: both
``general.file_type`` and the tensors' types differ from those recorded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.core import loads_strict
from riftco.interchange.errors import (
    ContainerError,
    ConversionError,
    IntegrityError,
    ManifestError,
    WeightsError,
)
from riftco.interchange.gguf_export import (
    FORMAT_VERSION,
    RIFTCO_CONFIG,
    RIFTCO_DIGEST,
    RIFTCO_FORMAT_VERSION,
    RIFTCO_TENSORS,
)
from riftco.interchange.gguf_file import (
    GgufFile,
    key_digest,
    layout_digest,
    read_gguf,
)
from riftco.interchange.gguf_layout import (
    ARCHITECTURES,
    GPT2,
    from_gguf_tensors,
    linear_sources,
)
from riftco.interchange.gguf_tokenizer import (
    RIFTCO_PARITY,
    RIFTCO_STATE,
    TOKENS,
    tokenizer_from_gguf,
)
from riftco.interchange.layout import check_shapes, config_from_dict
from riftco.interchange.lineage import RIFTCO_LINEAGE, parse_lineage
from riftco.interchange.models import build_model
from riftco.interchange.runnable import RunnableModel
from riftco.nn import ConfigError, TransformerConfig
from riftco.tensor import Backend
from riftco.text import Tokenizer

# Keys (after "{arch}.") whose presence with another value changes the math.
_REFUSED = {
    "expert_count": (None, 0),
    "rope.scaling.type": (None, "none"),
    "rope.scaling.factor": (None, 1.0),
}
_SHARED_FIELDS = (
    "vocab_size",
    "context_length",
    "d_model",
    "n_layers",
    "n_heads",
    "d_ff",
    "n_kv_heads",
    "norm",
    "positions",
    "feed_forward",
    "tie_embeddings",
    "head_bias",
    "sliding_window",
)


@dataclass
class GgufModel:
    """What an imported GGUF file holds, under riftco's names."""

    model_config: TransformerConfig
    arrays: dict[str, np.ndarray] = field(repr=False)
    tokenizer: Tokenizer | None
    architecture: str
    metadata: dict[str, Any] = field(repr=False)
    lineage: dict[str, Any] = field(default_factory=dict)
    #: The bytes of the file's Q8_0, Q4_0 and F16 matrices, by llama.cpp name.
    stored: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: The ggml type of every tensor, by llama.cpp name.
    types: dict[str, str] = field(default_factory=dict)
    #: What was verified, by part (``tensors``, ``metadata``): ``ok`` or ``not
    #: verified: <why>``.
    verified: dict[str, str] = field(default_factory=dict)
    #: Why the file's own tokenizer could not be read (``require_tokenizer=False``),
    #: or None.
    tokenizer_error: str | None = None

    def origin(self) -> dict[str, Any]:
        """The stage, parent and metadata a bundle made from this file records."""
        return {
            "stage": "imported",
            "parent_id": self.lineage.get("artifact_id"),
            "metadata": {
                "source": "gguf",
                "architecture": self.architecture,
                "file_type": self.metadata.get("general.file_type"),
            },
        }


def import_gguf(
    path: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
    require_tokenizer: bool = True,
) -> GgufModel:
    """Read a llama.cpp ``gpt2`` or ``llama`` GGUF file; ``tokenizer`` overrides its own.

    Without ``require_tokenizer`` a vocabulary riftco cannot represent leaves
    ``tokenizer`` None instead of raising."""
    path = Path(path)
    stored = read_gguf(path)
    metadata = stored.metadata
    tokenizer_error = None
    try:
        covered = _check_riftco_keys(stored)
        version = metadata.get(RIFTCO_FORMAT_VERSION, FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ConversionError(
                f"{RIFTCO_FORMAT_VERSION}: expected {FORMAT_VERSION}; found {version!r} "
                "(written by another version of riftco)"
            )
        verified = {"tensors": _check_integrity(stored)}
        config = _reconcile(config_from_gguf(metadata, stored.arrays), metadata)
        arrays = from_gguf_tensors(config, stored.arrays)
        check_shapes(config, {name: tuple(a.shape) for name, a in arrays.items()})
        for name, array in arrays.items():
            if not np.isfinite(array).all():
                raise WeightsError(f"{name}: expected finite values; found NaN or infinity")
        lineage = parse_lineage(metadata.get(RIFTCO_LINEAGE), RIFTCO_LINEAGE)
        if tokenizer is None:
            try:
                tokenizer = tokenizer_from_gguf(metadata)
            except ConversionError as exc:
                if require_tokenizer:
                    raise
                tokenizer_error = str(exc)
        verified["metadata"] = _check_key_values(stored, covered)
    except (ConversionError, WeightsError, IntegrityError) as exc:
        raise type(exc)(f"{path}: {exc}") from None
    except (ConfigError, ValueError) as exc:  # sizes the configuration rejects
        raise ConversionError(f"{path}: {exc}") from None
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise ConversionError(
            f"{path}: tokenizer: {tokenizer.vocab_size} ids do not fit the model's "
            f"vocab_size {config.vocab_size}"
        )
    types = {name: info.ggml_type for name, info in stored.tensors.items()}
    return GgufModel(
        config,
        arrays,
        tokenizer,
        metadata["general.architecture"],
        metadata,
        lineage,
        stored.stored,
        types,
        verified,
        tokenizer_error,
    )


def import_gguf_model(
    path: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
    backend: str | Backend | None = None,
    trainable: bool = False,
    weights: str = "float32",
) -> RunnableModel:
    """A llama.cpp ``gpt2`` or ``llama`` GGUF file as a runnable model.

    With ``weights="stored"`` every linear layer whose tensor is Q8_0, Q4_0 or F16 runs
    on the file's own bytes (a ``BlockLinear`` of that type: the weights are not
    quantized again, so they equal llama.cpp's), and so does the head (``output.weight``,
    or a tied ``token_embd.weight``: a ``BlockHead``); the other tensors are float32
    (a quantized token embedding holds its blocks' values, as llama.cpp reads it)."""
    if weights not in ("float32", "stored"):
        raise ConversionError(f"weights: expected 'float32' or 'stored'; found {weights!r}")
    if weights == "stored" and trainable:
        raise ConversionError("weights='stored' is for inference; it cannot be trainable")
    imported = import_gguf(path, tokenizer)
    assert imported.tokenizer is not None  # import_gguf requires one by default
    model = build_model(imported.model_config, imported.arrays, backend, trainable)
    if weights == "stored":
        use_stored_weights(model, imported)
    return RunnableModel(model, imported.tokenizer, None, Path(path), imported.origin())


def use_stored_weights(model: Any, imported: GgufModel) -> list[str]:
    """Swap each linear of ``model`` whose GGUF tensor is Q8_0, Q4_0 or F16 for a
    ``BlockLinear`` over the stored bytes, and the head for a ``BlockHead`` likewise;
    returns the layers swapped."""
    from riftco.nn import BlockHead, BlockLinear
    from riftco.tensor import BlockWeight

    modules = dict(model.named_modules())
    swapped = []
    for name, (tensor, take_rows) in linear_sources(imported.model_config).items():
        raw = imported.stored.get(tensor)
        if raw is None:
            continue
        fmt = imported.types[tensor].lower()
        linear = modules[name]
        shape = (linear.out_features, linear.in_features)
        data = np.ascontiguousarray(take_rows(raw))
        weight = BlockWeight.from_bytes(data, fmt, shape, backend=linear.weight.value.backend)
        model.replace_child(name, BlockLinear(weight, linear.bias))
        swapped.append(name)
    c = imported.model_config
    source = "token_embd.weight" if c.tie_embeddings else "output.weight"
    raw = imported.stored.get(source)
    if raw is not None:
        head = modules["language_model_head"]
        backend = model.token_embedding.weight.value.backend
        fmt = imported.types[source].lower()
        weight = BlockWeight.from_bytes(raw, fmt, (c.vocab_size, c.d_model), backend=backend)
        block_head = BlockHead(weight, head.bias, of_tied_embedding=c.tie_embeddings)
        model.replace_child("language_model_head", block_head)
        swapped.append("language_model_head")
    return swapped


def config_from_gguf(
    metadata: Mapping[str, Any], tensors: Mapping[str, np.ndarray]
) -> TransformerConfig:
    """The configuration llama.cpp's keys and tensor shapes describe."""
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ConversionError(
            f"general.architecture: riftco reads {' and '.join(map(repr, ARCHITECTURES))}; "
            f"found {arch!r}"
        )
    for key, allowed in _REFUSED.items():
        if metadata.get(f"{arch}.{key}") not in allowed:
            raise ConversionError(
                f"{arch}.{key}={metadata[f'{arch}.{key}']!r} is not supported by riftco"
            )
    if "rope_freqs.weight" in tensors:
        raise ConversionError(
            "rope_freqs.weight: llama.cpp scales the rotary frequencies with it (Llama 3.1 "
            "style), which riftco does not implement"
        )
    embedding = tensors.get("token_embd.weight")
    if embedding is None or embedding.ndim != 2:
        raise ConversionError("tensors: expected token_embd.weight, a matrix")
    vocab_size = int(embedding.shape[0])
    tokens = metadata.get(TOKENS)
    if isinstance(tokens, list) and len(tokens) != vocab_size:
        raise ConversionError(
            f"{TOKENS}: expected {vocab_size} tokens (the rows of token_embd.weight); "
            f"found {len(tokens)}"
        )
    d_model, heads = (
        _count(metadata, f"{arch}.embedding_length"),
        _count(metadata, f"{arch}.attention.head_count"),
    )
    kv_heads = metadata.get(f"{arch}.attention.head_count_kv", heads)
    head_dim = d_model // heads if d_model % heads == 0 else None
    lengths = ["attention.key_length", "attention.value_length"]
    if arch != GPT2:
        lengths.append("rope.dimension_count")
    for key in lengths:
        value = metadata.get(f"{arch}.{key}")
        if value is not None and value != head_dim:
            raise ConversionError(
                f"{arch}.{key}={value!r} is not supported (riftco needs "
                f"embedding_length / head_count = {head_dim})"
            )
    sizes: dict[str, Any] = dict(
        vocab_size=vocab_size,
        context_length=_count(metadata, f"{arch}.context_length"),
        d_model=d_model,
        n_layers=_count(metadata, f"{arch}.block_count"),
        n_heads=heads,
        d_ff=_count(metadata, f"{arch}.feed_forward_length"),
        tie_embeddings="output.weight" not in tensors,
    )
    if arch == GPT2:
        if kv_heads != heads:
            raise ConversionError(
                f"gpt2.attention.head_count_kv={kv_heads!r}: llama.cpp's gpt2 graph has "
                f"one key/value head per query head ({heads})"
            )
        eps = _number(metadata, "gpt2.attention.layer_norm_epsilon", 1e-5)
        return TransformerConfig.preset("gpt2", **sizes, norm_eps=eps, gelu="tanh")
    if not isinstance(kv_heads, int) or isinstance(kv_heads, bool):
        raise ConversionError(
            f"llama.attention.head_count_kv: expected an integer; found {kv_heads!r}"
        )
    return TransformerConfig.preset(
        "llama",
        **sizes,
        kv_heads=None if kv_heads == heads else kv_heads,
        norm_eps=_number(metadata, "llama.attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta=_number(metadata, "llama.rope.freq_base", 10000.0),
    )


#: The ``riftco.*`` keys every riftco release before ``riftco.digest`` wrote, and only those.
OLDER_KEYS = frozenset(
    {
        RIFTCO_FORMAT_VERSION,
        RIFTCO_CONFIG,
        RIFTCO_STATE,
        RIFTCO_PARITY,
        RIFTCO_LINEAGE,
        RIFTCO_TENSORS,
    }
)
#: The fields of a ``riftco.tensors`` record: as written before the digest, and since.
_OLDER_RECORD = frozenset({"sha256", "file_type"})
_RECORD = _OLDER_RECORD | {"layout_sha256", "metadata_digest"}
#: Since each tensor's own checksum was added (``tensor_sha256``).
_TENSORS_RECORD = _RECORD | {"tensor_sha256"}
#: ``general.architecture`` of the original riftco-transformer's GGUF files, whose
#: ``riftco.*`` keys are that architecture's (read by :mod:`riftco.interchange.original_exports`).
_ORIGINAL_ARCHITECTURE = "riftco"


def riftco_key_names(metadata: Mapping[str, Any]) -> list[str]:
    """The file's ``riftco.*`` keys (none in a file of the original's ``riftco``
    architecture, where they are llama.cpp-style architecture keys)."""
    if metadata.get("general.architecture") == _ORIGINAL_ARCHITECTURE:
        return []
    return sorted(key for key in metadata if key.startswith("riftco."))


def _check_riftco_keys(stored: GgufFile) -> dict[str, str] | None:
    """The digests ``riftco.digest`` records, by key, after checking that they cover
    exactly the file's ``riftco.*`` keys; None for a file without the digest (llama.cpp's,
    or an older riftco's, whose keys must then be exactly :data:`OLDER_KEYS`)."""
    metadata = stored.metadata
    present = riftco_key_names(metadata)
    if not present:
        return None
    record = _tensors_record(metadata)
    if RIFTCO_DIGEST not in metadata:
        if record is not None and "metadata_digest" in record:
            raise IntegrityError(
                f"{RIFTCO_DIGEST}: missing, and {RIFTCO_TENSORS} records that the file has "
                f"one (a renamed or removed key); found {_listed(present)}"
            )
        _same_keys(sorted(OLDER_KEYS), present, "riftco.* keys without riftco.digest")
        return None
    recorded = _parse_digest(stored)
    _same_keys(sorted(recorded), [k for k in present if k != RIFTCO_DIGEST], RIFTCO_DIGEST)
    if record is None or "metadata_digest" not in record:  # _RECORD or _TENSORS_RECORD
        raise IntegrityError(
            f"{RIFTCO_TENSORS}: expected a record with the fields {sorted(_RECORD)} beside "
            f"{RIFTCO_DIGEST}; found {None if record is None else sorted(record)}"
        )
    return recorded


def _same_keys(expected: list[str], found: list[str], what: str) -> None:
    missing = [k for k in expected if k not in found]
    unknown = [k for k in found if k not in expected]
    if not missing and not unknown:
        return
    parts = []
    if missing:
        parts.append(f"{_listed(missing)} missing")
    if unknown:
        parts.append(f"{_listed(unknown)} not expected")
    hint = " (a renamed key?)" if missing and unknown else " (a renamed or removed key?)"
    raise IntegrityError(f"{what}: expected {_listed(expected)}; {', '.join(parts)}{hint}")


def _listed(keys: list[str]) -> str:
    shown = ", ".join(repr(k[:80]) for k in keys[:8])
    return shown + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


def _parse_digest(stored: GgufFile) -> dict[str, str]:
    raw = stored.metadata[RIFTCO_DIGEST]
    expected = f'{RIFTCO_DIGEST}: expected the JSON string {{"sha256": {{key: 64 hex digits}}}}'
    if stored.types.get(RIFTCO_DIGEST) != "STRING" or not isinstance(raw, str):
        raise IntegrityError(f"{expected}; found type {stored.types.get(RIFTCO_DIGEST)}")
    try:
        document = loads_strict(raw)
    except ValueError as exc:
        raise IntegrityError(f"{expected}; {exc}") from None
    digests = document.get("sha256") if isinstance(document, dict) else None
    if (
        not isinstance(document, dict)
        or set(document) != {"sha256"}
        or not isinstance(digests, dict)
    ):
        raise IntegrityError(f"{expected}; found {raw[:200]!r}")
    for key, value in digests.items():
        if not key.startswith("riftco.") or key == RIFTCO_DIGEST or not _is_sha256(value):
            raise IntegrityError(f"{expected}; found {key[:80]!r}: {str(value)[:80]!r}")
    return digests


def _is_sha256(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def _check_key_values(stored: GgufFile, recorded: dict[str, str] | None) -> str:
    """``ok`` when every key ``riftco.digest`` covers has its recorded digest; else
    IntegrityError naming the keys whose type or value changed."""
    if recorded is None:
        if riftco_key_names(stored.metadata):
            return (
                "not verified: written by riftco before riftco.digest (the riftco.* keys were "
                "checked as a set and against llama.cpp's keys, their values against no digest)"
            )
        return "not verified: this GGUF file records no riftco.* metadata"
    changed = [
        key for key, digest in sorted(recorded.items()) if _value_digest(stored, key) != digest
    ]
    if changed:
        raise IntegrityError(
            f"{_listed(changed)}: the type or value differs from the one {RIFTCO_DIGEST} "
            "records (the metadata was changed or corrupted after export)"
        )
    return "ok"


def _value_digest(stored: GgufFile, key: str) -> str:
    try:
        return key_digest(key, stored.types.get(key, ""), stored.metadata[key])
    except ContainerError:
        return ""  # a value canonical JSON cannot hold is not the one recorded


def _tensors_record(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """``riftco.tensors`` parsed and checked field by field; None when absent."""
    raw = metadata.get(RIFTCO_TENSORS)
    if raw is None:
        return None
    expected = f"{RIFTCO_TENSORS}: expected JSON with the fields {sorted(_RECORD)}"
    try:
        record = loads_strict(raw) if isinstance(raw, str) else None
    except ValueError:
        record = None
    if not isinstance(record, dict) or set(record) not in (
        _OLDER_RECORD,
        _RECORD,
        _TENSORS_RECORD,
    ):
        found = sorted(record) if isinstance(record, dict) else f"{str(raw)[:200]!r}"
        raise ConversionError(
            f"{expected} (or, before {RIFTCO_DIGEST}, {sorted(_OLDER_RECORD)}); found {found}"
        )
    hashes = [record["sha256"], record.get("layout_sha256", "0" * 64)]
    file_type = record["file_type"]
    if not all(_is_sha256(h) for h in hashes) or not _is_count(file_type):
        raise ConversionError(f"{expected}; found {raw[:300]!r}")
    each = record.get("tensor_sha256", {})
    if not isinstance(each, dict) or not all(
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and len(entry[0]) <= 16
        and _is_sha256(entry[1])
        for entry in each.values()
    ):
        raise ConversionError(
            f"{RIFTCO_TENSORS}: tensor_sha256: expected {{name: [ggml type, SHA-256]}}; "
            f"found {str(each)[:200]!r}"
        )
    if "metadata_digest" in record and record["metadata_digest"] != RIFTCO_DIGEST:
        raise ConversionError(
            f"{RIFTCO_TENSORS}: metadata_digest: expected {RIFTCO_DIGEST!r}; "
            f"found {str(record['metadata_digest'])[:80]!r}"
        )
    return record


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_integrity(stored: GgufFile) -> str:
    """The tensors against ``riftco.tensors``: ``ok``; or ``not verified: <why>`` when
    there is no record, or when another tool re-encoded the tensors since export
    (``general.file_type`` and the tensors' types both differ from those recorded; the
    record's one checksum over all tensors no longer applies, but each tensor left as
    exported is still checked against its own ``tensor_sha256``). IntegrityError on a
    mismatch wherever a checksum applies."""
    record = _tensors_record(stored.metadata)
    if record is None:
        return "not verified: this GGUF file records no checksum"
    sha256, file_type = record["sha256"], record["file_type"]
    layout = layout_digest(stored.tensors.values())
    same_layout = record.get("layout_sha256") == layout
    found_type = stored.metadata.get("general.file_type")
    if found_type != file_type and not same_layout:
        return _re_encoded(stored, record, found_type)
    if stored.digest != sha256:
        changed = [
            name
            for name, (kind, digest) in sorted(record.get("tensor_sha256", {}).items())
            if stored.tensor_digests.get(name) != digest
        ]
        which = f" ({_listed(changed)})" if changed else ""
        raise IntegrityError(
            f"tensors: SHA-256 is {stored.digest}; {RIFTCO_TENSORS} records {sha256} "
            f"(the tensor data was changed or corrupted{which})"
        )
    if "layout_sha256" in record and not same_layout:
        raise IntegrityError(
            f"{RIFTCO_TENSORS}: layout_sha256 is not the one of the tensors its sha256 "
            "matches (the record was changed or corrupted)"
        )
    return "ok"


def _re_encoded(stored: GgufFile, record: dict[str, Any], found_type: Any) -> str:
    """The state of a file whose tensors another tool re-encoded: each tensor it left in
    its recorded type checked against its own digest (IntegrityError on a mismatch)."""
    why = (
        f"not verified: re-encoded by another tool (general.file_type {record['file_type']} "
        f"-> {found_type!r}, tensor types changed)"
    )
    each = record.get("tensor_sha256")
    if each is None:
        return f"{why}; {RIFTCO_TENSORS} holds one checksum over the tensors as exported"
    kept = [
        name
        for name, (kind, _) in sorted(each.items())
        if name in stored.tensors and stored.tensors[name].ggml_type == kind
    ]
    bad = [name for name in kept if stored.tensor_digests.get(name) != each[name][1]]
    if bad:
        raise IntegrityError(
            f"tensors: {_listed(bad)}: SHA-256 differs from the one {RIFTCO_TENSORS} records "
            "for a tensor still in its exported type (the tensor data was changed or "
            "corrupted)"
        )
    changed = len(stored.tensors) - len(kept)
    return (
        f"{why}: {changed} of {len(stored.tensors)} tensors are in another type and cannot "
        f"be checked; the other {len(kept)} match their SHA-256 in {RIFTCO_TENSORS}"
    )


def _reconcile(derived: TransformerConfig, metadata: Mapping[str, Any]) -> TransformerConfig:
    """``riftco.config`` when it agrees with what llama.cpp's keys say, else an error."""
    raw = metadata.get(RIFTCO_CONFIG)
    if raw is None:
        return derived
    try:
        stored = config_from_dict(loads_strict(raw) if isinstance(raw, str) else None)
    except (ValueError, ManifestError) as exc:
        raise ConversionError(f"{RIFTCO_CONFIG}: {exc}") from None
    fields = list(_SHARED_FIELDS)
    fields += ["gelu"] if derived.family == "gpt" else ["linear_bias"]
    for name in fields:
        if getattr(stored, name) != getattr(derived, name):
            raise _disagrees(name, getattr(stored, name), getattr(derived, name))
    for name in ("norm_eps",) if derived.family == "gpt" else ("norm_eps", "rope_theta"):
        if np.float32(getattr(stored, name)) != np.float32(getattr(derived, name)):
            raise _disagrees(name, getattr(stored, name), getattr(derived, name))
    return stored


def _disagrees(name: str, stored: Any, derived: Any) -> ConversionError:
    return ConversionError(
        f"{RIFTCO_CONFIG}: {name}={stored!r} disagrees with llama.cpp's keys and tensors, "
        f"which say {derived!r} (the file was changed after export?)"
    )


def _count(metadata: Mapping[str, Any], key: str) -> int:
    value = metadata.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConversionError(f"{key}: expected a positive integer; found {value!r}")
    return value


def _number(metadata: Mapping[str, Any], key: str, default: float) -> float:
    value = metadata.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ConversionError(f"{key}: expected a positive number; found {value!r}")
    # GGUF stores float32: take the shortest decimal that rounds to it (1e-05, not 9.99e-06).
    return float(str(np.float32(value)))
