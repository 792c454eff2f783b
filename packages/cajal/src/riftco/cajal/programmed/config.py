"""The programmed decoder's configuration: sizes, branches, and where the program sits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from riftco.cajal.errors import CajalError
from riftco.cajal.plan import STRATEGIES


class ProgrammedConfigError(CajalError, ValueError):
    """A programmed-model configuration that cannot be built."""


@dataclass(frozen=True)
class Span:
    """``length`` consecutive positions from ``start``, each carrying ``width`` logical
    coordinates: a program argument of dimension ``length * width`` read from those
    positions, or the program's output written to them."""

    start: int
    length: int
    width: int

    def __post_init__(self) -> None:
        for name in ("start", "length", "width"):
            value, low = getattr(self, name), 0 if name == "start" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ProgrammedConfigError(
                    f"span {name}: expected an int >= {low}, found {value!r}"
                )

    @property
    def stop(self) -> int:
        return self.start + self.length

    @property
    def dimension(self) -> int:
        return self.length * self.width


@dataclass(frozen=True)
class ProgrammedConfig:
    """A decoder of ``n_layers`` parallel-branch layers over token and learned position
    embeddings: in each, ``attention_branches`` causal attention branches of ``heads``
    heads, a GELU feed-forward branch of width ``d_ff`` (0: none) and, in layer
    ``program_layer``, the program branch, all reading one pre-norm and summed into the
    residual stream. ``inputs`` (one span per program argument, in context order) and
    ``output`` place the program in the sequence."""

    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int = 1
    attention_branches: int = 1
    heads: int = 1
    d_ff: int = 0
    program_layer: int = 0
    inputs: tuple[Span, ...] = ()
    output: Span | None = None
    strategy: str = "auto"
    trainable_program: bool = False
    program_init: str = "map"
    program_seed: int = 0
    norm_eps: float = 1e-5
    embedding_std: float = 1.0
    attention: str = "materialized"

    def __post_init__(self) -> None:
        spans = tuple(s if isinstance(s, Span) else Span(**s) for s in self.inputs)
        object.__setattr__(self, "inputs", spans)
        if isinstance(self.output, Mapping):
            object.__setattr__(self, "output", Span(**self.output))
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "heads"):
            _positive(name, getattr(self, name))
        for name in ("attention_branches", "d_ff", "program_layer"):
            _non_negative(name, getattr(self, name))
        if self.d_model % self.heads:
            raise ProgrammedConfigError(
                f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})"
            )
        if not 0 <= self.program_layer < self.n_layers:
            raise ProgrammedConfigError(
                f"program_layer: expected 0..{self.n_layers - 1}, found {self.program_layer}"
            )
        if self.strategy not in (*STRATEGIES, "auto"):
            raise ProgrammedConfigError(
                f"strategy: expected one of {[*STRATEGIES, 'auto']}, found {self.strategy!r}"
            )
        if self.attention not in ("materialized", "flash"):
            raise ProgrammedConfigError(
                f"attention: expected 'materialized' or 'flash', found {self.attention!r}"
            )
        if self.inputs and self.output is None:
            raise ProgrammedConfigError("a program with inputs needs an output span")
        for index, span in enumerate((*self.inputs, *([self.output] if self.output else []))):
            if span.stop > self.context_length:
                raise ProgrammedConfigError(
                    f"span {index} ({span.start}..{span.stop}) goes past the context of "
                    f"{self.context_length} positions"
                )
        if self.output is not None and self.inputs:
            last_read = max(s.stop - 1 for s in self.inputs)
            if self.output.start < last_read:
                raise ProgrammedConfigError(
                    f"the output span starts at {self.output.start}, before the last position "
                    f"the program reads ({last_read}): the program branch would see the future"
                )

    @property
    def has_program(self) -> bool:
        return self.output is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["inputs"] = [asdict(s) for s in self.inputs]
        data["output"] = None if self.output is None else asdict(self.output)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProgrammedConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ProgrammedConfigError(f"programmed config: unknown keys {unknown}")
        values = dict(data)
        try:
            values["inputs"] = tuple(Span(**s) for s in values.get("inputs", ()))
            if values.get("output") is not None:
                values["output"] = Span(**values["output"])
            return cls(**values)
        except TypeError as exc:
            raise ProgrammedConfigError(f"programmed config: {exc}") from None


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProgrammedConfigError(f"{name}: expected a positive int, found {value!r}")


def _non_negative(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProgrammedConfigError(f"{name}: expected an int >= 0, found {value!r}")
