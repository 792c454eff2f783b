"""riftco.backends.tpu: a riftco backend over any PJRT C API plugin.

On a Cloud TPU VM it loads libtpu; elsewhere it loads the plugin named by
``RIFTCO_PJRT_PLUGIN`` (for example XLA's CPU plugin from ``xla-cpu-pjrt``).
Every op is a StableHLO program, compiled once per shape and cached.

>>> import riftco.tensor as rt
>>> x = rt.tensor([1.0, 2.0], backend="tpu")  # with a plugin available
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.backends.tpu import _native

if _native.__version__ != __version__:
    raise ImportError(
        f"riftco.backends.tpu {__version__} found its native module at version "
        f"{_native.__version__} ({_native.__file__}); reinstall riftco-backend-tpu so both "
        "come from one build"
    )

from riftco.backends.tpu.backend import API_VERSION, TpuBackend
from riftco.backends.tpu.config import PjrtConfig
from riftco.backends.tpu.config import from_env as pjrt_config
from riftco.backends.tpu.errors import PjrtError
from riftco.backends.tpu.plugin import PluginLocation, find_plugin
from riftco.tensor.plugin import BackendUnavailable


def native_build_id() -> str:
    """The build id of the compiled PJRT bindings (checked against the wheelhouse)."""
    return _native.BUILD_ID


def create_backend() -> TpuBackend:
    """Entry-point factory for ``tpu``: find a plugin and open it, with the client
    options, determinism and disk cache of ``pjrt_config()``. The client itself is
    created on first use (listing backends never takes a GPU), except for a plugin
    whose file name does not say what it runs on.

    Raises ``BackendUnavailable`` with the reason when there is no plugin, a setting
    is malformed, or the plugin fails to initialize.
    """
    location = find_plugin()
    config = pjrt_config()
    try:
        device = _native.Device(
            str(location.path),
            list(config.options),
            deterministic=config.deterministic,
            cache_dir=None if config.cache_dir is None else str(config.cache_dir),
            cache_max_bytes=config.cache_max_bytes,
        )
    except PjrtError as exc:
        raise BackendUnavailable(
            f"PJRT plugin {location.path} (from {location.source}) failed to initialize: {exc}"
        ) from exc
    return TpuBackend(device, location)


__all__ = [
    "API_VERSION",
    "PjrtConfig",
    "PjrtError",
    "PluginLocation",
    "TpuBackend",
    "create_backend",
    "find_plugin",
    "native_build_id",
    "pjrt_config",
]
