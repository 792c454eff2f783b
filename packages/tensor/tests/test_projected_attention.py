"""``projected_attention`` (API 1.13): self-attention through its query, key and value
projections as one op. The cpu backend's kernels are the op layer's composition on its
own ops (the same bits as a backend without them); the composition is the weights
concatenated, one product, the parts narrowed out and attention (checked against
those ops written out); rotary positions always take the composition; bad operands
are typed errors."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor.cpu import CpuBackend


class ComposedCpu(CpuBackend):
    """The cpu backend without the kernels: the op layer composes them."""

    name = "cpu-composed"
    projected_attention = rt.Backend.projected_attention
    projected_attention_backward = rt.Backend.projected_attention_backward


def _operands(backend, b=2, t=5, h=4, hkv=2, dh=4, d=12, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    sizes = (h * dh, hkv * dh, hkv * dh)

    def put(a):
        return rt.from_numpy(np.asarray(a, np.float32), backend=backend)

    x = put(rng.normal(0, 1, (b, t, d)))
    ws = [put(rng.normal(0, 0.4, (n, d))) for n in sizes]
    bs = [put(rng.normal(0, 0.3, (n,))) for n in sizes] if bias else None
    g = put(rng.normal(0, 1, (b, t, h * dh)))
    return x, ws, bs, g, dict(heads=h, kv_heads=hkv, head_dim=dh)


def _bits(t):
    return t.numpy().view(np.uint32)


@pytest.mark.parametrize("compute", [None, "bfloat16"])
@pytest.mark.parametrize("bias", [True, False])
def test_the_cpu_kernels_give_the_compositions_bits(compute, bias):
    cpu, composed = rt.get_backend("cpu"), ComposedCpu()
    assert "projected_attention" in cpu.capabilities()
    assert "projected_attention" not in composed.capabilities()
    results = []
    for backend in (cpu, composed):
        x, ws, bs, g, dims = _operands(backend, bias=bias)
        out, state = rt.projected_attention_with_state(x, ws, bs, compute=compute, **dims)
        results.append((out, *rt.projected_attention_backward(g, state), state))
    (out, dx, dws, dbs, state), (out2, dx2, dws2, dbs2, state2) = results
    assert state.saved is not None and state2.saved is None
    for a, b in zip([out, dx, *dws, *(dbs or [])], [out2, dx2, *dws2, *(dbs2 or [])]):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    assert (dbs is None) == (not bias) == (dbs2 is None)


def test_the_composition_is_the_stacked_product_and_attention():
    x, ws, bs, _, dims = _operands(rt.get_backend("cpu"))
    h, hkv, dh = dims["heads"], dims["kv_heads"], dims["head_dim"]
    out = rt.projected_attention(x, ws, bs, **dims)
    b, t = x.shape[:2]
    y = rt.linear(x.reshape(-1, x.shape[-1]), rt.concatenate(ws), rt.concatenate(bs))
    q = rt.narrow(y, 1, 0, h * dh).reshape(b, t, h, dh)
    k = rt.narrow(y, 1, h * dh, hkv * dh).reshape(b, t, hkv, dh)
    v = rt.narrow(y, 1, (h + hkv) * dh, hkv * dh).reshape(b, t, hkv, dh)
    want = rt.attention(q, k, v).reshape(b, t, h * dh)
    np.testing.assert_array_equal(_bits(out), _bits(want))


@pytest.mark.parametrize("compute", [None, "bfloat16"])
def test_the_weight_gradients_are_each_parts_product(compute):
    # One product of the stacked gradient, its rows narrowed out: the bits of each
    # part's own linear_backward (rows across two of the product's depth slices).
    x, ws, bs, g, dims = _operands(ComposedCpu(), b=4, t=70, d=40, seed=3)
    _, state = rt.projected_attention_with_state(x, ws, bs, compute=compute, **dims)
    _, dws, dbs = rt.projected_attention_backward(g, state)
    out = state.out
    dq, dk, dv = rt.attention_backward(g.reshape(*out.shape), state.q, state.k, state.v,
                                       out, state.stats, compute=compute)  # fmt: skip
    x2 = x.reshape(-1, x.shape[-1])
    for d, w, dw, db in zip((dq, dk, dv), ws, dws, dbs):
        part = d.reshape(x2.shape[0], -1)
        _, want_w, want_b = rt.linear_backward(part, x2, w, False, True, True, compute=compute)
        np.testing.assert_array_equal(_bits(dw), _bits(want_w))
        np.testing.assert_array_equal(_bits(db), _bits(want_b))


def test_rotary_positions_take_the_composition():
    x, ws, bs, g, dims = _operands(rt.get_backend("cpu"), hkv=4)
    positions = rt.from_numpy(np.tile(np.arange(5, dtype=np.int64), (2, 1)))
    out, state = rt.projected_attention_with_state(x, ws, bs, positions=positions, **dims)
    assert state.saved is None and state.positions is positions
    dx, dws, dbs = rt.projected_attention_backward(g, state, need_x=False)
    assert dx is None and [d.shape for d in dws] == [w.shape for w in ws]
    assert dbs is not None and [d.shape for d in dbs] == [b.shape for b in bs]
    plain = rt.projected_attention(x, ws, bs, **dims)
    assert not np.array_equal(out.numpy(), plain.numpy())


def test_bad_operands_are_typed_errors():
    x, ws, bs, _, dims = _operands(rt.get_backend("cpu"))
    with pytest.raises(rt.ShapeError, match="expected three weights"):
        rt.projected_attention(x, ws[:2], bs, **dims)
    with pytest.raises(rt.ShapeError, match=r"expected the key weight \[8, 12\], found \(8, 11\)"):
        rt.projected_attention(x, [ws[0], rt.zeros([8, 11]), ws[2]], bs, **dims)
    with pytest.raises(rt.ShapeError, match=r"expected the value bias \[8\]"):
        rt.projected_attention(x, ws, [bs[0], bs[1], rt.zeros([7])], **dims)
    with pytest.raises(rt.ShapeError, match="divisible by kv_heads"):
        rt.projected_attention(x, ws, bs, heads=4, kv_heads=3, head_dim=4)
    with pytest.raises(rt.ShapeError, match=r"expected x \[B, T, d_model\]"):
        rt.projected_attention(x.reshape(-1, 12), ws, bs, **dims)
    _, state = rt.projected_attention_with_state(x, ws, bs, **dims)
    with pytest.raises(rt.ShapeError, match=r"expected g \[2, 5, 16\], found \(2, 5, 8\)"):
        rt.projected_attention_backward(rt.zeros([2, 5, 8]), state)
