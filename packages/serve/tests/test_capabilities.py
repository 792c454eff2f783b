"""Serving checks up front that the backend has what decoding the bundle's model needs,
and what it checks for is enough: a backend with exactly those capabilities serves."""

import sys
import types
from importlib.metadata import EntryPoint

import pytest

import riftco.nn as nn
import riftco.serve.loading as loading
import riftco.tensor as rt
from riftco.nn import TransformerConfig
from riftco.serve import ServerConfig
from riftco.serve.cli import main
from riftco.serve.loading import engine_from_bundle, serving_capabilities
from riftco.tensor.cpu import CpuBackend
from riftco.testing.tensor import extra_entry_points

RESTRICTED = EntryPoint(
    name="restricted", value="serve_restricted_backend:create", group="riftco.backends"
)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, tiny_model):
    from riftco.interchange import save_bundle

    path = tmp_path_factory.mktemp("bundle") / "tiny.rift"
    save_bundle(path, *tiny_model)
    return path


@pytest.fixture
def restricted(monkeypatch):
    """Register `restricted`: the CPU backend with only the capabilities given; every
    other one is Backend's own method, which raises CapabilityMissing."""

    def use(names):
        removed = {n: getattr(rt.Backend, n) for n in rt.CAPABILITIES if n not in names}
        cls = type("Restricted", (CpuBackend,), {"name": "restricted", **removed})
        module = types.ModuleType("serve_restricted_backend")
        module.create = cls
        monkeypatch.setitem(sys.modules, module.__name__, module)
        rt.reset_discovery()

    with extra_entry_points(RESTRICTED):
        yield use


def test_serving_needs_forward_and_paged_decoding_kernels_only():
    gpt = set(serving_capabilities(TransformerConfig.preset("gpt2")))
    assert {"layer_norm", "write_rows", "paged_attention", *rt.BASE_CAPABILITIES} <= gpt
    training_only = {"adam_update", "cross_entropy", "flash_attention", "attention"}
    assert not {c for c in gpt if c.endswith("_backward")} | (training_only & gpt)
    llama = set(serving_capabilities(TransformerConfig.preset("llama")))
    assert {"rms_norm", "rotary"} <= llama and "layer_norm" not in llama


@pytest.mark.anyio
async def test_a_backend_with_exactly_the_needed_capabilities_serves(
    bundle, tiny_model, restricted, monkeypatch, serve, anyio_backend
):
    restricted(serving_capabilities(tiny_model[0].config))
    monkeypatch.setenv("RIFTCO_BACKEND", "restricted")  # the model and its cache
    engine = engine_from_bundle(bundle, model_id="tiny", page_size=8)
    assert engine.model.backend.name == "restricted"
    async with serve(engine, ServerConfig(model_id="tiny")) as client:
        r = await client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": "the quick", "max_tokens": 6, "temperature": 0},
        )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] > 0


def test_a_missing_kernel_stops_serving_before_the_weights_are_read(
    bundle, tiny_model, restricted, monkeypatch
):
    needed = serving_capabilities(tiny_model[0].config)
    restricted([c for c in needed if c not in ("paged_attention", "layer_norm")])

    def never(*args, **kwargs):
        raise AssertionError("the bundle was loaded")

    monkeypatch.setattr("riftco.interchange.load_bundle", never)
    with pytest.raises(rt.JobUnsupported) as caught:
        engine_from_bundle(bundle, backend="restricted")
    assert caught.value.missing == ("layer_norm", "paged_attention")
    assert caught.value.job == "serving"
    assert loading.require_serving_backend(bundle, "cpu").name == "cpu"


def test_the_command_refuses_a_backend_that_cannot_serve(bundle, restricted, capsys):
    restricted(rt.BASE_CAPABILITIES)
    assert main([str(bundle), "--backend", "restricted"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("riftco serve: serving needs capabilities that backend 'restricted'")
    assert "write_rows, paged_attention" in err
    assert main([str(bundle), "--backend", "nope"]) == 1
    assert "'nope' is not installed" in capsys.readouterr().err


@pytest.mark.anyio
async def test_reduced_precision_weights_serve(bundle, restricted, serve, anyio_backend):
    engine = engine_from_bundle(bundle, model_id="tiny", page_size=8, weights="q8_0")
    formats = set(nn.inference_formats(engine.model).values())
    assert formats == {"q8_0"}
    async with serve(engine, ServerConfig(model_id="tiny")) as client:
        r = await client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": "the quick", "max_tokens": 6, "temperature": 0},
        )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] > 0
    # A backend without the block-layout kernels gets them composed from its own ops
    # (riftco-tensor's op layer, on its device) and serves; one that cannot have them
    # composed is refused before the weights are read.
    restricted(serving_capabilities(engine.model.config))
    composed = engine_from_bundle(bundle, backend="restricted", weights="q4_0")
    assert "block_linear" in rt.composed_capabilities(composed.model.backend)
    assert set(nn.inference_formats(composed.model).values()) == {"q4_0"}
    restricted(set(serving_capabilities(engine.model.config)) - {"concat"})
    with pytest.raises(rt.JobUnsupported) as caught:
        engine_from_bundle(bundle, backend="restricted", weights="q4_0")
    assert "block_linear" in caught.value.missing
