"""Backend priorities and capabilities: what discovery records, what `auto` picks, and
the up-front check a job makes (require_capabilities)."""

import json
from importlib.metadata import EntryPoint

import pytest

import riftco.tensor as rt
from riftco.tensor.backend import overridden_capabilities
from riftco.tensor.cpu import CpuBackend
from riftco.testing.tensor import REFERENCE_ENTRY_POINT, NumpyReferenceBackend, extra_entry_points


def ep(name: str, target: str) -> EntryPoint:
    return EntryPoint(name=name, value=f"plugins_for_tests:{target}", group="riftco.backends")


def info(name: str) -> rt.BackendInfo:
    return next(i for i in rt.backends() if i.name == name)


EVERY = tuple(rt.CAPABILITIES)
#: The numpy reference backend has every kernel but the native whole-step decoder and
#: the products in a compute dtype, the linear layer's ops, the residual add with its
#: layer norm (and their gradients together), attention in a compute dtype (its float32
#: products there) and attention through its stacked projections, which the op layer
#: composes there, and the mean cross-entropy (API 1.9-1.15).
DECODE = ("decode_program", "decode_step")
COMPOSED_THERE = (
    "matmul_compute",
    "linear",
    "linear_backward",
    "add_layer_norm",
    "flash_attention_compute",
    "flash_attention_backward_compute",
    "projected_attention",
    "projected_attention_backward",
    "add_layer_norm_backward",
    "cross_entropy_mean",
    "cross_entropy_mean_backward",
)
REFERENCE = tuple(c for c in EVERY if c not in (*DECODE, *COMPOSED_THERE))


def test_the_base_class_implements_nothing():
    assert rt.Backend().capabilities() == frozenset()
    assert rt.Backend.priority == 0


def test_cpu_implements_every_capability_and_the_reference_backend_all_but_decoding():
    assert rt.get_backend("cpu").capabilities() == frozenset(EVERY)
    assert NumpyReferenceBackend().capabilities() == frozenset(REFERENCE)
    cpu = info("cpu")
    assert cpu.capabilities == EVERY and cpu.missing_capabilities == ()
    assert cpu.composed == ()
    assert cpu.priority == 0 and cpu.runs_on_host
    with extra_entry_points(REFERENCE_ENTRY_POINT):
        reference = info("reference")
        assert reference.capabilities == REFERENCE
        assert reference.missing_capabilities == DECODE
        assert reference.composed == COMPOSED_THERE
    assert not rt.Decoder.available(NumpyReferenceBackend())


def test_block_weights_are_composed_where_a_backend_lacks_their_kernels():
    class NoBlockKernels(NumpyReferenceBackend):
        block_dequantize = rt.Backend.block_dequantize
        block_linear = rt.Backend.block_linear

    backend = NoBlockKernels()
    assert not {"block_dequantize", "block_linear"} & backend.capabilities()
    assert rt.composed_capabilities(backend) == {"block_dequantize", "block_linear"} | set(
        COMPOSED_THERE
    )
    assert set(rt.COMPOSED) == {"block_dequantize", "block_linear", *COMPOSED_THERE}

    # A composition is only there when every ingredient is a kernel of the backend.
    class NoMatmul(NoBlockKernels):
        matmul = rt.Backend.matmul

    # (the residual add and its norm need no product, nor do their gradients, nor
    # attention's fallbacks, nor the mean cross-entropy)
    assert rt.composed_capabilities(NoMatmul()) == {
        "add_layer_norm",
        "add_layer_norm_backward",
        "cross_entropy_mean",
        "cross_entropy_mean_backward",
        "flash_attention_compute",
        "flash_attention_backward_compute",
    }
    assert rt.composed_capabilities(rt.get_backend("cpu")) == frozenset()
    # The op layer runs the composition on the backend itself.
    w = rt.block_quantize(rt.tensor([[0.5] * 32, [-1.0] * 32]), "q8_0", backend=backend)
    x = rt.tensor([[1.0] * 32], backend=backend)
    assert rt.block_linear(x, w).backend is backend
    assert rt.require_capabilities(backend, ["block_linear"], job="serving") is backend
    with pytest.raises(rt.JobUnsupported, match="does not implement: block_linear"):
        rt.require_capabilities(NoMatmul(), ["block_linear"], job="serving")


def test_capabilities_are_the_methods_a_class_overrides():
    from plugins_for_tests import Partial

    assert Partial().capabilities() == {"from_numpy", "to_numpy", "unary", "binary"}

    class FromCpu(CpuBackend):  # inherited implementations count
        pass

    assert FromCpu().capabilities() == frozenset(EVERY)
    assert overridden_capabilities(FromCpu) is overridden_capabilities(FromCpu)


def test_each_capability_is_detected_on_its_own():
    for name in EVERY:
        cls = type("One", (rt.Backend,), {name: lambda self, *a: None})
        assert cls().capabilities() == {name}, name


