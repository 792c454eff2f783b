"""Interpreter = multilinear map = lowered module, on every enumerated input of every
program in the fixture suite, for every strategy that fits, on every backend."""

import itertools

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.cajal import compile_program, encode, enumerate_values, evaluate
from riftco.cajal.errors import (
    EvaluationError,
    LossyLoweringError,
    ShapeError,
    UnsupportedStrategyError,
)
from riftco.cajal.examples import EXAMPLES
from riftco.cajal.lowering import (
    DenseProgram,
    LinearAttentionProgram,
    LinearProgram,
    analyze,
    lower,
)
from riftco.cajal.multilinear import MultilinearMap

FITTING = {0: ["dense"], 1: ["linear", "dense"], 2: ["linear_attention", "dense"]}


def _cases(program):
    domains = [list(enumerate_values(t)) for _, t in program.context]
    return list(itertools.product(*domains))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_interpreter_map_and_module_agree_on_every_input(example, backend):
    program = compile_program(example.expression, example.context)
    cases = _cases(program)
    names = [name for name, _ in program.context]
    expected, interpreted_count = [], 0
    for values in cases:
        mapped = program.map(*(encode(v) for v in values))
        try:
            interpreted = encode(evaluate(program.expression, dict(zip(names, values))))
        except EvaluationError:  # no matching key: the map's output is unspecified there
            pass
        else:
            assert mapped == interpreted, (example.name, values)
            interpreted_count += 1
        expected.append(mapped)
    assert interpreted_count > 0
    expected = np.array(expected, dtype=np.float32)
    for strategy in ["auto", *FITTING.get(program.map.arity, ["dense"])]:
        module = lower(program, strategy, backend=backend)
        assert module.coefficient_tensor().backend.name == backend.name
        if program.map.arity == 0:
            got = module(leading_shape=(len(cases),)).numpy()
        else:
            columns = [
                rt.from_numpy(np.array([encode(v[i]) for v in cases], np.float32), backend=backend)
                for i in range(program.map.arity)
            ]
            got = module(*columns).numpy()
        np.testing.assert_array_equal(got, expected, err_msg=f"{example.name} {strategy}")
        assert module.to_map() == program.map


def test_auto_chooses_by_arity_and_the_classes_match():
    by_name = {e.name: compile_program(e.expression, e.context) for e in EXAMPLES}
    assert isinstance(lower(by_name["not"]), LinearProgram)
    assert isinstance(lower(by_name["lookup"]), LinearAttentionProgram)
    assert isinstance(lower(by_name["store-then-read"]), DenseProgram)
    assert isinstance(lower(by_name["unit"]), DenseProgram)


def test_leading_shapes_are_kept():
    rng = np.random.default_rng(0)
    for strategy, shape in [
        ("linear", (3, 4)),
        ("linear_attention", (3, 4, 2)),
        ("dense", (2, 3, 2, 4)),
    ]:
        tensor = rng.normal(size=shape)
        source = MultilinearMap(shape, tuple(float(x) for x in np.float32(tensor).reshape(-1)))
        module = lower(source, strategy)
        args = [rng.normal(size=(2, 5, d)).astype(np.float32) for d in shape[1:]]
        got = module(*(rt.from_numpy(a) for a in args)).numpy()
        assert got.shape == (2, 5, shape[0])
        want = np.array([[source(*(a[i, j] for a in args)) for j in range(5)] for i in range(2)])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        if len(args) > 1:
            with pytest.raises(ShapeError, match="leading shape"):
                module(*(rt.from_numpy(a[:1] if i else a) for i, a in enumerate(args)))
        with pytest.raises(ShapeError, match="expected shape"):
            module(*(rt.from_numpy(a[..., :1]) for a in args))


def test_exact_refusal_happens_before_allocation_and_can_be_waived():
    lossy = MultilinearMap((2, 2), (0.1, 0.0, 0.0, 1.0))
    with pytest.raises(LossyLoweringError):
        lower(lossy)
    module = lower(lossy, exact=False)
    assert module.describe()["float32_exact"] is False
    np.testing.assert_array_equal(
        module.coefficient_tensor().numpy(), np.float32([[0.1, 0], [0, 1]])
    )
    with pytest.raises(UnsupportedStrategyError, match="MLP"):
        lower(lossy, "mlp")


def test_frozen_coefficients_are_buffers_and_trainable_ones_parameters():
    program = compile_program(EXAMPLES[2].expression, EXAMPLES[2].context)  # not
    frozen = lower(program)
    assert list(frozen.named_parameters()) == []
    assert list(frozen.state_dict()) == ["coefficients"]
    trainable = lower(program, trainable=True)
    assert [n for n, _ in trainable.named_parameters()] == ["coefficients"]
    assert trainable.describe()["trainable"] is True


def test_random_initialization_is_seeded_and_keeps_the_shape():
    plan_map = compile_program(EXAMPLES[16].expression, EXAMPLES[16].context).map  # lookup
    a = lower(plan_map, init="normal", seed=3, trainable=True)
    b = lower(plan_map, init="normal", seed=3, trainable=True)
    c = lower(plan_map, init="normal", seed=4, trainable=True)
    assert a.to_map().shape == plan_map.shape
    np.testing.assert_array_equal(a.coefficient_tensor().numpy(), b.coefficient_tensor().numpy())
    assert not np.array_equal(a.coefficient_tensor().numpy(), c.coefficient_tensor().numpy())
    assert a.to_map() != plan_map


def test_the_plan_is_the_module_plan():
    program = compile_program(EXAMPLES[16].expression, EXAMPLES[16].context)
    assert lower(program).plan == analyze(program.map)
    assert lower(program).describe()["map_digest"] == program.map.digest()
