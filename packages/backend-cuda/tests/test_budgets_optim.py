"""Counted budgets of the optimizer's part of one GPT-2 124M training step (B=4,
T=1024, riftco-train's ``Trainer.train_step``) over the counting stand-in device: the
gradient norm is one multi-tensor reduction of two launches (it was a reduction and a
concatenation slot per gradient: 197 launches and a concatenation), Adam is two
(check, then commit with the first-bad search: it was three), and the step reads
the device once, after the update (it read Adam's flag as well). See test_budgets.py
for the whole step's figures."""

from __future__ import annotations

import pytest

from riftco.backends.cuda.counting import training_step_counts

pytest.importorskip("riftco.train")

#: Launches of the gradient norm (ss_partial, clip_gate) and of the update.
NORM_LAUNCHES = 2
ADAM_LAUNCHES = 2
#: Layer-norm weight and bias gradients: one launch a norm (both parameters together:
#: the chunks' partial sums, then the last block to finish sums the chunks), for
#: GPT-2's 25 norms.
NORM_PARAM_LAUNCHES = 25
#: Bias gradients reduced over the rows of a [tokens, width] gradient: one launch a bias
#: (each layer's query, key and value biases, its output and two feed-forward ones, and
#: the position embedding's broadcast sum); in f32 the linears' come from their weight-
#: gradient products' cuBLASLt epilogue (BGRADB), leaving the position embedding's.
BIAS_LAUNCHES = {"bf16": (3 + 1 + 2) * 12 + 1, "f32": 1}


@pytest.fixture(scope="module", params=["bf16", "f32"])
def counts(request):
    counted = training_step_counts(request.param)
    counted.precision = request.param  # type: ignore[attr-defined]
    return counted


def test_the_gradient_norm_is_one_multi_tensor_reduction(counts):
    norm = counts.launches["ss_partial"] + counts.launches["clip_gate"]
    assert norm == NORM_LAUNCHES, counts.launches.most_common(12)
    # No per-gradient reduction and no concatenation of per-gradient sums remain.
    assert counts.launches["reduce_rows_f32"] <= 2


def test_adam_is_two_launches_and_reads_nothing_of_its_own(counts):
    adam = counts.launches["adam_check"] + counts.launches["adam_commit"]
    assert adam == ADAM_LAUNCHES and counts.launches["adam_first_bad"] == 0
    # The one read of the step: the sums, the loss and the update's outcome together.
    assert counts.host_reads == 1, counts.summary()


def test_norm_and_bias_gradients_stay_within_their_launches(counts):
    norm = counts.launches["norm_param_grads_f32"]
    assert norm <= NORM_PARAM_LAUNCHES, counts.launches.most_common(20)
    bias = counts.launches["reduce_cols_f32"] + counts.launches["reduce_cols_tiled_f32"]
    assert bias <= BIAS_LAUNCHES[counts.precision], counts.launches.most_common(20)
