"""The programmed decoder: a lowered program beside learned attention and feed-forward
branches, inside an ordinary trainable decoder.

    h = token_embedding(ids) + position_embedding(positions)
    per layer i:  x = norm_i(h);  h = h + sum of the layer's branches applied to x
    logits = head(final_norm(h))

The program branch reads each argument's span of ``x`` through its own learned,
bias-free input projection (``d_model -> width`` at each position, the positions'
results concatenated into the argument's logical vector), runs the lowered program,
splits its output over the output span and maps each block back through a learned
output projection (``width -> d_model``); every other position gets zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import riftco.autograd as ag
import riftco.tensor as rt
from riftco.autograd import Variable
from riftco.cajal.compiler import CompiledProgram
from riftco.cajal.lowering import LoweredProgram, lower
from riftco.cajal.programmed.config import ProgrammedConfig, ProgrammedConfigError
from riftco.cajal.programmed.interventions import ForwardPlan, Intervention
from riftco.cajal.syntax import print_expression, print_type
from riftco.nn import (
    CausalSelfAttention,
    Embedding,
    FeedForward,
    LayerNorm,
    Linear,
    Module,
    ModuleList,
    TransformerConfig,
)
from riftco.tensor import Backend, Tensor


@dataclass(frozen=True)
class ProgrammedOutput:
    """A forward's logits ``[B, T, vocab]`` and the traces it was asked to capture."""

    logits: Variable
    traces: dict[str, np.ndarray]


def program_record(program: CompiledProgram) -> dict[str, str]:
    """What identifies a program: its source text, its context, its output type and its
    map's digest."""
    return {
        "source": print_expression(program.expression),
        "context": ", ".join(f"{name}: {print_type(t)}" for name, t in program.context),
        "output_type": print_type(program.output_type),
        "map_sha256": program.map.digest(),
    }


