"""riftco-nn's greedy draws through the cuda decode plan with ``decode_device_sampling``:
on the counting emulated device a session token costs one upload, one graph launch, one
argmax kernel and one read of the ids (8 bytes a row, int64); on ``cudaemu`` the greedy
tokens of ``generate`` equal the CPU's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from riftco.backends.cuda.ops.decode import DecodeOps, DecodePlan

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

nn = pytest.importorskip("riftco.nn")

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

CONFIG = {
    "gpt2": dict(vocab_size=48, context_length=32, d_model=32, n_heads=2, n_layers=2, d_ff=48),
    "llama": dict(vocab_size=48, context_length=32, d_model=32, n_heads=2, n_layers=2, d_ff=48),
}


def model(preset: str, backend) -> object:
    config = nn.TransformerConfig.preset(preset, **CONFIG[preset])
    return nn.DecoderOnlyTransformer(config, seed=3, backend=backend)


def test_the_backend_declares_device_sampling():
    assert DecodeOps.decode_device_sampling is True
    assert cuda_emulation.EmulatedCudaBackend().decode_device_sampling


@pytest.mark.parametrize("batch", [1, 3])
def test_a_greedy_session_token_reads_back_only_the_ids(monkeypatch, batch):
    monkeypatch.setenv("RIFTCO_CUDA_GRAPHS", "1")
    backend = cuda_emulation.EmulatedCudaBackend()
    dev = backend.device = backend.kernels.device = cuda_emulation.CountingDevice()
    pool = nn.DecodeSessionPool(model("gpt2", backend), pages=4 * batch, page_size=8)
    sessions = [pool.session(reserve_tokens=24, lease=True) for _ in range(batch)]
    greedy = nn.SamplingConfig()
    nn.prefill_many(sessions, [[1 + j, 2, 3] for j in range(batch)], logits=False)
    tokens = [s.sample(greedy) for s in sessions]
    nn.step_many(sessions, tokens, logits=False)  # the first step of a shape captures
    tokens = [s.sample(greedy) for s in sessions]
    for _ in range(3):
        dev.reset()
        nn.step_many(sessions, tokens, logits=False)
        tokens = [s.sample(greedy) for s in sessions]
        assert dev.counts == {
            "upload": 1,
            "download": 1,
            "download_bytes": 8 * batch,  # the int64 ids, not 4 * 48 * batch of logits
            "launch": 1,  # the argmax over the plan's logits
            "graph_launch": 1,
            "capture": 0,
        }
    # the logits are still there when asked: one read of the batch's rows
    dev.reset()
    rows = [s.logits for s in sessions]
    assert dev.counts["download"] == 1 and dev.counts["download_bytes"] == 4 * 48 * batch
    assert [int(r.argmax()) for r in rows] == tokens


def test_a_seeded_draw_reads_the_logits_for_the_host_sampler(monkeypatch):
    monkeypatch.setenv("RIFTCO_CUDA_GRAPHS", "1")
    backend = cuda_emulation.EmulatedCudaBackend()
    dev = backend.device = backend.kernels.device = cuda_emulation.CountingDevice()
    session = nn.DecodeSessionPool(model("gpt2", backend), pages=4, page_size=8).session()
    seeded = nn.SamplingConfig(temperature=0.9, top_k=4, seed=7)
    nn.prefill_many([session], [[1, 2, 3]], logits=False)
    token = session.sample(seeded)
    for _ in range(3):
        nn.step_many([session], [token], logits=False)
        dev.reset()
        token = session.sample(seeded)
        assert dev.counts["download"] == 1 and dev.counts["download_bytes"] == 4 * 48
        assert dev.counts["launch"] == 0


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_greedy_generation_equals_the_cpus_with_the_ids_read_on_the_device(preset):
    from riftco.nn.native_decode import decoder_for

    emu = cuda_emulation.EmulatedCudaBackend()
    cpu, dev = model(preset, "cpu"), model(preset, emu)
    prompts = [[1, 2, 3], [7, 5], [9, 9, 4, 0, 2]]
    greedy = nn.SamplingConfig(max_new_tokens=20)
    want = [r.tokens for r in nn.generate(cpu, prompts, greedy)]
    got = [r.tokens for r in nn.generate(dev, prompts, greedy)]
    assert got == want
    assert isinstance(decoder_for(dev)._program, DecodePlan)


def test_riftco_generate_on_cudaemu_prints_the_cpus_greedy_text(tmp_path, monkeypatch, capsys):
    # `riftco generate --backend NAME` over the emulated cuda backend (registered as
    # ``cudaemu`` by the emulator module), each one-token step through the plan.
    cli = pytest.importorskip("riftco.interchange.cli")
    text = pytest.importorskip("riftco.text")
    from riftco.interchange import save_bundle

    corpus = "the quick brown fox jumps over the lazy dog. " * 20 + "hello world, hello there."
    tokenizer = text.BpeTokenizer.train(corpus, vocab_size=300, pretokenize="gpt2")
    config = nn.TransformerConfig.preset(
        "gpt2", vocab_size=300, context_length=32, d_model=32, n_heads=2, n_layers=2, d_ff=48
    )
    bundle = tmp_path / "tiny.rift"
    save_bundle(bundle, nn.DecoderOnlyTransformer(config, seed=5), tokenizer)
    steps = []
    step = DecodePlan.step
    monkeypatch.setattr(
        DecodePlan, "step", lambda self, batch: steps.append(1) or step(self, batch)
    )
    outs = []
    for backend in ("cpu", "cudaemu"):
        argv = [str(bundle), "--prompt", "the quick", "--max-new-tokens", "10"]
        assert cli.generate_main([*argv, "--backend", backend]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[1] == outs[0] and outs[0].strip()
    assert len(steps) == 9  # every token after the prompt's through the cuda plan


def test_continuous_batching_drives_the_plan_and_gives_the_cpus_tokens(monkeypatch):
    # riftco-serve's scheduler, unchanged: requests join and leave between steps; on the
    # emulated device every one-token batch goes through the cuda plan.
    serve = pytest.importorskip("riftco.serve")
    from riftco.serve.scheduler import Scheduler
    from riftco.serve.sequence import SequenceState

    class Sink:
        def __init__(self):
            self.tokens, self.finish, self.error = [], None, None

        def on_token(self, token_id):
            self.tokens.append(token_id)
            return False

        def on_finish(self, reason, prompt_tokens, completion_tokens):
            self.finish = reason

        def on_error(self, error):
            self.error = error

    steps = []
    step = DecodePlan.step
    monkeypatch.setattr(
        DecodePlan, "step", lambda self, batch: steps.append(batch.q_counts) or step(self, batch)
    )
    emu = cuda_emulation.EmulatedCudaBackend()
    requests = [([1, 2, 3], 9), ([7, 5], 4), ([9, 9, 4, 0, 2], 7)]
    results = []
    for backend in ("cpu", emu):
        net = model("llama", backend)
        cache = serve.PagedKVCachePool(net.config, pages=16, page_size=4, backend=backend)
        scheduler = Scheduler(net, cache)
        sinks = []
        for i, (tokens, n) in enumerate(requests):
            sink = Sink()
            options = nn.SamplingConfig(max_new_tokens=n, temperature=0.0)
            scheduler.submit(SequenceState(i, tokens, options, sink))
            sinks.append(sink)
            if i == 0:
                scheduler.step()  # the others join a running batch
        while scheduler.has_work():
            scheduler.step()
        assert all(s.error is None and s.finish == "length" for s in sinks)
        results.append([s.tokens for s in sinks])
        assert cache.pages_in_use == 0
    assert results[1] == results[0]
    # Batched one-token steps of all three sequences ran on the plan (prefills too).
    assert steps.count((1, 1, 1)) >= 3
