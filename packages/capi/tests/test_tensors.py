"""Tensors and ops through the C ABI against numpy: shapes, dtypes (float16 and bfloat16
in and out), matmul, add, mul (with trailing broadcast), softmax (causal), layer and RMS
norm, attention (grouped-query, causal, windowed), and the errors."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from riftco_ctypes import CapiError

F32, F16, BF16 = 0, 1, 2


class T:
    def __init__(self, lib, array=None, dtype=F32, ptr=None):
        self.lib = lib
        self.ptr = ctypes.c_void_p() if ptr is None else ptr
        if array is not None:
            shape = (ctypes.c_size_t * max(1, array.ndim))(*array.shape)
            data = np.ascontiguousarray(array)
            lib(
                "tensor_create",
                data.ctypes.data_as(ctypes.c_void_p),
                dtype,
                shape,
                ctypes.c_size_t(array.ndim),
                ctypes.byref(self.ptr),
            )

    def shape(self):
        ndim = ctypes.c_size_t()
        self.lib("tensor_shape", self.ptr, None, ctypes.c_size_t(0), ctypes.byref(ndim))
        out = (ctypes.c_size_t * max(1, ndim.value))()
        self.lib("tensor_shape", self.ptr, out, ctypes.c_size_t(ndim.value), ctypes.byref(ndim))
        return tuple(out[: ndim.value])

    def read(self, dtype=F32):
        kind = {F32: np.float32, F16: np.float16, BF16: np.uint16}[dtype]
        out = np.zeros(self.shape(), kind)
        self.lib(
            "tensor_read",
            self.ptr,
            dtype,
            out.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_size_t(out.nbytes),
        )
        return out

    def op(self, name, *args):
        res = T(self.lib)
        self.lib("tensor_" + name, self.ptr, *args, ctypes.byref(res.ptr))
        return res

    def free(self):
        self.lib("tensor_free", self.ptr)


def rng_array(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_create_read_and_dtypes(lib):
    a = rng_array(3, 4, 5)
    t = T(lib, a)
    assert t.shape() == (3, 4, 5)
    np.testing.assert_array_equal(t.read(), a)
    np.testing.assert_array_equal(t.read(F16), a.astype(np.float16))
    half = a.astype(np.float16)
    h = T(lib, half.view(np.uint16), F16)
    np.testing.assert_array_equal(h.read(), half.astype(np.float32))
    np.testing.assert_array_equal(h.read(F16).view(np.uint16), half.view(np.uint16))
    dtype = ctypes.c_int32()
    lib("tensor_dtype", h.ptr, ctypes.byref(dtype))
    assert dtype.value == F16
    bits = (a.view(np.uint32) >> 16).astype(np.uint16)
    b = T(lib, bits, BF16)
    np.testing.assert_array_equal(b.read(BF16), bits)
    np.testing.assert_array_equal(b.read(), (bits.astype(np.uint32) << 16).view(np.float32))
    extreme = np.array([65504, 65520, 1e-8, -3e-5, 7e4, np.inf, 2.0**-24, 2.0**-25], np.float32)
    with np.errstate(over="ignore"):
        halves = extreme.astype(np.float16)
    np.testing.assert_array_equal(T(lib, extreme).read(F16), halves)
    for x in (t, h, b):
        x.free()


def test_ops_against_numpy(lib):
    a, b = rng_array(5, 7, seed=1), rng_array(7, 3, seed=2)
    ta, tb = T(lib, a), T(lib, b)
    np.testing.assert_allclose(ta.op("matmul", tb.ptr).read(), a @ b, rtol=1e-5, atol=1e-5)
    batched, shared = rng_array(2, 5, 7, seed=3), rng_array(2, 7, 3, seed=4)
    tbat, tsh = T(lib, batched), T(lib, shared)
    np.testing.assert_allclose(
        tbat.op("matmul", tsh.ptr).read(), batched @ shared, rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(tbat.op("matmul", tb.ptr).read(), batched @ b, rtol=1e-5, atol=1e-5)
    c = rng_array(5, 7, seed=5)
    tc, row = T(lib, c), T(lib, c[0])
    np.testing.assert_array_equal(ta.op("add", tc.ptr).read(), a + c)
    np.testing.assert_array_equal(ta.op("mul", tc.ptr).read(), a * c)
    np.testing.assert_array_equal(ta.op("add", row.ptr).read(), a + c[0])
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(
        ta.op("softmax", ctypes.c_size_t(0)).read(),
        e / e.sum(-1, keepdims=True),
        rtol=1e-6,
        atol=1e-7,
    )
    w, bias = rng_array(7, seed=6), rng_array(7, seed=7)
    tw, tbias = T(lib, w), T(lib, bias)
    mean, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
    want = (a - mean) / np.sqrt(var + 1e-5) * w + bias
    got = ta.op("layer_norm", tw.ptr, tbias.ptr, ctypes.c_float(1e-5)).read()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    want = a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6) * w
    got = ta.op("rms_norm", tw.ptr, ctypes.c_float(1e-6)).read()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got = ta.op("rms_norm", None, ctypes.c_float(1e-6)).read()
    np.testing.assert_allclose(got, a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6), rtol=1e-5)


def attention_reference(q, k, v, causal, window):
    t, h, d = q.shape
    s, kv, _ = k.shape
    out = np.zeros_like(q)
    for head in range(h):
        g = head // (h // kv)
        scores = q[:, head] @ k[:, g].T / np.sqrt(d)
        for i in range(t):
            pos = s - t + i
            for j in range(s):
                if causal and (j > pos or (window and j <= pos - window)):
                    scores[i, j] = -np.inf
        p = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, head] = (p / p.sum(-1, keepdims=True)) @ v[:, g]
    return out


@pytest.mark.parametrize("causal, window", [(0, 0), (1, 0), (1, 3)])
def test_attention(lib, causal, window):
    q, k, v = rng_array(4, 4, 8, seed=8), rng_array(6, 2, 8, seed=9), rng_array(6, 2, 8, seed=10)
    tq, tk, tv = T(lib, q), T(lib, k), T(lib, v)
    got = tq.op(
        "attention",
        tk.ptr,
        tv.ptr,
        ctypes.c_uint32(causal),
        ctypes.c_size_t(window),
        ctypes.c_float(0.0),
    ).read()
    np.testing.assert_allclose(
        got, attention_reference(q, k, v, causal, window), rtol=1e-5, atol=1e-6
    )


def test_errors(lib):
    a, b = T(lib, rng_array(2, 3)), T(lib, rng_array(4, 5))
    cases = [
        (lambda: a.op("matmul", b.ptr), "invalid_argument"),
        (lambda: a.op("add", b.ptr), "invalid_argument"),
        (lambda: a.op("matmul", None), "null_handle"),
        (lambda: T(lib, rng_array(2, 2), dtype=7), "invalid_argument"),
        (
            lambda: (
                a.read(F16) if False else lib("tensor_read", a.ptr, F32, None, ctypes.c_size_t(3))
            ),
            "invalid_argument",
        ),
        (
            lambda: lib("tensor_free", ctypes.c_void_p(ctypes.addressof(ctypes.c_uint64(7)))),
            "wrong_handle",
        ),
    ]
    for call, status in cases:
        with pytest.raises(CapiError) as info:
            call()
        assert info.value.status == status
    huge = (ctypes.c_size_t * 3)(1 << 30, 1 << 30, 1 << 30)
    out = ctypes.c_void_p()
    with pytest.raises(CapiError) as info:
        lib("tensor_create", None, F32, huge, ctypes.c_size_t(3), ctypes.byref(out))
    assert info.value.status == "limit"
    a.free()
    b.free()
