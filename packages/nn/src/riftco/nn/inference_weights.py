"""Reduced-precision weights for inference: llama.cpp's Q8_0, Q4_0 and F16 layouts.

``quantize_for_inference(model, "q8_0" | "q4_0" | "f16", keep_float=None)`` is riftco's
one in-process quantizer, by the one rule for each matrix's ggml type
(:func:`matrix_type`) that GGUF export (riftco-interchange's ``convert --dtype``) writes
too, so a model quantized in process is the model of the exported file:

- every plain ``Linear`` becomes a ``BlockLinear`` holding riftco.tensor's
  ``BlockWeight`` (the bytes of a GGUF tensor of that type) in the uint8 buffer
  ``weight_data``; its forward reads the blocks in place (no float32 weight is made).
  A Q8_0 / Q4_0 matrix whose rows do not hold whole blocks of 32 is F16;
- the language-model head becomes a :class:`BlockHead` (a tied head: over the token
  embedding's blocks), and the token embedding holds the float32 values of its blocks,
  which is what llama.cpp's row lookup reads from a quantized ``token_embd``;
- ``keep_float`` names the matrices that stay float32 instead, by llama.cpp name stem:
  ``token_embd`` (the token embedding), ``output`` (the head). A tied head is the token
  embedding: it stays float32 when either is named. ``("token_embd", "output")``
  quantizes the linears alone.

The position embedding, norms and every vector stay float32. This is what
``llama-quantize --pure`` writes; llama-quantize's default gives a Q4_0 file's head
Q6_K (or Q8_0 where its rows are not a multiple of 256), a type riftco has not.

These layers are for inference only: they take no gradient, and a forward while
gradients are being recorded is refused. ``dequantize_for_training`` puts float32
``Linear`` layers and head back (holding the dequantized weights; the embedding keeps
its blocks' values).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.nn.errors import ConfigError
from riftco.nn.functional import _plain, _record, _value
from riftco.nn.joins import Read
from riftco.nn.layers import Embedding, Linear
from riftco.nn.module import Module
from riftco.nn.transformer import LanguageModelHead
from riftco.tensor import BlockWeight, Tensor
from riftco.tensor.ops.blockquant import BLOCK_FORMATS, BLOCK_QK

#: The formats ``quantize_for_inference`` takes.
INFERENCE_FORMATS = BLOCK_FORMATS


class BlockLinear(Module):
    """``y = x @ W.T + bias`` with ``W [out_features, in_features]`` held in the uint8
    buffer ``weight_data`` in a llama.cpp block layout (``format``). The bias, if any, is
    a frozen Parameter."""

    bias: Parameter | None

    def __init__(self, weight: BlockWeight, bias: Parameter | None = None) -> None:
        super().__init__()
        if not isinstance(weight, BlockWeight):
            raise TypeError(f"BlockLinear: expected a BlockWeight, found {type(weight).__name__}")
        self.out_features, self.in_features = weight.shape
        self.format = weight.format
        self.register_buffer("weight_data", weight.data)
        if bias is not None and bias.shape != (self.out_features,):
            raise ConfigError(
                f"BlockLinear: bias must be [{self.out_features}], found {bias.shape}"
            )
        if bias is not None:
            bias.requires_grad = False
        self.register_parameter("bias", bias)
        self.__dict__["_packed"] = (None, weight)

    @classmethod
    def from_linear(cls, linear: Linear, fmt: str) -> BlockLinear:
        """Quantize ``linear``'s weight to ``fmt``; its bias Parameter is shared and frozen."""
        return cls(rt.block_quantize(linear.weight.value, fmt), linear.bias)

    @property
    def weight(self) -> BlockWeight:
        """The packed weight over the current buffer (after ``to()`` too)."""
        data = self._buffers["weight_data"]
        assert data is not None  # registered in __init__
        key = (id(data), data.version)
        cached, packed = self.__dict__["_packed"]
        if cached != key:
            packed = BlockWeight(self.format, (self.out_features, self.in_features), data)
            self.__dict__["_packed"] = (key, packed)
        return packed

    def decode_linear(self, read: Read) -> rt.DecodeLinear | None:
        """The block-layout weight, read in place (riftco.nn.joins)."""
        return rt.DecodeLinear.of(self.weight, read(self.bias))

    @classmethod
    def layer_capabilities(cls, job: str) -> tuple[str, ...]:
        """The block-layout linear (for every job: the layer takes no gradient, so a
        training job on it stops at its first forward)."""
        return ("block_linear",)

    def forward(self, x: Any) -> Any:
        if _record(x, self.bias):
            raise ConfigError(
                f"BlockLinear ({self.format}) is for inference: it takes no gradient "
                "(run under no_grad, or dequantize_for_training first)"
            )
        return _plain(x, rt.block_linear(_value(x), self.weight, _value(self.bias)))

    def dequantized_weight(self) -> Tensor:
        return rt.block_dequantize(self.weight)

    @property
    def weight_bytes(self) -> int:
        return self.weight.nbytes

    def extra_repr(self) -> str:
        return (
            f"{self.in_features}, {self.out_features}, bias={self.bias is not None}, {self.format}"
        )


