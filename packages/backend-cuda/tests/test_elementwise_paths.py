"""The elementwise kernels' two paths on the host emulation (``cudaemu``): contiguous,
16-byte-aligned float32 operands four elements an access, everything else (tails,
broadcasts, strided views, unaligned buffers) one at a time -- the same bits as
numpy's float32 either way."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


class Recording(cuda_emulation.EmulatedCudaBackend):
    """The emulated backend, keeping the buffer addresses each launch was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.pointers: list[int] = []
        launch = self.device.launch

        def recorded(module, kernel, grid, block, shared, args):
            self.pointers += [a.ptr for a in args if isinstance(a, cuda_emulation.EmulatedBuffer)]
            return launch(module, kernel, grid, block, shared, args)

        self.device.launch = recorded  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def emu():
    return Recording()


@pytest.mark.parametrize("n", [4, 7, 64, 1003])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_contiguous_binary_has_numpys_bits(emu, op, n):
    rng = np.random.default_rng(n)
    a = rng.normal(0, 3, n).astype(np.float32)
    b = rng.normal(0, 3, n).astype(np.float32)
    a[::5] = np.nan if op in ("maximum", "minimum") else a[::5]
    with np.errstate(all="ignore"):
        want = BINARY[op](a, b)
    emu.pointers.clear()
    got = getattr(rt, op)(rt.tensor(a, backend=emu), rt.tensor(b, backend=emu)).numpy()
    assert all(p % 16 == 0 for p in emu.pointers), "the fast path needs aligned buffers"
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_broadcast_and_strided_operands_take_the_general_path(emu):
    rng = np.random.default_rng(1)
    a = rng.normal(0, 1, (5, 6)).astype(np.float32)
    row = rng.normal(0, 1, (6,)).astype(np.float32)
    ta, trow = rt.tensor(a, backend=emu), rt.tensor(row, backend=emu)
    np.testing.assert_array_equal((ta * trow).numpy(), a * row)
    np.testing.assert_array_equal((ta + 2.5).numpy(), a + np.float32(2.5))
    t = rt.tensor(a, backend=emu).transpose(1, 0)
    np.testing.assert_array_equal((t - t).numpy(), a.T - a.T)


def test_unaligned_buffers_take_the_general_path(emu):
    # Buffers one float past 16-byte alignment: every element one at a time.
    n = 37
    rng = np.random.default_rng(2)
    a, b = (rng.normal(0, 1, n).astype(np.float32) for _ in range(2))
    out = np.zeros(n + 1, np.float32)
    device = emu.device
    raw = [np.concatenate([[0], x]).astype(np.float32).view(np.uint8) for x in (a, b)]
    bufs = [device.upload(r, "float32") for r in raw]
    dst = device.upload(out.view(np.uint8), "float32")
    # Addresses one float past each buffer's start (an address argument is its integer).
    shifted = [buf.ptr + 4 for buf in (*bufs, dst)]
    assert all(buf.ptr % 16 == 0 for buf in (*bufs, dst)) and shifted[0] % 16 == 4
    args = [*shifted, n, 0, *emu._broadcast_args((n,), (n,), (n,))]
    device.launch("elementwise", "binary_f32", (1, 1, 1), (16, 1, 1), 0, args)
    got = device.download(dst, 0, (n + 1) * 4).view(np.float32)[1:]
    np.testing.assert_array_equal(got, a + b)


@pytest.mark.parametrize("n", [3, 8, 1001])
def test_contiguous_unary_has_the_bits_of_one_at_a_time(emu, n):
    rng = np.random.default_rng(n)
    x = rng.normal(0, 2, n).astype(np.float32)
    tx = rt.tensor(x, backend=emu)
    np.testing.assert_array_equal(rt.neg(tx).numpy(), -x)
    np.testing.assert_array_equal(rt.abs(tx).numpy(), np.abs(x))
    # exp and tanh: the device's own functions, the same on either path.
    whole = rt.exp(tx).numpy()
    parts = np.concatenate([rt.exp(rt.tensor(x[i : i + 1], backend=emu)).numpy() for i in range(n)])
    np.testing.assert_array_equal(whole.view(np.uint32), parts.view(np.uint32))
