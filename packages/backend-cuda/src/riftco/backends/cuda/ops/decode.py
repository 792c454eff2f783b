"""Whole-step decoding on the device (backend API 1.7 ``decode_program`` /
``decode_step``) and device sampling.

``decode_program`` builds a `DecodePlan` once: the query/key/value weights fused into
one ``[(H + 2 Hkv) Dh, d]`` matrix (gate and up into one ``[2 hidden, d]``), every
weight float32 or, on request, bfloat16 (``RIFTCO_CUDA_DECODE_WEIGHTS=bfloat16``:
half the bytes, widened to float32 as read), and the rotary frequencies. Per batch
shape (tokens, logit rows, sequences, page-table width, the cache storages) it keeps a
`_Shape`: every activation buffer preallocated and the step's kernel launches as a
fixed list whose arguments never change, so the list is captured once as a CUDA graph
where the device offers graphs (``begin_capture`` / ``end_capture`` /
``graph_launch``) and replayed each step. A step then costs:

- one host-to-device transfer: the token ids, positions, cache rows, per-row key
  ranges, page table rows and logit rows packed into one int64 block, checked on the
  host first (where they come from; no flag is read back);
- one graph launch (without graphs: the list, ``launches_per_step`` kernels);
- the logits copied out of the plan's static buffer (``decode_step``), or, with device
  sampling (``decode_sample``), one read of the sampled ids.

Attention is split-KV (flash-decoding): each (row, head) has ``splits`` blocks over
``chunk`` keys each, writing partial softmax statistics that a second kernel combines
in split order, so the result does not depend on scheduling.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaError
from riftco.backends.cuda.ops.launch import Kernel, Launcher, grid, kernel, row_grid
from riftco.tensor.plugin import CapabilityMissing, undecodable

_EMBED = kernel("decode", "decode_embed")
_NORM = kernel("decode", "decode_norm")
_LINEAR = {
    "float32": kernel("decode", "decode_linear_f32"),
    "bfloat16": kernel("decode", "decode_linear_bf16"),
    "q8_0": kernel("decode", "decode_linear_q8_0"),
    "q4_0": kernel("decode", "decode_linear_q4_0"),
}
_QUANTIZE = kernel("decode", "decode_quantize_q8")
#: Bytes of a block of 32 elements of the llama.cpp layouts the plan reads.
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}
_ROTARY = kernel("decode", "decode_rotary")
_WRITE = kernel("decode", "decode_write_cache")
_SPLIT = kernel("decode", "decode_attention_split")
_COMBINE = kernel("decode", "decode_attention_combine")
_GELU = kernel("decode", "decode_gelu")
_SWIGLU = kernel("decode", "decode_swiglu")
_SAMPLE = kernel("sample", "sample_rows")

#: What the plan decodes (anything else is refused typed: the model decodes op by op).
NORM_ROLES = frozenset({"attention", "feed_forward"})
LINEAR_ROLES = frozenset(
    {"query", "key", "value", "output", "expand", "project", "gate", "up", "down"}
)
FEED_FORWARDS = frozenset({"gelu", "gelu_tanh", "swiglu"})
WEIGHT_DTYPES = ("float32", "bfloat16")
#: The DecodeLinear formats the plan reads (f32 as float32 or bfloat16).
HELD_FORMATS = frozenset({"f32", "q8_0", "q4_0"})
#: Keys per split-KV block on a GPU (the emulator uses its own, smaller).
CHUNK = 256


@dataclass(frozen=True)
class Sampling:
    """Device sampling of one row of logits: ``temperature <= 0`` is greedy (the first
    largest logit, as ``argmax``); otherwise logits divided by ``temperature`` after the
    repetition ``penalty`` (a positive logit of a seen token divided by it, a negative
    one multiplied), kept to the ``top_k`` largest (0: all) and the smallest set of
    largest whose probability reaches ``top_p`` (1: all), and one token drawn with a
    counter-based generator of ``(seed, counter, row)``: the same inputs draw the same
    token on every run and every GPU."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    penalty: float = 1.0
    seed: int = 0


def _bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.int32)[0])


