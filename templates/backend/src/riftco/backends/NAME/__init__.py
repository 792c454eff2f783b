"""riftco.backends.NAME: the NAME backend of riftco-tensor.

>>> import riftco.tensor as rt
>>> rt.tensor([[1.0, 2.0]], backend="NAME").softmax().numpy()
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.backends.NAME import _native

if _native.__version__ != __version__:
    raise ImportError(
        f"riftco.backends.NAME {__version__} found its native module at version "
        f"{_native.__version__} ({_native.__file__}); reinstall riftco-backend-NAME so both "
        "come from one build"
    )

from riftco.backends.NAME.backend import API_VERSION, PLUGINCLASS
from riftco.backends.NAME.device import HostDevice


def native_build_id() -> str:
    """The build id of the compiled kernels (checked against the wheelhouse)."""
    return _native.BUILD_ID


def create_backend() -> PLUGINCLASS:
    """Entry-point factory for ``NAME``. Cheap checks only; raise
    ``riftco.tensor.plugin.BackendUnavailable`` with the reason when there is no device.
    Until the native module opens the real device, the backend runs on the host."""
    return PLUGINCLASS(HostDevice())


__all__ = ["API_VERSION", "PLUGINCLASS", "create_backend", "native_build_id"]
