"""A counting stand-in for the GPU: the real ``CudaBackend`` ops over a device that
does no work and holds no memory, counting what a GPU would be asked to do.

``CountingDevice`` takes the place of ``_native.Device``: every kernel launch, cuBLAS
product, upload (and its bytes), host read, memset and device copy is tallied, with
the FLOPs and bytes each would move, and nothing is allocated (a buffer is a size,
a dtype and a made-up address). Host reads give ones
(float32), "no bad index" (an int64 flag) or zero bytes. Everything above the
device -- which kernels the ops choose, how many, with which arguments -- is the code
that runs on a GPU, so the counts are the GPU's counts, on any machine.

>>> import riftco.tensor as rt
>>> backend = CountingCudaBackend()
>>> x = rt.zeros([512, 256], backend=backend)  # a memset, nothing uploaded
>>> backend.counter.counts.uploads
0

Used by the package's budget tests (one GPT-2 124M training step) and by
``bench/bench_cuda.py --estimate`` (a roofline estimate from the tallies).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riftco.backends.cuda.backend import CudaBackend
from riftco.backends.cuda.errors import CudaError

#: Attention kernels whose FLOPs the tallies estimate from their shape arguments
#: (b, t, s, h, hkv, dh at these argument positions), and how many multiply-adds
#: of a score each does per (query, key, head-dim) triple.
_ATTENTION_FLOPS = {
    "attention_f32": (7, 2.0),
    "attention_bf16": (7, 2.0),
    "attention_dq_f32": (9, 3.0),
    "attention_dq_bf16": (9, 3.0),
    "attention_dkv_f32": (10, 4.0),
    "attention_dkv_bf16": (10, 4.0),
}

#: The FlashAttention-2 kernels (``flash_<part>_<source>_d<head dim>``): the argument
#: position of b (then t, s, h, hkv, window; causal is the last), and the products each
#: runs per (query, key) pair
#: seen -- 16 x 8 x 16 ``mma.sync`` steps on the tensor cores (the roofline's bfloat16
#: rate). The tiles each block reads again are counted once: a (batch row, head)'s keys
#: and values (or queries and output gradient) are read by its blocks side by side, from
#: the L2 cache.
_FLASH_FLOPS = {"flash_forward": (6, 2.0), "flash_dq": (9, 3.0), "flash_dkv": (9, 4.0)}


def _flash_part(kernel: str) -> str | None:
    part = kernel.rsplit("_", 2)[0]
    return part if part in _FLASH_FLOPS else None


class CountingBuffer:
    """A device buffer that is only a size: ``nbytes``, ``dtype`` and an address."""

    _addresses = itertools.count(1 << 32, 256)

    def __init__(self, nbytes: int, dtype: str):
        self.nbytes, self.dtype = int(nbytes), dtype
        self.ptr = next(self._addresses)


@dataclass
class Counts:
    """What the ops asked of the device since the last ``reset``."""

    launches: Counter[str] = field(default_factory=Counter)
    gemms: int = 0
    #: cuBLASLt products by epilogue (``bias``, ``bgradb``, ...), counted in ``gemms`` too.
    epilogues: Counter[str] = field(default_factory=Counter)
    gemm_flops: float = 0.0
    gemm_bytes: float = 0.0
    #: (kernel or "gemm <dims>", flops, bytes) per call, in order.
    calls: list[tuple[str, float, float]] = field(default_factory=list)
    uploads: int = 0
    upload_bytes: int = 0
    host_reads: int = 0
    read_bytes: int = 0
    memsets: int = 0
    memset_bytes: int = 0
    copies: int = 0
    copy_bytes: int = 0
    allocations: int = 0
    allocated_bytes: int = 0
    largest_allocation: int = 0

    @property
    def kernel_launches(self) -> int:
        return sum(self.launches.values())

    @property
    def passes(self) -> int:
        """Kernel launches and cuBLAS products together."""
        return self.kernel_launches + self.gemms

    def summary(self) -> str:
        return (
            f"{self.kernel_launches} launches, {self.gemms} GEMMs"
            + (f" ({sum(self.epilogues.values())} with epilogues)" if self.epilogues else "")
            + f", {self.uploads} uploads "
            f"({self.upload_bytes / 1e6:.2f} MB), {self.host_reads} host reads, "
            f"{self.memsets} memsets, {self.copies} device copies"
        )


class CountingDevice:
    """``_native.Device``'s interface, counting instead of running."""

    ordinal, name, arch = 0, "counting stand-in", "sm_90"
    total_memory = 141 << 30

    def __init__(self) -> None:
        self.counts = Counts()

    def reset(self) -> Counts:
        """Start counting afresh; returns what was counted so far."""
        done, self.counts = self.counts, Counts()
        return done

    def alloc(self, nbytes: int, dtype: str) -> CountingBuffer:
        self.counts.allocations += 1
        self.counts.allocated_bytes += int(nbytes)
        self.counts.largest_allocation = max(self.counts.largest_allocation, int(nbytes))
        return CountingBuffer(nbytes, dtype)

    def upload(self, data: np.ndarray, dtype: str) -> CountingBuffer:
        self.counts.uploads += 1
        self.counts.upload_bytes += int(data.nbytes)
        return CountingBuffer(data.nbytes, dtype)

    def download(self, src: CountingBuffer, offset: int, nbytes: int) -> np.ndarray:
        if offset + nbytes > src.nbytes:
            raise CudaError(f"reading {nbytes} bytes at {offset} of a {src.nbytes}-byte buffer")
        self.counts.host_reads += 1
        self.counts.read_bytes += int(nbytes)
        if src.dtype == "int64" and nbytes == 8:
            # An error flag: "no bad index" (riftco.backends.cuda.ops.launch.NO_BAD).
            return np.array([(1 << 63) - 1], dtype=np.int64).view(np.uint8)
        if src.dtype == "float32" and nbytes % 4 == 0:
            # Ones: finite, normal values (a loss, sums of squares), so nothing above
            # takes a path it would take only on a zero or an overflow.
            return np.ones(nbytes // 4, dtype=np.float32).view(np.uint8)
        return np.zeros(nbytes, dtype=np.uint8)

    def copy(self, dst, dst_offset, src, src_offset, nbytes) -> None:
        self.counts.copies += 1
        self.counts.copy_bytes += int(nbytes)
        self.counts.calls.append(("copy", 0.0, 2.0 * nbytes))

    def zero(self, dst) -> None:
        self.counts.memsets += 1
        self.counts.memset_bytes += dst.nbytes
        self.counts.calls.append(("memset", 0.0, float(dst.nbytes)))

    def fill(self, dst, pattern: bytes) -> None:
        self.counts.memsets += 1
        self.counts.memset_bytes += dst.nbytes
        self.counts.calls.append(("memset", 0.0, float(dst.nbytes)))

    def synchronize(self) -> None:
        pass

    def launch(self, module, kernel, grid, block, shared_bytes, args) -> None:
        if 0 in grid:
            return
        self.counts.launches[kernel] += 1
        # Each buffer once, however many of the arguments name it (swap_heads hands the
        # stacked projection as q, k and v).
        handed = {id(a): a for a in args if isinstance(a, CountingBuffer)}
        moved = float(sum(a.nbytes for a in handed.values()))
        flops = 0.0
        if kernel in _ATTENTION_FLOPS:
            first, per = _ATTENTION_FLOPS[kernel]
            b, t, s, h, _, dh = (int(x) for x in args[first : first + 6])
            causal = bool(args[first + 7])
            pairs = t * s / 2 if causal and t == s else t * s
            flops = 2.0 * per * b * h * pairs * dh
            # One block per row reads every other side's row it pairs with, two of them
            # (k and v; or q and dout), from global memory.
            size = 2 if kernel.endswith("bf16") else 4
            moved = max(moved, 2.0 * b * h * pairs * dh * size)
        elif (part := _flash_part(kernel)) is not None:
            first, per = _FLASH_FLOPS[part]
            b, t, s, h, _, window = (int(x) for x in args[first : first + 6])
            dh = int(kernel.rsplit("_d", 1)[1])
            causal = bool(args[-1])
            pairs = t * s / 2 if causal and t == s else t * s
            if causal and window > 0:
                pairs = min(pairs, t * window)
            flops = 2.0 * per * b * h * pairs * dh
        self.counts.calls.append((kernel, flops, moved))

    def gemm(self, element, m, n, k, a, b, c, batch, compute="float32", accumulate=False) -> None:
        size = 4 if element == "float32" else 2
        out_size = 8 if accumulate else 4  # an accumulating product reads C too
        flops = 2.0 * m * n * k * batch
        moved = float(batch * ((m * k + k * n) * size + m * n * out_size))
        self.counts.gemms += 1
        self.counts.gemm_flops += flops
        self.counts.gemm_bytes += moved
        # Products in bfloat16 (bfloat16 operands, or float32 ones rounded as they
        # load) run on the tensor cores: the roofline's bfloat16 rate.
        kind = "bfloat16" if compute == "bfloat16" else element
        self.counts.calls.append((f"gemm {m}x{n}x{k}x{batch} {kind}", flops, moved))

    def gemm_epilogue(
        self, element, m, n, k, a, b, c, epilogue, bias=None, compute="float32"
    ) -> None:
        """A cuBLASLt product with its epilogue: one GEMM, whose bytes are the
        operands, the float32 result and the epilogue's float32 bias vector (read for
        ``bias``, written for ``bgrada`` / ``bgradb``); the epilogue's adds are in the
        call's FLOPs, not in ``gemm_flops`` (the products')."""
        size = 4 if element == "float32" else 2
        product = 2.0 * m * n * k
        flops = product
        moved = float((m * k + k * n) * size + m * n * 4)
        if epilogue != "none":
            length = n if epilogue == "bgradb" else m
            moved += 4.0 * length
            flops += float(m * n) if epilogue == "bias" else float(length * k)
        self.counts.gemms += 1
        self.counts.epilogues[epilogue] += 1
        self.counts.gemm_flops += product  # the products' FLOPs, as for gemm
        self.counts.gemm_bytes += moved
        kind = "bfloat16" if compute == "bfloat16" else element  # tensor-core products
        # Named as cuBLAS products are (the epilogue is in ``counts.epilogues``).
        self.counts.calls.append((f"gemm {m}x{n}x{k}x1 {kind}", flops, moved))


class CountingCudaBackend(CudaBackend):
    """The ``CudaBackend`` over a ``CountingDevice`` (``self.device.counts``)."""

    name = "cudacount"
    runs_on_host = False

    def __init__(self) -> None:
        #: The stand-in itself (``device`` is the same object, typed as the GPU's).
        self.counter = CountingDevice()
        super().__init__(self.counter, {})  # type: ignore[arg-type]

    def describe(self) -> str:
        return "the cuda backend's ops over a counting stand-in device (no GPU)"


#: H200 SXM figures for the roofline: dense bfloat16 tensor-core FLOP/s, float32
#: CUDA-core FLOP/s (no TF32: the backend never uses it), HBM3e bytes/s.
H200 = {"bf16_flops": 989e12, "f32_flops": 67e12, "bytes": 4.8e12}


def roofline(counts: Counts, figures: dict[str, float] = H200) -> dict[str, Any]:
    """A roofline estimate of the counted work, in seconds: each call takes the longer
    of its FLOPs at peak and its bytes at full bandwidth (bfloat16 GEMMs and the
    FlashAttention-2 kernels at the tensor cores' rate, everything else at float32's). ``ideal`` is every FLOP at that rate
    with no memory time; ``by_kind`` the estimate per kernel (or GEMM dtype), largest
    first."""
    by_kind: dict[str, float] = {}
    total = ideal = 0.0
    for name, flops, moved in counts.calls:
        fast = name.endswith("bfloat16") if name.startswith("gemm") else name.startswith("flash_")
        rate = figures["bf16_flops"] if fast else figures["f32_flops"]
        seconds = max(flops / rate, moved / figures["bytes"])
        kind = name.split(" ")[0] + (" bf16" if fast else "") if name.startswith("gemm") else name
        by_kind[kind] = by_kind.get(kind, 0.0) + seconds
        total += seconds
        ideal += flops / rate
    ranked = dict(sorted(by_kind.items(), key=lambda item: -item[1]))
    return {"seconds": total, "ideal": ideal, "by_kind": ranked}


#: GPT-2 124M (riftco-nn's preset shapes): vocabulary, context, width, heads, layers.
GPT2_124M = dict(
    vocab_size=50257, context_length=1024, d_model=768, n_heads=12, n_layers=12, d_ff=3072
)


def training_step_counts(
    precision: str = "bf16", batch: int = 4, steps: int = 1024, config: dict | None = None
) -> Counts:
    """The counts of one training step of GPT-2 124M (or ``config``) as a user runs
    it: riftco-train's ``Trainer.train_step`` (forward and loss at ``precision``,
    backward, the loss and gradient norm read together, clipping, AdamW), on the
    counting stand-in. A first step runs uncounted (it makes the Adam moments)."""
    import riftco.nn as nn
    from riftco.optim import AdamW, WarmupCosineSchedule, weight_decay_groups
    from riftco.train.batches import RandomWindows
    from riftco.train.engine import Trainer

    backend = CountingCudaBackend()
    shapes = dict(GPT2_124M if config is None else config)
    shapes["context_length"] = max(int(shapes["context_length"]), steps)
    model = nn.DecoderOnlyTransformer(
        nn.TransformerConfig.preset("gpt2", **shapes), seed=0, backend=backend
    )
    groups = [g for g in weight_decay_groups(model.named_parameters(), 0.1) if g["params"]]
    optimizer = AdamW(groups, lr=3e-4, betas=(0.9, 0.95), max_grad_norm=1.0)
    stream = np.arange(batch * steps * 4, dtype=np.int64) % int(shapes["vocab_size"])
    source = RandomWindows(stream, steps, batch, seed=0)
    trainer = Trainer(
        model,
        optimizer,
        WarmupCosineSchedule(3e-4, 2, 10),
        source,
        stage="pretraining",
        total_steps=10,
        backend=backend,
        precision=precision,
    )
    trainer.train_step()
    backend.counter.reset()
    trainer.train_step()
    return backend.counter.reset()


__all__ = [
    "GPT2_124M",
    "H200",
    "CountingBuffer",
    "CountingCudaBackend",
    "CountingDevice",
    "Counts",
    "roofline",
    "training_step_counts",
]
