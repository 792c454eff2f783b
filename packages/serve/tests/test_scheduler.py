"""Continuous batching over a real (tiny) model: one forward per step, batched
greedy decoding equal to decoding alone, joins and leaves between steps, seeded
sampling, back-pressure, cancellation, failures and the context reset rule."""

import numpy as np
import pytest

import riftco.nn as nn
from riftco.serve import GenerationFailed, Overloaded, RequestError
from riftco.serve.caches import ContiguousKVCachePool, PagedKVCachePool
from riftco.serve.scheduler import Scheduler, SchedulerLimits
from riftco.serve.sequence import SequenceState

VOCAB = 89


class Recorder:
    def __init__(self):
        self.tokens, self.finish, self.error = [], None, None

    def on_token(self, token_id):
        self.tokens.append(token_id)
        return False

    def on_finish(self, reason, prompt_tokens, completion_tokens):
        self.finish = (reason, prompt_tokens, completion_tokens)

    def on_error(self, error):
        self.error = error


class Counting:
    """The model, counting its forwards and the sequences in each."""

    def __init__(self, model):
        self.model, self.config, self.batches = model, model.config, []

    def forward_incremental(self, tokens, cache, seq_ids):
        self.batches.append(len(tokens))
        return self.model.forward_incremental(tokens, cache, seq_ids)


@pytest.fixture(scope="module")
def model():
    config = nn.TransformerConfig.preset("gpt2", size="tiny", vocab_size=VOCAB, context_length=64)
    return nn.DecoderOnlyTransformer(config, seed=11)


def prompt(seed, n):
    return np.random.default_rng(seed).integers(0, VOCAB, size=n).tolist()


def request(i, tokens, max_tokens, **options):
    sink = Recorder()
    options = nn.SamplingConfig(max_new_tokens=max_tokens, **{"temperature": 1.0, **options})
    seq = SequenceState(i, tokens, options, sink)
    return seq, sink


def run(scheduler, limit=1000):
    steps = 0
    while scheduler.has_work() and steps < limit:
        scheduler.step()
        steps += 1
    return steps


def alone(model, tokens, max_tokens, **options):
    cache = PagedKVCachePool(model.config, pages=16, page_size=8)
    scheduler = Scheduler(model, cache)
    seq, sink = request(0, tokens, max_tokens, **options)
    scheduler.submit(seq)
    run(scheduler)
    return sink.tokens


def test_batched_greedy_equals_alone_and_one_forward_per_step(model):
    specs = [(prompt(i, n), m) for i, (n, m) in enumerate([(5, 9), (17, 4), (1, 12), (30, 7)])]
    counting = Counting(model)
    scheduler = Scheduler(counting, PagedKVCachePool(model.config, pages=64, page_size=8))
    sinks = []
    for i, (tokens, max_tokens) in enumerate(specs):
        seq, sink = request(i, tokens, max_tokens, temperature=0.0)
        scheduler.submit(seq)
        sinks.append(sink)
    steps = run(scheduler)
    assert steps == 12 and len(counting.batches) == 12  # the longest request's tokens
    assert counting.batches == [4, 4, 4, 4, 3, 3, 3, 2, 2, 1, 1, 1]
    for (tokens, max_tokens), sink in zip(specs, sinks):
        assert sink.finish == ("length", len(tokens), max_tokens)
        assert sink.tokens == alone(model, tokens, max_tokens, temperature=0.0)
    reference = nn.generate(model, [t for t, _ in specs], nn.SamplingConfig(max_new_tokens=12))
    for (_, max_tokens), sink, want in zip(specs, sinks, reference):
        assert sink.tokens == want.tokens[:max_tokens]
    assert scheduler.cache.pages_in_use == 0


def test_requests_join_and_leave_between_steps(model):
    counting = Counting(model)
    scheduler = Scheduler(counting, PagedKVCachePool(model.config, pages=64, page_size=8))
    first, first_sink = request(0, prompt(1, 6), 10, temperature=0.0)
    scheduler.submit(first)
    for _ in range(3):
        scheduler.step()
    late, late_sink = request(1, prompt(2, 9), 5, temperature=0.0)
    scheduler.submit(late)
    scheduler.step()
    assert counting.batches[-1] == 2  # the late prompt's prefill rode with a decode step
    run(scheduler)
    assert len(counting.batches) == 10
    assert counting.batches == [1, 1, 1, 2, 2, 2, 2, 2, 1, 1]
    assert first_sink.tokens == alone(model, first.prompt, 10, temperature=0.0)
    assert late_sink.tokens == alone(model, late.prompt, 5, temperature=0.0)


def test_sampling_is_reproducible_per_seed(model):
    options = dict(temperature=0.9, top_k=20, top_p=0.95)
    p = prompt(3, 8)
    a = alone(model, p, 12, seed=7, **options)
    assert a == alone(model, p, 12, seed=7, **options)
    assert a != alone(model, p, 12, seed=8, **options)
    # The same seed gives the same tokens in a batch with other requests.
    scheduler = Scheduler(model, PagedKVCachePool(model.config, pages=32, page_size=8))
    seq, sink = request(0, p, 12, seed=7, **options)
    other, _ = request(1, prompt(4, 20), 12, seed=1, **options)
    scheduler.submit(other)
    scheduler.submit(seq)
    run(scheduler)
    assert sink.tokens == a


