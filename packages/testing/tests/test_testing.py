"""The test support itself: the reference backend registers only when patched in."""

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.testing.tensor import (
    REFERENCE_ENTRY_POINT,
    NumpyReferenceBackend,
    backend_names,
    extra_entry_points,
)


def test_the_reference_backend_is_discoverable_only_when_patched_in():
    assert "reference" not in [info.name for info in rt.backends()]
    with extra_entry_points(REFERENCE_ENTRY_POINT):
        reference = rt.get_backend("reference")
        assert isinstance(reference, NumpyReferenceBackend)
        x = rt.tensor([[1.0, -2.0]], backend="reference")
        np.testing.assert_array_equal(rt.relu(x).numpy(), [[1.0, 0.0]])
    assert "reference" not in [info.name for info in rt.backends()]
    assert backend_names()[0] == "cpu" and backend_names()[-1] == "reference"


def test_the_serve_module_imports_where_riftco_serve_is_installed():
    pytest.importorskip("riftco.serve")
    from riftco.testing.serve import ScriptedEngine

    assert ScriptedEngine().model_id == "scripted"


def test_the_llamacpp_forward_refuses_other_architectures(tmp_path):
    gguf = pytest.importorskip("gguf")
    from riftco.testing.llamacpp import llamacpp_logits

    path = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_tensor("token_embd.weight", np.zeros((2, 2), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="expected architecture gpt2 or llama"):
        llamacpp_logits(path, [0])


def test_the_llamacpp_forward_quantizes_inputs_as_ggml_does():
    from riftco.testing.llamacpp import ggml_q8_0_input, llamacpp_logits

    with pytest.raises(ValueError, match="activations: expected 'exact' or 'ggml'"):
        llamacpp_logits("unused.gguf", [0], activations="q8")
    x = np.zeros((1, 64), np.float32)
    x[0, 0] = 100.0  # scale: 100 / 127 rounded to a half; codes from 127 / 100
    x[0, 1] = 37.3
    x[0, 32] = 127.0  # scale 1: the codes are x rounded to nearest, ties to even
    x[0, 33:36] = [0.5, 1.5, -2.5]
    got = ggml_q8_0_input(x)
    d = float(np.float16(np.float32(100) / np.float32(127)))
    assert got[0, 0] == 127 * d and got[0, 1] == np.rint(np.float32(37.3) * np.float32(1.27)) * d
    assert list(got[0, 32:36]) == [127.0, 0.0, 2.0, -2.0]
    assert not ggml_q8_0_input(np.zeros((2, 32), np.float32)).any()
    with pytest.raises(ValueError, match="multiple of 32"):
        ggml_q8_0_input(np.zeros((1, 31), np.float32))


def test_the_scripted_engine_frees_a_slot_closed_before_its_task_ran():
    """A stream closed before its generation task first runs still frees its slot."""
    pytest.importorskip("riftco.serve")
    import asyncio

    from riftco.serve.engine import GenerationRequest
    from riftco.testing.serve import ScriptedEngine

    async def main() -> ScriptedEngine:
        engine = ScriptedEngine(capacity=2)
        engine.start()
        for _ in range(5):  # more than the capacity: every closed stream gave its slot back
            channel = engine.submit(GenerationRequest(prompt="hello there"))
            await channel.aclose()  # before the task's first step
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        finished = engine.submit(GenerationRequest(prompt="hello there"))
        async for _ in finished:
            pass
        return engine

    engine = asyncio.run(main())
    assert engine.active == 0 and engine.closed_early == 5 and engine.rejected == 0


def test_ggml_gelu_is_a_table_of_halves():
    from riftco.testing.llamacpp import ggml_gelu, llamacpp_logits

    with pytest.raises(ValueError, match="gelu: expected 'exact' or 'ggml'"):
        llamacpp_logits("unused.gguf", [0], gelu="erf")
    x = np.array([-11.0, -10.0, 10.0, 11.0, 1.0, 0.1234567], np.float32)
    got = ggml_gelu(x)
    assert list(got[:4]) == [0.0, 0.0, 10.0, 11.0]
    h = np.float32(np.float16(np.float32(0.1234567)))
    c = np.float32(np.sqrt(2 / np.pi))
    gelu_h = np.float32(0.5) * h * (1 + np.tanh(c * h * (1 + np.float32(0.044715) * h * h)))
    assert got[5] == np.float16(gelu_h) and got[5] != 0.5 * 0.1234567 * (1 + np.tanh(0.1))
    assert abs(got[4] - 0.841192) < 1e-3
