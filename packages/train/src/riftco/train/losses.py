"""The training loss and the baseline it is judged against.

A batch's ``weights`` are 1 where a target counts and 0 where it does not (padding,
and prompt tokens when post-training on responses only).
"""

from __future__ import annotations

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Variable
from riftco.nn import cross_entropy


def masked_cross_entropy(logits: Variable, targets: rt.Tensor, weights: rt.Tensor) -> Variable:
    """Mean cross-entropy over the targets whose weight is non-zero (riftco.nn's fused
    kernel); a masked target adds exactly 0 to the loss and to the gradient."""
    return cross_entropy(logits, targets, mask=weights > 0)


def unigram_loss(train_ids: np.ndarray, validation_ids: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy (nats per token) of ``validation_ids`` under the training split's
    unigram distribution with add-one smoothing: the loss a model that ignores context
    would reach, the baseline a trained model must beat."""
    counts = np.bincount(np.asarray(train_ids, dtype=np.int64), minlength=vocab_size) + 1.0
    log_p = np.log(counts / counts.sum())
    return float(-log_p[np.asarray(validation_ids, dtype=np.int64)].mean())


__all__ = ["masked_cross_entropy", "unigram_loss"]
