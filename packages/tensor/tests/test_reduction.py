import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt

AXES = [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)]


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 5, 1), (3, 1000, 2), (2, 0, 3)], ids=str)
def test_reductions_match_numpy(backend, shape, axis, keepdims):
    x = rand(shape)
    t = on(backend, x)
    wide = x.astype(np.float64)
    close(
        t.sum(axis=axis, keepdims=keepdims),
        wide.sum(axis=axis, keepdims=keepdims),
        rtol=1e-5,
        atol=1e-5,
    )
    close(
        t.sum_squares(axis=axis, keepdims=keepdims),
        (wide * wide).sum(axis=axis, keepdims=keepdims),
        rtol=1e-6,
    )
    axes = range(len(shape)) if axis is None else np.atleast_1d(axis)
    if all(shape[a] > 0 for a in axes):
        close(
            t.mean(axis=axis, keepdims=keepdims),
            wide.mean(axis=axis, keepdims=keepdims),
            rtol=1e-5,
            atol=1e-6,
        )
        close(t.max(axis=axis, keepdims=keepdims), x.max(axis=axis, keepdims=keepdims))
        close(t.min(axis=axis, keepdims=keepdims), x.min(axis=axis, keepdims=keepdims))
    else:
        with pytest.raises(rt.ShapeError, match="empty axis"):
            t.max(axis=axis)


def test_long_sum_is_accurate(backend):
    x = rand((1_000_003,), low=0, high=1)
    close(on(backend, x).sum(), x.astype(np.float64).sum(), rtol=1e-5)


def test_int_reductions(backend):
    x = np.arange(24).reshape(2, 3, 4) - 10
    t = on(backend, x)
    close(t.sum(axis=1), x.sum(axis=1))
    close(t.max(axis=(0, 2)), x.max(axis=(0, 2)))
    with pytest.raises(rt.DTypeError, match="mean"):
        t.mean()


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax(backend, axis):
    x = np.round(rand((4, 6), 5))  # rounding makes ties: the first wins
    close(on(backend, x).argmax(axis=axis), np.argmax(x, axis=axis))
    kept = on(backend, x).argmax(axis=axis, keepdims=True)
    assert kept.ndim == 2
    with pytest.raises(rt.ShapeError, match="empty"):
        on(backend, np.zeros((0, 3), np.float32)).argmax(axis=0)


def _softmax(x, axis=-1):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 4, 33), (2, 1, 1)], ids=str)
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_softmax_is_stable(backend, shape, scale):
    x = rand(shape) * np.float32(scale)
    t = on(backend, x)
    close(t.softmax(), _softmax(x), atol=1e-6)
    wide = x.astype(np.float64)
    shifted = wide - wide.max(axis=-1, keepdims=True)
    log_ref = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    close(t.log_softmax(), log_ref, rtol=1e-5, atol=1e-4)
    close(t.softmax(axis=0), _softmax(x, axis=0), atol=1e-6)


@pytest.mark.parametrize(("t", "s"), [(1, 1), (4, 4), (3, 7), (5, 130)])
def test_causal_softmax_gives_future_keys_zero(backend, t, s):
    x = rand((2, t, s))
    mask = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)
    masked = np.where(mask, x, -np.inf)
    got = on(backend, x).softmax(causal=True).numpy()
    assert np.all(got[:, ~mask] == 0.0)
    close(on(backend, x).softmax(causal=True), _softmax(masked), atol=1e-6)
    logs = on(backend, x).log_softmax(causal=True).numpy()
    assert np.all(logs[:, ~mask] == -np.inf)


def test_softmax_errors(backend):
    with pytest.raises(rt.ShapeError, match="more queries than keys"):
        on(backend, rand((4, 3))).softmax(causal=True)
    with pytest.raises(rt.DTypeError, match="softmax"):
        on(backend, np.ones((2, 2), np.int64)).softmax()


def test_reducing_over_no_axis(backend):
    t = on(backend, np.array(3.0, np.float32))
    assert t.sum_squares().item() == 9.0
    assert t.sum().item() == 3.0
    close(on(backend, rand((2, 2))).sum_squares(axis=()), rand((2, 2)) ** 2)
