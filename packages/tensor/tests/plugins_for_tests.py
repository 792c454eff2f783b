"""Entry-point targets that the registry tests register by patching discovery."""

from riftco.tensor import Backend, BackendUnavailable


def broken():
    raise RuntimeError("driver exploded while loading")


def no_device():
    raise BackendUnavailable("no CUDA driver found (libcuda.so.1 missing)")


class FutureBackend(Backend):
    name = "future"
    api_version = (99, 0)


def future():
    return FutureBackend()


class FakeAccelerator(Backend):
    name = "cuda"
    runs_on_host = False


def accelerator():
    return FakeAccelerator()


class HostPjrt(Backend):
    name = "tpu"
    runs_on_host = True


def host_pjrt():
    return HostPjrt()


def not_a_backend():
    return object()
