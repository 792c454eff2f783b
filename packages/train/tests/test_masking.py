"""Post-training learns the response only: prompt tokens add zero loss and zero gradient."""

import numpy as np
import pytest
from train_helpers import TEXT

import riftco.nn as nn
import riftco.tensor as rt
from riftco.text import BpeTokenizer
from riftco.train.batches import ExampleSampler
from riftco.train.errors import DataError
from riftco.train.instructions import example
from riftco.train.losses import masked_cross_entropy
from riftco.train.tokens import encode_examples

TOKENIZER = BpeTokenizer.train(TEXT, vocab_size=300)
EXAMPLES = [
    example("Explain the while statement.", "It repeats."),
    example("Explain the if statement.", "It chooses one suite to run."),
]


def test_weights_cover_the_reply_and_its_end_marker_only():
    encoded = encode_examples(TOKENIZER, EXAMPLES, context=64)
    end = TOKENIZER.special_tokens["<|end|>"]
    for ex, ids, w in zip(EXAMPLES, encoded.sequences, encoded.weights):
        learned = ids[w == 1]
        assert TOKENIZER.decode(list(learned[:-1])) == ex.response
        assert learned[-1] == end
        prompt = TOKENIZER.decode(list(ids[w == 0]))
        assert "Explain" in prompt and ex.response not in prompt
    everything = encode_examples(TOKENIZER, EXAMPLES, context=64, loss_on="all")
    assert all(w.min() == 1 for w in everything.weights)


def loss_and_grads(model, batch):
    model.zero_grad()
    logits = model(rt.from_numpy(batch.inputs))
    logits.retain_grad()
    loss = masked_cross_entropy(logits, rt.from_numpy(batch.targets), rt.from_numpy(batch.weights))
    loss.backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    return loss.item(), logits.grad.numpy().copy(), grads


def test_prompt_tokens_add_zero_loss_and_zero_gradient():
    encoded = encode_examples(TOKENIZER, EXAMPLES, context=40)
    batch = ExampleSampler(encoded.sequences, 40, 2, weights=encoded.weights).next_batch()
    config = nn.TransformerConfig(
        vocab_size=TOKENIZER.vocab_size,
        context_length=40,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=32,
    )
    model = nn.DecoderOnlyTransformer(config, seed=0)
    loss, logit_grad, grads = loss_and_grads(model, batch)
    masked = batch.weights == 0
    assert masked.any() and (~masked).any()
    assert np.all(logit_grad[masked] == 0.0)
    # Changing every target the mask hides changes neither the loss nor any gradient.
    other_targets = np.where(masked, (batch.targets + 7) % TOKENIZER.vocab_size, batch.targets)
    changed = type(batch)(batch.inputs, other_targets, batch.weights)
    loss2, _, grads2 = loss_and_grads(model, changed)
    assert loss2 == loss
    assert all(np.array_equal(grads[n], grads2[n]) for n in grads)
    # The loss is the mean over response targets alone.
    logits = model(rt.from_numpy(batch.inputs)).numpy().astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, batch.targets[..., None], -1)[..., 0]
    assert loss == pytest.approx(-picked[~masked].mean(), rel=1e-5)


@pytest.mark.parametrize("policy", ["truncate", "drop", "error"])
def test_examples_longer_than_the_context(policy):
    long = example("Explain the while statement.", "It repeats. " * 20)
    data = [*EXAMPLES, long]
    if policy == "error":
        with pytest.raises(DataError, match="longer than the context"):
            encode_examples(TOKENIZER, data, context=50, overlong="error")
        return
    encoded = encode_examples(TOKENIZER, data, context=50, overlong=policy)
    assert all(len(s) <= 51 for s in encoded.sequences)
    if policy == "truncate":
        assert (encoded.truncated, encoded.dropped, len(encoded.sequences)) == (1, 0, 3)
        assert encoded.weights[-1].any()
    else:
        assert (encoded.truncated, encoded.dropped, len(encoded.sequences)) == (0, 1, 2)


def test_an_example_whose_reply_falls_past_the_context_is_dropped():
    long_prompt = example("Explain " * 60, "Yes.")
    encoded = encode_examples(TOKENIZER, [*EXAMPLES, long_prompt], context=50)
    assert encoded.dropped == 1 and len(encoded.sequences) == 2
    with pytest.raises(DataError, match="no usable examples"):
        encode_examples(TOKENIZER, [long_prompt], context=50)
