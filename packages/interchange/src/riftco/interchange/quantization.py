"""The tensor types of a quantized model, for ``convert --dtype``
(:func:`~riftco.interchange.gguf_export.export_gguf`) and ``--weights``
(:func:`quantize_model`): riftco-nn's one rule (``riftco.nn.matrix_type``) and its one
in-process quantizer (``riftco.nn.quantize_for_inference``), so that the file
``convert`` writes is the model ``generate --weights`` runs.

With ``dtype`` ``q8_0`` or ``q4_0`` every matrix is quantized to it, the token
embedding and the language-model head included (what ``llama-quantize --pure``
writes, byte for byte); a matrix whose rows do not hold whole blocks of 32 is F16.
``keep_float`` names the matrices that stay float32 instead: ``token_embd`` (the
token embedding), ``output`` (the head). A tied head is the token embedding: it
stays float32 when either is named. The position embedding and every vector are
always float32. With ``dtype`` ``f16`` the same rule holds with F16 for the
quantized type.

llama-quantize's default differs for the head (``llama_tensor_get_type``): a Q4_0
file gets ``output.weight`` (or a tied ``token_embd.weight``) as Q6_K, or as Q8_0
where its rows are not a multiple of 256; riftco has no Q6_K, so its default is the
``--pure`` one. A Q8_0 file is the same either way.

This module gives the rule riftco-interchange's names and typed errors
(``ConversionError``): :func:`check_keep_float`, :func:`parse_keep_float` (the command
line's ``--keep-float``), :func:`gguf_role` (a GGUF tensor's role) and
:func:`quantize_model`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import riftco.nn as nn
from riftco.interchange.errors import ConversionError
from riftco.nn import KEEPABLE, BlockHead, ConfigError, matrix_type

#: The dtypes whose matrices the rule quantizes (riftco-nn's ``INFERENCE_FORMATS``).
QUANTIZED = tuple(nn.INFERENCE_FORMATS)


def check_keep_float(keep_float: Iterable[str] | None) -> frozenset[str]:
    """``keep_float`` as a set of :data:`KEEPABLE` names; ConversionError otherwise."""
    try:
        return nn.check_keep_float(keep_float)
    except ConfigError as e:
        raise ConversionError(str(e)) from e


def parse_keep_float(text: str) -> frozenset[str]:
    """The command line's ``--keep-float`` value: ``none`` or comma-separated names."""
    if text.strip().lower() == "none":
        return frozenset()
    return check_keep_float(part.strip() for part in text.split(",") if part.strip())


def gguf_role(name: str, tied: bool) -> str:
    """The role (see ``riftco.nn.matrix_type``) of the GGUF matrix ``name``."""
    if name == "token_embd.weight":
        return "tied" if tied else "token_embd"
    if name == "output.weight":
        return "output"
    if name == "position_embd.weight":
        return "position_embd"
    return "linear"


def quantize_model(
    model: Any, dtype: str, keep_float: Iterable[str] | None = None
) -> dict[str, str]:
    """Quantize ``model`` (a ``DecoderOnlyTransformer``) in place for inference by the
    rule above: ``riftco.nn.quantize_for_inference`` (each linear layer a
    ``BlockLinear``, the head a ``BlockHead``, the token embedding its blocks'
    values), its refusals as ConversionError. Returns the ggml type of each matrix by
    riftco name (the linears, ``token_embedding``, ``language_model_head``)."""
    if dtype not in QUANTIZED:
        raise ConversionError(f"weights: expected one of {QUANTIZED}; found {dtype!r}")
    keep = check_keep_float(keep_float)
    try:
        return nn.quantize_for_inference(model, dtype, keep)
    except ConfigError as e:
        raise ConversionError(str(e)) from e


__all__ = [
    "KEEPABLE",
    "QUANTIZED",
    "BlockHead",
    "check_keep_float",
    "gguf_role",
    "matrix_type",
    "parse_keep_float",
    "quantize_model",
]
