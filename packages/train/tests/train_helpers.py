"""Shared test helpers: a tiny bigram model and a trainer around it."""

import numpy as np

import riftco.autograd as ag
import riftco.tensor as rt
from riftco.optim import AdamW, WarmupCosineSchedule
from riftco.train.batches import RandomWindows
from riftco.train.engine import Trainer


class Bigram:
    """The smallest language model: a table of next-token logits per token."""

    def __init__(self, vocab: int, seed: int = 0) -> None:
        self.table = ag.Parameter(rt.normal((vocab, vocab), std=0.02, seed=seed), name="table")

    def __call__(self, ids):
        return ag.embedding(self.table, ids)

    def named_parameters(self):
        return [("table", self.table)]


STREAM = (np.arange(4000) * 7 % 13).astype(np.int64)


def bigram_trainer(steps=30, stream=STREAM, data_seed=1, **options):
    model = Bigram(13)
    optimizer = AdamW([model.table], lr=0.05, weight_decay=0.01)
    schedule = WarmupCosineSchedule(0.05, 3, steps)
    source = RandomWindows(stream, 16, 4, seed=data_seed)
    return Trainer(
        model, optimizer, schedule, source, stage="pretraining", total_steps=steps, **options
    )


TEXT = (
    "The while statement is used for repeated execution as long as an expression is true.\n"
    "The for statement is used to iterate over the elements of a sequence.\n"
    "The if statement is used for conditional execution.\n"
) * 12


def tiny_pretrain_options(steps=12, **training):
    """A model and budget small enough for a test to train in well under a second."""
    from riftco.train.pretraining import ModelOptions, PretrainOptions
    from riftco.train.stage import TrainingOptions

    base = dict(
        steps=steps,
        batch_size=4,
        learning_rate=1e-2,
        min_learning_rate=1e-3,
        warmup_steps=2,
        eval_every=4,
        eval_batches=2,
        checkpoint_every=0,
    )
    base.update(training)
    return PretrainOptions(
        tokenizer="byte",
        validation_fraction=0.2,
        model=ModelOptions(context_length=16, d_model=16, n_layers=1, n_heads=2, d_ff=32),
        training=TrainingOptions(**base),
    )


def write_corpus(folder):
    path = folder / "corpus.txt"
    path.write_text(TEXT)
    return path


#: The capabilities `restricted_backend` implements (tests set it, then register it).
RESTRICTED_TO: tuple[str, ...] = ()


def restricted_backend():
    """Entry-point factory: the CPU backend with only RESTRICTED_TO implemented; every other
    capability is Backend's own method, which raises CapabilityMissing when called."""
    import riftco.tensor as rt
    from riftco.tensor.cpu import CpuBackend

    removed = {n: getattr(rt.Backend, n) for n in rt.CAPABILITIES if n not in RESTRICTED_TO}
    return type("Restricted", (CpuBackend,), {"name": "restricted", **removed})()
