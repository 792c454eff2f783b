import random

from cajal_strategies import programs, values_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riftco.cajal import (
    EvaluationError,
    check,
    compile_program,
    decode,
    encode,
    evaluate,
    parse,
    print_expression,
    type_of,
)

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs(), st.data())
def test_well_typed_programs_evaluate_to_values_of_the_checked_type(program, data):
    expression, context, built_type = program
    checked = check(expression, context)
    assert checked == built_type
    for _ in range(3):
        inputs = {name: data.draw(values_of(t)) for name, t in context}
        try:
            value = evaluate(expression, inputs)
        except EvaluationError:
            continue  # a lookup of an absent key
        assert type_of(value) == checked


@SETTINGS
@given(programs(), st.data())
def test_generated_programs_compile_to_their_interpretation(program, data):
    expression, context, _ = program
    assert parse(print_expression(expression)) == expression
    compiled = compile_program(expression, context)
    for _ in range(3):
        inputs = [data.draw(values_of(t)) for _, t in context]
        try:
            expected = evaluate(expression, {name: v for (name, _), v in zip(context, inputs)})
        except EvaluationError:
            continue
        output = compiled.map(*(encode(v) for v in inputs))
        assert output == encode(expected)
        assert decode(compiled.output_type, output) == expected


@SETTINGS
@given(programs(), st.integers(0, 2**32 - 1))
def test_generated_programs_compile_to_multilinear_maps(program, seed):
    expression, context, _ = program
    f = compile_program(expression, context).map
    rng = random.Random(seed)
    arguments = [[rng.uniform(-1, 1) for _ in range(n)] for n in f.input_dimensions]
    for position, width in enumerate(f.input_dimensions):
        x = [rng.uniform(-1, 1) for _ in range(width)]
        y = [rng.uniform(-1, 1) for _ in range(width)]
        a, b = rng.uniform(-2, 2), rng.uniform(-2, 2)

        def at(vector, position=position):
            return f(*arguments[:position], vector, *arguments[position + 1 :])

        mixed = at([a * p + b * q for p, q in zip(x, y)])
        combined = [a * p + b * q for p, q in zip(at(x), at(y))]
        assert all(abs(p - q) < 1e-9 for p, q in zip(mixed, combined))
