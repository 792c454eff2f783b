import numpy as np
import pytest
from tensor_helpers import LEVELS, rand

import riftco.tensor as rt
from riftco.tensor import _native


def test_panics_become_riftco_errors():
    with pytest.raises(rt.KernelError, match="internal error in a CPU kernel: deliberate panic"):
        _native._panic_for_test()
    assert issubclass(rt.KernelError, rt.RiftcoError)


def test_kernel_argument_errors_are_riftco_errors():
    with pytest.raises(rt.KernelError, match="cannot broadcast"):
        _native.binary("add", np.ones(3, np.float32), np.ones(4, np.float32), [3])
    with pytest.raises(rt.KernelError, match="read past its end"):
        _native.copy_strided(np.ones(4, np.float32), [3], [2], 0)
    with pytest.raises(rt.KernelError, match="unknown unary op"):
        _native.unary("frobnicate", np.ones(2, np.float32))


def test_version_and_build_id():
    assert _native.__version__ == rt.__version__
    assert len(rt.native_build_id()) == 16
    assert (
        _native.BUILD_ID_MARKER == f"RIFTCO_BUILD_ID:riftco.tensor._native:{rt.native_build_id()}"
    )


@pytest.fixture
def restore_threads():
    before = rt.get_num_threads()
    yield
    rt.set_num_threads(before)


def _run_all(x, y, idx):
    t, u = rt.tensor(x), rt.tensor(y)
    return [
        (t @ u).numpy(),
        rt.matmul(t.reshape(64, 64, 64), u.reshape(64, 64, 64), transpose_b=True).numpy(),
        t.sum().numpy(),
        t.sum(axis=0).numpy(),
        t.sum(axis=1).numpy(),
        t.sum_squares().numpy(),
        t.mean(axis=1).numpy(),
        t.max(axis=0).numpy(),
        t.argmax(axis=1).numpy(),
        t.softmax().numpy(),
        t.log_softmax(causal=True).numpy(),
        rt.gelu(t).numpy(),
        rt.exp(t).numpy(),
        (t * u + 1.0).numpy(),
        t.transpose(0, 1).numpy(),
        (t[:1] @ u).numpy(),
        rt.matmul(t[:1], u, transpose_b=True).numpy(),
        rt.index_add(rt.zeros(512, 512), 0, rt.tensor(idx), t).numpy(),
    ]


def test_bit_identical_with_one_and_two_threads(restore_threads):
    x, y = rand((512, 512), 1), rand((512, 512), 2)
    idx = np.random.default_rng(0).integers(0, 512, size=512)
    rt.set_num_threads(1)
    one = _run_all(x, y, idx)
    rt.set_num_threads(2)
    two = _run_all(x, y, idx)
    for a, b in zip(one, two):
        assert a.tobytes() == b.tobytes()


def test_set_num_threads_validates():
    with pytest.raises(ValueError, match="positive"):
        rt.set_num_threads(0)


def test_cpu_isa_is_capped_never_raised():
    detected = rt.cpu_isa_detected()
    assert detected in LEVELS
    before = rt.cpu_isa()
    try:
        for name in LEVELS:
            used = rt.set_cpu_isa(name)
            assert used == LEVELS[min(LEVELS.index(name), LEVELS.index(detected))]
            assert rt.cpu_isa() == used
        assert rt.set_cpu_isa("portable") == "portable"
        assert "portable kernels" in rt.get_backend("cpu").describe()
    finally:
        rt.set_cpu_isa(before)
    with pytest.raises(ValueError, match="expected one of portable, avx2, avx512, avx512-vnni"):
        rt.set_cpu_isa("sse9")


def test_cpu_isa_env_cap_and_bad_name(tmp_path):
    import subprocess
    import sys

    code = "import riftco.tensor as rt, riftco.tensor._native as n; print(rt.cpu_isa(), n.cpu_isa_env_error())"
    env = {**__import__("os").environ, "RIFTCO_CPU_ISA": "portable"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[0] == "portable" and out.stdout.split()[1] == "None"
    env["RIFTCO_CPU_ISA"] = "sse9"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[0] == rt.cpu_isa_detected()
    assert 'RIFTCO_CPU_ISA="sse9" is not one of portable' in out.stdout


def _glibc() -> bool:
    import platform

    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize("setting", [None, "0"])
def test_freed_buffers_are_kept_unless_opted_out(setting):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RIFTCO_CPU_KEEP_FREED"}
    if setting is not None:
        env["RIFTCO_CPU_KEEP_FREED"] = setting
    code = "from riftco.tensor import _native; print(_native.KEEPS_FREED_MEMORY)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(setting is None and _glibc())
