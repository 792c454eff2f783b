"""One rule for the tensor types of a quantized model, shared by ``convert --dtype``
(:func:`~riftco.interchange.gguf_export.export_gguf`) and ``--weights``
(:func:`quantize_model`, riftco's in-process quantization), so that the file
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

In process, a quantized embedding holds the float32 values of its blocks
(:func:`riftco.tensor.block_dequantize`), which is exactly what llama.cpp's row
lookup reads from a quantized ``token_embd``; a quantized head and the linears run
on the blocks (``BlockHead``, ``BlockLinear``), the products' inputs quantized as
ggml quantizes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import riftco.tensor as rt
from riftco.interchange.errors import ConversionError
from riftco.nn import BlockLinear, Linear
from riftco.tensor.ops.blockquant import BLOCK_QK

#: The matrices ``keep_float`` may name, by llama.cpp name stem.
KEEPABLE = ("token_embd", "output")
#: The dtypes whose matrices the rule quantizes.
QUANTIZED = ("f16", "q8_0", "q4_0")


def check_keep_float(keep_float: Iterable[str] | None) -> frozenset[str]:
    """``keep_float`` as a set of :data:`KEEPABLE` names; ConversionError otherwise."""
    if keep_float is None:
        return frozenset()
    if isinstance(keep_float, str):
        raise ConversionError(
            f"keep_float: expected a collection of names among {KEEPABLE}; found the "
            f"string {keep_float!r}"
        )
    names = frozenset(keep_float)
    unknown = sorted(n for n in names if n not in KEEPABLE)
    if unknown:
        raise ConversionError(f"keep_float: expected names among {KEEPABLE}; found {unknown}")
    return names


def parse_keep_float(text: str) -> frozenset[str]:
    """The command line's ``--keep-float`` value: ``none`` or comma-separated names."""
    if text.strip().lower() == "none":
        return frozenset()
    return check_keep_float(part.strip() for part in text.split(",") if part.strip())


def matrix_type(dtype: str, role: str, cols: int, keep: frozenset[str]) -> str:
    """The ggml type of a matrix of ``cols`` columns in a ``dtype`` model: ``role`` is
    ``token_embd``, ``output``, ``tied`` (the token embedding used as the head),
    ``position_embd`` or ``linear``."""
    if dtype not in QUANTIZED or role == "position_embd":
        return "F32"
    if (role == "tied" and keep) or role in keep:  # a tied head is both KEEPABLE names
        return "F32"
    if dtype in ("q8_0", "q4_0") and cols % BLOCK_QK == 0:
        return dtype.upper()
    return "F16"


def gguf_role(name: str, tied: bool) -> str:
    """The role (see :func:`matrix_type`) of the GGUF matrix ``name``."""
    if name == "token_embd.weight":
        return "tied" if tied else "token_embd"
    if name == "output.weight":
        return "output"
    if name == "position_embd.weight":
        return "position_embd"
    return "linear"


class BlockHead(BlockLinear):
    """The language-model head on block-layout weights (``x @ W.T + bias`` read in
    place), standing where ``LanguageModelHead`` stands: its forward takes (and
    ignores) the token embedding the model passes to a tied head."""

    tied = False

    def forward(self, x: Any, embedding: Any = None) -> Any:
        return super().forward(x)


def quantize_model(
    model: Any, dtype: str, keep_float: Iterable[str] | None = None
) -> dict[str, str]:
    """Quantize ``model`` (a ``DecoderOnlyTransformer``) in place for inference by the
    rule above: each linear layer becomes a ``BlockLinear``, the head a
    :class:`BlockHead`, the token embedding holds its blocks' values. Returns the ggml
    type of each matrix by riftco name (``token_embedding``, ``language_model_head``,
    the linears). Everything is quantized before anything is replaced."""
    if dtype not in QUANTIZED:
        raise ConversionError(f"weights: expected one of {QUANTIZED}; found {dtype!r}")
    keep = check_keep_float(keep_float)
    if any(getattr(m, "is_lora_adapted", False) for m in model.modules()):
        raise ConversionError("quantize_model: the model has LoRA adapters; merge them first")
    head = model.language_model_head
    if isinstance(head, BlockLinear) or any(type(m) is BlockLinear for m in model.modules()):
        raise ConversionError("quantize_model: the model is quantized already")
    c = model.config
    types: dict[str, str] = {}
    swaps: list[tuple[str, Any]] = []
    for name, module in model.named_modules():
        if name and type(module) is Linear:
            kind = matrix_type(dtype, "linear", module.in_features, keep)
            types[name] = kind
            swaps.append((name, BlockLinear.from_linear(module, kind.lower())))
    embedding = model.token_embedding.weight
    if c.tie_embeddings:
        kind = matrix_type(dtype, "tied", c.d_model, keep)
        types["token_embedding"] = types["language_model_head"] = kind
        table = None if kind == "F32" else rt.block_quantize(embedding.value, kind.lower())
        head_blocks = table
    else:
        kind = matrix_type(dtype, "token_embd", c.d_model, keep)
        types["token_embedding"] = kind
        table = None if kind == "F32" else rt.block_quantize(embedding.value, kind.lower())
        kind = matrix_type(dtype, "output", c.d_model, keep)
        types["language_model_head"] = kind
        head_blocks = None if kind == "F32" else rt.block_quantize(head.weight.value, kind.lower())
    if head_blocks is not None:
        swaps.append(("language_model_head", BlockHead(head_blocks, head.bias)))
    for name, layer in swaps:
        model.replace_child(name, layer)
    if table is not None:
        embedding.value.assign_(rt.block_dequantize(table))
    return types


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
