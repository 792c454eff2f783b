"""NF4 quantized linears: the frozen base of QLoRA.

``QuantizedLinear`` keeps its weight only as a packed NF4 payload (riftco.tensor's
``NF4Weight``: 4-bit codes and block scales, about 4.13 bits per weight at block 64
with double quantization) in persistent buffers; the forward and input-gradient
kernels dequantize tile by tile, so no float32 copy of the weight exists and the
weight gets no gradient. ``quantize_model`` swaps every ``Linear`` of a model for
one, ``dequantize_model`` swaps them back (for export), and ``weight_memory``
reports what the linear weights cost.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter, custom_gradient
from riftco.nn.errors import ConfigError
from riftco.nn.functional import _needs, _plain, _record, _value, _variable
from riftco.nn.jobs import TRAINING_JOBS
from riftco.nn.joins import Read
from riftco.nn.layers import Linear
from riftco.nn.module import Module
from riftco.tensor import NF4Weight, Tensor
from riftco.tensor.ops.quantized import NF4_DEFAULT_BLOCK_SIZE

#: The buffers that hold a quantized weight, in registration order.
PAYLOAD = ("weight_codes", "weight_absmax", "weight_group_range", "weight_offset")


def nf4_linear(x: Any, weight: NF4Weight, bias: Any = None) -> Any:
    """``x @ dequant(weight).T + bias``. While recording, one ``custom_gradient`` node
    whose VJP is the input-gradient kernel (the packed weight is a constant; the
    bias gets a gradient when it requires one)."""
    xv, b = _value(x), _value(bias)
    y = rt.nf4_linear(xv, weight, b)
    if not _record(x, bias):
        return _plain(x, y)
    need_x, need_b = _needs(x), bias is not None and _needs(bias)

    def vjp(g: Tensor) -> list[Tensor | None]:
        grads = [rt.nf4_linear_backward(g, weight) if need_x else None]
        if bias is not None:
            grads.append(g.reshape(-1, g.shape[-1]).sum(axis=0) if need_b else None)
        return grads

    inputs = [_variable(x)] + ([_variable(bias)] if bias is not None else [])
    return custom_gradient(y, inputs, vjp)


class QuantizedLinear(Module):
    """``y = x @ dequant(W).T + bias`` with ``W [out_features, in_features]`` held as
    packed NF4 in the buffers ``weight_codes`` (uint8), ``weight_absmax`` (uint8 when
    double-quantized, else float32), ``weight_group_range`` and ``weight_offset``
    (float32, double-quantized only). The bias, if any, is a Parameter (``from_linear``
    shares the linear's and freezes it)."""

    bias: Parameter | None

    def __init__(self, weight: NF4Weight, bias: Parameter | None = None) -> None:
        super().__init__()
        if not isinstance(weight, NF4Weight):
            raise TypeError(
                f"QuantizedLinear: expected an NF4Weight, found {type(weight).__name__}"
            )
        self.out_features, self.in_features = weight.shape
        self.block_size = weight.block_size
        #: Whether the float32 weight this came from required gradients (restored on
        #: dequantization).
        self.weight_requires_grad = False
        arrays = weight.arrays()
        self.register_buffer("weight_codes", weight.codes)
        self.register_buffer("weight_absmax", weight.absmax)
        if weight.double_quant:
            self.register_buffer("weight_group_range", weight.group_range)
            offset = rt.from_numpy(arrays["offset"], backend=weight.backend)
            self.register_buffer("weight_offset", offset)
        if bias is not None and bias.shape != (self.out_features,):
            raise ConfigError(
                f"QuantizedLinear: bias must be [{self.out_features}], found {bias.shape}"
            )
        self.register_parameter("bias", bias)
        #: The bias's ``requires_grad`` before quantization froze it.
        self.bias_requires_grad = False if bias is None else bias.requires_grad
        self.__dict__["_packed"] = (None, weight)

    @classmethod
    def from_linear(
        cls, linear: Linear, block_size: int = NF4_DEFAULT_BLOCK_SIZE, double_quant: bool = True
    ) -> QuantizedLinear:
        """Quantize ``linear``'s weight; its bias Parameter is shared and frozen."""
        packed = rt.nf4_quantize(linear.weight.value, block_size, double_quant)
        q = cls(packed, linear.bias)
        q.weight_requires_grad = linear.weight.requires_grad
        if linear.bias is not None:
            linear.bias.requires_grad = False
        return q

    @property
    def weight(self) -> NF4Weight:
        """The packed weight over the current buffers (after ``to()`` too)."""
        key = tuple((id(b), b.version) for b in self._payload_buffers())
        cached_key, packed = self.__dict__["_packed"]
        if cached_key != key:
            packed = self._build_packed()
            self.__dict__["_packed"] = (key, packed)
        return packed

    def _payload_buffers(self) -> Iterator[Tensor]:
        return (b for n in PAYLOAD if (b := self._buffers.get(n)) is not None)

    def _build_packed(self) -> NF4Weight:
        b: Mapping[str, Any] = self._buffers  # NF4Weight checks every part
        double = b.get("weight_group_range") is not None
        offset = float(b["weight_offset"].numpy()[0]) if double else 0.0
        return NF4Weight(
            (self.out_features, self.in_features),
            self.block_size,
            b["weight_codes"],
            b["weight_absmax"],
            b.get("weight_group_range"),
            offset,
        )

    def decode_linear(self, read: Read) -> rt.DecodeLinear | None:
        """The packed NF4 weight, read in place (riftco.nn.joins)."""
        return rt.DecodeLinear.of(self.weight, read(self.bias))

    @classmethod
    def layer_capabilities(cls, job: str) -> tuple[str, ...]:
        """The NF4 forward; in training also its input gradient and the dequantization
        a LoRA merge makes."""
        if job in TRAINING_JOBS:
            return ("nf4_dequantize", "nf4_linear", "nf4_linear_backward")
        return ("nf4_linear",)

    def forward(self, x: Any) -> Any:
        return nf4_linear(x, self.weight, self.bias)

    def dequantized_weight(self) -> Tensor:
        """The float32 weight, made on demand (for export and checks)."""
        return rt.nf4_dequantize(self.weight)

    @property
    def weight_bytes(self) -> int:
        return self.weight.nbytes

    @property
    def bits_per_weight(self) -> float:
        return self.weight.bits_per_weight

    def extra_repr(self) -> str:
        w = self.weight
        dq = ", double_quant" if w.double_quant else ""
        return (
            f"{self.in_features}, {self.out_features}, bias={self.bias is not None}, "
            f"nf4 block={self.block_size}{dq}"
        )


def replace_module(model: Module, name: str, new: Module) -> None:
    """``model.replace_child(name, new)`` (see ``Module.replace_child``)."""
    model.replace_child(name, new)


def _is_plain_linear(m: Module) -> TypeGuard[Linear]:
    return type(m) is Linear


def quantize_model(
    model: Module, block_size: int = NF4_DEFAULT_BLOCK_SIZE, double_quant: bool = True
) -> list[str]:
    """Replace every ``Linear`` of ``model`` by a ``QuantizedLinear`` (their biases are
    shared and frozen); returns the names replaced. Embeddings, norms and the language
    model head stay float32. All layers are quantized before any is replaced."""
    if any(getattr(m, "is_lora_adapted", False) for m in model.modules()):
        raise ConfigError("quantize_model: the model has LoRA adapters; quantize before attaching")
    modules = dict(model.named_modules())
    linears = [(n, m) for n, m in modules.items() if n and _is_plain_linear(m)]
    names = [n for n, _ in linears]
    made = [QuantizedLinear.from_linear(m, block_size, double_quant) for _, m in linears]
    for name, q in zip(names, made):
        model.replace_child(name, q)
    return names


def dequantize_model(model: Module) -> list[str]:
    """Replace every ``QuantizedLinear`` by a float32 ``Linear`` holding its dequantized
    weight (and the same bias); returns the names replaced."""
    modules = dict(model.named_modules())
    quantized = [(n, m) for n, m in modules.items() if n and type(m) is QuantizedLinear]
    names = [n for n, _ in quantized]
    made = [to_linear(m) for _, m in quantized]
    for (name, q), linear in zip(quantized, made):
        model.replace_child(name, linear)
        if linear.bias is not None:
            linear.bias.requires_grad = q.bias_requires_grad
    return names


def to_linear(q: QuantizedLinear, weight: Tensor | None = None) -> Linear:
    """A ``Linear`` with ``weight`` (default: ``q``'s dequantized weight) and ``q``'s bias
    (its ``requires_grad`` unchanged)."""
    linear = Linear.__new__(Linear)
    Module.__init__(linear)
    linear.in_features, linear.out_features = q.in_features, q.out_features
    value = q.dequantized_weight() if weight is None else weight
    linear.weight = Parameter(value, requires_grad=q.weight_requires_grad)
    linear.register_parameter("bias", q.bias)
    linear.training = q.training
    return linear


def quantized_layers(model: Module) -> dict[str, QuantizedLinear]:
    """Every quantized linear (adapted ones included) by qualified name."""
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantizedLinear)}


