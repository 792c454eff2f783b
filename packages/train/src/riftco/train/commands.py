"""The ``riftco pretrain`` and ``riftco post-train`` commands.

Each prints a progress bar (loss, its moving average, tokens/s) to stderr, writes its
metrics as JSONL, a ``.riftckpt`` checkpoint and, where matplotlib is installed, a
loss-curve PNG. Ctrl-C saves a checkpoint after the current step and exits with
status 130; ``--resume`` continues from it exactly.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from riftco.tensor import RiftcoError

if TYPE_CHECKING:
    from riftco.train.stage import TrainingOptions

INTERRUPTED = 130


def default_out(kind: str) -> Path:
    return Path("runs") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


def _training_flags(parser: argparse.ArgumentParser, defaults: TrainingOptions) -> None:
    from riftco.train.stage import ATTENTION

    g = parser.add_argument_group("training")
    add = g.add_argument
    add(
        "--steps",
        type=int,
        default=defaults.steps,
        metavar="N",
        help="optimizer steps (default %(default)s)",
    )
    add(
        "--batch-size",
        type=int,
        default=defaults.batch_size,
        metavar="B",
        help="rows per batch (default %(default)s)",
    )
    add(
        "--lr",
        type=float,
        metavar="LR",
        default=defaults.learning_rate,
        help="peak learning rate (default %(default)s)",
    )
    add(
        "--min-lr",
        type=float,
        metavar="LR",
        default=defaults.min_learning_rate,
        help="learning rate at the last step, after cosine decay (default %(default)s)",
    )
    add(
        "--warmup",
        type=int,
        default=defaults.warmup_steps,
        metavar="STEPS",
        help="linear warmup steps (default %(default)s)",
    )
    add(
        "--weight-decay",
        type=float,
        metavar="W",
        default=defaults.weight_decay,
        help="AdamW decoupled weight decay, not applied to norms, biases and embeddings (default %(default)s)",
    )
    add(
        "--max-grad-norm",
        type=float,
        metavar="NORM",
        default=defaults.max_grad_norm,
        help="clip the global gradient norm to this (default %(default)s)",
    )
    add(
        "--data-seed",
        type=int,
        metavar="SEED",
        default=defaults.data_seed,
        help="seed of the batch order, independent of the model's (default %(default)s)",
    )
    add(
        "--eval-every",
        type=int,
        default=defaults.eval_every,
        metavar="STEPS",
        help="evaluate on held-out data every STEPS steps, besides before training and at the end; 0: only then (default %(default)s)",
    )
    add(
        "--eval-batches",
        type=int,
        default=defaults.eval_batches,
        metavar="N",
        help="held-out batches per evaluation (default %(default)s)",
    )
    add(
        "--checkpoint-every",
        type=int,
        default=defaults.checkpoint_every,
        metavar="STEPS",
        help="save a .riftckpt every STEPS steps, besides at the end and on Ctrl-C; 0: only then (default %(default)s)",
    )
    add(
        "--attention",
        choices=ATTENTION,
        default=None,
        help="attention kernel: flash (tiled, never holds the T x T scores) or materialized "
        "(the plain softmax(QK^T)V); default: flash, or what the base bundle uses",
    )
    add(
        "--precision",
        choices=("f32", "bf16"),
        default=defaults.precision,
        help="bf16: matrix products and attention in bfloat16 with float32 accumulation; "
        "weights, Adam moments, norms and the loss stay float32, and so do bundles "
        "(default %(default)s)",
    )
    add(
        "--activation-checkpointing",
        action="store_true",
        help="keep no block activations between forward and backward and recompute them "
        "(less memory, about a third more compute)",
    )
    add(
        "--resume",
        type=Path,
        default=None,
        metavar="CKPT",
        help="continue exactly from a .riftckpt; model, tokenizer and training options come from it, the data from --data (it must be the same data)",
    )
    add(
        "--threads",
        type=int,
        metavar="N",
        default=None,
        help="kernel threads (default: RIFTCO_NUM_THREADS or all cores; one per rank is best when the ranks share a machine)",
    )
    add(
        "--backend",
        metavar="NAME",
        default=None,
        help="backend to train on: cpu, vulkan, metal, tpu, ... (default: RIFTCO_BACKEND or auto; "
        "`riftco backends` lists them)",
    )
    from riftco.train.distributed.cli import add_parallel_flags

    add_parallel_flags(parser)


def _training_options(args: argparse.Namespace):  # -> TrainingOptions
    from riftco.train.stage import TrainingOptions

    return TrainingOptions(
        steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        min_learning_rate=min(args.min_lr, args.lr),
        warmup_steps=args.warmup,
        weight_decay=args.weight_decay,
        max_grad_norm=args.max_grad_norm,
        data_seed=args.data_seed,
        eval_every=args.eval_every,
        eval_batches=args.eval_batches,
        checkpoint_every=args.checkpoint_every,
        attention=args.attention,
        activation_checkpointing=args.activation_checkpointing,
        precision=args.precision,
    )


def pretrain_parser() -> argparse.ArgumentParser:
    from riftco.train.pretraining import WINDOWS, ModelOptions, pretraining_defaults
    from riftco.train.tokens import TOKENIZERS

    parser = argparse.ArgumentParser(
        prog="riftco pretrain",
        description="Pretrain a decoder-only Transformer on text and write a base .rift bundle. "
        "With no --data, trains on the Python documentation topics that ship with CPython.",
    )
    add = parser.add_argument
    add(
        "--data",
        default=None,
        metavar="PATH",
        help="a UTF-8 text file or a folder of .txt files (default: pydoc_data.topics)",
    )
    add(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where base.rift, the checkpoint, metrics and plot go (default: runs/pretrain-<timestamp>)",
    )
    add(
        "--tokenizer",
        choices=TOKENIZERS,
        default="bpe",
        help="byte-level BPE or plain bytes, fitted on the training split only (default %(default)s)",
    )
    add(
        "--vocab-size",
        type=int,
        metavar="N",
        default=512,
        help="BPE vocabulary before special tokens (default %(default)s)",
    )
    add(
        "--validation-fraction",
        type=float,
        metavar="F",
        default=0.1,
        help="tail of each document held out for validation (default %(default)s)",
    )
    add(
        "--windows",
        choices=WINDOWS,
        default="random",
        help="random: windows anywhere in the token stream, with replacement; document: windows that never cross a document boundary (default %(default)s)",
    )
    add(
        "--sample",
        default="The ",
        metavar="TEXT",
        help="print the model's continuation of TEXT at the end ('' to skip; default %(default)r)",
    )
    m = parser.add_argument_group("model")
    d = ModelOptions()
    m.add_argument(
        "--preset",
        choices=("gpt2", "riftco_v1", "llama"),
        default=d.preset,
        help="topology (default %(default)s)",
    )
    m.add_argument(
        "--context",
        type=int,
        metavar="T",
        default=d.context_length,
        help="context length T (default %(default)s)",
    )
    m.add_argument(
        "--d-model", type=int, default=d.d_model, metavar="D", help="width D (default %(default)s)"
    )
    m.add_argument(
        "--layers", type=int, default=d.n_layers, metavar="L", help="blocks L (default %(default)s)"
    )
    m.add_argument(
        "--heads",
        type=int,
        default=d.n_heads,
        metavar="H",
        help="attention heads H (default %(default)s)",
    )
    m.add_argument(
        "--d-ff",
        type=int,
        default=d.d_ff,
        metavar="F",
        help="feed-forward width (default %(default)s)",
    )
    m.add_argument(
        "--dropout",
        type=float,
        default=d.dropout,
        metavar="P",
        help="dropout probability (default %(default)s)",
    )
    m.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        metavar="SEED",
        help="model initialization seed (default %(default)s)",
    )
    _training_flags(parser, pretraining_defaults())
    return parser


def post_train_parser() -> argparse.ArgumentParser:
    from riftco.train.post_training import post_training_defaults
    from riftco.train.tokens import LOSS_ON, OVERLONG

    parser = argparse.ArgumentParser(
        prog="riftco post-train",
        description="Fine-tune a base .rift bundle on prompt/response JSONL and write a chat "
        ".rift bundle whose parent is the base. With no --data, trains on instructions derived "
        "from the Python documentation topics.",
    )
    add = parser.add_argument
    add(
        "--base",
        type=Path,
        default=None,
        metavar="BUNDLE",
        help="the base .rift bundle (not needed with --resume)",
    )
    add(
        "--data",
        default=None,
        metavar="JSONL",
        help='one JSON object per line: {"prompt", "response"} or {"messages": [...]} (default: the embedded instructions)',
    )
    add(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where chat.rift, the checkpoint, metrics and plot go (default: the base's folder)",
    )
    add(
        "--loss-on",
        choices=LOSS_ON,
        default="response",
        help="learn the response tokens only, or every token (default %(default)s)",
    )
    add(
        "--overlong",
        choices=OVERLONG,
        default="truncate",
        help="conversations longer than the context: keep their first tokens, drop them, or stop with an error (default %(default)s)",
    )
    add(
        "--validation-fraction",
        type=float,
        metavar="F",
        default=0.1,
        help="share of conversations held out for validation, by reply (default %(default)s)",
    )
    add(
        "--sample",
        default="Explain the while statement.",
        metavar="PROMPT",
        help="print the model's reply to PROMPT at the end ('' to skip; default %(default)r)",
    )
    _adapter_flags(parser)
    _training_flags(parser, post_training_defaults())
    return parser


def _adapter_flags(parser: argparse.ArgumentParser) -> None:
    from riftco.nn import LORA_TARGETS
    from riftco.tensor.ops.quantized import NF4_BLOCK_SIZES
    from riftco.train.adapters import METHODS, AdapterOptions

    d = AdapterOptions()
    g = parser.add_argument_group("adapters")
    add = g.add_argument
    add(
        "--method",
        choices=METHODS,
        default=d.method,
        help="full: every parameter trains; lora: low-rank adapters on a frozen float32 base; qlora: adapters on a base quantized to NF4 (default %(default)s)",
    )
    add(
        "--lora-rank",
        type=int,
        default=d.lora_rank,
        metavar="R",
        help="adapter rank (default %(default)s)",
    )
    add(
        "--lora-alpha",
        type=float,
        default=d.lora_alpha,
        help="adapter scale numerator: updates are scaled by alpha / rank (default %(default)s)",
    )
    add(
        "--lora-targets",
        default=",".join(d.lora_targets),
        metavar="NAMES",
        help=f"comma-separated layers to adapt, from {', '.join(LORA_TARGETS)} (default %(default)s)",
    )
    add(
        "--nf4-block-size",
        type=int,
        choices=NF4_BLOCK_SIZES,
        default=d.nf4_block_size,
        metavar="N",
        help="qlora: weights per NF4 scale, a power of two from 32 to 4096 (default %(default)s)",
    )


def _adapter_options(args: argparse.Namespace):  # -> AdapterOptions
    from riftco.train.adapters import AdapterOptions

    targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
    return AdapterOptions(
        method=args.method,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        lora_targets=targets,
        nf4_block_size=args.nf4_block_size,
    )


def _require_sampling(prompt: str) -> None:
    """The sample printed after training decodes incrementally: check for that up front."""
    if prompt:
        import riftco.tensor as rt
        from riftco.train.capabilities import DECODING

        rt.require_capabilities(None, DECODING, job="the sample printed after training")


def resume_command(name: str, checkpoint: Path | str, data: str | None) -> str:
    """The command that resumes an interrupted stage: its checkpoint, and the data it
    read when that was not the default (a resumed run checks the data's fingerprint)."""
    command = f"riftco {name} --resume {shlex.quote(str(checkpoint))}"
    if data is not None:
        command += f" --data {shlex.quote(str(data))}"
    return command


def _run(name: str, args: argparse.Namespace, work) -> int:  # work: (DataParallel) -> StageResult
    from riftco.train.distributed.cli import run_parallel

    status, result = run_parallel(name, args, work, (RiftcoError, OSError))
    if status or result is None:
        return status
    if result.outcome == "interrupted":
        print(
            f"interrupted: checkpoint saved at {result.checkpoint}\n"
            f"resume with: {resume_command(name, result.checkpoint, args.data)}",
            file=sys.stderr,
        )
        return INTERRUPTED
    return 0


def _report(result, sample_text: str | None) -> None:  # result: StageResult
    s = result.summary
    print(
        f"{result.stage}: {s['steps']} steps, {s['tokens_seen']:,} tokens in {s['train_seconds']:.1f} s"
    )
    if s.get("unigram_validation_loss") is not None:
        print(f"unigram baseline loss: {s['unigram_validation_loss']:.4f}")
    if s.get("validation_loss") is not None:
        print(f"validation loss:       {s['validation_loss']:.4f}")
    if s.get("method"):
        line = f"{s['method']}: {s['trainable_parameters']:,} trainable adapter parameters"
        if "nf4" in s:
            nf4 = s["nf4"]
            line += (
                f"; linear weights {nf4['float32_bytes'] / 2**20:.2f} MiB as float32, "
                f"{nf4['stored_bytes'] / 2**20:.2f} MiB as NF4"
            )
        print(line)
    if sample_text is not None:
        print(f"sample: {sample_text}")
    print(f"bundle:     {result.bundle} ({result.artifact_id})")
    print(f"checkpoint: {result.checkpoint}")
    print(f"metrics:    {result.metrics}")
    if result.plot is not None:
        print(f"loss curve: {result.plot}")


def _threads(count: int | None) -> None:
    if count is not None:
        import riftco.tensor as rt

        rt.set_num_threads(count)


def _backend(name: str | None) -> None:
    # The job resolves its backend as every tensor does (RIFTCO_BACKEND, else auto), so
    # the flag is that variable for this process.
    if name is not None:
        os.environ["RIFTCO_BACKEND"] = name


def pretrain_main(argv: list[str]) -> int:
    """Pretrain a model on text (default: the Python docs) and write a base .rift bundle."""
    parser = pretrain_parser()
    args = parser.parse_args(argv)
    _check_parallel(parser, args)
    _threads(args.threads)
    _backend(args.backend)

    def work(parallel):
        from riftco.train.pretraining import ModelOptions, PretrainOptions, pretrain

        _require_sampling(args.sample)
        options = PretrainOptions(
            data=args.data,
            tokenizer=args.tokenizer,
            vocab_size=args.vocab_size,
            validation_fraction=args.validation_fraction,
            windows=args.windows,
            model=ModelOptions(
                preset=args.preset,
                context_length=args.context,
                d_model=args.d_model,
                n_layers=args.layers,
                n_heads=args.heads,
                d_ff=args.d_ff,
                dropout=args.dropout,
                seed=args.seed,
            ),
            training=_training_options(args),
        )
        out = args.out or (args.resume.parent if args.resume else default_out("pretrain"))
        out = Path(parallel.communicator.broadcast(str(out), root=0))
        result = pretrain(options, out, resume=args.resume, parallel=parallel)
        if result.outcome == "finished" and parallel.is_root:
            _report(result, _sample(result.bundle, args.sample, chat=False))
        return result

    return _run("pretrain", args, work)


def post_train_main(argv: list[str]) -> int:
    """Fine-tune a base .rift on prompt/response JSONL into a chat .rift bundle."""
    parser = post_train_parser()
    args = parser.parse_args(argv)
    if args.base is None and args.resume is None:
        parser.error("--base is required (unless resuming with --resume)")
    _check_parallel(parser, args)
    _threads(args.threads)
    _backend(args.backend)
    try:
        adapters = _adapter_options(args)
    except ValueError as exc:
        parser.error(str(exc))

    def work(parallel):
        from riftco.train.post_training import PostTrainOptions, post_train

        _require_sampling(args.sample)
        options = PostTrainOptions(
            data=args.data,
            loss_on=args.loss_on,
            overlong=args.overlong,
            validation_fraction=args.validation_fraction,
            training=_training_options(args),
            adapters=adapters,
        )
        out = args.out or (args.resume or args.base).parent
        result = post_train(options, args.base, out, resume=args.resume, parallel=parallel)
        if result.outcome == "finished" and parallel.is_root:
            _report(result, _sample(result.bundle, args.sample, chat=True))
        return result

    return _run("post-train", args, work)


def _check_parallel(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from riftco.train.distributed.cli import check_parallel_flags

    check_parallel_flags(parser, args)


def _sample(bundle: Path | None, prompt: str, chat: bool) -> str | None:
    if bundle is None or not prompt:
        return None
    from riftco.interchange import load_bundle
    from riftco.train.sampling import complete

    runnable = load_bundle(bundle)
    temperature = 0.0 if chat else 0.7
    reply = complete(runnable.model, runnable.tokenizer, prompt, chat=chat, temperature=temperature)
    return f"{prompt!r} -> {reply!r}" if chat else repr(prompt + reply)


__all__ = ["post_train_main", "post_train_parser", "pretrain_main", "pretrain_parser"]
