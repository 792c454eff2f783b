"""Adam and AdamW: global-norm clipping, then one fused, all-or-nothing update.

A step gathers the parameters that have gradients, computes the global gradient
norm (overflow-safe, see ``clipping``), derives the clip scale, and hands every
parameter, gradient and moment to ``riftco.tensor.adam_update_`` (the backend's
``adam_update`` capability) in one call. The backend writes nothing unless every new parameter and moment is
finite, so a failed step leaves parameters, moments and step counts as they were.
``measured_step`` does the same in one device read where the backend has
``clipped_adam_update`` (the norm, the scale and the update all on the device).
The arithmetic follows ``torch.optim.Adam`` / ``torch.optim.AdamW``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

import riftco.tensor as rt
from riftco.optim.clipping import clip_scale, global_grad_norm, norm_and_values, norm_from_sums
from riftco.optim.errors import (
    NonFiniteUpdate,
    OptimizerConfigError,
    OptimizerStateError,
    ParameterError,
)
from riftco.optim.groups import GROUP_KEYS, check_hyperparameters, check_lr, make_groups
from riftco.optim.moments import Moments
from riftco.tensor import BackendMismatch, DType, ShapeError, Tensor

#: Bumped when the layout of ``state_dict()`` changes.
STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class AdamStepStats:
    """What one successful step did."""

    #: The optimizer's step count after this step (the first step is 1).
    step: int
    #: The global L2 norm of the gradients before clipping.
    gradient_norm: float
    #: The factor the gradients were multiplied by (1.0 when not clipped).
    clip_scale: float


@dataclass(slots=True)
class _ParamState:
    step: int
    moments: Moments


@dataclass(slots=True)
class _Entry:
    index: int
    group: dict[str, Any]
    param: Any
    grad: Tensor


def _check_max_norm(max_grad_norm: Any) -> float | None:
    if max_grad_norm is None:
        return None
    if not (
        isinstance(max_grad_norm, (int, float))
        and not isinstance(max_grad_norm, bool)
        and math.isfinite(max_grad_norm)
        and max_grad_norm > 0
    ):
        raise OptimizerConfigError(
            f"max_grad_norm must be a positive number or None, found {max_grad_norm!r}"
        )
    return float(max_grad_norm)


def _label(index: int, param: Any) -> str:
    name = getattr(param, "name", None)
    shape = getattr(param.value, "shape", "?")
    return f"parameter {index}" + (f" {name!r}" if name else "") + f" (shape {shape})"


class Adam:
    """Adam (Kingma & Ba) with optional L2 weight decay and global-norm clipping.

    ``params`` is an iterable of parameters (objects with a float32 ``value``
    Tensor and a ``grad`` Tensor or None, such as ``riftco.autograd.Parameter``)
    or of group dicts ``{"params": [...], "lr": ..., "weight_decay": ...}`` whose
    missing keys take the constructor's values. ``max_grad_norm=None`` turns
    clipping off. ``paged=True`` keeps each moment in pages of at most
    ``page_size`` elements instead of one block; results are bit-identical.
    Parameters without a gradient are skipped (their moments and step stay).
    """

    decoupled: ClassVar[bool] = False
    kind: ClassVar[str] = "adam"

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        max_grad_norm: float | None = 1.0,
        *,
        paged: bool = False,
        page_size: int = 4096,
    ):
        where = type(self).__name__
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        self.defaults = check_hyperparameters(where, defaults)
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise OptimizerConfigError(
                f"{where}: page_size must be a positive int, found {page_size!r}"
            )
        self.max_grad_norm = max_grad_norm
        self.paged = bool(paged)
        self.page_size = page_size
        self.param_groups: list[dict[str, Any]] = make_groups(where, params, self.defaults)
        self._params: list[Any] = [p for g in self.param_groups for p in g["params"]]
        self._state: dict[int, _ParamState] = {}
        self._step = 0

    # -- facts ----------------------------------------------------------------
    @property
    def max_grad_norm(self) -> float | None:
        """The clipping threshold of the global gradient norm (None: no clipping)."""
        return self._max_grad_norm

    @max_grad_norm.setter
    def max_grad_norm(self, value: float | None) -> None:
        self._max_grad_norm = _check_max_norm(value)

    @property
    def step_count(self) -> int:
        """Successful steps so far."""
        return self._step

    def __repr__(self) -> str:
        groups = ", ".join(
            f"[{len(g['params'])} params lr={g['lr']} wd={g['weight_decay']}]"
            for g in self.param_groups
        )
        layout = f"paged({self.page_size})" if self.paged else "contiguous"
        return (
            f"{type(self).__name__}(step={self._step}, max_grad_norm={self.max_grad_norm}, "
            f"moments={layout}, groups={groups})"
        )

    # -- training -------------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every group (what a schedule drives)."""
        lr = check_lr(f"{type(self).__name__}.set_lr", lr)
        for group in self.param_groups:
            group["lr"] = lr

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (``grad`` becomes None)."""
        for p in self._params:
            p.grad = None

    def measure(self, values: Sequence[Tensor] = ()) -> tuple[float, list[float]]:
        """The global norm of the current gradients, and the host values of the
        one-element tensors ``values`` (a step's loss, say), in one device read.

        Hand the norm to ``step(gradient_norm=)`` so the step does not read it again.
        """
        return norm_and_values((e.grad for e in self._gather()), values)

    def step(self, gradient_norm: float | None = None) -> AdamStepStats:
        """Clip and apply the gradients; all-or-nothing.

        A step in which no parameter has a gradient changes nothing but the step count.
        ``gradient_norm`` is the norm ``measure()`` returned for these same gradients;
        without it the step computes it (one device read).

        Raises ``NonFiniteUpdate`` (leaving everything unchanged) when the gradient
        norm or any new parameter or moment value would not be finite.
        """
        entries = self._gather()
        if gradient_norm is None:
            norm = global_grad_norm(e.grad for e in entries)
        elif isinstance(gradient_norm, (int, float)) and not isinstance(gradient_norm, bool):
            norm = float(gradient_norm)
        else:
            raise OptimizerConfigError(
                f"{type(self).__name__}.step: gradient_norm must be a number or None, "
                f"found {gradient_norm!r}"[:300]
            )
        if not math.isfinite(norm):
            raise NonFiniteUpdate(
                f"{type(self).__name__} step {self._step + 1}: the gradient norm is {norm}; "
                "parameters, moments and step count are unchanged"
            )
        scale = clip_scale(norm, self.max_grad_norm)
        if entries:
            self._apply(entries, scale)
        self._step += 1
        return AdamStepStats(self._step, norm, scale)

    def measured_step(
        self, values: Sequence[Tensor] = ()
    ) -> tuple[AdamStepStats | None, list[float]]:
        """``measure(values)`` then ``step()``, with one device read in all.

        Where the backend has ``clipped_adam_update`` (API 1.8) the norm, the clip
        scale and the update run on the device before anything is read, and the
        sums, ``values`` and the outcome come back together; elsewhere this is
        ``measure`` and ``step``. When a value is not finite nothing is updated (not
        even the step count) and the stats are None: the caller decides (a trainer
        stops on a non-finite loss). Otherwise it is ``step()``: the same stats, the
        same bits, the same ``NonFiniteUpdate``.
        """
        entries = self._gather()
        for x in values:
            if not isinstance(x, Tensor) or x.size != 1:
                raise ShapeError(
                    f"{type(self).__name__}.measured_step: values must be one-element "
                    f"tensors, found {getattr(x, 'shape', type(x).__name__)}"
                )
        backend = entries[0].param.value.backend if entries else None
        if backend is None or "clipped_adam_update" not in backend.capabilities():
            norm, read = self.measure(values)
            if not all(math.isfinite(x) for x in read):
                return None, read
            return self.step(gradient_norm=norm), read
        states = self._states(entries)
        result = rt.clipped_adam_update_(
            [e.param.value for e in entries],
            [e.grad for e in entries],
            [s.moments.m for s in states],
            [s.moments.v for s in states],
            **self._hyperparameters(entries, states),
            max_grad_norm=self.max_grad_norm,
            values=list(values),
            page_size=self.page_size if self.paged else None,
        )
        if not all(math.isfinite(x) for x in result.values):
            return None, result.values
        if not result.applied and result.bad is None:
            # A sum the device would not take (overflowed, underflowed, not finite):
            # the norm as step() computes it, then step()'s own update.
            norm = norm_from_sums([e.grad for e in entries], result.sums)
            return self.step(gradient_norm=norm), result.values
        # Every sum was normal or exactly zero: the norm the device clipped with.
        norm = math.sqrt(math.fsum(result.sums))
        if result.bad is not None:
            self._refuse(entries[result.bad])
        self._commit(entries, states)
        self._step += 1
        return AdamStepStats(self._step, norm, clip_scale(norm, self.max_grad_norm)), result.values

    def _gather(self) -> list[_Entry]:
        entries, backend, index = [], None, -1
        for group in self.param_groups:
            for p in group["params"]:
                index += 1
                grad, value = p.grad, p.value
                if grad is None:
                    continue
                if not isinstance(grad, Tensor):
                    raise ParameterError(
                        f"{type(self).__name__}: {_label(index, p)} has a grad of type "
                        f"{type(grad).__name__}, expected a Tensor"
                    )
                if grad.shape != value.shape or grad.dtype is not DType.float32:
                    raise ShapeError(
                        f"{type(self).__name__}: {_label(index, p)} has a gradient of shape "
                        f"{grad.shape} {grad.dtype.value}; expected {value.shape} float32"
                    )
                backend = backend or value.backend
                for t in (value, grad):
                    if t.backend is not backend and t.backend.name != backend.name:
                        raise BackendMismatch(
                            f"{type(self).__name__}: {_label(index, p)} has tensors on "
                            f"{t.backend.name}, other parameters are on {backend.name}"
                        )
                entries.append(_Entry(index, group, p, grad))
        return entries

    def _states(self, entries: list[_Entry]) -> list[_ParamState]:
        backend = entries[0].param.value.backend
        page_size = self.page_size if self.paged else None
        states = []
        for e in entries:
            value = e.param.value
            old = self._state.get(e.index)
            if old is None:
                old = _ParamState(0, Moments.zeros(value.shape, backend, page_size))
            elif old.moments.shape != value.shape:
                raise ShapeError(
                    f"{type(self).__name__}: {_label(e.index, e.param)} has moments of shape "
                    f"{old.moments.shape}; was the parameter replaced?"
                )
            elif old.moments.backend.name != backend.name:
                raise BackendMismatch(
                    f"{type(self).__name__}: {_label(e.index, e.param)} lives on "
                    f"{backend.name}, its moments on {old.moments.backend.name}; "
                    "move parameters before the first step or reload the optimizer state"
                )
            states.append(old)
        return states

    def _hyperparameters(self, entries: list[_Entry], states: list[_ParamState]) -> dict[str, Any]:
        return dict(
            lr=[float(e.group["lr"]) for e in entries],
            beta1=[float(e.group["betas"][0]) for e in entries],
            beta2=[float(e.group["betas"][1]) for e in entries],
            eps=[float(e.group["eps"]) for e in entries],
            weight_decay=[float(e.group["weight_decay"]) for e in entries],
            decoupled=self.decoupled,
            step=[s.step + 1 for s in states],
        )

    def _refuse(self, e: _Entry) -> None:
        raise NonFiniteUpdate(
            f"{type(self).__name__} step {self._step + 1}: the update of "
            f"{_label(e.index, e.param)} is not finite; parameters, moments and step "
            "count are unchanged",
            parameter=e.index,
        )

    def _commit(self, entries: list[_Entry], states: list[_ParamState]) -> None:
        for e, s in zip(entries, states):
            self._state[e.index] = _ParamState(s.step + 1, s.moments)

    def _apply(self, entries: list[_Entry], scale: float) -> None:
        states = self._states(entries)
        bad = rt.adam_update_(
            [e.param.value for e in entries],
            [e.grad for e in entries],
            [s.moments.m for s in states],
            [s.moments.v for s in states],
            **self._hyperparameters(entries, states),
            grad_scale=scale,
            page_size=self.page_size if self.paged else None,
        )
        if bad is not None:
            self._refuse(entries[bad])
        self._commit(entries, states)

    # -- state ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs: hyperparameters, step counts and moments.

        Values are plain Python numbers, strings, lists and float32 numpy arrays
        (copies) shaped like their parameters; parameters are referred to by their
        position across groups.
        """
        groups, start = [], 0
        for g in self.param_groups:
            n = len(g["params"])
            groups.append(
                {
                    "lr": g["lr"],
                    "betas": list(g["betas"]),
                    "eps": g["eps"],
                    "weight_decay": g["weight_decay"],
                    "params": list(range(start, start + n)),
                }
            )
            start += n
        state = {}
        for index in sorted(self._state):
            s = self._state[index]
            m, v = s.moments.arrays()
            state[index] = {"step": s.step, "exp_avg": m, "exp_avg_sq": v}
        return {
            "version": STATE_VERSION,
            "kind": self.kind,
            "step": self._step,
            "max_grad_norm": self.max_grad_norm,
            "param_groups": groups,
            "state": state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()``; checks everything first and changes nothing on error."""
        where = f"{type(self).__name__}.load_state_dict"
        try:
            version, kind = state["version"], state["kind"]
            step, groups, entries = state["step"], state["param_groups"], state["state"]
            max_norm = state["max_grad_norm"]
        except (KeyError, TypeError) as exc:
            raise OptimizerStateError(f"{where}: not an optimizer state dict ({exc!r})") from None
        if version != STATE_VERSION:
            raise OptimizerStateError(
                f"{where}: state version {version!r}, expected {STATE_VERSION}"
            )
        if kind != self.kind:
            raise OptimizerStateError(
                f"{where}: state of a {kind!r} optimizer, this is {self.kind!r}"
            )
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise OptimizerStateError(f"{where}: step must be a non-negative int, found {step!r}")
        try:
            max_norm = _check_max_norm(max_norm)
        except ValueError as exc:
            raise OptimizerStateError(f"{where}: {exc}") from None
        if not isinstance(groups, Sequence) or len(groups) != len(self.param_groups):
            found = len(groups) if isinstance(groups, Sequence) else groups
            raise OptimizerStateError(
                f"{where}: {found} parameter groups in the state, {len(self.param_groups)} here"
            )
        new_groups, start = [], 0
        for i, (saved, ours) in enumerate(zip(groups, self.param_groups)):
            n = len(ours["params"])
            if list(saved.get("params", ())) != list(range(start, start + n)):
                raise OptimizerStateError(
                    f"{where}: group {i} holds parameters {saved.get('params')!r}, expected "
                    f"positions {start}..{start + n - 1}"
                )
            start += n
            try:
                values = check_hyperparameters(f"group {i}", {k: saved[k] for k in GROUP_KEYS})
            except (KeyError, TypeError, ValueError) as exc:
                raise OptimizerStateError(f"{where}: group {i}: {exc}") from None
            new_groups.append(values)
        new_state = {}
        page_size = self.page_size if self.paged else None
        for index, saved in dict(entries).items():
            new_state[index] = self._load_param(where, index, saved, step, page_size)
        for ours, values in zip(self.param_groups, new_groups):
            ours.update(values)
        self.max_grad_norm = max_norm
        self._step = step
        self._state = new_state

    def _load_param(self, where: str, index: Any, saved: Any, step: int, page_size: int | None):
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < len(self._params)
        ):
            raise OptimizerStateError(
                f"{where}: state for parameter {index!r}, which does not exist"
            )
        value = self._params[index].value
        try:
            p_step, m, v = saved["step"], saved["exp_avg"], saved["exp_avg_sq"]
        except (KeyError, TypeError) as exc:
            raise OptimizerStateError(f"{where}: parameter {index}: missing {exc}") from None
        if isinstance(p_step, bool) or not isinstance(p_step, int) or not 1 <= p_step:
            raise OptimizerStateError(f"{where}: parameter {index}: step {p_step!r} is not >= 1")
        arrays = []
        for name, a in (("exp_avg", m), ("exp_avg_sq", v)):
            a = np.asarray(a)
            if a.dtype != np.float32 or tuple(a.shape) != tuple(value.shape):
                raise OptimizerStateError(
                    f"{where}: {_label(index, self._params[index])}: {name} is {a.dtype} "
                    f"{tuple(a.shape)}, expected float32 {tuple(value.shape)}"
                )
            if not np.isfinite(a).all():
                raise OptimizerStateError(f"{where}: parameter {index}: {name} is not finite")
            arrays.append(np.ascontiguousarray(a))
        if (arrays[1] < 0).any():
            raise OptimizerStateError(f"{where}: parameter {index}: exp_avg_sq has negative values")
        return _ParamState(
            p_step, Moments.from_arrays(arrays[0], arrays[1], value.backend, page_size)
        )


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``:
    each parameter is first multiplied by ``1 - lr * weight_decay``. Use group dicts
    (see ``weight_decay_groups``) to keep norms, biases and embeddings undecayed."""

    decoupled: ClassVar[bool] = True
    kind: ClassVar[str] = "adamw"

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        max_grad_norm: float | None = 1.0,
        *,
        paged: bool = False,
        page_size: int = 4096,
    ):
        super().__init__(
            params, lr, betas, eps, weight_decay, max_grad_norm, paged=paged, page_size=page_size
        )


__all__ = ["STATE_VERSION", "Adam", "AdamStepStats", "AdamW"]