class _Shape:
    """The preallocated buffers and the fixed launch list of one batch shape."""

    def __init__(
        self,
        plan: DecodePlan,
        n: int,
        m: int,
        seqs: int,
        width: int,
        page_size: int,
        keys: tuple,
        values: tuple,
        cache_rows: int,
        sample: bool,
        history: int,
    ) -> None:
        k = plan.kernels
        d, qkv_w = plan.d, plan.qkv_width
        self.n, self.m, self.width, self.page_size = n, m, width, page_size
        capacity = width * page_size if width else cache_rows
        self.splits = max(1, -(-capacity // plan.chunk))
        self.table_at = 6 * n
        self.logit_at = 6 * n + seqs * width
        self.sample_at = self.logit_at + m
        self.history = history
        # sampling block: per row (temperature bits, top_k, top_p bits, penalty bits,
        # seed, counter, history length) then the history [m, history]
        self.params_len = self.sample_at + (m * (7 + history) if sample else 0)
        self.params = k.alloc((self.params_len,), "int64")
        self.x = k.alloc((n, d), "float32")
        self.h = k.alloc((n, d), "float32")
        self.qkv = k.alloc((n, qkv_w), "float32")
        self.att = k.alloc((n, plan.heads * plan.head_dim), "float32")
        self.part = k.alloc((n * plan.heads * self.splits * (plan.head_dim + 2),), "float32")
        self.u = k.alloc((n, max(plan.ff_width, 1)), "float32")
        # the input rows of a Q8_0 / Q4_0 product, quantized (codes and block scales)
        widest = max(d, plan.heads * plan.head_dim, plan.hidden)
        self.xq = k.alloc((n * widest,), "uint8") if plan.blocks else None
        self.xs = k.alloc((n * widest // 32 + 1,), "float32") if plan.blocks else None
        self.g = k.alloc((n, max(plan.hidden, 1)), "float32")
        self.last = k.alloc((m, d), "float32")
        self.logits = k.alloc((m, plan.vocab), "float32")
        self.scratch = k.alloc((m, plan.vocab), "float32") if sample else None
        self.ids = k.alloc((m,), "int64") if sample else None
        self.keys, self.values = keys, values  # kept alive while the launches name them
        self.launches = plan._launch_list(self, sample)
        self.graph: Any = None


class DecodePlan:
    """A lowered ``DecodeSpec`` on one device (see the module docstring)."""

    def __init__(
        self,
        backend: Any,
        spec: Any,
        weights: str | None = None,
        chunk: int | None = None,
        graphs: bool | None = None,
    ) -> None:
        _refuse_unknown(spec)
        self.kernels: Launcher = backend.kernels
        self.device = backend.device
        self.backend = backend
        weights = weights or os.environ.get("RIFTCO_CUDA_DECODE_WEIGHTS", "float32")
        if weights not in WEIGHT_DTYPES:
            raise CudaError(f"decode weights on cuda are float32 or bfloat16, found {weights!r}")
        self.weights = weights
        self.chunk: int = chunk or int(getattr(backend, "decode_chunk", CHUNK))
        if graphs is None:
            graphs = os.environ.get("RIFTCO_CUDA_GRAPHS", "1") != "0"
        self.graphs = bool(graphs) and hasattr(self.device, "begin_capture")
        s = spec
        self.spec = spec
        self.d, self.vocab, self.context = s.d_model, s.vocab, s.context
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        if self.head_dim > 256:
            raise CapabilityMissing(
                f"the cuda decode plan takes head_dim up to 256, found {self.head_dim}"
            )
        self.qkv_width = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.rms = int(s.norm == "rms")
        self.eps, self.scale, self.window = float(s.eps), float(s.scale), int(s.window)
        self.token_embedding, self.position_embedding = s.token_embedding, s.position_embedding
        self.inv_freq = None
        if s.rope_theta is not None:
            exponent = np.arange(0, s.head_dim, 2, dtype=np.float32) / np.float32(s.head_dim)
            inv = (np.float32(1.0) / np.power(np.float32(s.rope_theta), exponent)).astype(
                np.float32
            )
            self.inv_freq = self.kernels.upload(inv, "float32")
        self.blocks = False  # whether any product reads Q8_0 / Q4_0 blocks
        kinds = {layer.feed_forward for layer in s.layers}
        self.hidden = 0
        self.layers = []
        for layer in s.layers:
            lin = layer.linears
            fused = {
                "qkv": self._fuse([lin["query"], lin["key"], lin["value"]]),
                "output": self._fuse([lin["output"]]),
            }
            if layer.feed_forward == "swiglu":
                fused["up"] = self._fuse([lin["gate"], lin["up"]])
                fused["down"] = self._fuse([lin["down"]])
                hidden = lin["gate"].shape[0]
            else:
                fused["up"] = self._fuse([lin["expand"]])
                fused["down"] = self._fuse([lin["project"]])
                hidden = lin["expand"].shape[0]
            self.hidden = max(self.hidden, hidden)
            self.layers.append((layer, fused, hidden))
        self.ff_width = self.hidden * (2 if "swiglu" in kinds else 1)
        self.final_norm = s.final_norm
        self.head = self._fuse([s.head])
        self.shapes: dict[tuple, _Shape] = {}

    def _fuse(self, linears: Sequence[Any]) -> tuple[Any, Any, int, int, str]:
        """One ``[sum of rows, cols]`` weight (and bias, zeros where a part has none) in
        the plan's weight dtype (block layouts as they are): ``(weight, bias or None,
        rows, cols, kernel format)``."""
        cols = linears[0].shape[1]
        rows = sum(lin.shape[0] for lin in linears)
        formats = {lin.format for lin in linears}
        if len(formats) != 1:
            raise CapabilityMissing(
                f"the cuda decode plan fuses linears of one format, found {sorted(formats)}"
            )
        fmt = linears[0].format
        row_bytes = cols // 32 * BLOCK_BYTES[fmt] if fmt in BLOCK_BYTES else cols * 4
        k, dev = self.kernels, self.device
        if len(linears) == 1:
            weight = linears[0].arrays[0]
        else:
            weight = k.alloc((rows * row_bytes,), "uint8" if fmt in BLOCK_BYTES else "float32")
            at = 0
            for lin in linears:
                size = lin.shape[0] * row_bytes
                dev.copy(weight, at, lin.arrays[0], 0, size)
                at += size
        bias = None
        if any(lin.bias is not None for lin in linears):
            if len(linears) == 1:
                bias = linears[0].bias
            else:
                bias = k.alloc((rows,), "float32")
                dev.zero(bias)
                at = 0
                for lin in linears:
                    if lin.bias is not None:
                        dev.copy(bias, at, lin.bias, 0, lin.shape[0] * 4)
                    at += lin.shape[0] * 4
        if fmt in BLOCK_BYTES:
            if cols % 32:
                raise CapabilityMissing(f"{fmt} weights of {cols} columns (not blocks of 32)")
            self.blocks = True
            return weight, bias, rows, cols, fmt
        if self.weights == "bfloat16":
            weight = self.backend._convert(weight, (rows, cols), "float32", "bfloat16")
        return weight, bias, rows, cols, self.weights

    # -- the launch list ----------------------------------------------------------------
    def _launch_list(self, sh: _Shape, sample: bool) -> list[tuple]:
        k = self.kernels
        block = (k.block, 1, 1)
        n, m, d = sh.n, sh.m, self.d
        h, hkv, dh = self.heads, self.kv_heads, self.head_dim
        out: list[tuple] = []

        def add(kern: Kernel, g: tuple[int, int, int], args: list) -> None:
            out.append((kern.module, kern.name, g, block, 0, args))

        def linear(w: tuple, x: Any, y: Any, rows_in: int, accumulate: int) -> None:
            weight, bias, rows, cols, fmt = w
            if fmt in BLOCK_BYTES:
                add(
                    _QUANTIZE, grid(rows_in * cols // 32, k.block), [x, sh.xq, sh.xs, rows_in, cols]
                )
                args = [weight, bias, sh.xq, sh.xs, y, rows_in, rows, cols, accumulate]
            else:
                args = [weight, bias, x, y, rows_in, rows, cols, accumulate]
            add(_LINEAR[fmt], row_grid(rows), args)

        add(
            _EMBED,
            grid(n * d, k.block),
            [self.token_embedding, self.position_embedding, sh.params, sh.x, n, d],
        )
        for (layer, fused, hidden), kc, vc in zip(self.layers, sh.keys, sh.values):
            an, fn = layer.norms["attention"], layer.norms["feed_forward"]
            add(
                _NORM,
                row_grid(n),
                [sh.x, an.weight, an.bias, sh.h, sh.params, -1, n, d, self.eps, self.rms],
            )
            linear(fused["qkv"], sh.h, sh.qkv, n, 0)
            if self.inv_freq is not None:
                add(
                    _ROTARY,
                    grid(n * (h + hkv) * dh // 2, k.block),
                    [sh.qkv, self.inv_freq, sh.params, n, h, hkv, dh],
                )
            add(_WRITE, grid(n * hkv * dh, k.block), [sh.qkv, kc, vc, sh.params, n, h, hkv, dh])
            add(
                _SPLIT,
                row_grid(n * h * sh.splits),
                [
                    sh.qkv,
                    kc,
                    vc,
                    sh.part,
                    sh.params,
                    n,
                    h,
                    hkv,
                    dh,
                    self.scale,
                    self.window,
                    sh.splits,
                    self.chunk,
                    sh.width,
                    sh.page_size,
                ],
            )
            add(_COMBINE, row_grid(n * h), [sh.part, sh.att, n * h, sh.splits, dh])
            linear(fused["output"], sh.att, sh.x, n, 1)
            add(
                _NORM,
                row_grid(n),
                [sh.x, fn.weight, fn.bias, sh.h, sh.params, -1, n, d, self.eps, self.rms],
            )
            linear(fused["up"], sh.h, sh.u, n, 0)
            if layer.feed_forward == "swiglu":
                add(_SWIGLU, grid(n * hidden, k.block), [sh.u, sh.g, n, hidden])
                linear(fused["down"], sh.g, sh.x, n, 1)
            else:
                add(
                    _GELU,
                    grid(n * hidden, k.block),
                    [sh.u, n * hidden, int(layer.feed_forward == "gelu_tanh")],
                )
                linear(fused["down"], sh.u, sh.x, n, 1)
        fw = self.final_norm
        add(
            _NORM,
            row_grid(m),
            [sh.x, fw.weight, fw.bias, sh.last, sh.params, sh.logit_at, m, d, self.eps, self.rms],
        )
        linear(self.head, sh.last, sh.logits, m, 0)
        if sample:
            add(
                _SAMPLE,
                row_grid(m),
                [sh.logits, sh.scratch, sh.ids, sh.params, sh.sample_at, m, self.vocab, sh.history],
            )
        return out

    @property
    def launches_per_step(self) -> int:
        """Kernels of one step without graphs (the launch budget then)."""
        per_layer = 10 + (self.inv_freq is not None)
        fused = [w for _, f, _ in self.layers for w in f.values()] + [self.head]
        quantized = sum(w[4] in BLOCK_BYTES for w in fused)  # + a quantize each
        return 3 + per_layer * len(self.layers) + quantized

    # -- a step ---------------------------------------------------------------------------
    def _pack(self, batch: Any) -> tuple[np.ndarray, tuple]:
        """The step's int64 block, checked on the host; and the shape key."""
        tok, pos, rows = (
            np.asarray(_host(a), dtype=np.int64).reshape(-1)
            for a in (batch.tokens, batch.positions, batch.cache_rows)
        )
        n = len(tok)
        cache_rows = int(batch.cache_shape[0])
        if n == 0:
            raise CudaError("decode: a step of no tokens")
        if len(pos) != n or len(rows) != n:
            raise CudaError(
                f"decode: {n} tokens with {len(pos)} positions and {len(rows)} cache rows"
            )
        bad = np.flatnonzero((tok < 0) | (tok >= self.vocab))
        if bad.size:
            i = int(bad[0])
            raise CudaError(
                f"decode: token {tok[i]} (row {i}) is outside the vocabulary of {self.vocab}"
            )
        contexts = self.context if self.position_embedding is not None else None
        bad = np.flatnonzero((pos < 0) | ((pos >= contexts) if contexts else False))
        if bad.size:
            i = int(bad[0])
            limit = contexts if contexts else "non-negative"
            raise CudaError(
                f"decode: position {pos[i]} (row {i}) is outside the model's {limit} positions"
            )
        bad = np.flatnonzero((rows < 0) | (rows >= cache_rows))
        if bad.size:
            raise CudaError(
                f"decode: cache row {rows[int(bad[0])]} is outside layer 0's {cache_rows} rows"
            )
        logit_rows = np.asarray(batch.logit_rows, dtype=np.int64)
        if logit_rows.size and (logit_rows.min() < 0 or logit_rows.max() >= n):
            raise CudaError(
                f"decode: logits of row {int(logit_rows.max())} of a step of {n} tokens"
            )
        seqs = len(batch.q_starts)
        meta = np.zeros((n, 3), dtype=np.int64)
        paged = batch.page_table is not None
        width = int(batch.table_width) if paged else 0
        page_size = int(batch.page_size) if paged else 1
        table: np.ndarray = np.zeros((0,), dtype=np.int64)
        if paged:
            table = np.asarray(_host(batch.page_table), dtype=np.int64).reshape(seqs, width)
            pages = cache_rows // page_size
            given = width
            # The width padded to a power of two (at most the pool's pages), so a
            # sequence growing by a page seldom makes a new shape (and graph).
            padded = min(max(pages, width), 1 << max(0, (width - 1).bit_length()))
            if padded > width:
                table = np.pad(table, ((0, 0), (0, padded - width)))
                width = padded
        for j in range(seqs):
            q0, qn, kvl = int(batch.q_starts[j]), int(batch.q_counts[j]), int(batch.kv_lengths[j])
            if qn > kvl or q0 < 0 or q0 + qn > n:
                raise CudaError(f"decode: sequence {j} has {qn} new rows at {q0} over {kvl} keys")
            first = 0 if paged else int(batch.kv_starts[j])
            if paged:
                need = -(-kvl // page_size)
                if need > given:
                    raise CudaError(
                        f"decode: sequence {j} has {kvl} keys, more than its {given} pages of "
                        f"{page_size} hold"
                    )
                used = table[j, :need]
                if used.size and (used.min() < 0 or used.max() >= pages):
                    raise CudaError(
                        f"paged_attention: a page index of sequence {j} is out of range for an axis of size {pages}"
                    )
            elif first < 0 or first + kvl > cache_rows:
                raise CudaError(
                    f"decode: sequence {j}'s keys {first}..{first + kvl} are outside {cache_rows} rows"
                )
            for t in range(qn):
                meta[q0 + t] = (j, first, kvl - qn + t + 1)
        block = np.concatenate([tok, pos, rows, meta.reshape(-1), table.reshape(-1), logit_rows])
        key = (
            n,
            len(logit_rows),
            seqs,
            width,
            page_size,
            tuple(map(id, batch.keys)),
            tuple(map(id, batch.values)),
            cache_rows,
        )
        return block, key

    def _shape(self, key: tuple, batch: Any, sample: bool, history: int) -> _Shape:
        full = (*key, sample, history)
        sh = self.shapes.get(full)
        if sh is None:
            n, m, seqs, width, page_size, _, _, cache_rows = key
            sh = _Shape(
                self,
                n,
                m,
                seqs,
                width,
                page_size,
                tuple(batch.keys),
                tuple(batch.values),
                cache_rows,
                sample,
                history,
            )
            self.shapes[full] = sh
        return sh

    def _run(self, sh: _Shape, block: np.ndarray) -> None:
        dev = self.device
        raw = np.ascontiguousarray(block, dtype=np.int64).view(np.uint8)
        write = getattr(dev, "write", None)
        if write is not None:
            write(sh.params, 0, raw)  # one host-to-device copy into the static block
        else:  # one transfer into a pooled buffer, then a device copy into the block
            staged = dev.upload(raw, "int64")
            dev.copy(sh.params, 0, staged, 0, raw.size)
        if self.graphs:
            if sh.graph is None:
                dev.begin_capture()
                self._enqueue(sh)
                sh.graph = dev.end_capture()
            dev.graph_launch(sh.graph)
        else:
            self._enqueue(sh)

    def _enqueue(self, sh: _Shape) -> None:
        for module, name, g, b, shared, args in sh.launches:
            self.device.launch(module, name, g, b, shared, args)

    def step(self, batch: Any) -> Any:
        block, key = self._pack(batch)
        sh = self._shape(key, batch, False, 0)
        self._run(sh, block)
        out = self.kernels.alloc((sh.m, self.vocab), "float32")
        self.device.copy(out, 0, sh.logits, 0, sh.m * self.vocab * 4)
        return out

    def sample(
        self,
        batch: Any,
        sampling: Sequence[Sampling],
        counter: int,
        history: Sequence[Sequence[int]] | None = None,
    ) -> np.ndarray:
        """One step sampled on the device: the token ids ``[len(logit_rows)]`` (one read).
        ``sampling`` per logit row (one for all), ``counter`` the generator's step, and
        ``history`` each row's earlier tokens (for the repetition penalty)."""
        block, key = self._pack(batch)
        m = len(batch.logit_rows)
        rules = list(sampling) if len(sampling) != 1 else list(sampling) * m
        if len(rules) != m:
            raise CudaError(f"decode_sample: {len(rules)} samplings for {m} logit rows")
        hist = [list(map(int, h)) for h in (history or [[]] * m)]
        if len(hist) != m:
            raise CudaError(f"decode_sample: {len(hist)} histories for {m} logit rows")
        width = max([len(h) for h in hist] + [0])
        width = 1 << max(0, (width - 1).bit_length()) if width else 0  # few shapes
        extra = np.zeros((m, 7 + width), dtype=np.int64)
        for r, (rule, h) in enumerate(zip(rules, hist)):
            if rule.top_k < 0 or not 0.0 < rule.top_p <= 1.0 or rule.penalty <= 0.0:
                raise CudaError(
                    f"decode_sample: top_k >= 0, 0 < top_p <= 1 and penalty > 0, found {rule}"
                )
            extra[r, :7] = (
                _bits(rule.temperature),
                rule.top_k,
                _bits(rule.top_p),
                _bits(rule.penalty),
                np.int64(np.uint64(rule.seed & ((1 << 64) - 1)).view(np.int64)),
                counter,
                len(h),
            )
            extra[r, 7 : 7 + len(h)] = h
        sh = self._shape(key, batch, True, width)
        self._run(sh, np.concatenate([block, extra.reshape(-1)]))
        return self.device.download(sh.ids, 0, m * 8).view(np.int64).copy()


def _host(a: Any) -> np.ndarray:
    """An index array from the host (riftco.tensor's Decoder hands host arrays to a
    backend with ``decode_host_indices``), or read from a device buffer."""
    if isinstance(a, np.ndarray):
        return a
    raise CudaError(
        "the cuda decode step takes its token ids, positions, cache rows and page table from "
        f"the host (decode_host_indices), found a {type(a).__name__}"
    )


def _refuse_unknown(spec: Any) -> None:
    unknown = undecodable(
        spec,
        norms=NORM_ROLES,
        linears=LINEAR_ROLES,
        feed_forwards=FEED_FORWARDS,
        formats=HELD_FORMATS,
    )
    if unknown:
        raise CapabilityMissing(
            f"the cuda backend's whole-step decoder does not decode {', '.join(unknown)}"
        )


class DecodeOps:
    """``decode_program`` / ``decode_step`` (API 1.7) and ``decode_sample``."""

    #: riftco.tensor's Decoder hands this backend the step's index arrays on the host:
    #: they are checked there and uploaded in the plan's one transfer.
    decode_host_indices = True
    #: riftco-nn's sessions may draw a greedy token where the logits lie: the argmax on
    #: the device and one read of the ids (8 bytes a row) instead of the logits.
    decode_device_sampling = True
    kernels: Launcher
    device: _native.Device

    def decode_program(self, spec: Any) -> DecodePlan:
        return DecodePlan(self, spec)

    def decode_step(self, program: DecodePlan, batch: Any) -> Any:
        return program.step(batch)

    def decode_sample(
        self,
        program: DecodePlan,
        batch: Any,
        sampling: Sequence[Sampling],
        counter: int,
        history: Sequence[Sequence[int]] | None = None,
    ) -> np.ndarray:
        return program.sample(batch, sampling, counter, history)


__all__ = ["CHUNK", "DecodeOps", "DecodePlan", "Sampling"]