@dataclass(frozen=True)
class WeightMemory:
    """What the weights of the linear layers cost: ``elements`` weights in ``layers``
    layers (``quantized`` of them NF4) take ``stored_bytes``, against ``float32_bytes``
    as plain float32."""

    layers: int
    quantized: int
    elements: int
    float32_bytes: int
    stored_bytes: int

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.stored_bytes / self.elements if self.elements else 0.0

    @property
    def ratio(self) -> float:
        """float32 bytes over stored bytes."""
        return self.float32_bytes / self.stored_bytes if self.stored_bytes else 0.0


def weight_memory(model: Module) -> WeightMemory:
    """Memory of the weights of every ``Linear`` and ``QuantizedLinear`` (not biases,
    embeddings, norms or adapters)."""
    layers = quantized = elements = stored = 0
    for name, m in model.named_modules():
        if name.endswith(("lora_a", "lora_b")):
            continue
        if isinstance(m, QuantizedLinear):
            n = m.in_features * m.out_features
            layers, quantized, elements, stored = (
                layers + 1,
                quantized + 1,
                elements + n,
                stored + m.weight_bytes,
            )
        elif isinstance(m, Linear):
            n = int(np.prod(m.weight.shape))
            layers, elements, stored = layers + 1, elements + n, stored + 4 * n
    return WeightMemory(layers, quantized, elements, 4 * elements, stored)


__all__ = [
    "QuantizedLinear",
    "WeightMemory",
    "dequantize_model",
    "nf4_linear",
    "quantize_model",
    "quantized_layers",
    "replace_module",
    "to_linear",
    "weight_memory",
]
