"""What both stages share: options, the optimizer and schedule they build, and the run
around the engine (metrics log, progress bar, checkpoints, Ctrl-C, the loss plot)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from riftco.interchange import write_bundle
from riftco.nn import PRECISIONS, DecoderOnlyTransformer, TransformerConfig, check_exportable
from riftco.optim import AdamW, WarmupCosineSchedule, weight_decay_groups
from riftco.train.batches import Batch, BatchSource
from riftco.train.checkpoint import SUFFIX, Checkpoint, restore, save_checkpoint
from riftco.train.checkpoint_checks import check_run
from riftco.train.distributed.data_parallel import DataParallel, check_same_parameters
from riftco.train.engine import Callback, Trainer
from riftco.train.errors import CheckpointError, ResumeMismatch
from riftco.train.interrupt import StopOnInterrupt
from riftco.train.metrics import (
    MetricsLog,
    ProgressBar,
    TrainingMetric,
    plot_loss_curve,
    read_metrics,
)

#: The attention kernels a stage can train with (riftco-nn's ``TransformerConfig.attention``).
ATTENTION = ("flash", "materialized")


@dataclass(frozen=True)
class TrainingOptions:
    """How a stage trains: steps, batch, AdamW and its warmup + cosine schedule,
    evaluation and checkpoint cadence, the data order's seed, and how the model
    executes: ``attention`` (``flash`` or ``materialized``; None keeps the model's)
    and ``activation_checkpointing`` (drop each block's activations after forward
    and recompute them in backward: less memory, about a third more compute), and
    ``precision``: ``f32`` (float32 throughout) or ``bf16`` (matrix products and
    attention read bfloat16 operands and accumulate in float32; parameters, Adam's
    moments, norms, softmax statistics and the loss stay float32)."""

    steps: int = 300
    batch_size: int = 16
    learning_rate: float = 3e-3
    min_learning_rate: float = 3e-4
    warmup_steps: int = 20
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    data_seed: int = 0
    eval_every: int = 100
    eval_batches: int = 8
    checkpoint_every: int = 100
    attention: str | None = None
    activation_checkpointing: bool = False
    precision: str = "f32"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"precision must be one of {', '.join(PRECISIONS)}, found {self.precision!r}"
            )
        if self.attention not in (None, *ATTENTION):
            raise ValueError(
                f"attention must be one of {', '.join(ATTENTION)}, found {self.attention!r}"
            )
        for name in ("steps", "batch_size", "eval_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, found {getattr(self, name)}")
        for name in ("warmup_steps", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, found {getattr(self, name)}")
        if self.warmup_steps > self.steps:
            object.__setattr__(self, "warmup_steps", self.steps)
        if not 0 <= self.min_learning_rate <= self.learning_rate:
            raise ValueError(
                f"expected 0 <= min_learning_rate <= learning_rate, found "
                f"{self.min_learning_rate} and {self.learning_rate}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def execution_config(config: TransformerConfig, options: TrainingOptions) -> TransformerConfig:
    """``config`` with the attention kernel and activation checkpointing of ``options``
    (neither changes the weights, only how forward and backward run)."""
    attention = options.attention or config.attention
    return dataclasses.replace(
        config, attention=attention, checkpoint=options.activation_checkpointing
    )


@dataclass(frozen=True)
class StageResult:
    """What a stage made. ``bundle`` is None when the run was interrupted."""

    stage: str
    outcome: str
    out_dir: Path
    bundle: Path | None
    artifact_id: str | None
    checkpoint: Path
    metrics: Path
    plot: Path | None
    history: tuple[TrainingMetric, ...]
    summary: dict[str, Any]

    @property
    def validation_loss(self) -> float | None:
        found = [m.loss for m in self.history if m.phase == "validation"]
        return found[-1] if found else None


@dataclass(frozen=True)
class RunFiles:
    checkpoint: Path
    metrics: Path
    plot: Path

    @classmethod
    def for_stage(cls, out_dir: Path, stage: str) -> RunFiles:
        return cls(
            out_dir / f"{stage}{SUFFIX}",
            out_dir / f"{stage}-metrics.jsonl",
            out_dir / f"{stage}-loss.png",
        )


def build_optimizer(
    model: Any, options: TrainingOptions, paged: bool = False
) -> tuple[AdamW, WarmupCosineSchedule]:
    """AdamW over the parameters that require gradients (no decay on norms, biases and
    embeddings; moments in pages when ``paged``) and warmup + cosine decay."""
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = weight_decay_groups(trainable, options.weight_decay)
    groups = [g for g in groups if g["params"]]
    optimizer = AdamW(
        groups,
        lr=options.learning_rate,
        betas=(0.9, 0.95),
        weight_decay=options.weight_decay,
        max_grad_norm=options.max_grad_norm,
        paged=paged,
    )
    schedule = WarmupCosineSchedule(
        options.learning_rate, options.warmup_steps, options.steps, options.min_learning_rate
    )
    return optimizer, schedule


def check_resume(checkpoint: Checkpoint, stage: str) -> None:
    """``checkpoint`` is of ``stage`` and its run (options, configuration, tokenizer, the
    engine's counters against the options) can be rebuilt; raises ``CheckpointError``
    naming the field before anything is built from it."""
    if checkpoint.stage != stage:
        raise ResumeMismatch(
            f"{checkpoint.path}: a {checkpoint.stage} checkpoint; this command resumes {stage}"
        )
    try:
        check_run(checkpoint.manifest)
    except CheckpointError as exc:
        raise CheckpointError(f"{checkpoint.path}: {exc}") from None


def run_stage(
    *,
    stage: str,
    model: Any,
    source: BatchSource,
    validation: Sequence[Batch],
    options: TrainingOptions,
    out_dir: Path,
    run: dict[str, Any],
    resume: Checkpoint | None = None,
    callbacks: Sequence[Callback] = (),
    progress: TextIO | None = None,
    stop: Callable[[], bool] | None = None,
    plot: bool = True,
    paged_moments: bool = False,
    parallel: DataParallel | None = None,
) -> tuple[Trainer, str, RunFiles]:
    """Train ``model`` for one stage, writing the checkpoint, metrics and plot to
    ``out_dir``; returns the trainer, the outcome and the files.

    ``run`` describes the run (saved in every checkpoint); ``resume`` continues from a
    checkpoint. Ctrl-C saves a checkpoint after the current step and ends the run
    with outcome ``interrupted``. ``progress`` receives the progress bar (None: stderr).
    Only parameters that require gradients are optimized (``paged_moments``: Adam's
    moments in pages).

    With ``parallel`` over several ranks, every rank trains its share of each batch and
    rank 0 alone shows progress and writes the metrics, the checkpoints (after every
    rank has checked that its parameters equal rank 0's) and the plot; a stop on any
    rank stops every rank after the same step.
    """
    parallel = parallel if parallel is not None else DataParallel()
    comm, root = parallel.communicator, parallel.is_root
    files = RunFiles.for_stage(out_dir, stage)
    optimizer, schedule = build_optimizer(model, options, paged=paged_moments)
    log = bar = None
    if root:
        out_dir.mkdir(parents=True, exist_ok=True)
        log = MetricsLog(files.metrics, keep_through=resume.step if resume else None)
        bar = ProgressBar(options.steps, progress if progress is not None else sys.stderr)
    trainer = Trainer(
        model,
        optimizer,
        schedule,
        source,
        stage=stage,
        total_steps=options.steps,
        validation=validation,
        eval_every=options.eval_every,
        callbacks=[c for c in (log, bar) if c is not None] + list(callbacks),
        parallel=parallel,
        precision=options.precision,
    )
    try:
        if resume is not None:
            check_resume(resume, stage)
            restore(trainer, resume)
        check_same_parameters(comm, trainer.weights(), f"{stage} at step {trainer.step}")

        def save(t: Trainer) -> None:
            comm.barrier()
            check_same_parameters(comm, t.weights(), f"{stage} checkpoint at step {t.step}")
            if root:
                save_checkpoint(files.checkpoint, t, run)
            comm.barrier()

        with StopOnInterrupt(bar.stream if bar is not None else sys.stderr) as interrupt:

            def should_stop() -> bool:
                wanted = interrupt() or (stop is not None and stop())
                if comm.size == 1:
                    return wanted
                votes = np.array([int(wanted)], dtype=np.int64)
                comm.allreduce_ordered(votes)
                return bool(votes[0])

            outcome = trainer.run(
                checkpoint=save, checkpoint_every=options.checkpoint_every, stop=should_stop
            )
    finally:
        if bar is not None and log is not None:
            bar.close()
            log.close()
    if plot and root:
        plot_loss_curve(read_metrics(files.metrics), files.plot, title=f"{stage} loss")
    return trainer, outcome, files


def finish_stage(
    *,
    stage: str,
    outcome: str,
    trainer: Trainer,
    files: RunFiles,
    out_dir: Path,
    summary: dict[str, Any],
    bundle: Path,
    tokenizer: Any,
    parent_id: str | None = None,
    parallel: DataParallel | None = None,
) -> StageResult:
    """Write the stage's bundle when the run finished, and describe what was made.

    The bundle's metadata holds the summary without timing, so the same run always
    makes the same artifact id. Over several ranks rank 0 writes it and tells the
    others its identity.
    """
    parallel = parallel if parallel is not None else DataParallel()
    artifact_id = None
    if outcome == "finished" and parallel.is_root:
        model = trainer.model
        assert isinstance(model, DecoderOnlyTransformer)  # what both stages train
        check_exportable(model, f"write the {stage} bundle")
        weights = {n: np.array(t.numpy(), dtype=np.float32) for n, t in model.state_dict().items()}
        if "validation_loss" in summary and files.metrics.exists():
            # The log holds the whole run (a resume keeps its earlier lines), so a run
            # resumed after its last evaluation still reports that evaluation.
            logged = [m.loss for m in read_metrics(files.metrics) if m.phase == "validation"]
            summary = {**summary, "validation_loss": logged[-1] if logged else None}
        reproducible = {k: v for k, v in summary.items() if k != "train_seconds"}
        manifest = write_bundle(
            bundle,
            model.config.to_dict(),
            weights,
            tokenizer.to_state(),
            stage=stage,
            parent_id=parent_id,
            metadata={"training": reproducible},
        )
        artifact_id = manifest["artifact_id"]
    if parallel.size > 1:
        artifact_id = parallel.communicator.broadcast(artifact_id, root=0)
    return StageResult(
        stage,
        outcome,
        out_dir,
        bundle if outcome == "finished" else None,
        artifact_id,
        files.checkpoint,
        files.metrics,
        files.plot if parallel.is_root and files.plot.exists() else None,
        tuple(trainer.history),
        summary,
    )


__all__ = [
    "RunFiles",
    "StageResult",
    "TrainingOptions",
    "build_optimizer",
    "finish_stage",
    "run_stage",
]
