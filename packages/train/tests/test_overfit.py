import numpy as np

import riftco.nn as nn
from riftco.optim import AdamW, ConstantSchedule
from riftco.train.batches import ExampleSampler
from riftco.train.engine import Trainer


def test_a_tiny_batch_is_learned_by_heart():
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 32, size=17) for _ in range(2)]
    config = nn.TransformerConfig(
        vocab_size=32, context_length=16, d_model=32, n_layers=1, n_heads=2, d_ff=64
    )
    model = nn.DecoderOnlyTransformer(config, seed=0)
    optimizer = AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    source = ExampleSampler(rows, 16, 2, seed=0)
    trainer = Trainer(
        model, optimizer, ConstantSchedule(1e-2), source, stage="pretraining", total_steps=150
    )
    trainer.run()
    losses = [m.loss for m in trainer.history]
    assert losses[0] > 3.0 and losses[-1] < 0.05
