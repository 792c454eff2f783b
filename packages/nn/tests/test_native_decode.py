"""Whole-step decoding (riftco.nn.native_decode) against the op-by-op forward: every
preset, every inference weight format, ragged batches, rebuilds after the model
changes, and the cases that stay op by op."""

from __future__ import annotations

import numpy as np
import pytest
from test_transformer import PRESETS

import riftco.nn as nn
import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.nn.native_decode import decoder_for

SEQS = ([3, 1, 4, 1, 5], [9, 2], [6, 5, 3, 5, 8, 9, 7])


def decode(model, whole_step, seqs=SEQS, steps=6, capacity=16):
    """Prefill ``seqs`` (op by op either way), then greedy-feed fixed tokens one at a
    time; returns every step's logits."""
    cache = nn.ContiguousKVCache(
        model.config, max_sequences=len(seqs), capacity=capacity, backend=model.backend
    )
    ids = [cache.add_sequence() for _ in seqs]
    out = [model.forward_incremental(list(seqs), cache, ids, whole_step=whole_step).numpy()]
    for t in range(steps):
        feed = [[(7 * t + 3 * s[0]) % model.config.vocab_size] for s in seqs]
        out.append(model.forward_incremental(feed, cache, ids, whole_step=whole_step).numpy())
    return np.stack(out)


def assert_close(got, want, tol=1e-5):
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= tol * max(scale, 1.0)


def strengthen(model, seed=0):
    """Weights large enough that the logits differ clearly between tokens."""
    rng = np.random.default_rng(seed)
    for _, p in model.named_parameters():
        shape = p.value.shape
        p.value.assign_(rt.tensor(rng.normal(0, 0.3, shape).astype(np.float32)))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_whole_step_decoding_equals_the_op_by_op_forward(name):
    model = nn.DecoderOnlyTransformer(PRESETS[name], seed=5)
    strengthen(model)
    assert decoder_for(model) is not None
    assert_close(decode(model, True), decode(model, False))


@pytest.mark.parametrize("fmt", ["f16", "q8_0", "q4_0", "nf4"])
@pytest.mark.parametrize("name", ["gpt2", "llama", "llama-tied"])
def test_reduced_precision_weights_decode_as_their_linears_compute(name, fmt):
    config = PRESETS[name.removesuffix("-tied")]
    tied = name.endswith("-tied")
    config = type(config)(**{**config.__dict__, "d_model": 64, "d_ff": 96, "tie_embeddings": tied})
    model = nn.DecoderOnlyTransformer(config, seed=2)
    strengthen(model, 1)
    if fmt == "nf4":
        nn.quantize_model(model, block_size=64)
    else:
        model.quantize_for_inference(fmt)  # the head too: a BlockHead
        assert isinstance(model.language_model_head, nn.BlockHead)
    assert decoder_for(model) is not None
    # NF4's whole-step products take 8-bit inputs by default (riftco-tensor's README:
    # a few percent of the largest logit from the float32-input decode, 3.1% at most
    # here); the others follow their linears to float32 rounding.
    assert_close(decode(model, True), decode(model, False), 6e-2 if fmt == "nf4" else 1e-5)


def test_a_sequence_decodes_the_same_alone_batched_and_at_any_thread_count():
    model = nn.DecoderOnlyTransformer(PRESETS["llama"], seed=3)
    strengthen(model)
    batched = decode(model, True)
    for j, seq in enumerate(SEQS):
        alone = decode(model, True, seqs=(seq,))
        np.testing.assert_array_equal(alone[:, 0], batched[:, j])
    threads = rt.get_num_threads()
    try:
        rt.set_num_threads(1)
        np.testing.assert_array_equal(decode(model, True), batched)
    finally:
        rt.set_num_threads(threads)


def test_steps_mixing_prompts_and_single_tokens_give_each_sequence_its_own_logits():
    model = nn.DecoderOnlyTransformer(PRESETS["gpt2"], seed=4)
    strengthen(model)
    config = model.config

    def run(plan):
        cache = nn.ContiguousKVCache(config, max_sequences=2, capacity=16)
        ids = [cache.add_sequence() for _ in range(2)]
        got = []
        for feed in plan:
            active = [j for j, t in enumerate(feed) if t]
            got.append(
                model.forward_incremental(
                    [feed[j] for j in active], cache, [ids[j] for j in active]
                ).numpy()
            )
        return got

    mixed = run([[[1, 2, 3], [4]], [[5], [6, 7, 8]], [[9], [1]]])
    apart = run([[[1, 2, 3], []], [[], [4]], [[5], []], [[], [6, 7, 8]], [[9], [1]]])
    np.testing.assert_array_equal(mixed[0][0], apart[0][0])
    np.testing.assert_array_equal(mixed[0][1], apart[1][0])
    np.testing.assert_array_equal(mixed[1][0], apart[2][0])
    np.testing.assert_array_equal(mixed[1][1], apart[3][0])
    np.testing.assert_array_equal(mixed[2], apart[4])


