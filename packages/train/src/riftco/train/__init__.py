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
from riftco.train.checkpoint import Checkpoint, read_checkpoint, restore, save_checkpoint
from riftco.train.corpus import (
    DEFAULT_CORPUS,
    Document,
    TextCorpus,
    default_corpus,
    load_text,
    split_corpus,
)
from riftco.train.distributed import DataParallel, DistributedError, SimulatedWorld, SingleProcess
from riftco.train.engine import Trainer
from riftco.train.errors import CheckpointError, DataError, ResumeMismatch, TrainError
from riftco.train.instructions import (
    DEFAULT_INSTRUCTIONS,
    ChatExample,
    Message,
    default_instructions,
    load_instructions,
    load_jsonl,
)
from riftco.train.losses import masked_cross_entropy, unigram_loss
from riftco.train.metrics import (
    MetricsLog,
    MovingAverage,
    ProgressBar,
    TrainingMetric,
    plot_loss_curve,
    read_metrics,
)
from riftco.train.original_checkpoint import (
    Continuation,
    OriginalCheckpoint,
    continue_original,
    read_original_checkpoint,
)
from riftco.train.post_training import PostTrainOptions, post_train
from riftco.train.pretraining import ModelOptions, PretrainOptions, pretrain
from riftco.train.stage import StageResult, TrainingOptions
from riftco.train.tokens import encode_examples, fit_tokenizer

__all__ = [
    "DEFAULT_CORPUS",
    "DEFAULT_INSTRUCTIONS",
    "Batch",
    "BatchSource",
    "ChatExample",
    "Checkpoint",
    "CheckpointError",
    "Continuation",
    "DataError",
    "DataParallel",
    "DistributedError",
    "Document",
    "DocumentWindows",
    "ExampleSampler",
    "Message",
    "MetricsLog",
    "ModelOptions",
    "MovingAverage",
    "OriginalCheckpoint",
    "PostTrainOptions",
    "PretrainOptions",
    "ProgressBar",
    "RandomWindows",
    "ResumeMismatch",
    "SimulatedWorld",
    "SingleProcess",
    "StageResult",
    "TextCorpus",
    "TrainError",
    "Trainer",
    "TrainingMetric",
    "TrainingOptions",
    "continue_original",
    "default_corpus",
    "default_instructions",
    "encode_examples",
    "fit_tokenizer",
    "fixed_examples",
    "fixed_windows",
    "load_instructions",
    "load_jsonl",
    "load_text",
    "masked_cross_entropy",
    "plot_loss_curve",
    "post_train",
    "pretrain",
    "read_checkpoint",
    "read_metrics",
    "read_original_checkpoint",
    "restore",
    "save_checkpoint",
    "split_corpus",
    "unigram_loss",
]
