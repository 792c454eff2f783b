"""A programmed decoder as a ``.rift`` bundle, with its program recorded.

Needs the extra ``bundle`` (riftco-interchange). The bundle's config holds the model
configuration and the program's record: its source text, its context, its output type
and the digest of its compiled map. Loading recompiles the source, refuses a program
whose map no longer has the recorded digest, rebuilds the model and loads every tensor
(the program's coefficients included) strictly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from riftco.cajal.compiler import compile_program
from riftco.cajal.programmed.config import ProgrammedConfig, ProgrammedConfigError
from riftco.cajal.programmed.model import ProgrammedDecoder
from riftco.cajal.syntax import parse, parse_context
from riftco.interchange.bundle import Bundle, read_bundle, write_bundle
from riftco.tensor import Backend

FORMAT = "riftco-cajal/programmed"
FORMAT_VERSION = 1


def save_programmed(
    path: str | os.PathLike[str],
    model: ProgrammedDecoder,
    *,
    symbols: Sequence[str] = (),
    stage: str = "pretraining",
    parent_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``model`` atomically; ``symbols`` (one string per token id) is stored as the
    bundle's vocabulary. Returns the manifest (its ``artifact_id`` included)."""
    if symbols and len(symbols) != model.config.vocab_size:
        raise ProgrammedConfigError(
            f"symbols: expected {model.config.vocab_size} (one per token id), found {len(symbols)}"
        )
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model.config.to_dict(),
        "program": model.program_record,
        "seed": model.seed,
        "state_version": model.STATE_VERSION,
    }
    tensors = {
        name: np.ascontiguousarray(t.numpy(), dtype=np.float32)
        for name, t in model.state_dict().items()
    }
    tokenizer = {"kind": "symbols", "symbols": list(symbols)}
    return write_bundle(path, config, tensors, tokenizer, stage, parent_id, metadata)


def load_programmed(
    path: str | os.PathLike[str], *, backend: str | Backend | None = None
) -> tuple[ProgrammedDecoder, Bundle]:
    """The model a bundle holds (validated first) and the bundle itself."""
    bundle = read_bundle(path, copy=True)
    config = bundle.config
    if config.get("format") != FORMAT or config.get("format_version") != FORMAT_VERSION:
        raise ProgrammedConfigError(
            f"{path}: expected a {FORMAT!r} version {FORMAT_VERSION} config, found "
            f"{config.get('format')!r} version {config.get('format_version')!r}"
        )
    missing = sorted({"model", "program"} - set(config))
    if missing:
        raise ProgrammedConfigError(f"{path}: the config lacks {missing}")
    model_config = ProgrammedConfig.from_dict(config["model"])
    record = config["program"]
    if record is not None and (
        not isinstance(record, dict)
        or not all(isinstance(record.get(k), str) for k in ("source", "context", "map_sha256"))
    ):
        raise ProgrammedConfigError(
            f"{path}: expected the program record to hold source, context and map_sha256 strings"
        )
    program = None
    if record is not None:
        program = compile_program(parse(record["source"]), parse_context(record["context"]))
        digest = program.map.digest()
        if digest != record["map_sha256"]:
            raise ProgrammedConfigError(
                f"{path}: the recorded program compiles to a map with digest {digest}; the "
                f"bundle records {record['map_sha256']}"
            )
    model = ProgrammedDecoder(model_config, program, seed=config.get("seed", 0), backend=backend)
    model.load_state_dict(bundle.tensors, strict=True)
    return model, bundle
