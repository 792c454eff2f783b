"""The training loss: cross-entropy weighted per target token.

``weights`` is 1 where a target counts and 0 where it does not (padding, and prompt
tokens when post-training on responses only). A zero weight removes a token from
the loss and from the gradient exactly: its log-probability is multiplied by 0.
"""

from __future__ import annotations

import numpy as np

import riftco.autograd as ag
import riftco.tensor as rt
from riftco.autograd import Variable
from riftco.train.errors import TrainError


def weighted_cross_entropy(logits: Variable, targets: rt.Tensor, weights: rt.Tensor) -> Variable:
    """``-sum(w * log p(target)) / sum(w)`` over ``[B, T]`` targets, from ``[B, T, V]`` logits."""
    b, t, _ = logits.shape
    total = float(np.asarray(weights.numpy(), dtype=np.float64).sum())
    if total <= 0:
        raise TrainError("the batch has no target tokens to learn (every weight is 0)")
    log_probs = ag.log_softmax(logits, axis=-1)
    picked = ag.gather(log_probs, 2, targets.reshape((b, t, 1))).reshape((b, t))
    return ag.sum(picked * weights) * (-1.0 / total)


def unigram_loss(train_ids: np.ndarray, validation_ids: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy (nats per token) of ``validation_ids`` under the training split's
    unigram distribution with add-one smoothing: the loss a model that ignores context
    would reach, the baseline a trained model must beat."""
    counts = np.bincount(np.asarray(train_ids, dtype=np.int64), minlength=vocab_size) + 1.0
    log_p = np.log(counts / counts.sum())
    return float(-log_p[np.asarray(validation_ids, dtype=np.int64)].mean())


__all__ = ["unigram_loss", "weighted_cross_entropy"]
