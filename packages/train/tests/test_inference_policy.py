"""Training loads bundles through riftco-interchange's one loader and samples through
riftco-nn's one sampler, stopping where the tokenizer says text ends."""

import io

import numpy as np
import pytest
from test_stages import post_options
from train_helpers import TEXT

import riftco.nn as nn
from riftco.interchange import BundleError, WeightsError, save_bundle, write_bundle
from riftco.text import DEFAULT_SPECIAL_TOKENS, ByteTokenizer
from riftco.train.commands import post_train_main
from riftco.train.post_training import post_train
from riftco.train.sampling import complete


@pytest.fixture(scope="module")
def tokenizer():
    # A special token outside the chat template ends neither a text nor a reply.
    return ByteTokenizer.train(TEXT, special_tokens=(*DEFAULT_SPECIAL_TOKENS, "<|tool|>"))


def tiny_model(vocab_size, seed=0):
    config = nn.TransformerConfig.preset(
        "gpt2", vocab_size=vocab_size, context_length=32, d_model=16, n_layers=1, n_heads=2, d_ff=32
    )
    return nn.DecoderOnlyTransformer(config, seed=seed)


class Rows:
    def __init__(self, array):
        self.array = array

    def numpy(self):
        return self.array


class Rigged:
    """The model with its first new token forced to ``first`` and every later one to
    ``then`` (the real forward still runs, so the cache fills as it should)."""

    def __init__(self, model, first, then):
        self.model, self.config, self.backend = model, model.config, model.backend
        self.first, self.then, self.calls = first, then, 0

    def eval(self):
        self.model.eval()

    def forward_incremental(self, tokens, cache, seq_ids):
        logits = np.array(self.model.forward_incremental(tokens, cache, seq_ids).numpy())
        logits[:, self.first if self.calls == 0 else self.then] = 1e4
        self.calls += 1
        return Rows(logits)


def test_complete_stops_exactly_at_the_tokenizers_stop_ids(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    plain = tokenizer.encode("e")[0]
    for chat in (False, True):
        stops = set(tokenizer.stop_ids(chat))
        assert tokenizer.eos_id in stops
        for token in tokenizer.special_tokens.values():
            reply = complete(
                Rigged(model, token, plain), tokenizer, "hi", chat=chat, max_new_tokens=3
            )
            assert (reply == "") == (token in stops), (chat, token)
    # A chat reply ends where the model would open a new turn.
    assert tokenizer.special_tokens["<|user|>"] in tokenizer.stop_ids(chat=True)
    assert tokenizer.special_tokens["<|tool|>"] not in tokenizer.stop_ids(chat=True)


def test_complete_never_draws_a_padded_id(tokenizer):
    model = tiny_model(tokenizer.vocab_size + 7)
    padded = tokenizer.vocab_size + 3
    plain = tokenizer.encode("e")[0]
    reply = complete(Rigged(model, padded, padded), tokenizer, "hi", max_new_tokens=4)
    assert isinstance(reply, str)  # an id past the tokenizer would not decode
    reply = complete(Rigged(model, plain, padded), tokenizer, "hi", max_new_tokens=4)
    assert reply.startswith("e")


@pytest.fixture
def good_bundle(tmp_path, tokenizer):
    path = tmp_path / "good.rift"
    save_bundle(path, tiny_model(tokenizer.vocab_size, seed=3), tokenizer)
    return path


def rewrite(path, tmp_path, name, tokenizer_state=None, change=None):
    from riftco.interchange import read_bundle

    bundle = read_bundle(path, copy=True)
    tensors = dict(bundle.tensors)
    if change is not None:
        change(tensors)
    out = tmp_path / name
    write_bundle(out, bundle.config, tensors, tokenizer_state or bundle.tokenizer_state)
    return out


def test_post_training_refuses_a_wrong_shaped_tensor(tmp_path, good_bundle):
    def transpose(tensors):
        name = "blocks.0.feed_forward.expand.weight"
        tensors[name] = np.ascontiguousarray(tensors[name].T)

    bad = rewrite(good_bundle, tmp_path, "bad.rift", change=transpose)
    with pytest.raises(WeightsError, match="mis-shaped blocks.0.feed_forward.expand.weight"):
        post_train(post_options(), bad, tmp_path / "run", progress=io.StringIO())
    assert not (tmp_path / "run" / "chat.rift").exists()
    assert post_train_main(["--base", str(bad), "--steps", "1"]) == 1


def test_post_training_refuses_a_tokenizer_larger_than_the_model(tmp_path, good_bundle):
    bigger = ByteTokenizer.train(TEXT + "ZQXJKVWY0123456789@#%")
    bad = rewrite(good_bundle, tmp_path, "big.rift", tokenizer_state=bigger.to_state())
    with pytest.raises(BundleError, match="do not fit the model's vocab_size"):
        post_train(post_options(), bad, tmp_path / "run", progress=io.StringIO())


def test_post_training_starts_from_the_base_weights(tmp_path, good_bundle):
    from riftco.interchange import read_bundle

    result = post_train(
        post_options(steps=1), good_bundle, tmp_path / "run", progress=io.StringIO()
    )
    child, parent = read_bundle(result.bundle), read_bundle(good_bundle)
    assert child.parent_id == parent.artifact_id
    # One Adam step moves a weight by about the learning rate (5e-3); a fresh
    # initialization would differ by far more.
    name = "token_embedding.weight"
    assert np.abs(child.tensors[name] - parent.tensors[name]).max() < 0.01