class ProgramBranch(Module):
    """Input projections, the lowered program, the output projection."""

    def __init__(
        self,
        config: ProgrammedConfig,
        program: CompiledProgram,
        *,
        seed: int,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        names = [name for name, _ in program.context]
        dims = program.map.input_dimensions
        if len(config.inputs) != len(names):
            raise ProgrammedConfigError(
                f"the program takes {len(names)} arguments {names}; the config places "
                f"{len(config.inputs)} input spans"
            )
        for name, dim, span in zip(names, dims, config.inputs):
            if span.dimension != dim:
                raise ProgrammedConfigError(
                    f"argument {name!r} has dimension {dim}; its span holds {span.length} "
                    f"positions x width {span.width} = {span.dimension}"
                )
        out = config.output
        assert out is not None
        if out.dimension != program.map.output_dimension:
            raise ProgrammedConfigError(
                f"the program's output has dimension {program.map.output_dimension}; the "
                f"output span holds {out.length} x {out.width} = {out.dimension}"
            )
        self.names, self.spans, self.output_span = names, config.inputs, out
        self.record = program_record(program)
        self.input_projections = ModuleList(
            Linear(config.d_model, span.width, bias=False, seed=seed + 2 * i, backend=backend)
            for i, span in enumerate(config.inputs)
        )
        self.program: LoweredProgram = lower(
            program,
            config.strategy,
            trainable=config.trainable_program,
            init=config.program_init,
            seed=config.program_seed,
            backend=backend,
        )
        self.output_projection = Linear(
            out.width, config.d_model, bias=False, seed=seed + 101, backend=backend
        )

    def forward(self, x: Any, plan: ForwardPlan | None = None) -> Variable:
        plan = plan or ForwardPlan([], [], False, (), ())
        batch, steps, width = x.shape
        arguments = []
        for name, span, projection in zip(self.names, self.spans, self.input_projections):
            part = projection(ag.narrow(x, 1, span.start, span.length))
            arguments.append(
                plan.apply(f"program.input.{name}", ag.reshape(part, batch, span.dimension))
            )
        result = plan.apply("program.output", self.program(*arguments))
        out = self.output_span
        blocks = self.output_projection(ag.reshape(result, batch, out.length, out.width))
        backend = blocks.value.backend if isinstance(blocks, Variable) else blocks.backend
        pieces = []
        if out.start:
            pieces.append(rt.zeros((batch, out.start, width), backend=backend))
        pieces.append(blocks)
        if steps > out.stop:
            pieces.append(rt.zeros((batch, steps - out.stop, width), backend=backend))
        if len(pieces) == 1:
            return blocks if isinstance(blocks, Variable) else Variable(blocks)
        return ag.concatenate(pieces, axis=1)


class ProgrammedLayer(Module):
    def __init__(
        self,
        config: ProgrammedConfig,
        index: int,
        program: CompiledProgram | None,
        *,
        seed: int,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        self.index = index
        self.norm = LayerNorm(config.d_model, config.norm_eps, backend=backend)
        attention_config = TransformerConfig(
            vocab_size=config.vocab_size,
            context_length=config.context_length,
            d_model=config.d_model,
            n_layers=1,
            n_heads=config.heads,
            d_ff=max(config.d_ff, 1),
            attention=config.attention,
        )
        self.attention: ModuleList[CausalSelfAttention] = ModuleList()
        for j in range(config.attention_branches):
            branch = CausalSelfAttention(attention_config, backend=backend)
            _reseed(branch, seed + 10 * j)
            self.attention.append(branch)
        self.feed_forward = None
        if config.d_ff:
            self.feed_forward = FeedForward(config.d_model, config.d_ff, backend=backend)
            _reseed(self.feed_forward, seed + 500)
        self.program = None
        if program is not None and index == config.program_layer:
            self.program = ProgramBranch(config, program, seed=seed + 700, backend=backend)

    def branch_names(self) -> list[str]:
        names = [f"layer{self.index}.attention{j}" for j in range(len(self.attention))]
        if self.feed_forward is not None:
            names.append(f"layer{self.index}.feed_forward")
        if self.program is not None:
            names.append(f"layer{self.index}.program")
        return names

    def forward(self, h: Any, plan: ForwardPlan) -> Any:
        x = plan.apply(f"layer{self.index}.input", self.norm(h))
        for j, branch in enumerate(self.attention):
            name = f"layer{self.index}.attention{j}"
            if name not in plan.off:
                h = h + plan.apply(name, branch(x))
        if self.feed_forward is not None:
            name = f"layer{self.index}.feed_forward"
            if name not in plan.off:
                h = h + plan.apply(name, self.feed_forward(x))
        if self.program is not None:
            name = f"layer{self.index}.program"
            if name not in plan.off:
                h = h + plan.apply(name, self.program(x, plan))
        return plan.apply(f"layer{self.index}.residual", h)


class ProgrammedDecoder(Module):
    """A decoder hosting ``program`` (a checked, compiled program) at the spans of
    ``config``; ``program=None`` builds the same decoder without a program branch."""

    STATE_VERSION = 1

    def __init__(
        self,
        config: ProgrammedConfig,
        program: CompiledProgram | None = None,
        *,
        seed: int = 0,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        if config.has_program and program is None:
            raise ProgrammedConfigError("the config places a program; pass it as program=")
        if program is not None and not config.has_program:
            raise ProgrammedConfigError("a program needs input spans and an output span")
        self.config, self.seed = config, seed
        d = config.d_model
        std = config.embedding_std
        self.token_embedding = Embedding(config.vocab_size, d, seed=seed, std=std, backend=backend)
        self.position_embedding = Embedding(
            config.context_length, d, seed=seed + 1, std=std, backend=backend
        )
        self.layers = ModuleList(
            ProgrammedLayer(config, i, program, seed=seed + 1000 * (i + 1), backend=backend)
            for i in range(config.n_layers)
        )
        self.final_norm = LayerNorm(d, config.norm_eps, backend=backend)
        self.head = Linear(d, config.vocab_size, bias=False, seed=seed + 3, backend=backend)

    # -- facts ----------------------------------------------------------------------
    @property
    def program_branch(self) -> ProgramBranch | None:
        return self.layers[self.config.program_layer].program if self.config.has_program else None

    @property
    def program_record(self) -> dict[str, str] | None:
        branch = self.program_branch
        return None if branch is None else dict(branch.record)

    def branch_names(self) -> list[str]:
        return [name for layer in self.layers for name in layer.branch_names()]

    def site_names(self) -> list[str]:
        sites = ["embedding"]
        for layer in self.layers:
            sites += [f"layer{layer.index}.input", *layer.branch_names()]
            sites.append(f"layer{layer.index}.residual")
        branch = self.program_branch
        if branch is not None:
            sites += [f"program.input.{name}" for name in branch.names] + ["program.output"]
        return [*sites, "final"]

    # -- forward --------------------------------------------------------------------
    def _ids(self, ids: Any) -> Tensor:
        backend = self.head.weight.value.backend
        t = ids.value if isinstance(ids, Variable) else ids
        if not isinstance(t, Tensor):
            t = rt.from_numpy(np.asarray(t, dtype=np.int64), backend=backend)
        if t.ndim != 2:
            raise ProgrammedConfigError(f"ids: expected [batch, time], found shape {list(t.shape)}")
        steps = t.shape[1]
        if steps > self.config.context_length:
            raise ProgrammedConfigError(
                f"ids: {steps} positions exceed the context of {self.config.context_length}"
            )
        out = self.config.output
        if out is not None and steps < out.stop:
            raise ProgrammedConfigError(
                f"ids: {steps} positions; the program writes up to position {out.stop - 1}"
            )
        return t

    def run(
        self,
        ids: Any,
        *,
        capture: bool | Iterable[str] = (),
        interventions: Sequence[Intervention] = (),
        off: Iterable[str] = (),
    ) -> ProgrammedOutput:
        """Logits for int64 ``ids [B, T]``, with the traces named in ``capture`` (True:
        every site), after ``interventions``, with the branches in ``off`` switched off.
        Capturing never changes the result."""
        t = self._ids(ids)
        plan = ForwardPlan(self.site_names(), self.branch_names(), capture, interventions, off)
        steps = t.shape[1]
        positions = rt.arange(steps, dtype=rt.int64, backend=t.backend)
        h = self.token_embedding(t) + self.position_embedding(positions)
        h = plan.apply("embedding", h if isinstance(h, Variable) else Variable(h))
        for layer in self.layers:
            h = layer(h, plan)
        final = plan.apply("final", self.final_norm(h))
        logits = self.head(final)
        return ProgrammedOutput(
            logits if isinstance(logits, Variable) else Variable(logits), plan.traces
        )

    def forward(self, ids: Any) -> Variable:
        return self.run(ids).logits


def _reseed(module: Module, seed: int) -> None:
    """Re-draw a branch's weights from its own seed (so parallel branches differ) and
    zero its biases."""
    for k, (_, p) in enumerate(module.named_parameters()):
        shape, backend = p.value.shape, p.value.backend
        if len(shape) == 2:
            bound = 1.0 / float(np.sqrt(shape[-1]))
            p.value.assign_(rt.uniform(shape, -bound, bound, seed=seed + k, backend=backend))
        else:
            p.value.assign_(rt.zeros(shape, backend=backend))
