import subprocess
import sys

import pytest

from riftco.cajal import MultilinearMap, compile, parse, parse_context
from riftco.cajal.errors import (
    CoefficientLimitError,
    LossyLoweringError,
    ShapeError,
    UnsupportedStrategyError,
)
from riftco.cajal.examples import EXAMPLES
from riftco.cajal.plan import DEFAULT_MAX_COEFFICIENTS, REFUSED, analyze, choose_strategy


def test_auto_picks_linear_then_linear_attention_then_dense():
    expected = {0: "dense", 1: "linear", 2: "linear_attention", 3: "dense"}
    for example in EXAMPLES:
        plan = analyze(compile(example.expression, example.context))
        assert plan.strategy == expected.get(plan.arity, "dense"), example.name
        assert plan.float32_exact and plan.inexact_count == 0
        assert plan.coefficient_count == len(compile(example.expression, example.context).data)


def test_auto_says_what_it_passed_over():
    _, passed = choose_strategy((2, 2, 2, 2))
    assert [name for name, _ in passed] == ["linear", "linear_attention"]
    assert "arity 1" in passed[0][1] and "found arity 3" in passed[0][1]
    assert choose_strategy((3, 4)) == ("linear", ())


def test_an_explicit_strategy_must_fit_the_arity():
    lookup = compile(parse("d[k]"), parse_context("d: Dict[Bool, Bool], k: Bool"))
    assert analyze(lookup, "dense").strategy == "dense"
    with pytest.raises(UnsupportedStrategyError, match="arity 1, found arity 2"):
        analyze(lookup, "linear")
    with pytest.raises(UnsupportedStrategyError, match="expected one of"):
        analyze(lookup, "sparse")


def test_mlp_is_refused_with_the_reason():
    identity = MultilinearMap.identity(2)
    with pytest.raises(UnsupportedStrategyError, match="never approximated silently"):
        analyze(identity, "mlp")
    assert "mlp" in REFUSED


def test_the_coefficient_limit_is_checked_from_the_shape_before_the_data():
    big = MultilinearMap.zeros(64, [64, 64])
    assert DEFAULT_MAX_COEFFICIENTS == 1 << 24
    with pytest.raises(CoefficientLimitError, match="262144 coefficients; the limit is 1000"):
        analyze(big, max_coefficients=1000)
    assert analyze(big).coefficient_count == 64**3
    with pytest.raises(CoefficientLimitError):
        analyze(big, max_coefficients=0)


def test_exact_mode_refuses_what_float32_rounds():
    lossy = MultilinearMap((2, 1), (0.1, 1.0))
    with pytest.raises(LossyLoweringError, match="rounds 1 of 2 coefficients"):
        analyze(lossy)
    plan = analyze(lossy, exact=False)
    assert not plan.float32_exact and plan.inexact_count == 1
    assert 0 < plan.max_rounding_error < 1e-8
    assert "float32 rounds 1" in plan.describe()
    with pytest.raises(LossyLoweringError, match="float32's range"):
        analyze(MultilinearMap((1,), (1e300,)), exact=False)
    with pytest.raises(ShapeError):
        analyze("not a map")  # type: ignore[arg-type]


def test_the_core_imports_nothing_but_the_standard_library_and_riftco_core():
    code = (
        "import sys, riftco.cajal, riftco.cajal.plan, riftco.cajal.examples\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'riftco') and not m.startswith(('riftco.cajal', 'riftco.core')) and m != 'riftco')\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
