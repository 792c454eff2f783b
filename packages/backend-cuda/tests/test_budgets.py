"""Counted budgets: the real ``CudaBackend`` ops of one GPT-2 124M training step
(B=4, T=1024, riftco-train's ``Trainer.train_step``) over the counting stand-in
device, which runs nothing and allocates nothing. Counts, not times: they hold on
any machine, and a change that adds a pass, a host read or an upload fails here.

Before this design (the same step, counted the same way): bf16 1,173 launches and
147 GEMMs, 15 uploads of 157.7 MB, 7 host reads; f32 990 launches, 147 GEMMs. With
attention on cuBLAS one product per batch row (28 a layer at B=4): bf16 950 launches
and 483 GEMMs (1,433 passes), f32 719 and 483. With each attention product one call
over every batch row and head (7 a layer) and the heads moved by one launch each way:
bf16 938 launches and 231 GEMMs (1,169 passes), f32 755 and 231 (986). With the
gradient norm, clipping and Adam as ``clipped_adam_update`` (a multi-tensor reduction,
one read): bf16 741 launches and 231 GEMMs (972 passes), f32 558 and 231 (789). With
bias-gradient reductions tiled to fill the GPU and the norm parameters' gradients in two
passes: bf16 691 and 231 (922). With the products multiplying float32 operands' bfloat16
roundings in cuBLAS (``rt.matmul(..., compute="bfloat16")``, no convert passes): bf16
544 and 231 (775), f32 508 and 231 (739). With the query, key and value weight and bias
gradients computed from their own parts of the output gradient (no narrow copies):
bf16 496 and 255 (751), f32 460 and 255 (715). With linear layers as cuBLASLt products
whose epilogue adds the bias (and, float32, writes the bias gradient: ``rt.linear``,
``rt.linear_backward``): bf16 448 and 255 (703), f32 340 and 255 (595). With the stacked
query/key/value product rounded to bfloat16 once, before its parts are narrowed out
(bf16 only) and the loss gradient's per-row scale copied once (it was copied twice):
bf16 423 and 255 (678), f32 339 and 255 (594). With each residual add and the layer norm
after it one kernel (``rt.add_layer_norm``, API 1.11; riftco-nn's blocks): bf16 399 and
255 (654), f32 315 and 255 (570). With each norm's parameter gradients one launch (the
last block to finish sums the chunks' partials): bf16 374 and 255 (629), f32 290 and
255 (545). With bf16 attention's products all bfloat16 ones (API 1.12's compute
dtype): the same passes, the roofline 11.5 ms (was 14.9). With the query, key and value
projections as riftco-tensor's ``projected_attention`` (API 1.13: their products write
one stacked matrix that attention reads in place; no concatenation, no narrowing copy, no
convert): bf16 266 and 303 (569), f32 218 and 303 (521), 7 uploads, roofline 11.3 ms. With
each layer norm's backward one launch (the rows' input gradients and the chunks' parameter
partials, the last block summing them): bf16 241 and 303 (544), f32 193 and 303 (496). With
the residual's gradient added in that launch (riftco-nn's ``add_layer_norm`` one node of
both results, ``rt.add_layer_norm_backward``, API 1.14): bf16 218 and 303 (521), f32 170
and 303 (473). With bf16 attention as FlashAttention-2 on the tensor cores (one launch
forward, two backward, reading the stacked projection and writing the stacked gradient):
bf16 182 and 219 (401), the roofline 6.0 ms (was 11.0). With the mean cross-entropy one
launch each way (riftco-tensor API 1.15, ``rt.softmax_cross_entropy_mean``): bf16 173 and
219 (392), f32 161 and 303 (464)."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.counting import CountingCudaBackend, roofline, training_step_counts
from riftco.backends.cuda.errors import CudaError

pytest.importorskip("riftco.train")

#: Kernel launches plus cuBLAS products of one step, by precision (today's design
#: plus a little headroom: a new pass must be argued for here). bf16 attention is
#: FlashAttention-2, 3 launches a layer; f32 attention through cuBLAS is 7 products a
#: layer (each one call over all B * H matrices) and 6 launches (two head swaps and
#: one row pass each way).
PASSES = {"bf16": 400, "f32": 474}
#: The roofline estimate of one step at the H200's figures (counting.roofline), in
#: seconds: the row-kernel attention alone was 48 ms of a 57 ms bf16 step; the float32
#: attention products 5.8 ms of a 14.9 ms one.
ESTIMATE = {"bf16": 0.0065, "f32": 0.065}
#: Reads from the device a step: one, after the update -- the gradients' sums of
#: squares, the loss and Adam's all-or-nothing outcome together (riftco-optim's
#: measured_step over clipped_adam_update; test_budgets_optim.py counts its launches).
HOST_READS = 1
UPLOAD_BYTES = 1_000_000


@pytest.fixture(scope="module", params=["bf16", "f32"])
def step(request):
    return request.param, training_step_counts(request.param)


def test_one_step_reads_the_device_once(step):
    _precision, counts = step
    assert counts.host_reads <= HOST_READS, counts.summary()


def test_one_step_uploads_under_a_megabyte(step):
    # The embedding-gradient bases are device memsets, not 154 MB of host zeros.
    _precision, counts = step
    assert counts.upload_bytes < UPLOAD_BYTES, counts.summary()
    assert counts.memsets >= 2


def test_one_step_stays_within_its_pass_budget(step):
    precision, counts = step
    assert counts.passes <= PASSES[precision], (counts.summary(), counts.launches.most_common(12))


def test_no_weight_or_gradient_is_concatenated(step):
    # The query, key and value products write their columns of one stacked matrix and
    # attention reads its heads out of it (riftco-tensor's projected_attention, API
    # 1.13); backward the heads' gradients are written into one stacked gradient.
    _precision, counts = step
    places = {k: n for k, n in counts.launches.items() if k.startswith("place")}
    assert places == {}, places


def test_products_read_float32_operands_without_convert_passes(step):
    # bf16: each weight product rounds its float32 operands as cuBLAS reads them, and
    # attention rounds q, k and v as it stages them (FlashAttention-2); the loss counts
    # its kept targets in its own kernel (there was a bool mask converted to float32).
    precision, counts = step
    assert counts.launches["convert"] == 0
    weights = [
        c for c, _, _ in counts.calls if c.startswith("gemm ") and c.split()[1].endswith("x1")
    ]
    # forward, dx and dw of 4 linears a layer and the head; the query, key and value
    # projections are three products forward (one stacked result), three for dx (one
    # result, the second and third adding to it) and three weight gradients.
    assert len(weights) == 3 * (4 * 12 + 1) + 2 * 12 + 2 * 2 * 12
    rounded = [c for c in weights if c.endswith("bfloat16")]
    assert len(rounded) == (len(weights) if precision == "bf16" else 0)


def test_projections_are_not_narrowed_out_of_stacked_products(step):
    # No strided copy at all (the loss gradient's per-row scale, the last one, is taken
    # in the loss kernel).
    _precision, counts = step
    copies = {k: n for k, n in counts.launches.items() if k.startswith("copy_strided")}
    assert copies == {}


def test_the_loss_is_one_launch_each_way(step):
    # riftco-tensor's mean cross-entropy (API 1.15): the rows' losses and, by the last
    # block to finish, their mean over the kept rows; backward the gradient with the
    # mean's scale read in the kernel. Around it only the kept-target mask (weights > 0,
    # then where). There were 13 launches: the per-row losses, the kept count (compare,
    # convert, sum), its reciprocal (maximum, div), the sum and product, and backward the
    # scale's product, its broadcast and the gradient.
    _precision, counts = step
    loss = {
        k: n
        for k, n in counts.launches.items()
        if k.startswith(("cross_entropy", "reduce_rows", "convert", "compare", "where"))
    }
    assert loss == {
        "cross_entropy_mean_f32": 1,
        "cross_entropy_backward_f32": 1,
        "compare_f32": 1,
        "where_8": 1,
    }


def test_no_index_checks_run_on_the_device_for_host_indices(step):
    _precision, counts = step
    assert counts.launches["check_indices"] == 0


def test_bf16_attention_is_flash_attention_on_the_tensor_cores():
    # FlashAttention-2 (ops/flash.py): one launch forward, two backward (dq with delta,
    # then dk and dv), reading q, k and v out of the stacked projection and writing the
    # gradients into the stacked gradient: no product over heads, no head swap, no row
    # pass, no [B, H, T, T] buffer.
    counts = training_step_counts("bf16")
    layers = 12
    flash = {k: n for k, n in counts.launches.items() if k.startswith("flash_")}
    assert flash == {f"flash_{p}_f32_d64": layers for p in ("forward", "dq", "dkv")}
    products = [name for name, _, _ in counts.calls if name.startswith("gemm ")]
    assert all(p.split()[1].endswith("x1") for p in products), products
    for name in ("swap_heads", "attention_softmax_f32", "attention_softmax_dscores_f32"):
        assert counts.launches[name] == 0
    # The largest buffer a step allocates is the head's logits, not scores.
    b, t = 4, 1024
    assert counts.largest_allocation <= b * t * 50257 * 4


def test_f32_attention_runs_on_cublas_products():
    # Forward: scores and values; backward: dp, the scores again, dv, dq, dk -- each one
    # strided-batched call over every batch row and head. Around them: q, k and v moved
    # heads first and the results moved back (one launch each), the softmax forward,
    # and backward the probabilities and score gradient in one row pass.
    counts = training_step_counts("f32")
    layers, batch, heads = 12, 4, 12
    for name in ("attention", "attention_dq", "attention_dkv"):
        assert counts.launches[f"{name}_f32"] == 0
    products = [name for name, _, _ in counts.calls if name.startswith("gemm ")]
    over_heads = [p for p in products if p.split()[1].split("x")[3] == str(batch * heads)]
    assert len(over_heads) == 7 * layers
    assert {p.split()[2] for p in over_heads} == {"float32"}  # never the tensor cores
    assert not [p for p in products if p.split()[1].split("x")[3] not in ("1", str(batch * heads))]
    assert counts.launches["attention_softmax_f32"] == layers
    assert counts.launches["attention_softmax_dscores_f32"] == layers
    assert counts.launches["attention_dscores_f32"] == 0
    assert counts.launches["swap_heads"] == 4 * layers
    assert not [k for k in counts.launches if k.startswith("flash_")]


def test_the_roofline_estimate_is_on_record(step):
    precision, counts = step
    estimate = roofline(counts)
    assert estimate["ideal"] <= estimate["seconds"] <= ESTIMATE[precision]


def test_biases_are_added_and_summed_in_the_products(step):
    # Forward: every bias (the query's, key's and value's, the output projection's, the
    # feed-forward's two) in its product's epilogue, no add. Backward, float32: each
    # weight-gradient product with a bias (three for the stacked one) writes its bias
    # gradient (BGRADB): no column reductions but the layer norms'. bfloat16 products
    # of float32 operands keep the tiled reduction of the float32 gradient.
    precision, counts = step
    assert counts.epilogues["bias"] == (3 + 1 + 2) * 12
    bias_gradients = (1 + 3 + 2) * 12
    if precision == "f32":
        assert counts.epilogues["bgradb"] == bias_gradients
        assert counts.launches["reduce_cols_tiled_f32"] == 0
    else:
        # The query, key and value biases' three gradients are one column reduction
        # over the stacked gradient.
        assert counts.epilogues["bgradb"] == 0
        assert counts.launches["reduce_cols_tiled_f32"] == 3 * 12
        assert counts.launches["reduce_cols_parts_f32"] == 12
    # What binary launches are left: the embedding sum and the loss's own (each forward
    # residual add is taken with its norm, each backward one in the norm's backward).
    assert counts.launches["binary_f32"] <= 2


@pytest.mark.parametrize("precision", ["bf16", "f32"])
def test_flops_are_the_models(precision):
    # 6 N P for the matrices (P counts the weights of every product, head included)
    # plus attention. f32: seven [T, T] cuBLAS products a layer (full squares: cuBLAS
    # computes the masked half too). bf16: FlashAttention-2 computes the causal half,
    # two products forward, three for dq, four for dk and dv.
    counts = training_step_counts(precision)
    d, ff, v, layers, b, t = 768, 3072, 50257, 12, 4, 1024
    weights = layers * (3 * d * d + d * d + 2 * d * ff) + v * d
    products = 6 * b * t * weights
    square = 2 * b * t * t * d
    if precision == "f32":
        assert counts.gemm_flops == pytest.approx(products + layers * 7 * square, rel=1e-9)
        return
    assert counts.gemm_flops == pytest.approx(products, rel=1e-9)
    flash = sum(f for name, f, _ in counts.calls if name.startswith("flash_"))
    assert flash == pytest.approx(layers * (2 + 3 + 4) * square / 2, rel=1e-9)


# -- the counting device and the host-side checks it shows ------------------------------


def test_zeros_are_a_memset_and_negative_zero_is_uploaded():
    backend = CountingCudaBackend()
    counts = backend.counter.counts
    rt.zeros([512, 256], backend=backend)
    assert (counts.uploads, counts.memsets) == (0, 1)
    rt.full([512, 256], -0.0, backend=backend)
    rt.full([512, 256], 2.0, backend=backend)
    small = rt.zeros([4], backend=backend)  # small: uploaded (no scan)
    assert (counts.uploads, counts.memsets) == (3, 1)
    assert small.shape == (4,)


def test_host_known_indices_are_checked_on_the_host():
    backend = CountingCudaBackend()
    table = rt.normal([10, 4], backend=backend)
    ids = rt.tensor(np.array([1, 2, 9]), backend=backend)
    backend.counter.reset()
    rt.index_select(table, 0, ids)
    counts = backend.counter.counts
    assert counts.host_reads == 0 and counts.launches["check_indices"] == 0
    bad = rt.tensor(np.array([1, 12, -1]), backend=backend)
    with pytest.raises(
        CudaError, match="index 12 at position 1 is out of range for an axis of size 10"
    ):
        rt.index_select(table, 0, bad)
    assert backend.counter.counts.host_reads == 0


def test_indices_written_on_the_device_are_checked_there():
    backend = CountingCudaBackend()
    table = rt.normal([10, 4], backend=backend)
    ids = rt.tensor(np.array([1, 2, 3]), backend=backend)
    backend.assign(
        ids._data, rt.tensor(np.array([4, 5, 6]), backend=backend)._data, (3,), ids.dtype
    )
    backend.counter.reset()
    rt.index_select(table, 0, ids)
    assert backend.counter.counts.host_reads == 1  # the device flag: the host copy is stale


def test_where_of_host_indices_checks_candidates_on_the_host():
    backend = CountingCudaBackend()
    logits = rt.normal([3, 5], backend=backend)
    targets = rt.tensor(np.array([0, 4, 2]), backend=backend)
    keep = rt.tensor(np.array([True, False, True]), backend=backend)
    ignore = rt.tensor(np.array(-100), backend=backend)
    backend.counter.reset()
    masked = rt.where(keep, targets, ignore)
    backend.cross_entropy(logits._data, (3, 5), masked._data, -100)
    assert backend.counter.counts.host_reads == 0
    # A candidate out of range: the device decides whether one is used (a read).
    wild = rt.where(keep, rt.tensor(np.array([0, 9, 2]), backend=backend), ignore)
    backend.counter.reset()
    backend.cross_entropy(logits._data, (3, 5), wild._data, -100)
    assert backend.counter.counts.host_reads == 1


def test_each_norms_backward_is_one_launch_with_the_residuals_gradient(step):
    # The 25 norms: each one launch (input gradient, the residual's gradient added, the
    # weight and bias gradients' chunks summed by the last block).
    _precision, counts = step
    assert counts.launches["layer_norm_backward_f32"] == 2 * 12 + 1
    assert counts.launches["norm_param_grads_f32"] == 0


def test_residual_adds_are_taken_with_the_next_norm(step):
    # Two a layer: after attention with the feed-forward norm, after the feed-forward
    # with the next layer's attention norm (the last with the final norm).
    _precision, counts = step
    assert counts.launches["add_layer_norm_f32"] == 2 * 12
    assert counts.launches["layer_norm_f32"] == 1  # the first layer's attention norm
