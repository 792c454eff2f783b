"""The `riftco` command: a host for subcommands that packages contribute.

Each installed package adds subcommands through the entry-point group
``riftco.commands``: the entry point's name is the subcommand, its value a
function ``main(argv: list[str]) -> int`` that parses its own arguments. The
first line of that function's docstring is its summary in ``riftco --help``.
A contribution that fails to load is reported, never fatal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

__version__ = "0.1.0"

GROUP = "riftco.commands"
Command = Callable[[list[str]], int]


@dataclass(frozen=True)
class Contribution:
    name: str
    entry_point: EntryPoint

    @property
    def source(self) -> str:
        dist = self.entry_point.dist
        return dist.name if dist is not None else "?"

    def load(self) -> Command:
        command = self.entry_point.load()
        if not callable(command):
            raise TypeError(f"{self.entry_point.value} is not callable")
        return command


def contributions() -> dict[str, Contribution]:
    found: dict[str, Contribution] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
        found.setdefault(ep.name, Contribution(ep.name, ep))
    return found


def summary(command: Command) -> str:
    doc = (command.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def usage(found: dict[str, Contribution]) -> str:
    lines = ["usage: riftco COMMAND [ARGS...]", "", "commands:"]
    width = max((len(n) for n in found), default=8)
    for name, contribution in found.items():
        try:
            text = summary(contribution.load())
        except Exception as exc:  # a broken plugin must not break the host
            text = f"(unavailable from {contribution.source}: {type(exc).__name__}: {exc})"
        lines.append(f"  {name:<{width}}  {text}")
    lines += ["", "Run `riftco COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    found = contributions()
    if not args or args[0] in {"-h", "--help", "help"}:
        print(usage(found))
        return 0 if args else 2
    if args[0] == "--version":
        print(f"riftco {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in found:
        print(
            f"riftco: unknown command {name!r}; known: {', '.join(found) or 'none'}",
            file=sys.stderr,
        )
        return 2
    try:
        command = found[name].load()
    except Exception as exc:
        print(
            f"riftco: command {name!r} from {found[name].source} failed to load: "
            f"{type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    try:
        return int(command(rest) or 0)
    except KeyboardInterrupt:
        print("riftco: interrupted", file=sys.stderr)
        return 130
