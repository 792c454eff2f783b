"""Benchmark riftco-text BPE: training and encoding on 1 MB of Python documentation.

Trains 2,000 merges on the documentation topics that ship with CPython
(``pydoc_data.topics``), repeated to 1 MB, and prints training seconds and
encoding throughput, for each pre-tokenization. Where the Hugging Face
``tokenizers`` library is importable, it trains its BPE on the same corpus with
the same vocabulary size and pre-tokenization and its figures are printed
beside ours. Prints figures only; nothing here asserts on time.

    python bench/bench_text.py [--size BYTES] [--merges N] [--pretokenize none gpt2]
                               [--repeat N] [--tokenizers-limit SECONDS]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pydoc_data.topics
import time

from riftco.text import DEFAULT_SPECIAL_TOKENS, BpeTokenizer, tokenizer_from_state


def corpus_of(size: int) -> str:
    text = "".join(pydoc_data.topics.topics.values())
    data = (text * (size // len(text.encode()) + 1)).encode()[:size]
    return data.decode("utf-8", "ignore")


def seconds(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def bench_ours(corpus: str, merges: int, mode: str, repeat: int) -> dict[str, float]:
    """Best of ``repeat`` runs of each step."""
    size = len(corpus.encode())
    once = "".join(pydoc_data.topics.topics.values())[: len(corpus)]  # no repeats
    train_s = cold_s = warm_s = once_s = float("inf")
    for _ in range(repeat):
        took, tok = seconds(BpeTokenizer.train, corpus, 256 + merges, 2, mode)
        train_s = min(train_s, took)
        fresh = tokenizer_from_state(tok.to_state())  # an empty piece cache
        took, ids = seconds(fresh.encode, corpus)
        cold_s = min(cold_s, took)
        took, again = seconds(fresh.encode, corpus)
        warm_s = min(warm_s, took)
        assert again == ids and tok.decode(ids) == corpus
        took, _ = seconds(tokenizer_from_state(tok.to_state()).encode, once)
        once_s = min(once_s, took)
    return {
        "train_s": train_s,
        "merges": len(tok.merges),
        "encode_mb_s": size / cold_s / 1e6,
        "encode_warm_mb_s": size / warm_s / 1e6,
        "encode_once_mb_s": len(once.encode()) / once_s / 1e6,
        "once_bytes": len(once.encode()),
        "tokens": len(ids),
    }


def bench_tokenizers(corpus: str, merges: int, mode: str) -> dict[str, float] | None:
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        return None
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=mode == "gpt2")
    trainer = trainers.BpeTrainer(
        vocab_size=256 + merges + len(DEFAULT_SPECIAL_TOKENS),
        min_frequency=2,
        special_tokens=list(DEFAULT_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    train_s, _ = seconds(lambda: tok.train_from_iterator([corpus], trainer))
    encode_s, encoding = seconds(lambda: tok.encode(corpus))
    return {
        "train_s": train_s,
        "merges": tok.get_vocab_size() - 256 - len(DEFAULT_SPECIAL_TOKENS),
        "encode_mb_s": len(corpus.encode()) / encode_s / 1e6,
        "tokens": len(encoding.ids),
    }


def bench_tokenizers_within(corpus: str, merges: int, mode: str, limit: float):
    """``bench_tokenizers`` in a fresh process, given up after ``limit`` seconds."""
    # spawn, not fork: tokenizers' thread pool does not survive a fork
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pending = pool.apply_async(bench_tokenizers, (corpus, merges, mode))
        try:
            return pending.get(limit)
        except multiprocessing.TimeoutError:
            return "timeout"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="corpus bytes")
    parser.add_argument("--merges", type=int, default=2000)
    parser.add_argument("--pretokenize", nargs="+", default=["gpt2", "none"])
    parser.add_argument("--repeat", type=int, default=3, help="report the best of N runs")
    parser.add_argument(
        "--tokenizers-limit", type=float, default=300, help="seconds to wait for tokenizers"
    )
    args = parser.parse_args()
    corpus = corpus_of(args.size)
    print(f"corpus: {len(corpus.encode()):,} bytes of pydoc_data.topics; {args.merges} merges")
    threads = os.environ.get("RAYON_NUM_THREADS", f"all {os.cpu_count()} cores")
    for mode in args.pretokenize:
        ours = bench_ours(corpus, args.merges, mode, args.repeat)
        print(
            f"[{mode}] riftco-text: train {ours['train_s']:.2f} s ({ours['merges']} merges), "
            f"encode {ours['encode_mb_s']:.2f} MB/s fresh cache, "
            f"{ours['encode_warm_mb_s']:.2f} MB/s warm, {ours['tokens']:,} tokens; "
            f"{ours['encode_once_mb_s']:.2f} MB/s fresh on {ours['once_bytes']:,} bytes "
            f"without repeats"
        )
        theirs = bench_tokenizers_within(corpus, args.merges, mode, args.tokenizers_limit)
        if theirs is None:
            print(f"[{mode}] tokenizers: not installed")
            continue
        if theirs == "timeout":
            print(f"[{mode}] tokenizers: training did not finish in {args.tokenizers_limit:.0f} s")
            continue
        print(
            f"[{mode}] tokenizers ({threads}): train {theirs['train_s']:.2f} s "
            f"({theirs['merges']} merges), encode {theirs['encode_mb_s']:.2f} MB/s, "
            f"{theirs['tokens']:,} tokens; train time ratio riftco/tokenizers "
            f"{ours['train_s'] / theirs['train_s']:.1f}x"
        )


if __name__ == "__main__":
    main()
