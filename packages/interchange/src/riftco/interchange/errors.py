"""Typed errors: each says what was expected, what was found, and where.

Every error riftco-interchange raises on bad input is an :class:`InterchangeError`,
which is both a ``RiftcoError`` and a ``ValueError``.
"""

from __future__ import annotations

from riftco.tensor import RiftcoError


class InterchangeError(RiftcoError, ValueError):
    """Base class of every error raised by riftco.interchange."""


class ContainerError(InterchangeError):
    """A file that is not a well-formed, bounded safetensors container.

    Truncated files, oversized or malformed headers, unknown dtypes, bad shapes
    and overlapping or gapped data offsets all raise this.
    """


class IntegrityError(ContainerError):
    """A checksum or identity that does not match the content it describes."""


class BundleError(InterchangeError):
    """A ``.rift`` bundle whose manifest, configuration or weights are unacceptable."""


class ManifestError(BundleError):
    """A manifest with a wrong format, version, key or value."""


class WeightsError(BundleError):
    """Weights that disagree with the configuration, or hold NaN or infinity."""


class ConversionError(InterchangeError):
    """A model or directory that the requested format cannot represent faithfully."""


__all__ = [
    "BundleError",
    "ContainerError",
    "ConversionError",
    "IntegrityError",
    "InterchangeError",
    "ManifestError",
    "WeightsError",
]
