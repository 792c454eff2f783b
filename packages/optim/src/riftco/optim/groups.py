"""Parameter groups: which parameters share which hyperparameters."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from riftco.optim.errors import OptimizerConfigError, ParameterError
from riftco.tensor import DType, DTypeError, Tensor

#: The hyperparameters a group may set; missing ones take the optimizer's values.
GROUP_KEYS = ("lr", "betas", "eps", "weight_decay")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_lr(where: str, lr: Any) -> float:
    if not (_finite(lr) and lr >= 0):
        raise OptimizerConfigError(
            f"{where}: lr must be a finite non-negative number, found {lr!r}"
        )
    return float(lr)


def check_hyperparameters(where: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every key of GROUP_KEYS validated (betas as a float pair)."""
    lr, betas, eps, weight_decay = (values[k] for k in GROUP_KEYS)
    check_lr(where, lr)
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise OptimizerConfigError(f"{where}: betas must be a pair (beta1, beta2), found {betas!r}")
    for name, b in zip(("beta1", "beta2"), betas):
        if not (_finite(b) and 0.0 <= b < 1.0):
            raise OptimizerConfigError(f"{where}: {name} must lie in [0, 1), found {b!r}")
    if not (_finite(eps) and eps >= 0):
        raise OptimizerConfigError(
            f"{where}: eps must be a finite non-negative number, found {eps!r}"
        )
    if not (_finite(weight_decay) and weight_decay >= 0):
        raise OptimizerConfigError(
            f"{where}: weight_decay must be a finite non-negative number, found {weight_decay!r}"
        )
    return {**values, "betas": (float(betas[0]), float(betas[1]))}


def make_groups(
    where: str, params: Iterable[Any], defaults: dict[str, Any]
) -> list[dict[str, Any]]:
    """Group dicts (``params`` plus every hyperparameter) from parameters or group specs."""
    items = list(params)
    if items and all(isinstance(x, dict) for x in items):
        specs = items
    elif any(isinstance(x, dict) for x in items):
        raise ParameterError(f"{where}: expected parameters or group dicts, found a mix")
    else:
        specs = [{"params": items}]
    groups: list[dict[str, Any]] = []
    seen: set[int] = set()
    for i, spec in enumerate(specs):
        unknown = set(spec) - {"params", *GROUP_KEYS}
        if unknown or "params" not in spec:
            raise OptimizerConfigError(
                f"{where}: group {i} needs 'params' and may set {', '.join(GROUP_KEYS)}; "
                f"found keys {sorted(spec)}"
            )
        values = {**defaults, **{k: v for k, v in spec.items() if k != "params"}}
        values = check_hyperparameters(f"{where} group {i}", values)
        members = list(spec["params"])
        for p in members:
            _check_parameter(where, p)
            if id(p) in seen or id(p.value) in seen:
                raise OptimizerConfigError(
                    f"{where}: a parameter (or its value tensor) appears twice"
                )
            seen.update((id(p), id(p.value)))
        groups.append({"params": members, **values})
    return groups


def _check_parameter(where: str, p: Any) -> None:
    value = getattr(p, "value", None)
    if not isinstance(value, Tensor) or not hasattr(p, "grad"):
        raise ParameterError(
            f"{where}: expected parameters with a Tensor 'value' and a 'grad' "
            f"(riftco.autograd.Parameter), found {type(p).__name__}"
        )
    if value.dtype is not DType.float32:
        raise DTypeError(
            f"{where}: parameter values must be float32, found {value.dtype.value} "
            f"with shape {value.shape}"
        )


def weight_decay_groups(
    named_parameters: Iterable[tuple[str, Any]],
    weight_decay: float,
    *,
    exclude_embeddings: bool = True,
) -> list[dict[str, Any]]:
    """Two groups for AdamW: parameters to decay, and the rest with ``weight_decay=0``.

    Parameters with fewer than two axes (norm weights, biases) are never decayed;
    with ``exclude_embeddings``, neither is any whose name contains "embedding".
    """
    decay: list[Any] = []
    keep: list[Any] = []
    for name, p in named_parameters:
        skip = p.value.ndim < 2 or (exclude_embeddings and "embedding" in name)
        (keep if skip else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]


__all__ = ["GROUP_KEYS", "check_hyperparameters", "check_lr", "make_groups", "weight_decay_groups"]