class BlockHead(BlockLinear):
    """The language-model head on block-layout weights (``x @ W.T + bias`` read in
    place), standing where ``LanguageModelHead`` stands: its forward takes (and
    ignores) the token embedding the model passes to a tied head, and it describes
    itself to the whole-step decoder through ``decode_linear`` as a ``BlockLinear``
    does. ``of_tied_embedding``: its blocks are the token embedding's (a tied head),
    so ``dequantize_for_training`` ties the float32 head again."""

    tied = False

    def __init__(
        self, weight: BlockWeight, bias: Parameter | None = None, *, of_tied_embedding: bool = False
    ) -> None:
        super().__init__(weight, bias)
        self.of_tied_embedding = bool(of_tied_embedding)

    def forward(self, x: Any, embedding: Any = None) -> Any:
        return super().forward(x)


#: The matrices ``keep_float`` may name, by llama.cpp name stem: the token embedding
#: and the language-model head.
KEEPABLE = ("token_embd", "output")
#: The roles :func:`matrix_type` takes.
ROLES = ("token_embd", "output", "tied", "position_embd", "linear")


def _check_format(fmt: Any) -> str:
    if fmt not in INFERENCE_FORMATS:
        raise ConfigError(
            f"quantize_for_inference: format must be one of {INFERENCE_FORMATS}, found {fmt!r}"
        )
    return str(fmt)


def check_keep_float(keep_float: Iterable[str] | None) -> frozenset[str]:
    """``keep_float`` as a set of :data:`KEEPABLE` names (None: none); ConfigError
    for a bare string or an unknown name."""
    if keep_float is None:
        return frozenset()
    if isinstance(keep_float, str):
        raise ConfigError(
            f"keep_float: expected a collection of names among {KEEPABLE}; found the "
            f"string {keep_float!r}"
        )
    try:
        names = frozenset(keep_float)
    except TypeError:
        raise ConfigError(
            f"keep_float: expected a collection of names among {KEEPABLE}; found "
            f"{type(keep_float).__name__}"
        ) from None
    unknown = sorted(repr(n) if not isinstance(n, str) else n for n in names if n not in KEEPABLE)
    if unknown:
        raise ConfigError(f"keep_float: expected names among {KEEPABLE}; found {unknown}")
    return names


def matrix_type(fmt: str, role: str, cols: int, keep: Iterable[str] = ()) -> str:
    """The ggml type (``F32``, ``F16``, ``Q8_0``, ``Q4_0``) of a matrix of ``cols``
    columns in a model quantized to ``fmt``: ``role`` is ``token_embd``, ``output``,
    ``tied`` (the token embedding used as the head), ``position_embd`` or ``linear``;
    ``keep`` the :data:`KEEPABLE` names kept float32. A ``fmt`` that is not one of
    :data:`INFERENCE_FORMATS` (``f32``) keeps every matrix F32."""
    if role not in ROLES:
        raise ConfigError(f"matrix_type: role must be one of {ROLES}, found {role!r}")
    keep = frozenset(keep)
    if fmt not in INFERENCE_FORMATS or role == "position_embd":
        return "F32"
    if (role == "tied" and keep) or role in keep:  # a tied head is both KEEPABLE names
        return "F32"
    if fmt in ("q8_0", "q4_0") and cols % BLOCK_QK == 0:
        return fmt.upper()
    return "F16"


