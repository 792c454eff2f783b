"""``riftco inspect FILE``: what a bundle, safetensors file, GGUF or ONNX file, or model
directory holds."""

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
    failed = any(str(report.get(k, "")).startswith("FAILED") for k in ("integrity", "values"))
    return 1 if failed else 0


def describe(path: Path) -> dict[str, Any]:
    """A JSON-ready description of ``path``."""
    from riftco.interchange.original_exports import original_kind

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
        validate_bundle(bundle)
        integrity = "ok"
        values = values_report(bundle.tensors)
    except InterchangeError as exc:
        integrity = f"FAILED: {exc}"
        values = "not checked (the file failed its integrity check)"
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
    }


def _describe_export(path: Path) -> dict[str, Any]:
    """A GGUF file (any llama.cpp ``gpt2``/``llama`` file) or an ONNX export riftco wrote
    (with its ``.onnx.json`` sidecar); reading it checks the digests it records."""
    gguf = path.suffix.lower() == ".gguf"
    kind = "gguf" if gguf else "onnx"
    try:
        if gguf:
            from riftco.interchange.gguf_export import RIFTCO_TENSORS
            from riftco.interchange.gguf_import import import_gguf
            from riftco.interchange.gguf_tokenizer import RIFTCO_PARITY

            model: Any = import_gguf(path, require_tokenizer=False)
            extra = {
                "architecture": model.architecture,
                "name": model.metadata.get("general.name"),
                "file_type": model.metadata.get("general.file_type"),
                "tokenizer_parity": model.metadata.get(RIFTCO_PARITY),
            }
        else:
            from riftco.interchange.onnx_import import import_onnx

            model = import_onnx(path)
            onnx = model.sidecar.get("onnx", {})
            extra = {"opset": onnx.get("opset"), "onnx_sha256": onnx.get("sha256")}
    except IntegrityError as exc:
        return {"path": str(path), "kind": kind, "integrity": f"FAILED: {exc}"}
    tokenizer = model.tokenizer
    if not gguf:
        integrity = "ok"
        verified = "the SHA-256 of the .onnx file and its external data against the sidecar"
    elif model.metadata.get(RIFTCO_TENSORS) is not None:
        integrity = "ok"
        verified = f"the tensors' SHA-256 against {RIFTCO_TENSORS}"
    else:
        integrity = "not verified: this GGUF file records no checksum"
        verified = "the header, the tensors' layout and their shapes against the configuration"
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
    }


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
    }


def _describe_directory(path: Path) -> dict[str, Any]:
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
