"""``Module``: ordered registration of parameters, buffers and child modules, with
qualified names, state dictionaries, backend moves and train/eval modes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter, Variable
from riftco.nn.errors import StateDictError
from riftco.tensor import Backend, Tensor


@dataclass(frozen=True)
class LoadResult:
    """What ``load_state_dict`` left out: keys the module has that the state lacked, and
    keys the state has that the module does not."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)


#: What ``Module.__init__`` puts in every module's ``__dict__`` (the registries and the
#: mode), as opposed to its own attributes.
_REGISTRIES = ("_parameters", "_buffers", "_transient", "_modules", "training")

#: Bumped whenever any module's attributes, parameters, buffers or children change
#: (what a compiled form of a model, such as its whole-step decoder, depends on).
_EPOCH = [0]


def structure_epoch() -> int:
    """A counter that changes whenever a module anywhere gains, loses or replaces an
    attribute, parameter, buffer or child (values written in place do not count)."""
    return _EPOCH[0]


class Module:
    """Base class of every layer. Assigning a ``Parameter``, a ``Module`` or (for a name
    registered with :meth:`register_buffer`) a ``Tensor`` to an attribute registers it,
    in assignment order; calling the module runs :meth:`forward`."""

    training: bool
    _parameters: dict[str, Parameter | None]
    _buffers: dict[str, Tensor | None]
    _transient: set[str]
    _modules: dict[str, Module | None]

    def __init__(self) -> None:
        d = self.__dict__
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_transient"] = set()
        d["_modules"] = {}
        d["training"] = True

    # -- registration -----------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        _EPOCH[0] += 1
        d = self.__dict__
        params = d.get("_parameters")
        if params is None:
            raise AttributeError(f"{type(self).__name__}: call Module.__init__() before {name!r}")
        if isinstance(value, Parameter):
            self._forget(name)
            params[name] = value
        elif isinstance(value, Module):
            self._forget(name)
            d["_modules"][name] = value
        elif name in params:
            if value is not None:
                raise TypeError(
                    f"{name!r} is a parameter: assign a Parameter or None, found "
                    f"{type(value).__name__}"
                )
            params[name] = None
        elif name in d["_modules"]:
            if value is not None:
                raise TypeError(
                    f"{name!r} is a child module: assign a Module or None, found "
                    f"{type(value).__name__}"
                )
            d["_modules"][name] = None
        elif name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"{name!r} is a buffer: assign a Tensor or None, found {type(value).__name__}"
                )
            d["_buffers"][name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._forget(name)
        object.__delattr__(self, name)

    def _forget(self, name: str) -> None:
        _EPOCH[0] += 1
        d = self.__dict__
        d["_parameters"].pop(name, None)
        d["_modules"].pop(name, None)
        d["_buffers"].pop(name, None)
        d["_transient"].discard(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or an empty slot, None) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"register_parameter: expected a Parameter, found {type(param).__name__}"
            )
        self._forget(name)
        self.__dict__["_parameters"][name] = param
        object.__setattr__(self, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A tensor that belongs to the module's state but is not trained. Persistent
        buffers appear in ``state_dict``."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: expected a Tensor, found {type(tensor).__name__}")
        self._forget(name)
        self.__dict__["_buffers"][name] = tensor
        if not persistent:
            self.__dict__["_transient"].add(name)
        object.__setattr__(self, name, tensor)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: expected a Module, found {type(module).__name__}")
        self._forget(name)
        self.__dict__["_modules"][name] = module
        object.__setattr__(self, name, module)

    def replace_child(self, name: str, new: Module) -> Module | None:
        """Put ``new`` where the child ``name`` is and return the child it replaces.

        ``name`` is a child of this module or, dotted, of a descendant
        (``blocks.0.attention.query``). The new child takes the old one's place in the
        registration order, so the qualified names and the order of every parameter
        and buffer outside it stay as they were (how quantization swaps a ``Linear``
        for its packed form). ``KeyError`` when ``name`` is not a registered child;
        ``TypeError`` unless ``new`` is a ``Module``.
        """
        if not isinstance(new, Module):
            raise TypeError(f"replace_child: expected a Module, found {type(new).__name__}")
        path, _, attr = name.rpartition(".")
        parent = self._descendant(path, name) if path else self
        children = parent.__dict__["_modules"]
        if attr not in children:
            raise KeyError(f"replace_child: {name!r} is not a child module")
        old = children[attr]
        children[attr] = new
        object.__setattr__(parent, attr, new)
        _EPOCH[0] += 1
        return old

    def _descendant(self, path: str, name: str) -> Module:
        m: Module = self
        for part in path.split("."):
            child = m.__dict__["_modules"].get(part)
            if child is None:
                raise KeyError(f"replace_child: {name!r} is not a child module")
            m = child
        return m

    def adopt(self, other: Module) -> None:
        """Take over ``other``'s state: its parameters, buffers (persistent or not) and
        children, under the same names and in the same order, its plain attributes
        (``in_features``, ...) and its training mode. What this module had registered
        before is dropped; ``other`` is left as it was, sharing its tensors and
        children with this module.

        A layer that wraps another in place adopts it (LoRA's adapted linears adopt the
        linear they adapt), so the wrapper answers to the wrapped layer's qualified
        names (``attention.query.weight``) and can stand in its place through
        :meth:`replace_child`. ``TypeError`` unless ``other`` is a ``Module``.
        """
        if not isinstance(other, Module):
            raise TypeError(f"adopt: expected a Module, found {type(other).__name__}")
        Module.__init__(self)
        theirs = other.__dict__
        registered = {
            *theirs["_parameters"],
            *theirs["_buffers"],
            *theirs["_modules"],
            *_REGISTRIES,
        }
        for key, value in theirs.items():
            if key not in registered:
                self.__dict__[key] = value
        for key, p in theirs["_parameters"].items():
            self.register_parameter(key, p)
        for key, b in theirs["_buffers"].items():
            self.register_buffer(key, b, persistent=key not in theirs["_transient"])
        for key, m in theirs["_modules"].items():
            self.add_module(key, m)
        self.__dict__["training"] = other.training

    # -- traversal --------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """Every module of the tree (this one first, named ``prefix``), each once."""
        seen: set[int] = set()
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            kids = [(f"{name}.{k}" if name else k, c) for k, c in m.named_children()]
            stack.extend(reversed(kids))

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def _tree(self, prefix: str, recurse: bool) -> Iterator[tuple[str, Module]]:
        return self.named_modules(prefix) if recurse else iter([(prefix, self)])

    def named_parameters(
        self, prefix: str = "", recurse: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """Qualified names (``blocks.0.attention.query.weight``) in registration order;
        a parameter shared by several modules appears once, under its first name.
        ``recurse=False``: this module's own parameters only."""
        seen: set[int] = set()
        for mname, m in self._tree(prefix, recurse):
            for pname, p in m._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def named_buffers(
        self, prefix: str = "", persistent_only: bool = False, recurse: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """Buffers by qualified name in registration order (``persistent_only``: those
        ``state_dict`` holds; ``recurse=False``: this module's own)."""
        for mname, m in self._tree(prefix, recurse):
            for bname, b in m._buffers.items():
                if b is not None and not (persistent_only and bname in m._transient):
                    yield (f"{mname}.{bname}" if mname else bname), b

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Elements over all (distinct) parameters."""
        return sum(p.size for p in self.parameters() if p.requires_grad or not trainable_only)

    # -- state ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """Parameter values and persistent buffers by qualified name (the tensors
        themselves, not copies)."""
        state: dict[str, Tensor] = {name: p.value for name, p in self.named_parameters()}
        state.update(self.named_buffers(persistent_only=True))
        return state

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Copy ``state`` (Tensors or numpy arrays) into the parameters and buffers in
        place. With ``strict``, missing or unexpected keys raise ``StateDictError``
        naming them all; a value of the wrong shape always raises. Nothing is written
        unless everything checks out."""
        own: dict[str, Tensor] = self.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if strict and (missing or unexpected):
            raise StateDictError(
                f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}"
            )
        staged: list[tuple[Tensor, Tensor]] = []
        for name, target in own.items():
            if name not in state:
                continue
            value = _as_tensor(name, state[name], target)
            staged.append((target, value))
        for target, value in staged:
            target.assign_(value)
        return LoadResult(missing, unexpected)

    def to(self, backend: str | Backend) -> Module:
        """Move every parameter (with its gradient) and buffer to ``backend``: all of
        them, or, when a move fails, none."""
        target = rt.get_backend(backend)
        params = self.parameters()
        moved_params = [
            (p, p.value.to(target), None if p.grad is None else p.grad.to(target)) for p in params
        ]
        buffers = [
            (m, name, b.to(target))
            for _, m in self.named_modules()
            for name, b in m._buffers.items()
            if b is not None
        ]
        for p, value, grad in moved_params:
            p.value, p.grad = value, grad
        for m, name, value in buffers:
            m._buffers[name] = value
            object.__setattr__(m, name, value)
        _EPOCH[0] += 1
        return self

    # -- what the layer needs of a backend -------------------------------------------
    @classmethod
    def layer_capabilities(cls, job: str) -> tuple[str, ...]:
        """The backend capabilities (``riftco.tensor.CAPABILITIES`` names) this kind of
        layer calls for ``job`` (riftco.nn.capabilities' ``JOBS``) beyond the base op
        layer and what its model's configuration implies: none, unless the layer runs a
        kernel of its own (NF4 or block-layout weights). A model's
        ``required_capabilities(job)`` collects them over its layers."""
        return ()

    # -- modes and calls --------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.__dict__["training"] = bool(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # -- display ----------------------------------------------------------------
    def extra_repr(self) -> str:
        """One line of this module's own settings, for ``repr``."""
        return ""

    def __repr__(self) -> str:
        lines = _collapse([(name, repr(m)) for name, m in self.named_children()])
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        body = "\n".join("  " + line.replace("\n", "\n  ") for line in lines)
        return f"{head}\n{body}\n)"


def _collapse(children: list[tuple[str, str]]) -> list[str]:
    """``(name): repr`` lines; runs of identical numbered children collapse into
    ``(0-5): 6 x repr``."""
    out: list[str] = []
    i = 0
    while i < len(children):
        name, text = children[i]
        j = i
        while j + 1 < len(children) and children[j + 1][1] == text and children[j + 1][0].isdigit():
            j += 1
        if j > i and name.isdigit():
            out.append(f"({name}-{children[j][0]}): {j - i + 1} x {text}")
        else:
            out.append(f"({name}): {text}")
        i = j + 1
    return out


def _as_tensor(name: str, value: Any, like: Tensor) -> Tensor:
    if isinstance(value, Variable):
        value = value.value
    if isinstance(value, Tensor):
        value = value.to(like.backend)
    else:
        value = rt.from_numpy(np.ascontiguousarray(value), dtype=like.dtype, backend=like.backend)
    if value.shape != like.shape or value.dtype is not like.dtype:
        raise StateDictError(
            f"load_state_dict: {name!r} has shape {value.shape} "
            f"{value.dtype.value}, expected {like.shape} {like.dtype.value}"
        )
    return value


M = TypeVar("M", bound=Module)


class ModuleList(Module, Generic[M]):
    """Modules held in order, named ``0``, ``1``, ..."""

    def __init__(self, modules: Iterable[M] = ()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: M) -> ModuleList[M]:
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, index: int) -> M:
        return cast(M, list(self._modules.values())[index])

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[M]:
        return iter(cast(list[M], list(self._modules.values())))


class ParameterList(Module):
    """Parameters held in order, named ``0``, ``1``, ..."""

    def __init__(self, params: Iterable[Parameter] = ()) -> None:
        super().__init__()
        for p in params:
            self.append(p)

    def append(self, param: Parameter) -> ParameterList:
        self.register_parameter(str(len(self._parameters)), param)
        return self

    def __getitem__(self, index: int) -> Parameter:
        return cast(Parameter, list(self._parameters.values())[index])

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(cast(list[Parameter], list(self._parameters.values())))

    def extra_repr(self) -> str:
        return ", ".join(str(p.shape) for p in self)


__all__ = [
    "LoadResult",
    "Module",
    "ModuleList",
    "Parameter",
    "ParameterList",
    "structure_epoch",
]
