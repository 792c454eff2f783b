"""riftco.train: data, batch sources, metrics, the training engine and its stages.

See the package README for the interface, the commands and the checkpoint format.
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.train.batches import (
    Batch,
    BatchSource,
    DocumentWindows,
    ExampleSampler,
    RandomWindows,
    fixed_examples,
    fixed_windows,
)
from riftco.train.corpus import (
    DEFAULT_CORPUS,
    Document,
    TextCorpus,
    default_corpus,
    load_text,
    split_corpus,
)
from riftco.train.errors import CheckpointError, DataError, ResumeMismatch, TrainError
from riftco.train.instructions import (
    DEFAULT_INSTRUCTIONS,
    ChatExample,
    Message,
    default_instructions,
    load_instructions,
    load_jsonl,
)
from riftco.train.metrics import (
    MetricsLog,
    MovingAverage,
    ProgressBar,
    TrainingMetric,
    plot_loss_curve,
    read_metrics,
)

__all__ = [
    "DEFAULT_CORPUS",
    "DEFAULT_INSTRUCTIONS",
    "Batch",
    "BatchSource",
    "ChatExample",
    "CheckpointError",
    "DataError",
    "Document",
    "DocumentWindows",
    "ExampleSampler",
    "Message",
    "MetricsLog",
    "MovingAverage",
    "ProgressBar",
    "RandomWindows",
    "ResumeMismatch",
    "TextCorpus",
    "TrainError",
    "TrainingMetric",
    "default_corpus",
    "default_instructions",
    "fixed_examples",
    "fixed_windows",
    "load_instructions",
    "load_jsonl",
    "load_text",
    "plot_loss_curve",
    "read_metrics",
    "split_corpus",
]
