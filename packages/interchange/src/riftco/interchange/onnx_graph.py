"""The decoder as an ONNX graph at opset 18, built with ``onnx.helper``.

``input_ids`` (int64 ``[batch, sequence]``) to ``logits`` (float32
``[batch, sequence, vocab]``), both axes dynamic. Parameters are initializers
under riftco's names and layouts (a linear weight stays ``[out, in]`` and goes
through a ``Transpose`` that runtimes fold into a constant), so the file reads
back without a name map. The pieces opset 18 lacks are composed:

- GELU: ``0.5 x (1 + Erf(x / sqrt 2))``, or the tanh form
  ``0.5 x (1 + Tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``;
- RMSNorm: ``x / Sqrt(ReduceMean(x * x) + eps) * weight`` (``LayerNormalization``
  exists since opset 17 and is used for LayerNorm);
- attention: ``MatMul``, scale, ``Where`` over a causal (and sliding-window) mask
  made with ``Trilu``, ``Softmax``, ``MatMul``; grouped-query heads share keys
  by broadcasting ``[B, Hkv, group, T, T]`` scores, never by copying keys;
- split-half rotary embedding: ``cos``/``sin`` tables ``[context, 1, head_dim/2]``
  computed as riftco's kernel computes them (float32 inverse frequencies and
  angles, cosine and sine in float64), gathered at positions ``0..T-1``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from riftco.nn import TransformerConfig

OPSET = 18
IR_VERSION = 8  # the oldest IR that opset 18 allows, for the widest set of runtimes
INPUT, OUTPUT = "input_ids", "logits"


def rotary_tables(config: TransformerConfig) -> tuple[np.ndarray, np.ndarray]:
    """``cos`` and ``sin`` ``[context_length, 1, head_dim / 2]`` as riftco's kernel
    computes them."""
    dh = config.head_dim
    exponent = np.arange(0, dh, 2, dtype=np.float32) / np.float32(dh)
    inverse = np.float32(1.0) / np.power(np.float32(config.rope_theta), exponent)
    angle = (np.arange(config.context_length, dtype=np.float32)[:, None] * inverse[None, :]).astype(
        np.float64
    )
    return (
        np.cos(angle).astype(np.float32)[:, None, :],
        np.sin(angle).astype(np.float32)[:, None, :],
    )


def build_graph(config: TransformerConfig, arrays: Mapping[str, np.ndarray]) -> Any:
    """The ``onnx.ModelProto`` computing ``config``'s logits with ``arrays``."""
    from onnx import TensorProto, helper

    g = _Builder(config, arrays)
    logits = g.decoder()
    batch, sequence = "batch", "sequence"
    graph = helper.make_graph(
        g.nodes,
        "riftco_decoder",
        [helper.make_tensor_value_info(INPUT, TensorProto.INT64, [batch, sequence])],
        [
            helper.make_tensor_value_info(
                OUTPUT, TensorProto.FLOAT, [batch, sequence, config.vocab_size]
            )
        ],
        g.initializers,
    )
    graph.node.append(helper.make_node("Identity", [logits], [OUTPUT], name="logits"))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