def test_stop_ids_and_repetition_penalty(model):
    p = prompt(5, 4)
    greedy = alone(model, p, 10, temperature=0.0)
    scheduler = Scheduler(model, PagedKVCachePool(model.config, pages=8, page_size=8))
    seq, sink = request(0, p, 10, temperature=0.0)
    seq.stop_ids = frozenset({greedy[3]})
    scheduler.submit(seq)
    run(scheduler)
    cut = greedy.index(greedy[3])
    assert sink.tokens == greedy[:cut] and sink.finish == ("stop", 4, cut)
    penalized = alone(model, p, 10, temperature=0.0, repetition_penalty=50.0)
    assert len(set(penalized)) == len(penalized)  # nothing repeats under a huge penalty
    assert not set(penalized) & set(p) or penalized != greedy


def test_full_pool_queues_and_full_queue_refuses(model):
    cache = PagedKVCachePool(model.config, pages=4, page_size=8, share_prefixes=False)
    scheduler = Scheduler(model, cache, SchedulerLimits(max_waiting=2, retry_after=3))
    seqs = [request(i, prompt(10 + i, 8), 8, temperature=0.0) for i in range(3)]
    for seq, _ in seqs[:2]:
        scheduler.submit(seq)
    scheduler.step()  # each needs two pages of 8 positions: both fit
    assert scheduler.running == 2 and scheduler.waiting == 0
    scheduler.submit(seqs[2][0])
    scheduler.step()
    assert scheduler.running == 2 and scheduler.waiting == 1  # waits for pages
    scheduler.submit(request(8, prompt(8, 3), 2)[0])
    with pytest.raises(Overloaded) as info:
        scheduler.submit(request(9, prompt(9, 3), 2)[0])
    assert info.value.retry_after == 3 and scheduler.rejected_total == 1
    run(scheduler)
    for seq, sink in seqs:
        assert sink.tokens == alone(model, seq.prompt, 8, temperature=0.0)
    assert cache.pages_in_use == 0


def test_prompt_longer_than_the_context_is_refused(model):
    scheduler = Scheduler(model, PagedKVCachePool(model.config, pages=16, page_size=8))
    with pytest.raises(RequestError, match="context"):
        scheduler.submit(request(0, prompt(0, 65), 4)[0])
    with pytest.raises(RequestError, match="empty"):
        scheduler.submit(request(0, [], 4)[0])


def test_cancel_frees_pages(model):
    cache = PagedKVCachePool(model.config, pages=16, page_size=8)
    scheduler = Scheduler(model, cache)
    seq, sink = request(0, prompt(6, 20), 30, temperature=0.0)
    queued, queued_sink = request(1, prompt(7, 5), 30)
    scheduler.submit(seq)
    scheduler.step()
    scheduler.step()
    assert cache.pages_in_use == 3
    scheduler.submit(queued)
    scheduler.cancel(0)
    scheduler.cancel(1)
    assert not scheduler.step()
    assert cache.pages_in_use == 0 and cache.pages_available == 16
    assert len(sink.tokens) == 2 and sink.finish is None and queued_sink.tokens == []


def test_a_failed_step_fails_its_requests_and_keeps_the_cache_whole(model):
    class Failing(Counting):
        def forward_incremental(self, tokens, cache, seq_ids):
            if len(self.batches) == 2:
                self.batches.append(0)
                model.forward_incremental(tokens, cache, seq_ids)  # fills and commits ...
                raise RuntimeError("boom")  # ... then fails: the scheduler rolls back
            return super().forward_incremental(tokens, cache, seq_ids)

    cache = PagedKVCachePool(model.config, pages=16, page_size=8)
    scheduler = Scheduler(Failing(model), cache)
    seq, sink = request(0, prompt(8, 5), 10)
    scheduler.submit(seq)
    run(scheduler)
    assert isinstance(sink.error, GenerationFailed) and "boom" in str(sink.error)
    assert cache.pages_in_use == 0 and scheduler.running == 0


@pytest.mark.parametrize("cache_kind", ["paged", "contiguous"])
def test_context_reset_replays_the_newest_tokens(cache_kind):
    config = nn.TransformerConfig.preset("gpt2", size="tiny", vocab_size=VOCAB, context_length=16)
    model = nn.DecoderOnlyTransformer(config, seed=2)
    if cache_kind == "paged":
        cache = PagedKVCachePool(config, pages=8, page_size=4)
    else:
        cache = ContiguousKVCachePool(config, max_sequences=2)
    scheduler = Scheduler(model, cache, SchedulerLimits(replay_tokens=6))
    p = prompt(9, 10)
    seq, sink = request(0, p, 30, temperature=0.0)
    scheduler.submit(seq)
    run(scheduler)
    assert sink.finish == ("length", 10, 30) and seq.resets >= 2
    tokens = p + sink.tokens
    # Token 6 still sees all 16 positions; token 7 would not fit, so it comes from
    # the newest 6 tokens replayed from position 0.
    full = model.forward([tokens[:16]]).numpy()[0]
    assert sink.tokens[6] == int(np.argmax(full[-1]))
    after = model.forward([tokens[11:17]]).numpy()[0]
    assert sink.tokens[7] == int(np.argmax(after[-1]))
