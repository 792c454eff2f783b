"""``riftco inspect FILE``: what a bundle, safetensors file, GGUF or ONNX file, or model
directory holds, and whether riftco's import takes it.

Each kind is read by its importer (``read_bundle`` and ``validate_bundle``,
``import_gguf``, ``import_onnx``, ``import_huggingface``, ``read_original``) and then
checked by :func:`riftco.interchange.convert.check_fits`, so inspect refuses what
import and convert refuse. Exit status: 0 when the file passes; 1 when a check fails
(the error on stderr, or ``integrity``/``values`` ``FAILED`` in the report) or when
import would refuse it (``import: refused: ...``, e.g. a tokenizer riftco cannot read
or whose ids do not fit the vocabulary, or a training checkpoint of the original
riftco-transformer, which is not a model file); 2 for a usage error. ``integrity`` is
``ok`` only where every checksum the file records was checked and matched; where a
check could not be made it is ``not verified (<why>)`` (no checksum; tensors another
tool re-encoded), never ``ok``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange.bundle import read_bundle, read_manifest
from riftco.interchange.container import read_safetensors
from riftco.interchange.errors import IntegrityError, InterchangeError
from riftco.interchange.manifest import MANIFEST_KEY


def main(argv: list[str]) -> int:
    """Show a .rift bundle's config, size, stage, lineage, identity and integrity."""
    parser = argparse.ArgumentParser(
        prog="riftco inspect",
        description="Describe a .rift bundle, a safetensors, .gguf or .onnx file or a Hugging "
        "Face directory, and verify its integrity (exit status 1 when it fails).",
    )
    parser.add_argument(
        "file",
        type=Path,
        help="a .rift bundle, a .safetensors, .gguf or .onnx file, or a directory",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        report = describe(args.file)
    except InterchangeError as exc:
        print(f"riftco inspect: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, ensure_ascii=False) if args.json else render(report))
    return 1 if refused(report) else 0


def refused(report: dict[str, Any]) -> bool:
    """Whether the file described fails a check (``integrity`` or ``values`` FAILED) or
    its import refuses it (``import`` says why): ``riftco inspect`` then exits 1."""
    failed = any(str(report.get(k, "")).startswith("FAILED") for k in ("integrity", "values"))
    return failed or str(report.get("import", "ok")) != "ok"


def describe(path: Path) -> dict[str, Any]:
    """A JSON-ready description of ``path``."""
    from riftco.interchange.original_exports import original_kind
    from riftco.interchange.runnable_files import how_to_continue, original_checkpoint_summary

    checkpoint = original_checkpoint_summary(path)
    if checkpoint is not None:
        return {
            "path": str(path),
            "kind": "riftco-transformer 0.6.1 training checkpoint (.riftckpt)",
            **checkpoint,
            "integrity": "not verified (a training checkpoint: inspect reads its manifest "
            "only; riftco.train.read_original_checkpoint checks every member's SHA-256 "
            "and the checkpoint_id)",
            "import": f"refused: {how_to_continue(path)}",
        }
    kind = original_kind(path)
    if kind is not None:
        return _describe_original(path, kind)
    if path.is_dir():
        return _describe_directory(path)
    if path.suffix.lower() in (".gguf", ".onnx"):
        return _describe_export(path)
    stored = read_safetensors(path)
    if MANIFEST_KEY not in stored.metadata:
        return {
            "path": str(path),
            "kind": "safetensors",
            "tensors": len(stored.tensors),
            "parameters": sum(info.size for info in stored.tensors.values()),
            "dtypes": sorted({info.dtype for info in stored.tensors.values()}),
            "metadata": dict(stored.metadata),
            "integrity": "not verified: plain SafeTensors files carry no checksum "
            "(the header and the tensors' layout were checked)",
            "values": values_report(stored.arrays()),
        }
    manifest = read_manifest(path)
    try:
        from riftco.interchange.models import validate_bundle

        bundle = read_bundle(path)
        config, bundle_tokenizer = validate_bundle(bundle)  # what load_bundle checks
        integrity = "ok"
        values = values_report(bundle.tensors)
        verdict = _import_verdict(path, config, bundle.tensors, bundle_tokenizer, None)
    except InterchangeError as exc:
        integrity = f"FAILED: {exc}"
        values = "not checked (the file failed its integrity check)"
        verdict = "refused: the file failed its integrity check"
    tokenizer = manifest["tokenizer"]
    return {
        "path": str(path),
        "kind": "rift bundle",
        "format": f"{manifest['format']} v{manifest['format_version']}",
        "artifact_id": manifest["artifact_id"],
        "stage": manifest["stage"],
        "parent_id": manifest["parent_id"],
        "parameters": manifest["weights"]["parameters"],
        "tensors": manifest["weights"]["tensors"],
        "weights_sha256": manifest["weights"]["sha256"],
        "config": manifest["config"],
        "tokenizer": {
            "method": tokenizer.get("method"),
            "special_tokens": [t.get("content") for t in tokenizer.get("special_tokens", [])],
            "eos_token": tokenizer.get("eos_token"),
            "chat_template": tokenizer.get("chat_template") is not None,
        },
        "metadata": manifest["metadata"],
        "integrity": integrity,
        "verified": "identity (the manifest's hash), the weights' SHA-256, every tensor's "
        "shape against the configuration, the tokenizer against the vocabulary",
        "values": values,
        "import": verdict,
    }


def _describe_export(path: Path) -> dict[str, Any]:
    """A GGUF file (any llama.cpp ``gpt2``/``llama`` file) or an ONNX export riftco wrote
    (with its ``.onnx.json`` sidecar), read by the importer: every check import makes is
    made here, the digests the file records included."""
    gguf = path.suffix.lower() == ".gguf"
    kind = "gguf" if gguf else "onnx"
    try:
        if gguf:
            from riftco.interchange.gguf_import import import_gguf
            from riftco.interchange.gguf_tokenizer import RIFTCO_PARITY

            model: Any = import_gguf(path, require_tokenizer=False)
            extra = {
                "architecture": model.architecture,
                "name": model.metadata.get("general.name"),
                "file_type": model.metadata.get("general.file_type"),
                "tokenizer_parity": model.metadata.get(RIFTCO_PARITY),
            }
            problem = model.tokenizer_error
        else:
            from riftco.interchange.onnx_import import import_onnx

            model = import_onnx(path)
            onnx = model.sidecar.get("onnx", {})
            extra = {"opset": onnx.get("opset"), "onnx_sha256": onnx.get("sha256")}
            problem = None if model.tokenizer is not None else "the sidecar holds no tokenizer"
    except IntegrityError as exc:
        return {"path": str(path), "kind": kind, "integrity": f"FAILED: {exc}"}
    tokenizer = model.tokenizer
    if not gguf:
        integrity = "ok"
        verified = "the SHA-256 of the .onnx file and its external data against the sidecar"
    else:
        integrity, verified = _gguf_integrity(model.verified)
    return {
        "path": str(path),
        "kind": kind,
        **{k: v for k, v in extra.items() if v is not None},
        "parameters": sum(int(a.size) for a in model.arrays.values()),
        "tensors": len(model.arrays),
        "config": model.model_config.to_dict(),
        "lineage": dict(model.lineage),
        "tokenizer": None
        if tokenizer is None
        else {
            "method": type(tokenizer).__name__,
            "vocab_size": tokenizer.vocab_size,
            "special_tokens": list(getattr(tokenizer, "special_tokens", {})),
        },
        "integrity": integrity,
        "verified": verified,
        "values": values_report(model.arrays),
        "import": _import_verdict(path, model.model_config, model.arrays, tokenizer, problem),
    }


def _gguf_integrity(checks: dict[str, str]) -> tuple[str, str]:
    """``integrity`` and ``verified`` for a GGUF file from what import verified."""
    from riftco.interchange.gguf_export import RIFTCO_DIGEST, RIFTCO_TENSORS

    done = {
        "tensors": f"the tensors' SHA-256 against {RIFTCO_TENSORS}",
        "metadata": f"every riftco.* key's type and value against {RIFTCO_DIGEST}",
    }
    verified = [done[part] for part, state in checks.items() if state == "ok"]
    missing = [
        f"{part}: {state.removeprefix('not verified: ')}"
        for part, state in checks.items()
        if state != "ok"
    ]
    layout = "the header, the tensors' layout and their shapes against the configuration"
    integrity = "ok" if not missing else f"not verified ({'; '.join(missing)})"
    return integrity, "; ".join([*verified, layout])


def _import_verdict(
    path: Path, config: Any, arrays: Any, tokenizer: Any, problem: str | None
) -> str:
    """``ok`` when importing the file as it is (its own tokenizer) and converting it
    succeed, else ``refused: <why>``: the tokenizer could not be read, or the checks
    :func:`riftco.interchange.convert.check_fits` makes before writing fail."""
    from riftco.interchange.convert import check_fits

    if tokenizer is None:
        return f"refused: {problem or 'no tokenizer'} (pass a tokenizer to import it)"
    try:
        check_fits(path, config, arrays, tokenizer)
    except InterchangeError as exc:
        return f"refused: {exc}"
    return "ok"


def values_report(arrays: Any) -> str:
    """``all finite``, or which floating-point tensors hold NaN or infinity."""
    bad = [
        name
        for name, array in arrays.items()
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all()
    ]
    if not bad:
        return "all finite"
    more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
    return f"FAILED: NaN or infinity in {', '.join(sorted(bad)[:4])}{more}"


def _describe_original(path: Path, kind: str) -> dict[str, Any]:
    from riftco.interchange.original_exports import KINDS, read_original

    try:
        original = read_original(path, kind)
    except IntegrityError as exc:
        return {"path": str(path), "kind": KINDS[kind], "integrity": f"FAILED: {exc}"}
    tokenizer = original.tokenizer
    return {
        "path": str(path),
        "kind": KINDS[kind],
        "artifact_id": original.artifact_id,
        "stage": original.stage,
        "parent_id": original.parent_artifact_id,
        "parameters": sum(int(a.size) for a in original.arrays.values()),
        "tensors": len(original.arrays),
        "config": original.config.to_dict(),
        "original_config": original.original_config,
        "tokenizer": {
            "method": type(tokenizer).__name__,
            "vocab_size": tokenizer.vocab_size,
            "special_tokens": [],
            "eos_token": None,
            "chat_template": False,
        },
        "metadata": original.metadata,
        "integrity": "ok",
        "verified": "the payload's SHA-256 and the manifest's hash",
        "values": values_report(original.arrays),
        "import": _import_verdict(path, original.config, original.arrays, tokenizer, None),
    }


def _describe_directory(path: Path) -> dict[str, Any]:
    """A Hugging Face directory, read by the importer (:func:`import_huggingface`):
    ``config.json``, the weights' names, shapes and values, the tokenizer and its fit."""
    from riftco.interchange.huggingface import import_huggingface

    imported = import_huggingface(path, require_tokenizer=False)
    return {
        "path": str(path),
        "kind": f"Hugging Face directory ({imported.config.get('model_type')})",
        "parameters": sum(int(a.size) for a in imported.arrays.values()),
        "tensors": len(imported.arrays),
        "config": imported.model_config.to_dict(),
        "tokenizer": None if imported.tokenizer is None else repr(imported.tokenizer),
        "integrity": "not verified: Hugging Face directories carry no checksum (config.json, "
        "the tensors' names and shapes were checked)",
        "values": values_report(imported.arrays),
        "import": _import_verdict(
            path,
            imported.model_config,
            imported.arrays,
            imported.tokenizer,
            imported.tokenizer_error,
        ),
    }


def render(report: dict[str, Any]) -> str:
    """The report as aligned ``key: value`` lines."""
    lines = []
    for key, value in report.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {_short(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {_short(value)}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
