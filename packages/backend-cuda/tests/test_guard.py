"""The guarded device: a sticky error is "device lost" on every later call, and
RIFTCO_CUDA_SYNC=1 names the kernel an asynchronous fault came from."""

from __future__ import annotations

import pytest

from riftco.backends.cuda.counting import CountingCudaBackend, CountingDevice
from riftco.backends.cuda.errors import CudaDeviceLost, CudaError
from riftco.backends.cuda.guard import GuardedDevice, is_sticky


class FaultyDevice(CountingDevice):
    """Launches are accepted; the fault shows at the next synchronize."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error, self.pending = error, False

    def launch(self, *args) -> None:
        super().launch(*args)
        self.pending = True

    def synchronize(self) -> None:
        if self.pending:
            raise CudaError(self.error)


def test_sync_names_the_kernel_that_faulted():
    device = GuardedDevice(FaultyDevice("CUDA_ERROR_INVALID_VALUE: bad"), sync=True)
    with pytest.raises(CudaError, match="kernel unary_f32 of module elementwise failed"):
        device.launch("elementwise", "unary_f32", (1, 1, 1), (32, 1, 1), 0, [])


def test_a_sticky_error_loses_the_device_for_every_later_call():
    device = GuardedDevice(FaultyDevice("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"))
    device.launch("index", "gather_4", (1, 1, 1), (32, 1, 1), 0, [])  # no sync: no error yet
    with pytest.raises(CudaDeviceLost, match="lost at synchronize: CUDA_ERROR_ILLEGAL_ADDRESS"):
        device.synchronize()
    for call in (lambda: device.alloc(16, "float32"), device.synchronize):
        with pytest.raises(CudaDeviceLost, match="restart it"):
            call()
    assert device.lost is not None and "ILLEGAL_ADDRESS" in device.lost


def test_ordinary_errors_pass_through_and_the_device_stays():
    device = GuardedDevice(FaultyDevice("CUDA_ERROR_INVALID_VALUE"), sync=False)
    device.launch("elementwise", "unary_f32", (1, 1, 1), (32, 1, 1), 0, [])
    with pytest.raises(CudaError) as caught:
        device.synchronize()
    assert not isinstance(caught.value, CudaDeviceLost) and device.lost is None
    assert not is_sticky(caught.value)


def test_the_backend_guards_its_device_and_reads_through_it():
    backend = CountingCudaBackend()
    assert isinstance(backend.device, GuardedDevice)
    assert backend.device.name == "counting stand-in"
    assert backend.device.inner is backend.counter


def test_sync_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("RIFTCO_CUDA_SYNC", "1")
    device = GuardedDevice(FaultyDevice("CUDA_ERROR_INVALID_VALUE"))
    with pytest.raises(CudaError, match="kernel k of module m failed"):
        device.launch("m", "k", (1, 1, 1), (1, 1, 1), 0, [])
