"""``lower``: analyze a map, then build the module its plan names."""

from __future__ import annotations

import math

import numpy as np

from riftco.cajal.compiler import CompiledProgram
from riftco.cajal.errors import LoweringError
from riftco.cajal.lowering.modules import MODULES, LoweredProgram
from riftco.cajal.multilinear import MultilinearMap
from riftco.cajal.plan import DEFAULT_MAX_COEFFICIENTS, LoweringPlan, analyze
from riftco.tensor import Backend

INITS = ("map", "normal")


def lower(
    program: MultilinearMap | CompiledProgram,
    strategy: str = "auto",
    *,
    exact: bool = True,
    max_coefficients: int = DEFAULT_MAX_COEFFICIENTS,
    trainable: bool = False,
    init: str = "map",
    seed: int = 0,
    std: float | None = None,
    backend: str | Backend | None = None,
) -> LoweredProgram:
    """A module computing ``program``'s map, on ``backend``.

    The plan (``riftco.cajal.plan.analyze``) runs first, so an unsupported strategy, a
    map over ``max_coefficients`` or, with ``exact``, a map float32 would round is
    refused before any tensor exists. ``init="map"`` loads the map's coefficients;
    ``init="normal"`` draws a map of the same shape from N(0, std²) with PCG64(seed)
    (``std`` defaults to 1/sqrt(d_1 ... d_k)), which only makes sense ``trainable``.
    Coefficients are frozen unless ``trainable``.
    """
    source = program.map if isinstance(program, CompiledProgram) else program
    if init not in INITS:
        raise LoweringError(f"init: expected one of {list(INITS)}, found {init!r}")
    plan = analyze(
        source, strategy, exact=exact and init == "map", max_coefficients=max_coefficients
    )
    return build(plan, source, trainable=trainable, init=init, seed=seed, std=std, backend=backend)


def build(
    plan: LoweringPlan,
    source: MultilinearMap,
    *,
    trainable: bool = False,
    init: str = "map",
    seed: int = 0,
    std: float | None = None,
    backend: str | Backend | None = None,
) -> LoweredProgram:
    """The module of an existing ``plan`` for ``source`` (which must have its shape)."""
    if plan.shape != source.shape:
        raise LoweringError(
            f"build: the plan is for shape {list(plan.shape)}, the map has {list(source.shape)}"
        )
    if init == "map":
        tensor = np.array(source.data, dtype=np.float64).reshape(source.shape)
    elif init == "normal":
        scale = 1.0 / math.sqrt(math.prod(source.shape[1:])) if std is None else float(std)
        if not (math.isfinite(scale) and scale >= 0):
            raise LoweringError(f"std: expected a finite value >= 0, found {std!r}")
        rng = np.random.Generator(np.random.PCG64(seed))
        tensor = rng.normal(0.0, scale, size=source.shape)
    else:
        raise LoweringError(f"init: expected one of {list(INITS)}, found {init!r}")
    return MODULES[plan.strategy](
        plan,
        tensor,
        trainable=trainable,
        init=init,
        seed=seed,
        map_digest=source.digest(),
        backend=backend,
    )
