"""``riftco inspect FILE``: what a bundle, safetensors file or model directory holds."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from riftco.interchange.bundle import read_bundle, read_manifest
from riftco.interchange.container import read_safetensors
from riftco.interchange.errors import IntegrityError, InterchangeError
from riftco.interchange.manifest import MANIFEST_KEY


def main(argv: list[str]) -> int:
    """Show a .rift bundle's config, size, stage, lineage, identity and integrity."""
    parser = argparse.ArgumentParser(
        prog="riftco inspect",
        description="Describe a .rift bundle, a safetensors file or a Hugging Face directory, "
        "and verify its integrity (exit status 1 when it fails).",
    )
    parser.add_argument("file", type=Path, help="a .rift bundle, .safetensors file or directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        report = describe(args.file)
    except InterchangeError as exc:
        print(f"riftco inspect: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, ensure_ascii=False) if args.json else render(report))
    return 0 if report.get("integrity", "ok") == "ok" else 1


def describe(path: Path) -> dict[str, Any]:
    """A JSON-ready description of ``path``."""
    from riftco.interchange.original_exports import original_kind

    kind = original_kind(path)
    if kind is not None:
        return _describe_original(path, kind)
    if path.is_dir():
        return _describe_directory(path)
    stored = read_safetensors(path)
    if MANIFEST_KEY not in stored.metadata:
        return {
            "path": str(path),
            "kind": "safetensors",
            "tensors": len(stored.tensors),
            "parameters": sum(info.size for info in stored.tensors.values()),
            "dtypes": sorted({info.dtype for info in stored.tensors.values()}),
            "metadata": dict(stored.metadata),
            "integrity": "ok",
        }
    manifest = read_manifest(path)
    try:
        from riftco.interchange.models import validate_bundle

        validate_bundle(read_bundle(path))
        integrity = "ok"
    except InterchangeError as exc:
        integrity = f"FAILED: {exc}"
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
    }


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
        "integrity": "ok",
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
