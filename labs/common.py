"""What the post-training labs share: a small pretrained base, one post-training run
measured as a record, held-out evaluation of a bundle, and record files.

Every run goes through riftco-train's own ``pretrain`` and ``post_train`` (full
fine-tuning, LoRA, QLoRA); the labs only choose options and measure.
"""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import riftco.tensor as rt
from riftco.autograd import no_grad
from riftco.core import write_bytes_atomic
from riftco.interchange import read_bundle
from riftco.nn import DecoderOnlyTransformer, TransformerConfig, weight_memory
from riftco.text import tokenizer_from_state
from riftco.train import (
    ModelOptions,
    PostTrainOptions,
    PretrainOptions,
    TrainingOptions,
    encode_examples,
    fixed_examples,
    load_instructions,
    masked_cross_entropy,
    post_train,
    pretrain,
)
from riftco.train.adapters import AdapterOptions
from riftco.train.post_training import split_examples

ATTENTION = ("attention.query", "attention.key", "attention.value", "attention.output")
FEED_FORWARD = ("feed_forward.expand", "feed_forward.project")
TARGET_SETS = {"attention": ATTENTION, "attention+ff": ATTENTION + FEED_FORWARD}


@dataclass(frozen=True)
class BaseSpec:
    """The base model every run of a lab starts from (pretrained once per lab run)."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    context_length: int = 64
    vocab_size: int = 512
    steps: int = 400
    batch_size: int = 16
    seed: int = 0

    def options(self) -> PretrainOptions:
        model = ModelOptions(
            context_length=self.context_length,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            seed=self.seed,
        )
        training = TrainingOptions(
            steps=self.steps,
            batch_size=self.batch_size,
            warmup_steps=min(30, self.steps // 10),
            eval_every=0,
            eval_batches=4,
            checkpoint_every=0,
        )
        return PretrainOptions(vocab_size=self.vocab_size, model=model, training=training)


@dataclass(frozen=True)
class RunSpec:
    """One post-training run: the method, LoRA's rank, alpha and targets, the seed (of
    the data order and the adapters' initialization) and the training budget."""

    method: str
    seed: int
    steps: int
    batch_size: int
    learning_rate: float
    rank: int = 4
    alpha: float = 8.0
    target_set: str = "attention"
    eval_every: int = 10
    validation_fraction: float = 0.1
    data: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def options(self) -> PostTrainOptions:
        training = TrainingOptions(
            steps=self.steps,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            min_learning_rate=self.learning_rate / 10,
            warmup_steps=max(1, self.steps // 10),
            weight_decay=0.0,
            data_seed=self.seed,
            eval_every=self.eval_every,
            eval_batches=64,  # every held-out conversation, in fixed batches
            checkpoint_every=0,
        )
        adapters = AdapterOptions(
            method=self.method,
            lora_rank=self.rank,
            lora_alpha=self.alpha,
            lora_targets=TARGET_SETS[self.target_set],
            lora_seed=self.seed,
        )
        return PostTrainOptions(
            data=self.data,
            validation_fraction=self.validation_fraction,
            training=training,
            adapters=adapters,
        )


def make_base(spec: BaseSpec, out_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Pretrain the base on the embedded corpus; returns its bundle and a description."""
    started = time.perf_counter()
    result = pretrain(spec.options(), out_dir, progress=io.StringIO())
    config = TransformerConfig.from_dict(read_bundle(result.bundle).config)
    model = DecoderOnlyTransformer(config)
    memory = weight_memory(model)
    described = {
        "spec": spec.__dict__,
        "artifact_id": result.artifact_id,
        "parameters": sum(p.size for _, p in model.named_parameters()),
        "linear_weights": memory.elements,
        "validation_loss": result.summary["validation_loss"],
        "seconds": round(time.perf_counter() - started, 2),
    }
    return result.bundle, described


def bundle_loss(bundle: Path, examples: Sequence[Any], batch_size: int = 16) -> float:
    """Mean response-token loss of ``bundle`` over ``examples`` (loss-token weighted)."""
    stored = read_bundle(bundle, copy=True)
    model = DecoderOnlyTransformer(TransformerConfig.from_dict(stored.config))
    model.load_state_dict(stored.tensors)
    model.eval()
    tokenizer = tokenizer_from_state(stored.tokenizer_state)
    t = model.config.context_length
    encoded = encode_examples(tokenizer, list(examples), t, allow_empty=True)
    batches = fixed_examples(
        encoded.sequences, encoded.weights, t, batch_size, 1 << 16, tokenizer.eos_id
    )
    total, count = 0.0, 0
    with no_grad():
        for batch in batches:
            n = batch.loss_tokens
            if n:
                logits = model(rt.from_numpy(batch.inputs))
                targets, weights = rt.from_numpy(batch.targets), rt.from_numpy(batch.weights)
                total += float(masked_cross_entropy(logits, targets, weights).item()) * n
                count += n
    return total / max(count, 1)


def post_train_record(spec: RunSpec, base: Path, work: Path) -> dict[str, Any]:
    """Run ``spec`` from ``base`` and measure it: curves, the final held-out loss, the
    child bundle's loss on every training conversation (and, as a cross-check, on the
    held-out ones), the gap between them, trainable parameters, base-weight memory
    and the median and fastest step times."""
    out = work / f"{spec.method}-r{spec.rank}-{spec.target_set}-s{spec.seed}"
    result = post_train(spec.options(), base, out, progress=io.StringIO())
    history = result.history
    train = [(m.step, m.loss) for m in history if m.phase == "train"]
    validation = [(m.step, m.loss) for m in history if m.phase == "validation"]
    seconds = [m.seconds for m in history if m.phase == "train"]
    step_times = np.diff([0.0, *seconds])
    examples = load_instructions(spec.data)
    train_examples, held_out = split_examples(examples, spec.validation_fraction)
    train_loss = bundle_loss(result.bundle, train_examples)
    held_out_loss = bundle_loss(result.bundle, held_out)
    summary = result.summary
    stored = read_bundle(base)
    model = DecoderOnlyTransformer(TransformerConfig.from_dict(stored.config))
    total = sum(p.size for _, p in model.named_parameters())
    memory = weight_memory(model)
    base_bytes = summary["nf4"]["stored_bytes"] if spec.method == "qlora" else memory.float32_bytes
    record = {
        "method": spec.method,
        "seed": spec.seed,
        "rank": spec.rank if spec.method != "full" else None,
        "alpha": spec.alpha if spec.method != "full" else None,
        "target_set": spec.target_set if spec.method != "full" else None,
        "learning_rate": spec.learning_rate,
        "steps": spec.steps,
        "batch_size": spec.batch_size,
        "trainable_parameters": summary.get("trainable_parameters", total),
        "total_parameters": total,
        "base_weight_bytes": int(base_bytes),
        "base_weight_float32_bytes": int(memory.float32_bytes),
        "validation_loss": validation[-1][1],
        "fixed_train_loss": train_loss,
        "bundle_validation_loss": held_out_loss,
        "generalization_gap": validation[-1][1] - train_loss,
        "step_seconds": statistics.median(step_times.tolist()[1:] or step_times.tolist()),
        "step_seconds_min": float(step_times.min()),
        "train_curve": train,
        "validation_curve": validation,
        "examples": {"train": summary["examples"], "validation": summary["validation_examples"]},
        "artifact_id": result.artifact_id,
        **spec.extra,
    }
    return record


def environment() -> dict[str, Any]:
    """Where the records were measured (no timing-sensitive claims beyond this)."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "rayon_threads": os.environ.get("RAYON_NUM_THREADS"),
        "riftco_train": _version("riftco-train"),
        "riftco_tensor": _version("riftco-tensor"),
    }


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def write_json(path: Path, document: Any) -> None:
    """Write ``document`` as indented JSON, atomically (NaN refused)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False)
    write_bytes_atomic(path, (text + "\n").encode("utf-8"))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def parse_list(text: str, kind: type = int) -> list[Any]:
    """``"1,2,4"`` as ``[1, 2, 4]``."""
    return [kind(part) for part in text.split(",") if part.strip()]


def use_one_thread() -> None:
    """Keep the kernels on one thread unless the caller chose otherwise."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
