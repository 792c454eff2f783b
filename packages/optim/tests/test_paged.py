"""Paged and contiguous moments give bit-identical results."""

import pytest
from optim_helpers import grads_for, make_params, same_bits, set_grads, state_bits, values

import riftco.tensor as rt
from riftco.optim import Adam, AdamW, Moments, page_lengths


def test_page_lengths():
    assert page_lengths(10, 4) == [4, 4, 2]
    assert page_lengths(8, 4) == [4, 4]
    assert page_lengths(3, 4) == [3]
    assert page_lengths(0, 4) == [0]
    assert page_lengths(10, None) == [10]


@pytest.mark.parametrize("page_size", [1, 3, 4096])
@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_paged_equals_contiguous(backend, cls, page_size):
    shapes = [(17, 9), (4097,), (1,), (2, 0)]
    runs = []
    for paged in (False, True):
        params = make_params(shapes, backend=backend)
        opt = cls(params, lr=1e-2, weight_decay=0.05, paged=paged, page_size=page_size)
        stats = []
        for step in range(1, 5):
            set_grads(params, grads_for(shapes, step, scale=0.7))
            stats.append(opt.step())
        runs.append((values(params), state_bits(opt), stats))
    (v0, s0, st0), (v1, s1, st1) = runs
    assert same_bits(v0, v1) and s0 == s1 and st0 == st1


def test_pages_are_bounded():
    params = make_params([(100, 100)])
    opt = Adam(params, paged=True, page_size=4096)
    set_grads(params, grads_for([(100, 100)], 1))
    opt.step()
    moments = opt._state[0].moments
    assert [p.size for p in moments.m] == [4096, 4096, 1808]
    assert all(p.ndim == 1 for p in moments.v)


def test_moments_round_trip_through_host_arrays():
    m = Moments.zeros((3, 5), rt.get_backend("cpu"), 4)
    a, b = m.arrays()
    assert a.shape == b.shape == (3, 5) and len(m.m) == 4
    again = Moments.from_arrays(a + 1, b + 2, rt.get_backend("cpu"), None)
    assert len(again.m) == 1 and (again.arrays()[1] == 2).all()
