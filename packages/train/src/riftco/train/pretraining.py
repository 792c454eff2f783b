"""Pretraining: text -> tokenizer fitted on the training split -> model -> base ``.rift``.

The base bundle (stage ``pretraining``) records in its metadata the data source, its
fingerprint, the steps and tokens trained, the final validation loss and the unigram
baseline it is compared with.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from riftco.nn import DecoderOnlyTransformer, TransformerConfig
from riftco.text import Tokenizer, tokenizer_from_state
from riftco.train.batches import DocumentWindows, RandomWindows, fixed_windows
from riftco.train.capabilities import require_training_backend
from riftco.train.checkpoint import read_checkpoint
from riftco.train.corpus import load_text, split_corpus
from riftco.train.distributed.data_parallel import DataParallel
from riftco.train.engine import Callback
from riftco.train.errors import CheckpointError
from riftco.train.losses import unigram_loss
from riftco.train.stage import (
    StageResult,
    TrainingOptions,
    check_resume,
    execution_config,
    finish_stage,
    run_stage,
)
from riftco.train.tokens import encode_documents, fit_tokenizer, token_stream

STAGE = "pretraining"
WINDOWS = ("random", "document")


@dataclass(frozen=True)
class ModelOptions:
    """The model pretraining builds: a topology preset and its sizes (the vocabulary
    size comes from the tokenizer)."""

    preset: str = "gpt2"
    context_length: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 512
    dropout: float = 0.0
    seed: int = 0

    def config(self, vocab_size: int) -> TransformerConfig:
        return TransformerConfig.preset(
            self.preset,
            vocab_size=vocab_size,
            context_length=self.context_length,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
        )


def pretraining_defaults() -> TrainingOptions:
    """The default budget: sized so pretraining on the default corpus takes about two
    minutes on two cores (the main job's first stage). Eight windows of the default
    256-token context are as many tokens per step as sixteen of 128, at about the
    same cost, and leave a chat room for several turns."""
    return TrainingOptions(
        steps=800,
        batch_size=8,
        learning_rate=3e-3,
        min_learning_rate=3e-4,
        warmup_steps=30,
        weight_decay=0.1,
        eval_every=200,
        eval_batches=8,
        checkpoint_every=200,
    )


@dataclass(frozen=True)
class PretrainOptions:
    """Everything ``pretrain`` needs; ``data`` None is the embedded default corpus."""

    data: str | None = None
    tokenizer: str = "bpe"
    vocab_size: int = 512
    validation_fraction: float = 0.1
    windows: str = "random"
    model: ModelOptions = field(default_factory=ModelOptions)
    training: TrainingOptions = field(default_factory=pretraining_defaults)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PretrainOptions:
        fields = dict(data)
        model = ModelOptions(**fields.pop("model", {}))
        training = TrainingOptions.from_dict(fields.pop("training", {}))
        return cls(**fields, model=model, training=training)


@dataclass
class _Corpus:
    """The text split, tokenized and streamed, with the unigram baseline."""

    source: str
    tokenizer: Tokenizer
    train_docs: list[Any]
    stream: Any  # the training tokens, one stream
    validation_stream: Any
    baseline: float | None


def pretrain(
    options: PretrainOptions,
    out_dir: str | os.PathLike[str],
    *,
    resume: str | os.PathLike[str] | None = None,
    callbacks: Sequence[Callback] = (),
    progress: TextIO | None = None,
    stop: Callable[[], bool] | None = None,
    parallel: DataParallel | None = None,
    bundle_name: str = "base.rift",
) -> StageResult:
    """Pretrain on ``options.data`` and write ``out_dir/base.rift``.

    With ``resume`` (a ``.riftckpt``), the tokenizer, model and training options come
    from the checkpoint and the data from ``options.data``, which must be the data the
    checkpoint was trained on (its fingerprint is checked).
    """
    out = Path(out_dir)
    checkpoint = read_checkpoint(resume) if resume is not None else None
    tokenizer: Tokenizer | None = None
    if checkpoint is not None:
        check_resume(checkpoint, STAGE)
        saved = PretrainOptions.from_dict(checkpoint.run["options"])
        options = dataclasses.replace(saved, data=options.data)
        tokenizer = tokenizer_from_state(checkpoint.run["tokenizer"])
    # Before any data is read; the topology decides the kernels, the vocabulary does not.
    require_training_backend(
        execution_config(options.model.config(vocab_size=256), options.training),
        job=STAGE,
        precision=options.training.precision,
    )
    corpus = _read_corpus(options, tokenizer)
    config = _model_config(options, corpus.tokenizer, checkpoint)
    model = DecoderOnlyTransformer(config, seed=options.model.seed)
    source, validation = _batches(options, config, corpus)
    run = {
        "stage": STAGE,
        "options": options.to_dict(),
        "config": config.to_dict(),
        "tokenizer": corpus.tokenizer.to_state(),
        "data": {"source": corpus.source, "train_tokens": int(corpus.stream.size)},
    }
    trainer, outcome, files = run_stage(
        stage=STAGE,
        model=model,
        source=source,
        validation=validation,
        options=options.training,
        out_dir=out,
        run=run,
        resume=checkpoint,
        callbacks=callbacks,
        progress=progress,
        stop=stop,
        parallel=parallel,
    )
    summary = {
        "data": corpus.source,
        "data_fingerprint": source.fingerprint,
        "tokenizer": options.tokenizer,
        "train_tokens": int(corpus.stream.size),
        "validation_tokens": int(corpus.validation_stream.size),
        "steps": trainer.step,
        "tokens_seen": trainer.tokens,
        "unigram_validation_loss": corpus.baseline,
        "validation_loss": _last_validation(trainer.history),
        "train_seconds": round(trainer.seconds, 3),
    }
    return finish_stage(
        stage=STAGE,
        outcome=outcome,
        trainer=trainer,
        files=files,
        out_dir=out,
        summary=summary,
        bundle=out / bundle_name,
        tokenizer=corpus.tokenizer,
        parallel=parallel,
    )


def _read_corpus(options: PretrainOptions, tokenizer: Tokenizer | None) -> _Corpus:
    """The text, split; the tokenizer (fitted on the training split unless given) and
    both splits as token streams; the unigram baseline of the held-out one."""
    corpus = load_text(options.data)
    train_text, validation_text = split_corpus(corpus, options.validation_fraction)
    if tokenizer is None:
        tokenizer = fit_tokenizer(options.tokenizer, train_text, options.vocab_size)
    train_docs = encode_documents(tokenizer, train_text)
    validation_stream = token_stream(encode_documents(tokenizer, validation_text))
    stream = token_stream(train_docs)
    baseline = (
        unigram_loss(stream, validation_stream, tokenizer.vocab_size)
        if len(validation_stream)
        else None
    )
    return _Corpus(corpus.source, tokenizer, train_docs, stream, validation_stream, baseline)


def _model_config(
    options: PretrainOptions, tokenizer: Tokenizer, checkpoint: Any
) -> TransformerConfig:
    """The model's configuration (the vocabulary is the tokenizer's); a resumed run's
    must be the one its checkpoint recorded."""
    config = execution_config(options.model.config(tokenizer.vocab_size), options.training)
    if checkpoint is not None and config.to_dict() != checkpoint.run.get("config"):
        raise CheckpointError(
            f"{checkpoint.path}: run.options describe another model than run.config "
            "(the one its tensors were checked against)"
        )
    return config


def _batches(
    options: PretrainOptions, config: TransformerConfig, corpus: _Corpus
) -> tuple[DocumentWindows | RandomWindows, list[Any]]:
    """The training windows (``options.windows``) and the fixed held-out batches."""
    t, b = config.context_length, options.training.batch_size
    source: DocumentWindows | RandomWindows
    if options.windows == "document":
        source = DocumentWindows(
            corpus.train_docs, t, b, seed=options.training.data_seed, pad_id=corpus.tokenizer.eos_id
        )
    elif options.windows == "random":
        source = RandomWindows(corpus.stream, t, b, seed=options.training.data_seed)
    else:
        raise ValueError(f"windows must be one of {WINDOWS}, found {options.windows!r}")
    validation = fixed_windows(corpus.validation_stream, t, b, options.training.eval_batches)
    return source, validation


def _last_validation(history: Sequence[Any]) -> float | None:
    found = [m.loss for m in history if m.phase == "validation"]
    return found[-1] if found else None


__all__ = ["STAGE", "ModelOptions", "PretrainOptions", "pretrain", "pretraining_defaults"]
