"""`riftco generate`'s and `RunnableModel`'s sampling breadth: -n samples seeded
seed + i, the presence and frequency penalties, --logit-bias and --logprobs."""

from __future__ import annotations

import numpy as np
import pytest

from riftco.interchange import load_bundle, save_bundle
from riftco.interchange.cli import generate_main


@pytest.fixture
def bundle(tmp_path, make_model, tokenizer):
    path = tmp_path / "model.rift"
    save_bundle(path, make_model(), tokenizer)
    return path


def test_samples_are_seeded_seed_plus_i(bundle):
    runnable = load_bundle(bundle)
    kw = dict(max_new_tokens=8, temperature=1.2, top_k=40)
    samples = runnable.generate_samples("the", n=3, seed=4, **kw)
    assert [s.text for s in samples] == [
        runnable.generate("the", seed=4 + i, **kw) for i in range(3)
    ]
    assert all(s.logprobs is None for s in samples)
    with pytest.raises(ValueError, match="positive int"):
        runnable.generate_samples("the", n=0)


def test_sample_logprobs_are_the_models_log_softmax(bundle):
    runnable = load_bundle(bundle)
    (sample,) = runnable.generate_samples("the quick", max_new_tokens=5, logprobs=3)
    ids = runnable.encode_prompt("the quick")
    result = runnable.generate_ids(ids, max_new_tokens=5, stop_ids=runnable.stop_ids())
    assert sample.logprobs is not None and len(sample.logprobs) == len(result.tokens)
    for token, (text, logprob, top) in zip(result.tokens, sample.logprobs):
        # over the tokenizer's ids (the model's vocabulary may be padded past them)
        row = runnable.logits(ids)[-1, : runnable.tokenizer.vocab_size].astype(np.float64)
        reference = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
        assert logprob == pytest.approx(reference[token], abs=1e-4)
        assert text == runnable.tokenizer.token_bytes(token).decode("utf-8", "replace")
        assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]
        ids.append(token)


def test_generate_command_sampling_flags(bundle, capsys):
    runnable = load_bundle(bundle)
    argv = [str(bundle), "--prompt", "the", "--max-new-tokens", "6"]
    assert generate_main([*argv, "--frequency-penalty", "1.5", "--presence-penalty", "-0.5"]) == 0
    expected = runnable.generate(
        "the", max_new_tokens=6, frequency_penalty=1.5, presence_penalty=-0.5
    )
    assert capsys.readouterr().out == expected + "\n"
    token = runnable.encode_prompt(" the")[0]
    assert generate_main([*argv, "--logit-bias", f"{token}=100"]) == 0
    forced = runnable.generate("the", max_new_tokens=6, logit_bias={token: 100.0})
    assert capsys.readouterr().out == forced + "\n"
    assert forced == runnable.tokenizer.decode([token] * 6)
    assert generate_main([*argv, "-n", "2", "--temperature", "1", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    for i in range(2):
        text = runnable.generate("the", max_new_tokens=6, temperature=1.0, seed=3 + i)
        assert f"--- sample {i} (seed {3 + i}) ---\n{text}\n" in out
    assert generate_main([*argv, "--logprobs", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(1 for line in lines if line.startswith("  ")) == 6


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--presence-penalty", "3"], "--presence-penalty"),
        (["--frequency-penalty", "-2.5"], "--frequency-penalty"),
        (["--logprobs", "21"], "--logprobs"),
        (["-n", "0"], "--num-samples"),
        (["--logit-bias", "5"], "ID=BIAS"),
        (["--logit-bias", "x=1"], "ID=BIAS"),
        (["--logit-bias", "5=101"], "ID=BIAS"),
        (["--logit-bias", "999999=1"], "past the vocabulary"),
    ],
)
def test_generate_command_refuses_bad_sampling_flags(bundle, capsys, flags, says):
    with pytest.raises(SystemExit) as info:
        generate_main([str(bundle), "--prompt", "x", *flags])
    assert info.value.code == 2 and says in capsys.readouterr().err
