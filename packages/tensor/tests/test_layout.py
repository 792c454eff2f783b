import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt


def test_reshape_is_free_and_checks_sizes(backend):
    x = rand((2, 3, 4))
    t = on(backend, x)
    close(t.reshape(6, 4), x.reshape(6, 4))
    close(t.reshape(-1), x.reshape(-1))
    close(t.reshape((4, -1)), x.reshape(4, -1))
    assert t.reshape(2, 3, 4) is t
    with pytest.raises(
        rt.ShapeError, match=r"reshape: cannot reshape \(2, 3, 4\) \(24 elements\) to \(5, 5\)"
    ):
        t.reshape(5, 5)
    with pytest.raises(rt.ShapeError, match="at most one -1"):
        t.reshape(-1, -1)


@pytest.mark.parametrize("axes", [(1, 0, 2), (2, 1, 0), (0, 2, 1), (2, 0, 1)])
def test_permute(backend, axes):
    x = rand((2, 3, 4))
    close(on(backend, x).permute(*axes), x.transpose(axes))


def test_permute_errors(backend):
    t = on(backend, rand((2, 3)))
    with pytest.raises(rt.ShapeError, match="not a permutation"):
        t.permute(0, 0)


def test_transpose_and_T(backend):
    x = rand((2, 3, 5))
    t = on(backend, x)
    close(t.transpose(0, 2), x.swapaxes(0, 2))
    close(t.T, x.swapaxes(-1, -2))


@pytest.mark.parametrize(
    "index",
    [
        0,
        -1,
        (1, 2),
        slice(1, 3),
        (slice(None), 1),
        (Ellipsis, 2),
        (slice(0, 4, 2), Ellipsis, slice(1, None)),
        (None, 1),
        slice(5, 9),
        (slice(None), slice(None), slice(None, None, 3)),
    ],
    ids=str,
)
def test_getitem(backend, index):
    x = rand((4, 3, 5))
    close(on(backend, x)[index], x[index])


def test_getitem_errors(backend):
    t = on(backend, rand((4, 3)))
    with pytest.raises(rt.ShapeError, match="index 4 is out of range for axis 0"):
        t[4]
    with pytest.raises(rt.ShapeError, match="steps must be positive"):
        t[::-1]
    with pytest.raises(rt.ShapeError, match="3 indices for a 2-d tensor"):
        t[0, 0, 0]


def test_narrow(backend):
    x = rand((4, 6))
    t = on(backend, x)
    close(t.narrow(1, 2, 3), x[:, 2:5])
    close(t.narrow(0, 4, 0), x[4:4])
    with pytest.raises(rt.ShapeError, match="narrow"):
        t.narrow(1, 5, 2)


@pytest.mark.parametrize(
    ("shape", "target"), [((3,), (2, 3)), ((2, 1), (2, 4)), ((), (3, 2)), ((1, 3, 1), (2, 3, 4))]
)
def test_broadcast_to_and_sum_to_shape(backend, shape, target):
    x = rand(shape)
    t = on(backend, x)
    b = t.broadcast_to(target)
    close(b, np.broadcast_to(x, target))
    back = b.sum_to_shape(shape)
    lead = len(target) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and target[lead + i] != 1
    )
    close(back, np.broadcast_to(x, target).sum(axis=axes).reshape(shape), rtol=1e-5)
    with pytest.raises(rt.ShapeError, match="broadcast_to"):
        t.broadcast_to((5, 7)) if shape else t.reshape(1).broadcast_to((1, 0, 2)).broadcast_to(3)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate_and_stack(backend, axis):
    xs = [rand((2, 3), seed=i) for i in range(3)]
    ts = [on(backend, x) for x in xs]
    close(rt.concatenate(ts, axis=axis), np.concatenate(xs, axis=axis))
    close(rt.stack(ts, axis=axis), np.stack(xs, axis=axis))
    ints = [on(backend, np.arange(4).reshape(2, 2) + i) for i in range(2)]
    close(rt.concatenate(ints, axis=axis), np.concatenate([i.numpy() for i in ints], axis=axis))


def test_concatenate_errors(backend):
    a, b = on(backend, rand((2, 3))), on(backend, rand((3, 2)))
    with pytest.raises(
        rt.ShapeError, match=r"concatenate: shapes \(2, 3\), \(3, 2\) differ off axis 0"
    ):
        rt.concatenate([a, b])
    with pytest.raises(rt.ShapeError, match="stack: shapes differ"):
        rt.stack([a, b])
    with pytest.raises(rt.ShapeError, match="at least one"):
        rt.concatenate([])


def test_unsqueeze_squeeze_astype(backend):
    x = rand((3, 1, 2))
    t = on(backend, x)
    assert t.squeeze().shape == (3, 2)
    assert t.squeeze(1).unsqueeze(0).shape == (1, 3, 2)
    with pytest.raises(rt.ShapeError, match="has size 3, not 1"):
        t.squeeze(0)
    close(t.astype("int64"), x.astype(np.int64))
    close((t > 0).astype(rt.float32), (x > 0).astype(np.float32))


def test_numpy_is_read_only_and_copies_are_independent(backend):
    source = rand((2, 2))
    t = on(backend, source)
    source[0, 0] = 100.0
    assert t.numpy()[0, 0] != 100.0
    view = t.numpy()  # a read-only view, or a copy
    try:
        view[0, 0] = 5.0
    except ValueError:
        pass
    assert t.numpy()[0, 0] != 5.0


def test_item_and_creation(backend):
    assert on(backend, [[3.5]]).item() == 3.5
    with pytest.raises(rt.ShapeError, match="one element"):
        on(backend, [1.0, 2.0]).item()
    assert rt.zeros(2, 3, backend=backend).shape == (2, 3)
    assert rt.ones((4,), dtype="int64", backend=backend).tolist() == [1, 1, 1, 1]
    assert rt.arange(5, backend=backend).dtype is rt.int64
    assert rt.full((2,), 7.0, backend=backend).tolist() == [7.0, 7.0]
    u = rt.uniform((1000,), -1, 1, seed=3, backend=backend).numpy()
    assert -1 <= u.min() and u.max() < 1
    np.testing.assert_array_equal(u, rt.uniform((1000,), -1, 1, seed=3).numpy())
    n = rt.normal((4000,), 2.0, 0.5, seed=1, backend=backend).numpy()
    assert abs(n.mean() - 2.0) < 0.05 and abs(n.std() - 0.5) < 0.05
    assert rt.tensor([True, False]).dtype is rt.bool_
    with pytest.raises(rt.DTypeError):
        rt.tensor([[1.0], [2.0, 3.0]])


def test_assign_bumps_version(backend):
    t = on(backend, rand((2, 2)))
    before = t.version
    t.assign_(on(backend, np.ones((2, 2), np.float32)))
    assert t.version == before + 1
    close(t, np.ones((2, 2)))
    with pytest.raises(rt.ShapeError, match="assign_"):
        t.assign_(on(backend, np.ones((3,), np.float32)))


def test_iteration_stops_at_the_end(backend):
    x = rand((3, 2))
    rows = list(on(backend, x))
    assert len(rows) == 3
    close(rows[2], x[2])
    with pytest.raises(IndexError):
        on(backend, x)[3]
