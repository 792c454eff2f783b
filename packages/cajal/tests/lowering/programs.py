"""A small conditional-reversal program for the programmed-model tests."""

from riftco.cajal import compile_program, parse, parse_context
from riftco.cajal.programmed import ProgrammedConfig, Span

LENGTH, SYMBOLS = 3, 4


def letter(n: int) -> str:
    return "(" + " + ".join(["Unit"] * n) + ")"


def reverse_source(length: int) -> str:
    def element(k: int) -> str:
        path = "x"
        for _ in range(k):
            path = f"(snd {path})"
        return path if k == length - 1 else f"(fst {path})"

    items = [element(k) for k in reversed(range(length))]
    out = items[-1]
    for item in reversed(items[:-1]):
        out = f"({item}, {out})"
    return out


def conditional_reverse(length: int = LENGTH, symbols: int = SYMBOLS):
    source = f"case c of inl a => a; x | inr b => b; {reverse_source(length)}"
    context = f"x: {' & '.join([letter(symbols)] * length)}, c: Bool"
    return compile_program(parse(source), parse_context(context))


def config(**overrides) -> ProgrammedConfig:
    values = dict(
        vocab_size=SYMBOLS + 1,
        context_length=2 * LENGTH,
        d_model=8,
        attention_branches=2,
        heads=2,
        d_ff=12,
        inputs=(Span(0, LENGTH, SYMBOLS), Span(0, 1, 2)),
        output=Span(LENGTH, LENGTH, SYMBOLS),
    )
    values.update(overrides)
    return ProgrammedConfig(**values)
