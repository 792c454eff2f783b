"""The in-place ops: adam_update_ validates once and bumps versions; write_rows_
has an unchecked fast path that still bumps versions."""

from __future__ import annotations

import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt


def adam_args(backend, shapes, page_size=None):
    params = [on(backend, rand(s, i)) for i, s in enumerate(shapes)]
    grads = [on(backend, rand(s, 10 + i)) for i, s in enumerate(shapes)]

    def pages(n):
        size = page_size or max(1, *[int(np.prod(s)) for s in shapes])
        bounds = list(range(0, n, size)) or [0]
        return [on(backend, np.zeros(min(size, n - b), np.float32)) for b in bounds]

    sizes = [int(np.prod(s)) for s in shapes]
    m = [pages(n) for n in sizes]
    v = [pages(n) for n in sizes]
    k = len(shapes)
    hyper = dict(
        lr=[1e-2] * k,
        beta1=[0.9] * k,
        beta2=[0.999] * k,
        eps=[1e-8] * k,
        weight_decay=[0.0] * k,
        step=[1] * k,
        decoupled=False,
        page_size=page_size,
    )
    return params, grads, m, v, hyper


def test_adam_update_matches_the_formula_and_bumps_every_version(backend):
    params, grads, m, v, hyper = adam_args(backend, [(3, 4), (5,)], page_size=4)
    p0 = [p.numpy().copy() for p in params]
    g0 = [g.numpy().copy() for g in grads]
    tensors = [*params, *(t for pages in m for t in pages), *(t for pages in v for t in pages)]
    versions = [t.version for t in tensors]
    assert rt.adam_update_(params, grads, m, v, **hyper) is None
    assert [t.version for t in tensors] == [n + 1 for n in versions]
    for p, before, g in zip(params, p0, g0):
        m1 = np.float32(0.1) * g
        v1 = np.float32(0.001) * g * g
        step = np.float32(-1e-2 / 0.1) * m1 / (np.sqrt(v1) / np.float32(0.001**0.5) + 1e-8)
        close(p, before + step, rtol=1e-5, atol=1e-6)
    close(rt.ops.concatenate(m[0], 0), (np.float32(0.1) * g0[0]).reshape(-1))


def test_a_non_finite_update_changes_nothing(backend):
    params, grads, m, v, hyper = adam_args(backend, [(4,), (4,)])
    grads[1] = on(backend, np.array([1.0, np.inf, 0.0, 0.0], np.float32))
    before = [p.numpy().copy() for p in params]
    versions = [p.version for p in params]
    assert rt.adam_update_(params, grads, m, v, **hyper) == 1
    for p, b in zip(params, before):
        assert p.numpy().tobytes() == b.tobytes()
    assert [p.version for p in params] == versions


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: a[1].pop(), "1 entries in grads"),
        (lambda a: a[4]["lr"].pop(), "1 entries in lr"),
        (lambda a: a[1].__setitem__(0, a[1][0].reshape(12)), "gradient"),
        (lambda a: a[2][0].pop(), "needs m pages"),
        (lambda a: a[4].__setitem__("step", [0, 1]), "step of parameter 0"),
        (lambda a: a[4].__setitem__("page_size", 0), "page_size"),
    ],
    ids=["grads", "lr", "grad shape", "pages", "step", "page size"],
)
@pytest.mark.parametrize("page_size", [4, None], ids=["paged", "one page"])
def test_adam_update_names_what_disagrees(backend, mutate, message, page_size):
    # One page a parameter takes the checks' fast path first: anything wrong still
    # reaches the checks that name it.
    params, grads, m, v, hyper = adam_args(backend, [(3, 4), (5,)], page_size=page_size)
    args = [params, grads, m, v, hyper]
    mutate(args)
    before = params[0].numpy().copy()
    with pytest.raises(rt.ShapeError, match=message):
        rt.adam_update_(args[0], args[1], args[2], args[3], **args[4])
    assert params[0].numpy().tobytes() == before.tobytes()


def test_the_checks_fast_path_finds_what_the_full_checks_find(backend):
    from riftco.tensor.ops import inplace

    params, grads, m, v, hyper = adam_args(backend, [(3, 4), (5,), (2, 3)])
    args = ("adam_update_", params, grads, m, v, hyper["lr"], hyper["beta1"], hyper["beta2"])
    rest = (hyper["eps"], hyper["weight_decay"], hyper["step"])
    assert inplace._adam_fast_path(params, grads, m, v, hyper["step"], None) is not None
    fast = inplace._check_adam(*args, *rest, None)
    full = inplace._check_adam(*args, *rest, 12)  # the same single pages, checked in full
    assert fast[0] == full[0] == [12, 5, 6] and fast[1] == full[1] == 12
    assert [id(t) for t in fast[2]] == [id(t) for t in full[2]]


def test_adam_update_refuses_other_dtypes_and_types(backend):
    params, grads, m, v, hyper = adam_args(backend, [(4,)])
    with pytest.raises(rt.DTypeError):
        rt.adam_update_([params[0].astype(rt.int64)], grads, m, v, **hyper)
    with pytest.raises(TypeError, match="expected a Tensor"):
        rt.adam_update_([params[0].numpy()], grads, m, v, **hyper)


def test_the_unchecked_write_skips_the_checks_but_still_bumps_the_version(backend):
    dst = on(backend, np.zeros((4, 3), np.float32))
    src = rand((1, 3), 2)
    rt.write_rows_(dst, on(backend, np.array([2])), on(backend, src), check=False)
    want = np.zeros((4, 3), np.float32)
    want[2] = src[0]
    close(dst, want)
    assert dst.version == 1
    with pytest.raises(rt.KernelError, match="out of range"):
        rt.write_rows_(dst, on(backend, np.array([7])), on(backend, src), check=False)