def test_the_decoder_follows_weights_written_in_place_and_replaced():
    model = nn.DecoderOnlyTransformer(PRESETS["gpt2"], seed=6)
    strengthen(model)
    first = decoder_for(model)
    assert decoder_for(model) is first  # kept between steps
    Parameter(rt.zeros(3))  # a parameter bound elsewhere: still the same tensors here
    assert decoder_for(model) is first
    before = decode(model, True)
    w = model.blocks[0].feed_forward.expand.weight
    w.value.assign_(w.value * 2.0)  # in place: the same decoder reads it
    assert decoder_for(model) is first
    doubled = decode(model, True)
    assert not np.array_equal(doubled, before)
    assert_close(doubled, decode(model, False))
    w.value = w.value * 0.5  # a new tensor: the decoder is rebuilt
    assert decoder_for(model) is not first
    assert_close(decode(model, True), before)
    model.quantize_for_inference("f16")  # layers replaced
    assert_close(decode(model, True), decode(model, False))


def test_what_the_decoder_does_not_cover_decodes_op_by_op():
    model = nn.DecoderOnlyTransformer(PRESETS["gpt2"], seed=7)
    with nn.mixed_precision(rt.bfloat16):
        assert decoder_for(model) is None
    nn.attach_lora(model, nn.LoraConfig(rank=2))
    assert decoder_for(model) is None
    assert_close(decode(model, True), decode(model, False))


def test_layers_say_how_they_join_a_fused_projection_and_a_whole_step_program():
    from riftco.nn.joins import decode_linear, fused_projection

    linear = nn.Linear(32, 8)
    read = lambda p: None if p is None else p.value  # noqa: E731
    assert fused_projection(linear) == (linear.weight, linear.bias)
    joined = decode_linear(linear, read)
    assert joined.format == "f32" and joined.arrays[0] is linear.weight.value
    block = nn.BlockLinear.from_linear(nn.Linear(32, 8), "q8_0")
    assert fused_projection(block) is None and decode_linear(block, read).format == "q8_0"
    adapted = nn.LoraLinear(nn.Linear(32, 8), nn.LoraConfig(rank=2))
    assert fused_projection(adapted) is None and decode_linear(adapted, read) is None

    class Custom(nn.Module):  # a linear-like layer that declares nothing
        def forward(self, x):
            return x

    assert fused_projection(Custom()) is None and decode_linear(Custom(), read) is None


def test_a_layer_that_cannot_join_keeps_its_model_op_by_op():
    model = nn.DecoderOnlyTransformer(PRESETS["gpt2"], seed=4)
    assert decoder_for(model) is not None

    class Plain(nn.Module):  # a feed-forward layer that does not describe itself
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    before = decode(model, True)
    block = model.blocks[0]
    block.replace_child("feed_forward", Plain(block.feed_forward))
    assert decoder_for(model) is None
    assert_close(decode(model, True), before)


def test_both_caches_are_whole_step_caches_and_others_decode_op_by_op():
    config = PRESETS["llama"]
    cache = nn.ContiguousKVCache(config, max_sequences=1, capacity=8)
    assert isinstance(cache, nn.WholeStepCache) and isinstance(cache, nn.KVCache)

    class OpsOnly:  # the KVCache protocol without decode_layout
        def __init__(self, inner):
            self.inner = inner

        def length(self, seq_id):
            return self.inner.length(seq_id)

        def begin(self, seq_ids, counts):
            return self.inner.begin(seq_ids, counts)

        def append(self, step, layer, keys, values):
            self.inner.append(step, layer, keys, values)

        def attend(self, step, layer, queries, *, scale, window):
            return self.inner.attend(step, layer, queries, scale=scale, window=window)

        def commit(self, step):
            self.inner.commit(step)

    model = nn.DecoderOnlyTransformer(config, seed=1)
    ops = OpsOnly(nn.ContiguousKVCache(config, max_sequences=1, capacity=8))
    assert isinstance(ops, nn.KVCache) and not isinstance(ops, nn.WholeStepCache)
    seq = cache.add_sequence()
    other = ops.inner.add_sequence()
    model.forward_incremental([[1, 2, 3]], cache, [seq])
    model.forward_incremental([[1, 2, 3]], ops, [other])
    got = model.forward_incremental([[4]], ops, [other]).numpy()
    want = model.forward_incremental([[4]], cache, [seq]).numpy()
    assert_close(got, want)


def test_a_backend_without_the_native_step_decodes_op_by_op_on_its_device():
    from riftco.testing.tensor import REFERENCE_ENTRY_POINT, extra_entry_points

    with extra_entry_points(REFERENCE_ENTRY_POINT):
        model = nn.DecoderOnlyTransformer(PRESETS["llama"], seed=6)
        strengthen(model)
        want = decode(model, False)
        model.to("reference")
        assert not rt.Decoder.available(model.backend) and decoder_for(model) is None
        got = decode(model, True)
    assert_close(got, want)
