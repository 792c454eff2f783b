"""Training checks up front that the backend has what the job needs, and what it
checks for is enough: a backend with exactly those capabilities trains."""

import dataclasses
from importlib.metadata import EntryPoint

import pytest
import train_helpers
from train_helpers import tiny_pretrain_options, write_corpus

import riftco.tensor as rt
from riftco.nn import TransformerConfig
from riftco.testing.tensor import extra_entry_points
from riftco.train.adapters import AdapterOptions
from riftco.train.capabilities import DECODING, NF4, training_capabilities
from riftco.train.commands import pretrain_main
from riftco.train.post_training import PostTrainOptions, post_train
from riftco.train.pretraining import pretrain

RESTRICTED = EntryPoint(
    name="restricted", value="train_helpers:restricted_backend", group="riftco.backends"
)


@pytest.fixture
def restricted(monkeypatch):
    """Run with RIFTCO_BACKEND=restricted, a CPU backend cut down to the names given."""

    def use(names):
        monkeypatch.setattr(train_helpers, "RESTRICTED_TO", tuple(names))
        monkeypatch.setenv("RIFTCO_BACKEND", "restricted")
        rt.reset_discovery()
        assert set(rt.get_backend().capabilities()) == set(names)

    with extra_entry_points(RESTRICTED):
        yield use


def test_each_topology_needs_its_own_kernels():
    gpt = training_capabilities(TransformerConfig.preset("gpt2"))
    assert {"layer_norm", "layer_norm_backward", "flash_attention", "adam_update"} <= set(gpt)
    assert {"cross_entropy", "cross_entropy_backward", "activation_backward"} <= set(gpt)
    assert set(rt.BASE_CAPABILITIES) <= set(gpt)
    unused = {"rms_norm", "rotary", "attention", "paged_attention", *DECODING, *NF4}
    assert not unused & set(gpt)
    assert gpt == tuple(c for c in rt.CAPABILITIES if c in gpt)
    llama = TransformerConfig.preset("llama", attention="materialized")
    qlora = set(training_capabilities(llama, "qlora"))
    assert {"rms_norm", "rms_norm_backward", "rotary", "attention", *NF4} <= qlora
    assert not {"layer_norm", "flash_attention"} & qlora
    assert training_capabilities(llama, "lora") == training_capabilities(llama, "full")


def test_a_backend_with_exactly_the_needed_capabilities_trains(tmp_path, restricted):
    options = tiny_pretrain_options(steps=2, eval_every=0)
    config = options.model.config(vocab_size=256)
    restricted(training_capabilities(config))
    result = pretrain(options, tmp_path, resume=None)
    assert result.outcome == "finished" and result.bundle.exists()


def test_qlora_with_exactly_the_needed_capabilities_trains(tmp_path, restricted):
    options = tiny_pretrain_options(steps=2, eval_every=0)
    base = pretrain(options, tmp_path / "base").bundle  # on the CPU: restricted set later
    post = PostTrainOptions(
        training=options.training, adapters=AdapterOptions(method="qlora", nf4_block_size=32)
    )
    restricted(training_capabilities(options.model.config(vocab_size=256), "qlora"))
    result = post_train(post, base, tmp_path / "chat")
    assert result.outcome == "finished" and result.bundle.exists()


def test_pretraining_stops_before_reading_data_when_a_kernel_is_missing(tmp_path, restricted):
    options = tiny_pretrain_options(steps=2)
    needed = training_capabilities(options.model.config(vocab_size=256))
    restricted([c for c in needed if c not in ("flash_attention_backward", "adam_update")])
    missing_data = tmp_path / "no-such-corpus.txt"
    with pytest.raises(rt.JobUnsupported) as caught:
        pretrain(dataclasses.replace(options, data=str(missing_data)), tmp_path)
    assert caught.value.missing == ("adam_update", "flash_attention_backward")
    assert caught.value.job == "pretraining" and caught.value.backend == "restricted"
    assert list(tmp_path.iterdir()) == []


def test_qlora_without_nf4_kernels_fails_up_front(tmp_path, restricted):
    options = tiny_pretrain_options(steps=2, eval_every=0)
    base = pretrain(options, tmp_path / "base").bundle
    needed = training_capabilities(options.model.config(vocab_size=256), "qlora")
    restricted([c for c in needed if c != "nf4_linear_backward"])
    post = PostTrainOptions(training=options.training, adapters=AdapterOptions(method="qlora"))
    with pytest.raises(
        rt.JobUnsupported, match="QLoRA post-training needs .*: nf4_linear_backward;"
    ):
        post_train(post, base, tmp_path / "chat")
    assert not (tmp_path / "chat").exists()
    # full post-training needs no NF4 kernel: the same backend takes it
    full = PostTrainOptions(training=options.training, adapters=AdapterOptions(method="full"))
    assert post_train(full, base, tmp_path / "full").outcome == "finished"


def test_the_command_checks_the_sample_too(tmp_path, restricted, capsys):
    corpus = write_corpus(tmp_path)
    options = tiny_pretrain_options()
    restricted(training_capabilities(options.model.config(vocab_size=256)))
    out = tmp_path / "run"
    args = ["--data", str(corpus), "--out", str(out), "--steps", "1", "--tokenizer", "byte"]
    args += ["--context", "16", "--d-model", "16", "--layers", "1", "--heads", "2"]
    assert pretrain_main([*args, "--d-ff", "32", "--batch-size", "2"]) == 1
    err = capsys.readouterr().err
    assert "the sample printed after training needs capabilities" in err
    assert "attention_varlen, write_rows" in err and not out.exists()
    assert pretrain_main([*args, "--d-ff", "32", "--batch-size", "2", "--sample", ""]) == 0
