"""The ``tpu`` backend: storages are PJRT device buffers, every op a compiled
StableHLO program (written per op and shape by the native module, compiled
once and cached). The host is touched only by ``to_numpy`` and transfers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.tpu import _native
from riftco.backends.tpu.plugin import PluginLocation
from riftco.tensor.plugin import Backend, DType, Shape

#: The backend API this package implements (riftco.tensor's BACKEND_API_VERSION):
#: 1.0 base capabilities, 1.1 adam_update, 1.2 fused kernels, 1.3 paged_attention,
#: 1.4 NF4 quantized weights, 1.5 (bfloat16, which this backend does not hold),
#: 1.6 llama.cpp block-layout weights (no kernel here: riftco-tensor's op layer composes
#: them from the ops here, on the device), 1.7 whole-step decoding (no native kernel yet:
#: models decode op by op in riftco-nn).
API_VERSION = (1, 7)


class TpuBackend(Backend):
    """Any PJRT plugin: libtpu on a Cloud TPU VM, or the plugin named by RIFTCO_PJRT_PLUGIN."""

    name = "tpu"
    api_version = API_VERSION
    #: auto's ranking among accelerators (higher wins; cpu is 0). A dedicated GPU
    #: backend ranks above a PJRT device, hence a middle value.
    priority = 100

    def __init__(self, device: _native.Device, location: PluginLocation):
        self.device = device
        self.location = location
        # A plugin computing on the host's own cores is usable by name, never by `auto`.
        self.runs_on_host = bool(device.is_host)

    def describe(self) -> str:
        """The plugin, and the device once the client exists (discovery never creates it)."""
        major, minor = self.device.api_version
        where = f"C API {major}.{minor}, {self.location.path} from {self.location.source}"
        options = ", ".join(self.device.client_options) or "none"
        if not self.device.client_created:
            return (
                f"PJRT {self.device.plugin_kind} plugin (client created on first use; "
                f"options: {options}), {where}"
            )
        platform, version = self.device.platform, self.device.platform_version
        version = f" {version}" if version and version != platform else ""
        return (
            f"PJRT {platform}{version}, {self.device.device} "
            f"({self.device.device_count} device(s)), {where}; options: {options}"
        )

    def missing_hint(self, capability: str) -> str:
        platform = self.device.platform if self.device.client_created else self.device.plugin_kind
        return (
            f"{capability!r} is not supported on tpu (PJRT platform {platform}); "
            "there is no fallback to the CPU: move the tensors with .to('cpu') to use it there"
        )

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray):
        return _native.from_numpy(self.device, np.asarray(array, order="C"))

    def to_numpy(self, x, shape: Shape, dtype: DType) -> np.ndarray:
        out = _native.to_numpy(x)
        out.flags.writeable = False
        return out

    def reshape(self, x, shape: Shape, new_shape: Shape):
        return _native.reshape(x, list(new_shape))

    def assign(self, dst, src, shape: Shape, dtype: DType) -> None:
        _native.assign(dst, src)

    def astype(self, x, shape: Shape, src: DType, dst: DType):
        return _native.astype(self.device, x, dst.value)

    # -- layout ---------------------------------------------------------------
    def copy_strided(self, x, shape, dtype, out_shape, strides, offset):
        return _native.copy_strided(self.device, x, list(out_shape), list(strides), offset)

    def concat(self, xs: Sequence, shapes, dtype, axis):
        return _native.concat(self.device, list(xs), axis)

    # -- elementwise ----------------------------------------------------------
    def unary(self, op, x, shape, dtype):
        return _native.unary(self.device, op, x)

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return _native.binary(self.device, op, a, b, list(out_shape))

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return _native.compare(self.device, op, a, b, list(out_shape))

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        return _native.select(self.device, cond, a, b, list(out_shape))

    # -- reductions -----------------------------------------------------------
    def reduce(self, op, x, shape, dtype, axis):
        return _native.reduce(self.device, op, x, axis)

    def argmax(self, x, shape, dtype, axis):
        return _native.argmax(self.device, x, axis)

    # -- linear algebra -------------------------------------------------------
    def matmul(self, a, a_shape, b, b_shape, transpose_a, transpose_b):
        return _native.matmul(self.device, a, b, transpose_a, transpose_b)

    # -- indexing -------------------------------------------------------------
    def index_select(self, x, shape, dtype, axis, indices, count):
        return _native.index_select(self.device, x, axis, indices)

    def index_add(self, base, shape, axis, indices, src, src_shape):
        return _native.index_add(self.device, base, axis, indices, src)

    def gather(self, x, shape, dtype, axis, indices, index_shape):
        return _native.gather(self.device, x, axis, indices)

    def scatter_add(self, base, shape, axis, indices, index_shape, src):
        return _native.scatter_add(self.device, base, axis, indices, src)

    # -- normalization --------------------------------------------------------
    def softmax(self, x, shape, causal, log):
        return _native.softmax(self.device, x, causal, log)

    # -- optimizer ------------------------------------------------------------
    def adam_update(
        self,
        params,
        grads,
        m,
        v,
        sizes,
        page_size,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled,
        step,
        grad_scale,
    ):
        return _native.adam_update(
            self.device,
            list(params),
            list(grads),
            [list(x) for x in m],
            [list(x) for x in v],
            [int(n) for n in sizes],
            int(page_size),
            [float(x) for x in lr],
            [float(x) for x in beta1],
            [float(x) for x in beta2],
            [float(x) for x in eps],
            [float(x) for x in weight_decay],
            bool(decoupled),
            [int(t) for t in step],
            float(grad_scale),
        )

    # -- fused neural-network kernels ------------------------------------------
    def layer_norm(self, x, shape, weight, bias, eps):
        return _native.layer_norm(self.device, x, weight, bias, float(eps))

    def layer_norm_backward(self, dy, x, shape, weight, mean, rstd, with_bias):
        return _native.layer_norm_backward(self.device, dy, x, weight, mean, rstd, bool(with_bias))

    def rms_norm(self, x, shape, weight, eps):
        return _native.rms_norm(self.device, x, weight, float(eps))

    def rms_norm_backward(self, dy, x, shape, weight, rstd):
        return _native.rms_norm_backward(self.device, dy, x, weight, rstd)

    def activation_backward(self, op, x, dy, shape):
        return _native.activation_backward(self.device, op, x, dy)

    def cross_entropy(self, logits, shape, targets, ignore_index):
        return _native.cross_entropy(self.device, logits, targets, int(ignore_index))

    def cross_entropy_backward(self, logits, shape, targets, lse, grad, ignore_index):
        return _native.cross_entropy_backward(
            self.device, logits, targets, lse, grad, int(ignore_index)
        )

    def rotary(self, x, shape, positions, theta, inverse):
        return _native.rotary(self.device, x, positions, float(theta), bool(inverse))

    def attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        return _native.attention(self.device, q, k, v, float(scale), bool(causal), int(window))

    def attention_backward(self, dout, q, k, v, probs, q_shape, kv_shape, scale, causal, window):
        return _native.attention_backward(self.device, dout, q, k, v, probs, float(scale))

    def flash_attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        return _native.flash_attention(
            self.device, q, k, v, float(scale), bool(causal), int(window)
        )

    def flash_attention_backward(
        self, dout, q, k, v, out, row_max, row_sum, q_shape, kv_shape, scale, causal, window
    ):
        return _native.flash_attention_backward(
            self.device, dout, q, k, v, row_max, row_sum, float(scale), bool(causal), int(window)
        )

    def attention_varlen(
        self, q, k, v, q_shape, kv_shape, q_starts, q_counts, kv_starts, kv_lengths, scale, window
    ):
        return _native.attention_varlen(
            self.device,
            q,
            k,
            v,
            [int(x) for x in q_starts],
            [int(x) for x in q_counts],
            [int(x) for x in kv_starts],
            [int(x) for x in kv_lengths],
            float(scale),
            int(window),
        )

    def write_rows(self, dst, shape, dtype, rows, src):
        _native.write_rows(self.device, dst, rows, src)

    def paged_attention(
        self,
        q,
        q_shape,
        k_pages,
        v_pages,
        pages_shape,
        page_table,
        table_shape,
        q_starts,
        q_counts,
        kv_lengths,
        scale,
        window,
    ):
        return _native.paged_attention(
            self.device,
            q,
            k_pages,
            v_pages,
            page_table,
            [int(x) for x in q_starts],
            [int(x) for x in q_counts],
            [int(x) for x in kv_lengths],
            float(scale),
            int(window),
        )

    # -- quantized weights (NF4) ------------------------------------------------
    def nf4_dequantize(self, codes, absmax, group_range, offset, w_shape, block_size):
        return _native.nf4_dequantize(
            self.device, codes, absmax, group_range, float(offset), list(w_shape), int(block_size)
        )

    def nf4_linear(self, x, x_shape, codes, absmax, group_range, offset, w_shape, block_size, bias):
        return _native.nf4_linear(
            self.device,
            x,
            codes,
            absmax,
            group_range,
            float(offset),
            list(w_shape),
            int(block_size),
            bias,
        )

    def nf4_linear_backward(
        self, dy, dy_shape, codes, absmax, group_range, offset, w_shape, block_size
    ):
        return _native.nf4_linear_backward(
            self.device,
            dy,
            codes,
            absmax,
            group_range,
            float(offset),
            list(w_shape),
            int(block_size),
        )
