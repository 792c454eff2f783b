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
