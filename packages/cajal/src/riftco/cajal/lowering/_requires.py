"""A clear message when the ``lowering`` extra is not installed."""

from __future__ import annotations

try:
    import numpy  # noqa: F401

    import riftco.nn  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"riftco.cajal.lowering needs riftco-nn and numpy ({exc}); install the extra: "
        "pip install 'riftco-cajal[lowering]'"
    ) from exc