def quantize_for_inference(
    model: Module, fmt: str, keep_float: Iterable[str] | None = None
) -> dict[str, str]:
    """Quantize ``model`` in place for inference in ``fmt`` by :func:`matrix_type`'s
    rule (see the module): each plain ``Linear`` becomes a ``BlockLinear`` (bias shared
    and frozen), the head (``language_model_head``, a ``LanguageModelHead``) a
    :class:`BlockHead`, and the token embedding (``token_embedding``) holds its
    blocks' values, unless ``keep_float`` names them. Returns the ggml type of each
    matrix by qualified name (the linears, then ``token_embedding`` and
    ``language_model_head`` where the model has them; ``F32`` for those kept).
    Everything is quantized before anything is replaced; a model holding LoRA
    adapters or block-layout layers already is refused."""
    fmt = _check_format(fmt)
    keep = check_keep_float(keep_float)
    modules = list(model.named_modules())
    if any(getattr(m, "is_lora_adapted", False) for _, m in modules):
        raise ConfigError("quantize_for_inference: the model has LoRA adapters; merge them first")
    if any(isinstance(m, BlockLinear) for _, m in modules):
        raise ConfigError(
            "quantize_for_inference: the model is quantized already (it holds block-layout "
            "layers); dequantize_for_training first to quantize it again"
        )
    types: dict[str, str] = {}
    swaps: list[tuple[str, Module]] = []
    for name, module in modules:
        if name and type(module) is Linear:
            kind = matrix_type(fmt, "linear", module.in_features, keep)
            types[name] = kind
            swaps.append((name, BlockLinear.from_linear(module, kind.lower())))
    embedding = getattr(model, "token_embedding", None)
    table: BlockWeight | None = None
    if type(embedding) is Embedding:
        head = getattr(model, "language_model_head", None)
        head = head if type(head) is LanguageModelHead else None
        cols = embedding.weight.shape[1]
        tied = head is not None and head.tied
        kind = matrix_type(fmt, "tied" if tied else "token_embd", cols, keep)
        types["token_embedding"] = kind
        if kind != "F32":
            table = rt.block_quantize(embedding.weight.value, kind.lower())
        if head is not None:
            head_blocks = table
            if not tied:
                kind = matrix_type(fmt, "output", cols, keep)
                head_blocks = (
                    None if kind == "F32" else rt.block_quantize(head.weight.value, kind.lower())
                )
            types["language_model_head"] = kind
            if head_blocks is not None:
                block_head = BlockHead(head_blocks, head.bias, of_tied_embedding=tied)
                block_head.training = head.training
                swaps.append(("language_model_head", block_head))
    for name, layer in swaps:
        model.replace_child(name, layer)
    if table is not None:
        assert embedding is not None
        embedding.weight.value.assign_(rt.block_dequantize(table))
    return types


def dequantize_for_training(model: Module) -> list[str]:
    """Replace every ``BlockLinear`` by a float32 ``Linear`` holding its dequantized
    weight (and its bias, made trainable again), and a :class:`BlockHead` by a
    ``LanguageModelHead`` (tied again where its blocks were the token embedding's,
    which holds their values); returns the names replaced."""
    found = [(n, m) for n, m in model.named_modules() if n and isinstance(m, BlockLinear)]
    for name, q in found:
        if q.bias is not None:
            q.bias.requires_grad = True
        layer: Module
        if isinstance(q, BlockHead):
            layer = LanguageModelHead.__new__(LanguageModelHead)
            Module.__init__(layer)
            layer.tied = q.of_tied_embedding
            weight = None if layer.tied else Parameter(q.dequantized_weight())
            layer.register_parameter("weight", weight)
        else:
            layer = Linear.__new__(Linear)
            Module.__init__(layer)
            layer.in_features, layer.out_features = q.in_features, q.out_features
            layer.weight = Parameter(q.dequantized_weight())
        layer.register_parameter("bias", q.bias)
        layer.training = q.training
        model.replace_child(name, layer)
    return [n for n, _ in found]


def inference_formats(model: Module) -> dict[str, str]:
    """The format of every ``BlockLinear`` (the head's ``BlockHead`` included) by
    qualified name."""
    return {n: m.format for n, m in model.named_modules() if isinstance(m, BlockLinear)}


__all__ = [
    "INFERENCE_FORMATS",
    "KEEPABLE",
    "BlockHead",
    "BlockLinear",
    "check_keep_float",
    "dequantize_for_training",
    "inference_formats",
    "matrix_type",
    "quantize_for_inference",
]
