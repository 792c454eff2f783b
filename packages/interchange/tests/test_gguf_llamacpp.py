"""llama.cpp itself loads our GGUF exports: the same logits and the same token ids.

Opt-in (marker ``parity``): runs where ``llama_cpp`` (llama-cpp-python, which
builds llama.cpp from source) is installed, and skips elsewhere. The key/value
cache is kept in float32 so that it adds no float16 rounding of its own. A
``llama`` file in F32 then gives riftco's logits to float32 rounding (about 6e-7
measured); ``gpt2`` computes GELU through a float16 table on the CPU (about
5e-4), and F16 weights take float16 activations into the matrix products
(about 1e-3), so those are compared to 5e-3.
"""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

from riftco.autograd import no_grad  # noqa: E402
from riftco.interchange import export_gguf, model_arrays  # noqa: E402
from riftco.text import BpeTokenizer, ByteTokenizer  # noqa: E402

pytestmark = pytest.mark.parity

GGML_TYPE_F32 = 0
CASES = [
    ("gpt2", {}, "f32"),
    ("gpt2", {"tie_embeddings": True}, "f32"),
    ("gpt2", {}, "f16"),
    ("llama", {}, "f32"),
    ("llama", {"kv_heads": 1, "rope_theta": 500.0}, "f32"),
    ("llama", {"tie_embeddings": True}, "f16"),
]
IDS = ["gpt2", "gpt2-tied", "gpt2-f16", "llama", "llama-gqa", "llama-tied-f16"]
TEXT = "The quick brown fox, 42 lazy dogs!  Hello\n\nthere; it's 3.14 <|endoftext|> ok"


def _load(path, n_ctx):
    return llama_cpp.Llama(
        model_path=str(path),
        n_ctx=n_ctx,
        n_batch=n_ctx,
        logits_all=True,
        type_k=GGML_TYPE_F32,
        type_v=GGML_TYPE_F32,
        n_threads=2,
        verbose=False,
    )


@pytest.mark.parametrize(("preset", "overrides", "dtype"), CASES, ids=IDS)
def test_llamacpp_logits_match_ours(tmp_path, make_model, tokenizer, preset, overrides, dtype):
    model = make_model(preset, **overrides)
    arrays = model_arrays(model)
    path = export_gguf(tmp_path / "m.gguf", model.config, arrays, tokenizer, dtype=dtype)
    if dtype == "f16":  # compare with the weights the file holds
        stored = {
            n: a.astype(np.float16).astype(np.float32)
            if a.ndim == 2 and n != "position_embedding.weight"
            else a
            for n, a in arrays.items()
        }
        model.load_state_dict(stored)
    ids = tokenizer.encode("the quick brown fox jumps over the lazy dog")
    llm = _load(path, model.config.context_length)
    llm.eval(ids)
    theirs = np.array(llm.scores[: len(ids)], dtype=np.float64)
    with no_grad():
        ours = np.asarray(model(np.asarray([ids])).numpy(), dtype=np.float64)[0]
    assert theirs.shape == ours.shape
    exact = preset == "llama" and dtype == "f32"
    np.testing.assert_allclose(theirs, ours, atol=1e-5 if exact else 5e-3, rtol=0)
    assert (theirs.argmax(-1) == ours.argmax(-1)).all()


@pytest.mark.parametrize(
    "make_tokenizer",
    [
        lambda: BpeTokenizer.train(
            TEXT * 4 + " quick quick dogs", vocab_size=300, pretokenize="gpt2"
        ),
        lambda: ByteTokenizer.train(TEXT),
    ],
    ids=["bpe-gpt2", "byte"],
)
def test_llamacpp_tokenizes_to_our_ids(tmp_path, make_model, make_tokenizer):
    tokenizer = make_tokenizer()
    model = make_model("llama")
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
    llm = _load(path, model.config.context_length)
    for text in (TEXT, "quick  brown fox 4213", "it's   ok\n\n x"):
        ours = tokenizer.encode(text, allow_special=True)
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == ours, text
        assert llm.detokenize(ours, special=True).decode("utf-8") == tokenizer.decode(ours)
