"""gradcheck itself: it passes right gradients and points at the wrong element."""

import pytest

import riftco.autograd as ag
from riftco.autograd import custom_gradient, gradcheck


def test_passes_and_reports(make):
    x = make((2, 3))
    report = gradcheck(lambda x: (x * x).sum(axis=1), [x])
    assert report and report.ok and report.checked == 6
    assert report.max_error < report.tolerance
    assert "passed" in str(report)
    assert x.grad is None  # gradcheck touches no grad


def test_finds_the_wrong_element(make, backend):
    import riftco.tensor as rt

    x = make((2, 3))
    mask = rt.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], backend=backend)

    def wrong_square(v):  # the VJP forgets element (1, 2)
        return custom_gradient((v * v).value, [v], lambda g: [g * v.value * 2.0 * mask])

    report = gradcheck(wrong_square, [x])
    assert not report
    assert report.worst_input == 0 and report.worst_index == (1, 2)
    assert report.analytic == 0.0 and abs(report.numeric) > 0
    assert "FAILED" in str(report) and "(1, 2)" in str(report)


def test_only_inputs_requiring_gradients_are_checked(make, const):
    x, y = make((2,), seed=1), make((2,), seed=2, requires_grad=False)
    ids = const([1, 0])
    report = gradcheck(lambda x, y, ids: ag.index_select(x * y, 0, ids), [x, y, ids])
    assert report and report.checked == 2
    report = gradcheck(lambda a, b: a * b, [x.value, y.value])  # float Tensors are checked
    assert report and report.checked == 4


def test_rejects_inputs_without_gradients(make):
    x = make((2,), requires_grad=False)
    with pytest.raises(ValueError, match="no input"):
        gradcheck(lambda x: x * 2.0, [x])
    with pytest.raises(ValueError, match="depends"):
        gradcheck(lambda x: x.detach(), [make((2,))])
