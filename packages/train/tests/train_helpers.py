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