class _Builder:
    """Appends nodes and initializers; every value gets a fresh readable name."""

    def __init__(self, config: TransformerConfig, arrays: Mapping[str, np.ndarray]) -> None:
        from onnx import TensorProto, helper, numpy_helper

        self.c, self.arrays = config, arrays
        self.helper, self.numpy_helper, self.TensorProto = helper, numpy_helper, TensorProto
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.count = 0
        self.constants: dict[tuple, str] = {}
        self.parameters: set[str] = set()

    # -- plumbing ---------------------------------------------------------------------

    def op(self, op_type: str, *inputs: str, name: str = "", **attributes: Any) -> str:
        self.count += 1
        output = f"{name or op_type.lower()}_{self.count}"
        self.nodes.append(
            self.helper.make_node(
                op_type, list(inputs), [output], name=f"{op_type}_{self.count}", **attributes
            )
        )
        return output

    def ops(self, op_type: str, *inputs: str, outputs: int, **attributes: Any) -> list[str]:
        self.count += 1
        names = [f"{op_type.lower()}_{self.count}_{k}" for k in range(outputs)]
        self.nodes.append(
            self.helper.make_node(
                op_type, list(inputs), names, name=f"{op_type}_{self.count}", **attributes
            )
        )
        return names

    def initializer(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        """A shared constant for a number or a list of numbers."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self.constants:
            self.constants[key] = self.initializer(f"const_{len(self.constants)}", array)
        return self.constants[key]

    def parameter(self, name: str) -> str:
        if name not in self.parameters:
            self.parameters.add(name)
            self.initializer(name, np.asarray(self.arrays[name], dtype=np.float32))
        return name

    # -- layers -----------------------------------------------------------------------

    def linear(self, x: str, prefix: str, bias: bool | None = None) -> str:
        weight = self.op("Transpose", self.parameter(f"{prefix}.weight"), perm=[1, 0])
        y = self.op("MatMul", x, weight, name=prefix.replace(".", "_"))
        has_bias = self.c.linear_bias if bias is None else bias
        return self.op("Add", y, self.parameter(f"{prefix}.bias")) if has_bias else y

    def norm(self, x: str, prefix: str) -> str:
        eps = float(self.c.norm_eps)
        if self.c.norm == "layer":
            return self.op(
                "LayerNormalization",
                x,
                self.parameter(f"{prefix}.weight"),
                self.parameter(f"{prefix}.bias"),
                axis=-1,
                epsilon=eps,
            )
        mean_square = self.op("ReduceMean", self.op("Mul", x, x), self.const([-1], np.int64))
        root = self.op("Sqrt", self.op("Add", mean_square, self.const(eps)))
        return self.op("Mul", self.op("Div", x, root), self.parameter(f"{prefix}.weight"))

    def gelu(self, x: str) -> str:
        if self.c.gelu == "exact":
            inner = self.op("Erf", self.op("Mul", x, self.const(1.0 / math.sqrt(2.0))))
        else:
            cube = self.op("Mul", self.op("Mul", x, x), x)
            inner = self.op("Add", x, self.op("Mul", cube, self.const(0.044715)))
            inner = self.op("Tanh", self.op("Mul", inner, self.const(math.sqrt(2.0 / math.pi))))
        half = self.op("Mul", x, self.const(0.5))
        return self.op("Mul", half, self.op("Add", inner, self.const(1.0)))

    def rotate(self, x: str, cos: str, sin: str) -> str:
        first, second = self.ops("Split", x, outputs=2, axis=-1, num_outputs=2)
        a = self.op("Sub", self.op("Mul", first, cos), self.op("Mul", second, sin))
        b = self.op("Add", self.op("Mul", second, cos), self.op("Mul", first, sin))
        return self.op("Concat", a, b, axis=-1)

    def attention(self, h: str, prefix: str, mask: str, rotary: tuple[str, str] | None) -> str:
        c = self.c
        heads, kv_heads, dh = c.n_heads, c.n_kv_heads, c.head_dim
        q = self.op(
            "Reshape", self.linear(h, f"{prefix}.query"), self.const([0, 0, heads, dh], np.int64)
        )
        k = self.op(
            "Reshape", self.linear(h, f"{prefix}.key"), self.const([0, 0, kv_heads, dh], np.int64)
        )
        v = self.op(
            "Reshape", self.linear(h, f"{prefix}.value"), self.const([0, 0, kv_heads, dh], np.int64)
        )
        if rotary is not None:
            q, k = self.rotate(q, *rotary), self.rotate(k, *rotary)
        q = self.op("Transpose", q, perm=[0, 2, 1, 3])  # [B, H, T, dh]
        k = self.op("Transpose", k, perm=[0, 2, 3, 1])  # [B, Hkv, dh, T]
        v = self.op("Transpose", v, perm=[0, 2, 1, 3])  # [B, Hkv, T, dh]
        if kv_heads != heads:  # [B, Hkv, group, T, dh] against keys [B, Hkv, 1, dh, T]
            group = heads // kv_heads
            q = self.op("Reshape", q, self.const([0, kv_heads, group, -1, dh], np.int64))
            k = self.op("Unsqueeze", k, self.const([2], np.int64))
            v = self.op("Unsqueeze", v, self.const([2], np.int64))
        scores = self.op("Mul", self.op("MatMul", q, k), self.const(1.0 / math.sqrt(dh)))
        scores = self.op("Where", mask, scores, self.const(-np.inf))
        out = self.op("MatMul", self.op("Softmax", scores, axis=-1), v)
        out = self.op("Reshape", out, self.const([0, heads, -1, dh], np.int64))
        out = self.op("Transpose", out, perm=[0, 2, 1, 3])
        out = self.op("Reshape", out, self.const([0, 0, heads * dh], np.int64))
        return self.linear(out, f"{prefix}.output")

    def feed_forward(self, h: str, prefix: str) -> str:
        if self.c.feed_forward == "gelu":
            return self.linear(self.gelu(self.linear(h, f"{prefix}.expand")), f"{prefix}.project")
        gate = self.linear(h, f"{prefix}.gate")
        silu = self.op("Mul", gate, self.op("Sigmoid", gate))
        return self.linear(self.op("Mul", silu, self.linear(h, f"{prefix}.up")), f"{prefix}.down")

    def causal_mask(self, length: str) -> str:
        """Boolean ``[T, T]``: True where query ``i`` may read key ``j``."""
        square = self.op("Concat", length, length, axis=0)
        ones = self.op(
            "ConstantOfShape",
            square,
            value=self.numpy_helper.from_array(np.ones(1, np.float32)),
        )
        visible = self.op("Trilu", ones, self.const(0, np.int64), upper=0)
        window = self.c.sliding_window
        if window:  # drop keys at distance window or more: j <= i - window
            too_far = self.op("Trilu", ones, self.const(-window, np.int64), upper=0)
            visible = self.op("Sub", visible, too_far)
        return self.op("Cast", visible, to=self.TensorProto.BOOL, name="causal_mask")

    def decoder(self) -> str:
        c = self.c
        zero, one = self.const([0], np.int64), self.const([1], np.int64)
        length = self.op("Slice", self.op("Shape", INPUT), one, self.const([2], np.int64))

        def first_rows(table: str) -> str:  # rows 0..T-1: positions 0..T-1
            return self.op("Slice", table, zero, length, zero)

        x = self.op("Gather", self.parameter("token_embedding.weight"), INPUT, axis=0)
        rotary = None
        if c.positions == "learned":
            x = self.op("Add", x, first_rows(self.parameter("position_embedding.weight")))
        else:
            cos, sin = rotary_tables(c)
            rotary = (
                first_rows(self.initializer("rotary.cos", cos)),
                first_rows(self.initializer("rotary.sin", sin)),
            )
        mask = self.causal_mask(length)
        for i in range(c.n_layers):
            block = f"blocks.{i}"
            h = self.norm(x, f"{block}.attention_norm")
            x = self.op("Add", x, self.attention(h, f"{block}.attention", mask, rotary))
            h = self.norm(x, f"{block}.feed_forward_norm")
            x = self.op("Add", x, self.feed_forward(h, f"{block}.feed_forward"))
        x = self.norm(x, "final_norm")
        head = "token_embedding.weight" if c.tie_embeddings else "language_model_head.weight"
        return self.head(x, head)

    def head(self, x: str, weight: str) -> str:
        logits = self.op("MatMul", x, self.op("Transpose", self.parameter(weight), perm=[1, 0]))
        if self.c.head_bias:
            logits = self.op("Add", logits, self.parameter("language_model_head.bias"))
        return logits
