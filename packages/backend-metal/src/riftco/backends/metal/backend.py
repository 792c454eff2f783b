"""The ``metal`` and ``vulkan`` backends: storages are pooled wgpu buffers, every op
a WGSL compute kernel recorded into the pending batch. The host waits for the
device only in ``to_numpy`` (``.numpy()``, ``.item()``) and where a kernel's
result decides what the op returns (an index check, Adam's finite check).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from riftco.backends.metal import (
    _native,
    attention,
    decode,
    elementwise,
    fused,
    indexing,
    layout,
    linalg,
    optimizer,
    quantized,
    reductions,
)
from riftco.backends.metal.discovery import Adapter, driver_messages
from riftco.backends.metal.runtime import Runtime, Storage
from riftco.tensor.plugin import Backend, BackendUnavailable, DType, Shape, as_dtype

#: The backend API this package implements (riftco.tensor's BACKEND_API_VERSION):
#: through 1.4 as WGSL kernels; 1.5 is bfloat16, which WGSL cannot hold (``dtypes``
#: stays the base set); 1.6's llama.cpp block-layout weights have no kernel here
#: (riftco-tensor's op layer composes them from the kernels here, on the device); 1.7's
#: whole-step decoding is a plan of WGSL kernels over float32 weights (decode.py).
API_VERSION = (1, 7)


#: Chooses the matmul kernel when a device opens (``auto`` unless set).
MATMUL_VAR = "RIFTCO_WGPU_MATMUL"
#: The matmul paths: what each is, and when ``auto`` takes it.
MATMUL_PATHS = {
    "tiled": "64 x 64 workgroup tiles through workgroup memory, 4 x 4 outputs a thread, "
    "f32 (auto on a GPU)",
    "blocked": "8 x 16 outputs a thread read as vec4s, no workgroup memory or barriers "
    "(auto on a software adapter such as lavapipe)",
    "f16": "the tiled kernel with f16 tiles: inputs rounded to f16, products summed in f32 "
    "(needs SHADER_F16; never auto: about 1e-3 relative error)",
    "subgroup": "the blocked kernel with A shared through subgroup shuffles "
    "(needs subgroups of at least 8 lanes)",
    "coop": "cooperative matrices: 8 x 8 or 16 x 16 tiles, f16 inputs where offered "
    "(else f32), f32 accumulation (needs wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX with such "
    "a configuration; never auto: the device opens with it only when asked)",
}
#: ``plan`` (default): whole-step decoding through decode.py's plan; ``ops``: the
#: backend offers no ``decode_step``, so models decode op by op (for comparison).
DECODE_VAR = "RIFTCO_WGPU_DECODE"
_DECODE_CAPS = frozenset({"decode_program", "decode_step"})
#: Lanes a subgroup needs for the subgroup path (linalg.BLOCK_ROWS).
SUBGROUP_LANES = 8


def _wanted_matmul_path() -> str:
    return os.environ.get(MATMUL_VAR, "auto").strip().lower() or "auto"


def _coop_refusal(adapter: Adapter) -> str:
    if adapter.cooperative_matrices and not adapter.cooperative_matrix:
        said = "reports " + ", ".join(adapter.cooperative_matrices) + " but wgpu withholds them"
    elif adapter.cooperative_matrices:
        said = "offers only " + ", ".join(adapter.cooperative_matrices)
    else:
        said = "reports no cooperative matrices"
    return (
        f"{MATMUL_VAR}=coop needs cooperative matrices wgpu can use (8x8x8 or 16x16x16 tiles, "
        f"f16 or f32 inputs, f32 accumulation), and {adapter.name} {said}"
    )


def wants_cooperative_matrix(adapter: Adapter) -> bool:
    """Whether the device should open with cooperative matrices: ``RIFTCO_WGPU_MATMUL=coop``,
    refused with ``BackendUnavailable`` (the reason) where ``adapter`` has none it can use."""
    if _wanted_matmul_path() != "coop":
        return False
    if adapter.cooperative_matrix_config is None:
        raise BackendUnavailable(_coop_refusal(adapter))
    return True


def choose_matmul_path(adapter: Adapter, device: _native.Device | None = None) -> str:
    """The matmul path for ``adapter``: ``RIFTCO_WGPU_MATMUL`` if set (``tiled``,
    ``blocked``, ``f16``, ``subgroup``, ``coop``), else ``blocked`` on a software adapter and
    ``tiled`` on a GPU."""
    wanted = _wanted_matmul_path()
    if wanted == "auto":
        return "blocked" if adapter.runs_on_host else "tiled"
    if wanted not in MATMUL_PATHS:
        raise BackendUnavailable(
            f"{MATMUL_VAR}={wanted!r} is not a matmul path; expected auto, "
            + ", ".join(MATMUL_PATHS)
        )
    if wanted not in matmul_paths(adapter, device):
        if wanted == "coop":
            raise BackendUnavailable(_coop_refusal(adapter))
        need = {
            "f16": "the SHADER_F16 feature",
            "subgroup": f"subgroups of at least {SUBGROUP_LANES} lanes",
        }[wanted]
        raise BackendUnavailable(f"{MATMUL_VAR}={wanted} needs {need}, which {adapter.name} lacks")
    if wanted == "coop" and device is not None and coop_config(device) is None:
        raise BackendUnavailable(
            f"{MATMUL_VAR}=coop: the device on {adapter.name} was opened without cooperative "
            "matrices (riftco.backends.metal opens it with them when this is set at open)"
        )
    return wanted


def coop_config(device: _native.Device) -> tuple[int, str, int] | None:
    """The coop path's (tile size, input type, workgroup width) where ``device`` was opened
    with cooperative matrices, else None."""
    return getattr(device, "cooperative_matrix", None)


def matmul_paths(adapter: Adapter, device: _native.Device | None = None) -> list[str]:
    """The matmul paths this adapter (or the opened ``device``) can run. ``coop`` is the
    adapter's to offer: a device opens with cooperative matrices only when that path is
    asked for."""
    if device is not None:
        f16, lanes = device.shader_f16, device.subgroup_sizes[0]
    else:
        f16, lanes = adapter.shader_f16, adapter.subgroup_sizes[0] if adapter.subgroup else 0
    offered = {
        "f16": f16,
        "subgroup": lanes >= SUBGROUP_LANES,
        "coop": adapter.cooperative_matrix_config is not None,
    }
    return [p for p in MATMUL_PATHS if offered.get(p, True)]


#: Chooses the attention kernels when a device opens (``auto`` unless set).
ATTENTION_VAR = "RIFTCO_WGPU_ATTENTION"
ATTENTION_PATHS = ("rows", "tiled")


def choose_attention_path(adapter: Adapter) -> str:
    """``RIFTCO_WGPU_ATTENTION`` if set (``rows``, ``tiled``), else ``tiled`` on a GPU
    and ``rows`` on a software adapter (whose workgroup memory and barriers cost more
    than the loads they save)."""
    wanted = os.environ.get(ATTENTION_VAR, "auto").strip().lower() or "auto"
    if wanted == "auto":
        return "rows" if adapter.runs_on_host else "tiled"
    if wanted not in ATTENTION_PATHS:
        raise BackendUnavailable(
            f"{ATTENTION_VAR}={wanted!r} is not an attention path; expected auto, rows, tiled"
        )
    return wanted


class WgpuBackend(Backend):
    """One wgpu device: an Apple GPU (``metal``) or a Vulkan adapter (``vulkan``)."""

    api_version = API_VERSION
    #: auto's ranking: above PJRT devices (100), as a dedicated GPU backend.
    priority = 150
    #: Decoder.step hands decode_step its index arrays on the host (decode.py checks
    #: them there and writes them with the step's one upload).
    decode_host_indices = True

    def __init__(self, name: str, device: _native.Device, adapter: Adapter):
        self.name = name
        self.device = device
        self.adapter = adapter
        self.matmul_path = choose_matmul_path(adapter, device)
        self.attention_path = choose_attention_path(adapter)
        self.rt = Runtime(device, self.matmul_path, self.attention_path)
        # A software adapter computes on the host CPU: usable by name, never by `auto`.
        self.runs_on_host = adapter.runs_on_host
        decode_path = os.environ.get(DECODE_VAR, "plan").strip().lower() or "plan"
        if decode_path not in ("plan", "ops"):
            raise BackendUnavailable(f"{DECODE_VAR} must be plan or ops, found {decode_path!r}")
        #: ``plan`` or ``ops`` (RIFTCO_WGPU_DECODE); may be changed before a model decodes.
        self.decode_path = decode_path

    def capabilities(self) -> frozenset[str]:
        caps = super().capabilities()
        return caps - _DECODE_CAPS if self.decode_path == "ops" else caps

    def describe(self) -> str:
        offered = " ".join(matmul_paths(self.adapter, self.device))
        path = self.matmul_path
        coop = coop_config(self.device)
        if path == "coop" and coop is not None:
            size, inputs, width = coop
            path += f" ({size}x{size}x{size} {inputs}->f32, workgroups of {width})"
        text = (
            f"wgpu {self.name}: {self.adapter.describe()}; matmul path {path} "
            f"(offered here: {offered}); attention path {self.attention_path}; "
            f"decode path {self.decode_path}; "
            f"shader features: {self.adapter.features()}"
        )
        said = driver_messages()
        if said:
            # What the driver wrote to stderr during discovery, kept off the terminal.
            unique = list(dict.fromkeys(said))
            text += f"; the driver wrote during discovery: {' | '.join(unique)}"
            if len(said) > len(unique):
                text += f" ({len(said)} lines)"
        return text

    def missing_hint(self, capability: str) -> str:
        return "there is no fallback to the CPU: move the tensors with .to('cpu') to use it there"

    def synchronize(self) -> None:
        """Wait until every recorded op has run (benchmarks)."""
        self.device.synchronize()

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> Storage:
        return self.rt.upload(array, as_dtype(array.dtype))

    def to_numpy(self, x: Storage, shape: Shape, dtype: DType) -> np.ndarray:
        return layout.to_numpy(self.rt, x, shape)

    def reshape(self, x: Storage, shape: Shape, new_shape: Shape) -> Storage:
        return x.view()

    def assign(self, dst: Storage, src: Storage, shape: Shape, dtype: DType) -> None:
        if dst.buffer is not src.buffer:
            self.rt.copy(src, dst, dst.count)

    def astype(self, x: Storage, shape: Shape, src: DType, dst: DType) -> Storage:
        return layout.astype(self.rt, x, src, dst)

    # -- layout ---------------------------------------------------------------
    def copy_strided(self, x, shape, dtype, out_shape, strides, offset):
        return layout.copy_strided(self.rt, x, dtype, out_shape, strides, offset)

    def concat(self, xs: Sequence, shapes, dtype, axis):
        return layout.concat(self.rt, list(xs), list(shapes), dtype, axis)

    # -- elementwise ----------------------------------------------------------
    def unary(self, op, x, shape, dtype):
        return elementwise.unary(self.rt, op, x, dtype)

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return elementwise.binary(self.rt, op, a, a_shape, b, b_shape, out_shape, dtype)

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return elementwise.compare(self.rt, op, a, a_shape, b, b_shape, out_shape, dtype)

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        return elementwise.where(
            self.rt, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype
        )

    # -- reductions -----------------------------------------------------------
    def reduce(self, op, x, shape, dtype, axis):
        return reductions.reduce(self.rt, op, x, shape, dtype, axis)

    def argmax(self, x, shape, dtype, axis):
        return reductions.reduce(self.rt, "argmax", x, shape, dtype, axis)

    def softmax(self, x, shape, causal, log):
        return reductions.softmax(self.rt, x, shape, causal, log)

    # -- linear algebra -------------------------------------------------------
    def matmul(self, a, a_shape, b, b_shape, transpose_a, transpose_b):
        return linalg.matmul(self.rt, a, a_shape, b, b_shape, transpose_a, transpose_b)

    # -- indexing -------------------------------------------------------------
    def index_select(self, x, shape, dtype, axis, indices, count):
        return indexing.index_select(self.rt, x, shape, dtype, axis, indices, count)

    def index_add(self, base, shape, axis, indices, src, src_shape):
        return indexing.index_add(self.rt, base, shape, axis, indices, src, src_shape)

    def gather(self, x, shape, dtype, axis, indices, index_shape):
        return indexing.gather(self.rt, x, shape, dtype, axis, indices, index_shape)

    def scatter_add(self, base, shape, axis, indices, index_shape, src):
        return indexing.scatter_add(self.rt, base, shape, axis, indices, index_shape, src)

    def write_rows(self, dst, shape, dtype, rows, src):
        indexing.write_rows(self.rt, dst, shape, rows, src)

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
        return optimizer.adam_update(
            self.rt, params, grads, m, v, sizes, page_size, lr, beta1, beta2, eps,
            weight_decay, decoupled, step, grad_scale,
        )  # fmt: skip

    # -- fused neural-network kernels ------------------------------------------
    def layer_norm(self, x, shape, weight, bias, eps):
        return fused.norm(self.rt, x, shape, weight, bias, eps, rms=False)

    def layer_norm_backward(self, dy, x, shape, weight, mean, rstd, with_bias):
        return fused.norm_backward(self.rt, dy, x, shape, weight, [mean, rstd], False, with_bias)

    def rms_norm(self, x, shape, weight, eps):
        return fused.norm(self.rt, x, shape, weight, None, eps, rms=True)

    def rms_norm_backward(self, dy, x, shape, weight, rstd):
        dx, dw, _ = fused.norm_backward(self.rt, dy, x, shape, weight, [rstd], True, False)
        return dx, dw

    def activation_backward(self, op, x, dy, shape):
        return fused.activation_backward(self.rt, op, x, dy)

    def cross_entropy(self, logits, shape, targets, ignore_index):
        return fused.cross_entropy(self.rt, logits, shape, targets, int(ignore_index))

    def cross_entropy_backward(self, logits, shape, targets, lse, grad, ignore_index):
        return fused.cross_entropy_backward(
            self.rt, logits, shape, targets, lse, grad, int(ignore_index)
        )

    def rotary(self, x, shape, positions, theta, inverse):
        return fused.rotary(self.rt, x, shape, positions, float(theta), bool(inverse))

    # -- attention --------------------------------------------------------------
    def attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        return attention.attention(self.rt, q, k, v, q_shape, kv_shape, scale, causal, window)

    def attention_backward(self, dout, q, k, v, probs, q_shape, kv_shape, scale, causal, window):
        return attention.backward(
            self.rt, dout, q, k, v, probs, None, None, q_shape, kv_shape, scale, causal, window
        )

    def flash_attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        out, row_max, row_sum, _ = attention.forward(
            self.rt, q, k, v, q_shape, kv_shape, scale, causal, window
        )
        return out, row_max, row_sum

    def flash_attention_backward(
        self, dout, q, k, v, out, row_max, row_sum, q_shape, kv_shape, scale, causal, window
    ):
        return attention.backward(
            self.rt, dout, q, k, v, None, row_max, row_sum, q_shape, kv_shape, scale, causal, window
        )

    def attention_varlen(
        self, q, k, v, q_shape, kv_shape, q_starts, q_counts, kv_starts, kv_lengths, scale, window
    ):
        return attention.varlen(
            self.rt, q, k, v, q_shape, kv_shape, q_starts, q_counts, kv_starts, kv_lengths,
            float(scale), int(window),
        )  # fmt: skip

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
        return attention.paged(
            self.rt, q, q_shape, k_pages, v_pages, pages_shape, page_table, table_shape,
            q_starts, q_counts, kv_lengths, float(scale), int(window),
        )  # fmt: skip

    # -- whole-step decoding (API 1.7) -------------------------------------------
    def decode_program(self, spec):
        return decode.program(self.rt, spec)

    def decode_step(self, program, batch):
        return decode.step(self.rt, program, batch)

    # -- quantized weights (NF4) ------------------------------------------------
    def nf4_dequantize(self, codes, absmax, group_range, offset, w_shape, block_size):
        return quantized.dequantize(
            self.rt, codes, absmax, group_range, float(offset), w_shape, int(block_size)
        )

    def nf4_linear(self, x, x_shape, codes, absmax, group_range, offset, w_shape, block_size, bias):
        return quantized.linear(
            self.rt, x, x_shape, codes, absmax, group_range, float(offset), w_shape,
            int(block_size), bias,
        )  # fmt: skip

    def nf4_linear_backward(
        self, dy, dy_shape, codes, absmax, group_range, offset, w_shape, block_size
    ):
        return quantized.linear_backward(
            self.rt, dy, dy_shape, codes, absmax, group_range, float(offset), w_shape,
            int(block_size),
        )  # fmt: skip
