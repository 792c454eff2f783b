"""Entry-point targets that the registry tests register by patching discovery."""

from typing import ClassVar

from riftco.tensor import Backend, BackendUnavailable, DType


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


class RankedAccelerator(Backend):
    """An accelerator whose auto priority comes from the entry point's target."""

    runs_on_host = False

    def __init__(self, name: str, priority: int):
        self.name = name
        self.priority = priority


def low():
    return RankedAccelerator("low", 100)


def high():
    return RankedAccelerator("high", 300)


def also_high():
    return RankedAccelerator("also_high", 300)


def bad_priority():
    return RankedAccelerator("bad", True)


class Partial(Backend):
    """Storage and two elementwise capabilities, nothing else."""

    name = "partial"

    def from_numpy(self, array):
        return array.copy()

    def to_numpy(self, x, shape, dtype):
        return x

    def unary(self, op, x, shape, dtype):
        return -x if op == "neg" else abs(x)

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return a + b


def partial():
    return Partial()


class Narrowed(Partial):
    """Implements binary, but its device lacks it: the declared set is smaller."""

    name = "narrowed"

    def capabilities(self):
        return super().capabilities() - {"binary"}


def narrowed():
    return Narrowed()


class Boastful(Partial):
    """Claims matmul without implementing it."""

    name = "boastful"

    def capabilities(self):
        return super().capabilities() | {"matmul", "from_a_newer_api"}


def boastful():
    return Boastful()


def capabilities_as_list():
    backend = Partial()
    backend.capabilities = lambda: ["from_numpy"]
    return backend


class DtypesAsList(Partial):
    name = "dtypes_list"
    dtypes: ClassVar = [DType.float32]


def dtypes_as_list():
    return DtypesAsList()


class WithoutInt64(Partial):
    name = "no_int64"
    dtypes = frozenset({DType.float32, DType.bool, DType.uint8})


def without_int64():
    return WithoutInt64()
