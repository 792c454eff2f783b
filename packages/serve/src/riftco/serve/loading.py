"""From a ``.rift`` bundle to a served app: the loader, and factories for ASGI hosts.

    uvicorn --factory riftco.serve.loading:from_environment   # RIFTCO_SERVE_MODEL=model.rift

A Ray Serve deployment (or any ASGI host) can mount ``app_from_bundle(path)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

import riftco.tensor as rt
from riftco.nn import TransformerConfig, required_capabilities_for
from riftco.serve.app import create_app
from riftco.serve.batch_engine import BatchEngine
from riftco.serve.config import ServerConfig
from riftco.serve.scheduler import SchedulerLimits


def engine_from_bundle(
    path: str | os.PathLike[str],
    *,
    model_id: str | None = None,
    backend: str | None = None,
    pages: int | None = None,
    page_size: int = 16,
    limits: SchedulerLimits | None = None,
    weights: str | None = None,
) -> BatchEngine:
    """Validate and load a bundle (riftco-interchange), then wrap it in a `BatchEngine`.
    The backend is checked for what serving the bundle's model needs before its weights
    are read (``riftco.tensor.JobUnsupported`` names what is missing). ``weights``
    (``f16``, ``q8_0`` or ``q4_0``) quantizes the model as ``riftco convert --dtype`` does
    (riftco.interchange.quantization: the linears, embedding and head); ``None`` or
    ``float32`` keeps float32."""
    from riftco.interchange import load_bundle
    from riftco.interchange.quantization import quantize_model

    require_serving_backend(path, backend, weights)
    runnable = load_bundle(path, backend=backend)
    if weights not in (None, "float32"):
        quantize_model(runnable.model, weights)
    return BatchEngine(
        runnable.model,
        runnable.tokenizer,
        model_id=model_id or default_model_id(path),
        pages=pages,
        page_size=page_size,
        limits=limits,
    )


def serving_capabilities(config: TransformerConfig, weights: str | None = None) -> tuple[str, ...]:
    """What decoding ``config`` over the paged cache needs (prefill included), on
    linear ``weights`` (None or ``float32``, ``f16``, ``q8_0``, ``q4_0``), in
    CAPABILITIES order: riftco.nn's list for the ``serve`` job."""
    return required_capabilities_for(config, "serve", weights=weights)


def require_serving_backend(
    path: str | os.PathLike[str],
    backend: str | rt.Backend | None = None,
    weights: str | None = None,
) -> rt.Backend:
    """The backend (``None``: RIFTCO_BACKEND or auto), once it has every capability that
    serving the bundle at ``path`` (on ``weights``) needs; reads the bundle's manifest,
    not its weights."""
    from riftco.interchange import read_manifest

    config = TransformerConfig.from_dict(read_manifest(path)["config"])
    needs = serving_capabilities(config, weights)
    return rt.require_capabilities(backend, needs, job="serving")


def default_model_id(path: str | os.PathLike[str]) -> str:
    """The bundle's file name without ``.rift``."""
    return Path(path).name.removesuffix(".rift") or "riftco"


def bundle_loader(path: str | os.PathLike[str], **options: Any) -> Callable[[], BatchEngine]:
    """A loader for `create_app`: the bundle is read when the app starts, so health
    checks answer (503) while it loads."""
    return lambda: engine_from_bundle(path, **options)


def app_from_bundle(
    path: str | os.PathLike[str], config: ServerConfig | None = None, **options: Any
) -> Starlette:
    """The ASGI app serving one bundle."""
    model_id = options.pop("model_id", None) or default_model_id(path)
    config = config or ServerConfig(model_id=model_id)
    return create_app(bundle_loader(path, model_id=model_id, **options), config)


def from_environment() -> Starlette:
    """An app factory configured by environment variables: ``RIFTCO_SERVE_MODEL`` (the
    bundle, required), ``RIFTCO_SERVE_MODEL_ID``, ``RIFTCO_API_KEY``,
    ``RIFTCO_SERVE_BIND_HOST`` (the address the host binds, default 127.0.0.1, which
    turns the Host check on) and ``RIFTCO_SERVE_ALLOWED_HOSTS`` (comma-separated)."""
    path = os.environ.get("RIFTCO_SERVE_MODEL")
    if not path:
        raise RuntimeError("from_environment: set RIFTCO_SERVE_MODEL to a .rift bundle")
    model_id = os.environ.get("RIFTCO_SERVE_MODEL_ID") or default_model_id(path)
    allowed = os.environ.get("RIFTCO_SERVE_ALLOWED_HOSTS", "")
    config = ServerConfig(
        model_id=model_id,
        bind_host=os.environ.get("RIFTCO_SERVE_BIND_HOST", "127.0.0.1"),
        api_key=os.environ.get("RIFTCO_API_KEY") or None,
        allowed_hosts=tuple(h.strip() for h in allowed.split(",") if h.strip()),
    )
    return app_from_bundle(path, config, model_id=model_id)


__all__ = [
    "app_from_bundle",
    "bundle_loader",
    "default_model_id",
    "engine_from_bundle",
    "from_environment",
    "require_serving_backend",
    "serving_capabilities",
]
