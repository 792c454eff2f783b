"""Post-training: a base ``.rift`` + prompt/response JSONL -> chat template -> child ``.rift``.

The child bundle has stage ``post_training`` and ``parent_id`` set to the base's
artifact id. Full fine-tuning: every parameter trains. By default the loss covers the
response tokens only (the assistant's content and its end marker); ``loss_on="all"``
includes the prompts. Batches are example-uniform: each conversation is a row (its
first ``context + 1`` tokens, see ``tokens`` for longer ones), every conversation
once per epoch in a shuffled order.

Validation holds out the conversations whose reply hashes into the last
``validation_fraction`` of the hash range, so prompts that share a reply stay together.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from riftco.interchange import load_bundle, original_kind
from riftco.nn import DecoderOnlyTransformer, TransformerConfig
from riftco.text import tokenizer_from_state
from riftco.train.adapters import (
    AdapterOptions,
    adapter_summary,
    export_model,
    packed_manifest,
    prepare_model,
    read_packed,
    save_adapters,
)
from riftco.train.batches import ExampleSampler, fixed_examples
from riftco.train.capabilities import require_training_backend
from riftco.train.checkpoint import read_checkpoint
from riftco.train.distributed.data_parallel import DataParallel
from riftco.train.engine import Callback
from riftco.train.errors import DataError
from riftco.train.instructions import DEFAULT_INSTRUCTIONS, ChatExample, load_instructions
from riftco.train.stage import (
    StageResult,
    TrainingOptions,
    check_resume,
    execution_config,
    finish_stage,
    run_stage,
)
from riftco.train.tokens import encode_examples

STAGE = "post_training"


def post_training_defaults() -> TrainingOptions:
    """The default budget: about a minute on two cores for the default instructions
    (rows are padded to the base's context, 256 tokens by default)."""
    return TrainingOptions(
        steps=100,
        batch_size=8,
        learning_rate=1e-3,
        min_learning_rate=1e-4,
        warmup_steps=8,
        weight_decay=0.0,
        eval_every=50,
        eval_batches=8,
        checkpoint_every=50,
    )


@dataclass(frozen=True)
class PostTrainOptions:
    """Everything ``post_train`` needs; ``data`` None is the embedded default instructions."""

    data: str | None = None
    loss_on: str = "response"
    overlong: str = "truncate"
    validation_fraction: float = 0.1
    training: TrainingOptions = field(default_factory=post_training_defaults)
    adapters: AdapterOptions = field(default_factory=AdapterOptions)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "adapters": self.adapters.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PostTrainOptions:
        fields = dict(data)
        training = TrainingOptions.from_dict(fields.pop("training", {}))
        adapters = AdapterOptions.from_dict(fields.pop("adapters", {}))
        return cls(**fields, training=training, adapters=adapters)


def split_examples(
    examples: Sequence[ChatExample], validation_fraction: float
) -> tuple[list[ChatExample], list[ChatExample]]:
    """``(train, validation)`` by a hash of each reply (deterministic, no seed)."""
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must lie in [0, 1), found {validation_fraction!r}")
    train: list[ChatExample] = []
    validation: list[ChatExample] = []
    for e in examples:
        digest = hashlib.sha256(e.response.encode("utf-8")).digest()
        held_out = int.from_bytes(digest[:8], "big") / 2**64 >= 1.0 - validation_fraction
        (validation if held_out else train).append(e)
    if not train:
        train, validation = list(examples), []
    return train, validation


_JOBS = {"full": "full post-training", "lora": "LoRA post-training", "qlora": "QLoRA post-training"}


def _require_backend(config: TransformerConfig, options: PostTrainOptions) -> None:
    method = options.adapters.method
    require_training_backend(
        config, method, job=_JOBS[method], precision=options.training.precision
    )


@dataclass
class _Start:
    """The model post-training starts from, and where it came from."""

    options: PostTrainOptions
    config: TransformerConfig
    model: DecoderOnlyTransformer
    tokenizer: Any
    parent_id: str | None
    checkpoint: Any = None  # the checkpoint resumed, if any


@dataclass
class _Data:
    """The encoded conversations: the training sampler and the held-out batches."""

    name: str
    source: ExampleSampler
    train: Any  # the encoded training examples (sequences, weights, truncated, dropped)
    validation: list[Any]
    validation_examples: int


def post_train(
    options: PostTrainOptions,
    base: str | os.PathLike[str] | None,
    out_dir: str | os.PathLike[str],
    *,
    resume: str | os.PathLike[str] | None = None,
    callbacks: Sequence[Callback] = (),
    progress: TextIO | None = None,
    stop: Callable[[], bool] | None = None,
    parallel: DataParallel | None = None,
    bundle_name: str = "chat.rift",
) -> StageResult:
    """Fine-tune the base bundle ``base`` on ``options.data`` and write ``out_dir/chat.rift``.

    With ``resume``, the model, tokenizer, options and the base's identity come from the
    checkpoint (``base`` may be None) and the data from ``options.data``. With
    ``options.adapters.method`` ``lora`` or ``qlora`` only adapters train; the child
    bundle holds the merged float32 weights and ``<bundle stem>-adapters.safetensors``
    the adapters alone.
    """
    out = Path(out_dir)
    start = _resumed(resume, options) if resume is not None else _from_base(base, options)
    options, model, adapters = start.options, start.model, start.options.adapters
    _prepare_adapters(start)
    data = _encode_data(options, start.config, start.tokenizer)
    trainer, outcome, files = run_stage(
        stage=STAGE,
        model=model,
        source=data.source,
        validation=data.validation,
        options=options.training,
        out_dir=out,
        run=_run_record(start, data),
        resume=start.checkpoint,
        callbacks=callbacks,
        progress=progress,
        stop=stop,
        paged_moments=adapters.paged,
        parallel=parallel,
    )
    summary = _summary(options, data, trainer, model)
    root = parallel is None or parallel.is_root
    if outcome == "finished" and adapters.method != "full" and root:
        meta = {"parent_id": start.parent_id, "method": adapters.method}
        save_adapters(out / f"{Path(bundle_name).stem}-adapters.safetensors", model, meta)
        export_model(model)
    return finish_stage(
        stage=STAGE,
        outcome=outcome,
        trainer=trainer,
        files=files,
        out_dir=out,
        summary=summary,
        bundle=out / bundle_name,
        tokenizer=start.tokenizer,
        parent_id=start.parent_id,
        parallel=parallel,
    )


def _resumed(resume: str | os.PathLike[str], options: PostTrainOptions) -> _Start:
    """The run ``resume`` checkpointed: its options (with ``options.data``), model
    configuration, tokenizer and parent, once the backend can train it."""
    checkpoint = read_checkpoint(resume)
    check_resume(checkpoint, STAGE)
    options = dataclasses.replace(
        PostTrainOptions.from_dict(checkpoint.run["options"]), data=options.data
    )
    config = TransformerConfig.from_dict(checkpoint.run["config"])
    _require_backend(config, options)
    tokenizer = tokenizer_from_state(checkpoint.run["tokenizer"])
    parent_id = checkpoint.run["parent_id"]
    model = DecoderOnlyTransformer(config)
    return _Start(options, config, model, tokenizer, parent_id, checkpoint)


def _from_base(base: str | os.PathLike[str] | None, options: PostTrainOptions) -> _Start:
    """The base bundle's model and tokenizer, rebuilt for ``options.training``'s
    execution settings, once the backend can train it."""
    if base is None:
        raise DataError("post-training needs a base .rift bundle (or a checkpoint to resume)")
    if original_kind(base) is not None:
        raise DataError(
            f"{base}: a model of the original riftco-transformer; post-training needs a "
            "tokenizer with an end-of-text token and a chat template, which its tokenizers "
            "do not have (its own runs continue from their .riftckpt with "
            "riftco.train.continue_original)"
        )
    runnable = load_bundle(base, trainable=True)
    model, tokenizer = runnable.model, runnable.tokenizer
    config = execution_config(runnable.config, options.training)
    _require_backend(config, options)
    if config != runnable.config:  # the same weights, run another way
        state = model.state_dict()
        model = DecoderOnlyTransformer(config, backend=model.backend)
        model.load_state_dict(state)
    return _Start(options, config, model, tokenizer, runnable.artifact_id)


def _prepare_adapters(start: _Start) -> None:
    """Freeze, quantize and adapt the model for the method (a resumed QLoRA run gets
    its checkpointed NF4 payload back)."""
    adapters, checkpoint = start.options.adapters, start.checkpoint
    packed = None
    if checkpoint is not None and adapters.method == "qlora":
        packed = read_packed(checkpoint.tensors, checkpoint.run.get("nf4") or {})
    prepare_model(start.model, adapters, packed)


def _encode_data(options: PostTrainOptions, config: TransformerConfig, tokenizer: Any) -> _Data:
    """The conversations split, encoded with the chat template and batched: a seeded
    sampler over the training ones, fixed batches of the held-out ones."""
    examples = load_instructions(options.data)
    name = options.data or DEFAULT_INSTRUCTIONS
    train_examples, validation_examples = split_examples(examples, options.validation_fraction)
    t, b = config.context_length, options.training.batch_size
    encode: dict[str, Any] = dict(loss_on=options.loss_on, overlong=options.overlong, source=name)
    train = encode_examples(tokenizer, train_examples, t, **encode)
    source = ExampleSampler(
        train.sequences,
        t,
        b,
        seed=options.training.data_seed,
        weights=train.weights,
        pad_id=tokenizer.eos_id,
    )
    validation = []
    if validation_examples:
        held = encode_examples(tokenizer, validation_examples, t, **encode, allow_empty=True)
        validation = fixed_examples(
            held.sequences, held.weights, t, b, options.training.eval_batches, tokenizer.eos_id
        )
    return _Data(name, source, train, validation, len(validation_examples))


def _run_record(start: _Start, data: _Data) -> dict[str, Any]:
    """What the checkpoints record of the run (and a resume reads back)."""
    run = {
        "stage": STAGE,
        "options": start.options.to_dict(),
        "config": start.config.to_dict(),
        "tokenizer": start.tokenizer.to_state(),
        "parent_id": start.parent_id,
        "data": {"source": data.name, "examples": len(data.train.sequences)},
    }
    if start.options.adapters.method == "qlora":
        run["nf4"] = packed_manifest(start.model)
    return run


def _summary(
    options: PostTrainOptions, data: _Data, trainer: Any, model: DecoderOnlyTransformer
) -> dict[str, Any]:
    found = [m.loss for m in trainer.history if m.phase == "validation"]
    return {
        "data": data.name,
        "data_fingerprint": data.source.fingerprint,
        "loss_on": options.loss_on,
        "examples": len(data.train.sequences),
        "validation_examples": data.validation_examples,
        "truncated": data.train.truncated,
        "dropped": data.train.dropped,
        "steps": trainer.step,
        "tokens_seen": trainer.tokens,
        "validation_loss": found[-1] if found else None,
        "train_seconds": round(trainer.seconds, 3),
        **adapter_summary(model, options.adapters),
    }


__all__ = ["STAGE", "PostTrainOptions", "post_train", "post_training_defaults", "split_examples"]
