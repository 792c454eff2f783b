"""Reduced-precision weights for inference: llama.cpp's Q8_0, Q4_0 and F16 layouts.

``quantize_for_inference(model, "q8_0" | "q4_0" | "f16")`` swaps every plain ``Linear``
of a model for a ``BlockLinear`` holding riftco.tensor's ``BlockWeight`` (the bytes of
a GGUF tensor of that type) in the uint8 buffer ``weight_data``; its forward reads the
blocks in place (no float32 weight is made). Embeddings, norms and the language-model
head stay float32. A Q8_0 / Q4_0 linear needs ``in_features`` to be a multiple of 32;
a linear that is not stays float32 (its name is not in the returned list).

These layers are for inference only: they take no gradient, and a forward while
gradients are being recorded is refused. ``dequantize_for_training`` puts float32
``Linear`` layers back (holding the dequantized weights).
"""

from __future__ import annotations

from typing import Any

import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.nn.errors import ConfigError
from riftco.nn.functional import _plain, _record, _value
from riftco.nn.joins import Read
from riftco.nn.layers import Linear
from riftco.nn.module import Module
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


def _check_format(fmt: Any) -> str:
    if fmt not in INFERENCE_FORMATS:
        raise ConfigError(
            f"quantize_for_inference: format must be one of {INFERENCE_FORMATS}, found {fmt!r}"
        )
    return str(fmt)


def quantize_for_inference(model: Module, fmt: str) -> list[str]:
    """Replace every plain ``Linear`` of ``model`` whose ``in_features`` fits ``fmt``'s
    blocks by a ``BlockLinear`` (biases shared and frozen); returns the names replaced.
    All layers are quantized before any is replaced."""
    fmt = _check_format(fmt)
    if any(getattr(m, "is_lora_adapted", False) for m in model.modules()):
        raise ConfigError("quantize_for_inference: the model has LoRA adapters; merge them first")
    block = 1 if fmt == "f16" else BLOCK_QK
    linears = [
        (n, m)
        for n, m in model.named_modules()
        if n and type(m) is Linear and m.in_features % block == 0
    ]
    made = [BlockLinear.from_linear(m, fmt) for _, m in linears]
    for (name, _), q in zip(linears, made):
        model.replace_child(name, q)
    return [n for n, _ in linears]


def dequantize_for_training(model: Module) -> list[str]:
    """Replace every ``BlockLinear`` by a float32 ``Linear`` holding its dequantized
    weight (and its bias, made trainable again); returns the names replaced."""
    found = [(n, m) for n, m in model.named_modules() if n and type(m) is BlockLinear]
    for name, q in found:
        linear = Linear.__new__(Linear)
        Module.__init__(linear)
        linear.in_features, linear.out_features = q.in_features, q.out_features
        linear.weight = Parameter(q.dequantized_weight())
        if q.bias is not None:
            q.bias.requires_grad = True
        linear.register_parameter("bias", q.bias)
        linear.training = q.training
        model.replace_child(name, linear)
    return [n for n, _ in found]


def inference_formats(model: Module) -> dict[str, str]:
    """The format of every ``BlockLinear`` by qualified name."""
    return {n: m.format for n, m in model.named_modules() if isinstance(m, BlockLinear)}


__all__ = [
    "INFERENCE_FORMATS",
    "BlockLinear",
    "dequantize_for_training",
    "inference_formats",
    "quantize_for_inference",
]