def test_discovery_records_capabilities_in_table_order_and_the_missing_ones():
    with extra_entry_points(ep("partial", "partial"), ep("narrowed", "narrowed")):
        partial = info("partial")
        assert partial.available
        assert partial.capabilities == ("from_numpy", "to_numpy", "unary", "binary")
        assert partial.missing_capabilities == tuple(
            c for c in EVERY if c not in partial.capabilities
        )
        assert info("narrowed").capabilities == ("from_numpy", "to_numpy", "unary")


def test_a_backend_claiming_what_it_does_not_implement_is_unavailable():
    with extra_entry_points(ep("boastful", "boastful"), ep("listy", "capabilities_as_list")):
        boastful = info("boastful")
        assert not boastful.available and boastful.capabilities == ()
        # matmul is a lie; a name from a newer API is not this riftco-tensor's to judge
        assert "claims matmul, which its class does not implement" in boastful.reason
        assert "expected a frozenset" in info("listy").reason


def test_discovery_records_dtypes_and_refuses_malformed_ones():
    assert info("cpu").dtypes == ("float32", "int64", "bool", "uint8", "bfloat16")
    with extra_entry_points(ep("partial", "partial"), ep("dtypes_list", "dtypes_as_list")):
        assert info("partial").dtypes == ("float32", "int64", "bool", "uint8")
        listed = info("dtypes_list")
        assert not listed.available and "expected a frozenset of riftco.tensor.DType" in (
            listed.reason
        )
    with extra_entry_points(ep("no_int64", "without_int64")):
        assert "declares dtypes without int64" in info("no_int64").reason


def test_auto_takes_the_highest_priority_then_the_first_name():
    with extra_entry_points(ep("low", "low"), ep("high", "high")):
        assert rt.get_backend("auto").name == "high"
        assert info("high").priority == 300 and info("low").priority == 100
    with extra_entry_points(ep("low", "low")):
        assert rt.get_backend().name == "low"
    with extra_entry_points(ep("high", "high"), ep("also_high", "also_high"), ep("low", "low")):
        assert rt.get_backend("auto").name == "also_high"


def test_a_priority_that_is_not_an_int_makes_the_plugin_unavailable():
    with extra_entry_points(ep("bad", "bad_priority")):
        assert "declares priority True; expected an int" in info("bad").reason
        assert rt.get_backend("auto").name == "cpu"


def test_require_capabilities_returns_the_backend_when_all_are_there():
    cpu = rt.get_backend("cpu")
    assert rt.require_capabilities("cpu", EVERY, job="everything") is cpu
    assert rt.require_capabilities(None, ["matmul"], job="x") is rt.get_backend()
    assert rt.require_capabilities(cpu, [], job="nothing") is cpu


def test_require_capabilities_names_every_missing_one_in_table_order():
    with extra_entry_points(ep("partial", "partial")):
        with pytest.raises(rt.JobUnsupported) as caught:
            rt.require_capabilities(
                "partial", ["nf4_linear", "unary", "matmul", "from_numpy"], job="QLoRA training"
            )
    err = caught.value
    assert isinstance(err, rt.CapabilityMissing) and isinstance(err, rt.RiftcoError)
    assert err.missing == ("matmul", "nf4_linear") and err.backend == "partial"
    assert err.job == "QLoRA training"
    assert str(err).startswith(
        "QLoRA training needs capabilities that backend 'partial' does not implement: "
        "matmul, nf4_linear;"
    )


def test_require_capabilities_honours_a_declared_narrowing(monkeypatch):
    with extra_entry_points(ep("narrowed", "narrowed")):
        monkeypatch.setenv("RIFTCO_BACKEND", "narrowed")
        with pytest.raises(rt.JobUnsupported, match="does not implement: binary;"):
            rt.require_capabilities(None, ["binary", "unary"], job="adding")


def test_require_capabilities_rejects_unknown_names_and_unavailable_backends():
    with pytest.raises(rt.UnknownCapability, match="unknown capabilities matmull"):
        rt.require_capabilities("cpu", ["matmull"], job="typo")
    with extra_entry_points(ep("cuda", "no_device")):
        with pytest.raises(rt.BackendUnavailable, match="libcuda.so.1 missing"):
            rt.require_capabilities("cuda", ["matmul"], job="training")


def test_backends_command_shows_priority_and_capabilities(capsys):
    from riftco.tensor.cli import main

    with extra_entry_points(ep("partial", "partial"), ep("high", "high")):
        assert main([]) == 0
        table = capsys.readouterr().out
        assert main(["--capabilities"]) == 0
        full = capsys.readouterr().out
        assert main(["--json"]) == 0
        rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    n = len(EVERY)
    assert f"native kernels: {n} of {n} (API" in table
    assert "host, by name only" in table and "priority 300" in table
    assert f"native kernels: 4 of {n}" in table
    assert "missing: copy_strided reshape" not in table  # table order, not sorted
    assert "missing: reshape assign astype copy_strided" in table
    assert "implements: from_numpy to_numpy unary binary" in full
    assert rows["cpu"]["capabilities"] == list(EVERY) and rows["cpu"]["priority"] == 0
    assert rows["partial"]["missing_capabilities"][:2] == ["reshape", "assign"]
    assert rows["high"]["priority"] == 300 and not rows["high"]["runs_on_host"]
