"""`riftco demo`: the main job, on the embedded default data.

Pretrain on the Python documentation topics that ship with CPython, post-train on
instructions derived from them, then `riftco generate` a reply to a sample
instruction, printing the losses, a sample of each stage, and where the artifacts are.
The samples are also written to ``samples.txt`` beside the bundles, and each stage's
loss curves (train and validation) to ``<stage>-loss.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import sys
import time
from pathlib import Path
from typing import Any

PROMPT = "Explain the while statement."


def main(argv: list[str]) -> int:
    """Run the main job: pretrain, post-train and generate on the embedded default data."""
    parser = argparse.ArgumentParser(prog="riftco demo", description=main.__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the artifacts go (default: runs/demo-<timestamp>)",
    )
    parser.add_argument("--seed", type=int, default=0, help="model initialization seed (default 0)")
    parser.add_argument(
        "--prompt",
        default=PROMPT,
        help="the instruction to answer at the end (default %(default)r)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("RIFTCO_DEMO_QUICK") == "1",
        help="a tiny model and a few steps, to check the pipeline in seconds (or RIFTCO_DEMO_QUICK=1)",
    )
    parser.add_argument(
        "--precision",
        choices=("f32", "bf16"),
        default="f32",
        help="train both stages in float32, or with matrix products and attention in "
        "bfloat16 (float32 accumulation, weights and bundles; default %(default)s)",
    )
    args = parser.parse_args(argv)
    from riftco.tensor import RiftcoError

    try:
        return run(args.out, args.seed, args.prompt, args.quick, args.precision)
    except (RiftcoError, OSError) as exc:
        print(f"riftco demo: {exc}", file=sys.stderr)
        return 1


def _options(seed: int, quick: bool, precision: str = "f32"):
    from riftco.train.post_training import PostTrainOptions
    from riftco.train.pretraining import ModelOptions, PretrainOptions

    pretraining, post_training = PretrainOptions(), PostTrainOptions()
    model = dataclasses.replace(pretraining.model, seed=seed)
    if quick:
        model = ModelOptions(
            context_length=64, d_model=32, n_layers=1, n_heads=2, d_ff=64, seed=seed
        )
        small: dict[str, Any] = dict(
            steps=4, batch_size=4, eval_every=0, eval_batches=1, checkpoint_every=0, warmup_steps=1
        )
        pretraining = dataclasses.replace(
            pretraining, training=dataclasses.replace(pretraining.training, **small)
        )
        post_training = dataclasses.replace(
            post_training, training=dataclasses.replace(post_training.training, **small)
        )
    pretraining = dataclasses.replace(
        pretraining, training=dataclasses.replace(pretraining.training, precision=precision)
    )
    post_training = dataclasses.replace(
        post_training, training=dataclasses.replace(post_training.training, precision=precision)
    )
    return dataclasses.replace(pretraining, model=model), post_training


def _duration(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def run(out: Path | None, seed: int, prompt: str, quick: bool, precision: str = "f32") -> int:
    from riftco.interchange import load_bundle
    from riftco.train.post_training import post_train
    from riftco.train.pretraining import pretrain
    from riftco.train.sampling import complete

    started = time.perf_counter()
    out = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    pretraining, post_training = _options(seed, quick, precision)
    m, t = pretraining.model, pretraining.training
    print(f"riftco demo -> {out}")
    print(
        f"[1/3] pretraining on pydoc_data.topics: {pretraining.tokenizer} tokenizer "
        f"({pretraining.vocab_size} ids), {m.preset} model D={m.d_model} L={m.n_layers} "
        f"H={m.n_heads} T={m.context_length}, {t.steps} steps of {t.batch_size} windows",
        flush=True,
    )
    base = pretrain(pretraining, out)
    if base.outcome != "finished":
        print(f"interrupted; resume with: riftco pretrain --resume {base.checkpoint}")
        return 130
    assert base.bundle is not None and base.artifact_id is not None  # a finished stage's
    baseline, loss = base.summary["unigram_validation_loss"], base.summary["validation_loss"]
    print(f"      unigram baseline validation loss: {baseline:.4f} nats/token")
    print(
        f"      model validation loss:            {loss:.4f} ({loss / baseline:.2f}x the baseline)"
    )
    runnable = load_bundle(base.bundle)
    start = 'The "for" statement'
    text = complete(
        runnable.model, runnable.tokenizer, start, max_new_tokens=40, temperature=0.5, seed=seed
    )
    print(f"      sample: {start + text!r}")
    print(
        f"[2/3] post-training on the default instructions ({post_training.training.steps} steps, loss on responses)",
        flush=True,
    )
    chat = post_train(post_training, base.bundle, out)
    if chat.outcome != "finished":
        print(f"interrupted; resume with: riftco post-train --resume {chat.checkpoint}")
        return 130
    assert chat.bundle is not None
    print(f"      validation loss on held-out instructions: {chat.summary['validation_loss']:.4f}")
    command = ["generate", str(chat.bundle), "--chat", "--prompt", prompt, "--max-new-tokens", "60"]
    print(f"[3/3] riftco {' '.join(command[:3])} --prompt {prompt!r}", flush=True)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = _generate(command)
    reply = captured.getvalue().removesuffix("\n")
    if code != 0:
        print(reply)
        runnable = load_bundle(chat.bundle)
        reply = complete(runnable.model, runnable.tokenizer, prompt, chat=True, temperature=0.0)
    print(reply)
    samples = _write_samples(out, start + text, prompt, reply)
    print(f"artifacts in {out}:")
    print(f"  base.rift  stage pretraining, id {base.artifact_id}")
    print(
        f"  chat.rift  stage post_training, id {chat.artifact_id}, parent {base.artifact_id[:16]}..."
    )
    print("  pretraining.riftckpt, post_training.riftckpt (resume with --resume)")
    print(f"  {samples.name}  the samples above")
    print(
        "  *-metrics.jsonl"
        + (
            ", pretraining-loss.png and post_training-loss.png (train and validation loss)"
            if base.plot
            else " (pip install matplotlib for loss curves)"
        )
    )
    print(f"done in {_duration(time.perf_counter() - started)}")
    return 0


def _write_samples(out: Path, pretraining: str, prompt: str, reply: str) -> Path:
    from riftco.core.atomic import write_bytes_atomic

    path = out / "samples.txt"
    text = f"base.rift continues a text:\n{pretraining}\n\nchat.rift answers {prompt!r}:\n{reply}\n"
    write_bytes_atomic(path, text.encode("utf-8"))
    return path


def _generate(command: list[str]) -> int:
    """`riftco generate` through the command host; 1 when it is not installed."""
    from riftco.cli import contributions

    found = contributions().get("generate")
    if found is None:
        return 1
    try:
        generate = found.load()
    except Exception as exc:  # a broken contribution must not end the demo
        print(
            f"      (riftco generate unavailable: {type(exc).__name__}: {exc}; using riftco.train's sampler)"
        )
        return 1
    return generate(command[1:])
