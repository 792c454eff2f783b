"""The guard to run before an exported ONNX graph: ids in range, sequences that fit.

The graph itself checks nothing. ONNX's ``Gather`` reads a negative index from the
end of the table, so a token id of -1 silently embeds the last token; an id past
the vocabulary or a sequence longer than the context fails inside ONNX Runtime with
a generic indexing error. ``check_onnx_input`` (or the same three checks in any
language, with the ``vocab_size`` and ``context_length`` of the sidecar's config)
turns each into an error that names the problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from riftco.interchange.errors import ConversionError


class OnnxInputError(ConversionError):
    """Token ids an exported graph would misread or fail on."""


def check_onnx_input(input_ids: Any, config: Mapping[str, Any] | Any) -> np.ndarray:
    """``input_ids`` as the graph's int64 ``[batch, sequence]`` input, after checking
    that every id lies in ``0..vocab_size-1`` and the sequence fits ``context_length``.

    ``config`` is the sidecar's ``config`` (a mapping) or a `TransformerConfig`."""
    vocab = int(_field(config, "vocab_size"))
    context = int(_field(config, "context_length"))
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise OnnxInputError(f"input_ids: expected shape [batch, sequence]; found {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise OnnxInputError(f"input_ids: expected integer token ids; found dtype {ids.dtype}")
    if ids.shape[1] > context:
        raise OnnxInputError(
            f"input_ids: {ids.shape[1]} tokens do not fit the context of {context}; keep the "
            f"newest {context} (or fewer) and run again"
        )
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise OnnxInputError(f"input_ids: token id {bad} is outside 0..{vocab - 1}")
    return ids.astype(np.int64, copy=False)


def _field(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config[name]
    return getattr(config, name)


__all__ = ["OnnxInputError", "check_onnx_input"]
