import itertools
import random

import pytest

from riftco.cajal import (
    BOOL,
    UNIT_VALUE,
    DictionaryType,
    DictionaryValue,
    EvaluationError,
    LeftValue,
    LinearityError,
    RightValue,
    check,
    compile,
    compile_program,
    decode,
    encode,
    enumerate_values,
    evaluate,
    lookup_form,
    parse,
    syntax,
)
from riftco.cajal.examples import EXAMPLES, example

FALSE, TRUE = LeftValue(UNIT_VALUE, BOOL), RightValue(UNIT_VALUE, BOOL)


def constructs(expression):
    yield type(expression).__name__
    for value in vars(expression).values():
        children = value if isinstance(value, tuple) else (value,)
        for child in children:
            for part in child if isinstance(child, tuple) else (child,):
                if type(part).__name__ in syntax.__all__:
                    yield from constructs(part)


def test_the_suite_covers_every_construct():
    assert len(EXAMPLES) >= 15
    seen = {name for e in EXAMPLES for name in constructs(e.expression)}
    expected = {
        "Variable", "Unit", "Tuple", "InjectLeft", "InjectRight", "Dictionary",
        "Sequence", "Projection", "Case", "Let", "Lookup",
    }  # fmt: skip
    assert seen == expected


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_compiled_map_agrees_with_the_interpreter_on_every_input(example):
    program = compile_program(example.expression, example.context)
    assert program.map.input_dimensions == tuple(
        len(encode(enumerate_values(t)[0])) for _, t in example.context
    )
    succeeded = 0
    for inputs in itertools.product(*(enumerate_values(t) for _, t in example.context)):
        environment = {name: v for (name, _), v in zip(example.context, inputs)}
        try:
            expected = evaluate(example.expression, environment)
        except EvaluationError:
            continue  # a lookup without a matching key: the map's output is unspecified
        output = program.map(*(encode(v) for v in inputs))
        assert output == encode(expected)
        assert decode(program.output_type, output) == expected
        assert program.run(inputs) == expected
        succeeded += 1
    assert succeeded > 0


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_compiled_map_is_linear_in_each_argument(example):
    rng = random.Random(example.name)
    f = compile(example.expression, example.context)

    def draw(n):
        return [rng.uniform(-1, 1) for _ in range(n)]

    for position, width in enumerate(f.input_dimensions):
        arguments = [draw(n) for n in f.input_dimensions]
        x, y, a, b = draw(width), draw(width), rng.uniform(-2, 2), rng.uniform(-2, 2)
        mixed = [a * p + b * q for p, q in zip(x, y)]

        def at(vector, position=position, arguments=arguments):
            return f(*arguments[:position], vector, *arguments[position + 1 :])

        expected = [a * p + b * q for p, q in zip(at(x), at(y))]
        assert all(abs(p - q) < 1e-9 for p, q in zip(at(mixed), expected))


def test_compile_checks_first():
    with pytest.raises(LinearityError):
        compile(parse("(x, y)"), [("x", BOOL), ("y", BOOL)])


def test_context_order_fixes_argument_order():
    source = parse("let table = dict[Bool, Bool] {k: v} in table[q]")
    forward = compile(source, [("k", BOOL), ("v", BOOL), ("q", BOOL)])
    backward = compile(source, [("q", BOOL), ("v", BOOL), ("k", BOOL)])
    assert backward == forward.permute([2, 1, 0])
    assert forward(encode(TRUE), encode(FALSE), encode(TRUE)) == encode(FALSE)


def test_run_takes_inputs_by_name_or_in_order():
    program = compile_program(example("xor").expression, example("xor").context)
    assert program.run({"x": TRUE, "y": FALSE}) == TRUE
    assert program.run([TRUE, TRUE]) == FALSE
    with pytest.raises(EvaluationError, match="expected a value for each of"):
        program.run({"x": TRUE})


def test_lookup_form_reads_one_row():
    type_ = DictionaryType(BOOL, BOOL)
    form = lookup_form(type_)
    table = DictionaryValue(type_, ((FALSE, TRUE), (TRUE, FALSE)))
    assert form(encode(table), encode(TRUE)) == encode(FALSE)
    assert form(encode(table), encode(FALSE)) == encode(TRUE)


def test_a_closed_program_compiles_to_a_constant():
    f = compile(example("constant-dictionary").expression)
    assert f.arity == 0
    assert decode(check(example("constant-dictionary").expression), f()) == evaluate(
        example("constant-dictionary").expression
    )
