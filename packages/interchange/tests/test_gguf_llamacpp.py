"""llama.cpp itself loads our GGUF exports: the same logits and the same token ids.

Opt-in (marker ``parity``): runs where ``llama_cpp`` (llama-cpp-python, which
builds llama.cpp from source) is installed, and skips elsewhere. The key/value
cache is kept in float32 so that it adds no float16 rounding of its own. A
``llama`` file in F32 then gives riftco's logits to float32 rounding (about 6e-7
measured); ``gpt2`` computes GELU through a float16 table on the CPU (about
5e-4), and F16 weights take float16 activations into the matrix products
(about 1e-3), so those are compared to 5e-3.

Q8_0 and Q4_0 files, riftco's own and those llama.cpp's quantizer makes from riftco's
F32 export (``llama_model_quantize``, default and ``--pure``), run on their stored
blocks (``weights="stored"``) with the products' inputs quantized as ggml quantizes
them, and give llama.cpp's logits to float32 rounding: ``llama`` within 1.7e-7 of the
largest logit on all 162 rows measured (QUANT_PARITY asked of most rows: an input that
lands within rounding of the boundary between two 8-bit codes moves its row and the
later ones; riftco-tensor's README says why). Quantized ``gpt2`` is 1e-2 away, from
llama.cpp's GELU table alone: riftco-testing's reference with that table gives
llama.cpp's logits to about 1e-7.
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


#: On most rows, |ours - llama.cpp's| over the largest |logit| for Q8_0 / Q4_0 llama files.
QUANT_PARITY = 1e-4
QUANT_FLIP = 0.1
LLAMA_FTYPES = {"q8_0": 7, "q4_0": 2}


def _llama_quantize(src, dst, dtype, pure):
    """llama.cpp's quantizer (what ``llama-quantize [--pure] src dst TYPE`` runs)."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPES[dtype]
    params.pure = pure
    params.nthread = 2
    status = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    assert status == 0, f"llama_model_quantize returned {status}"
    return dst


def test_llamacpp_quantized_logits_match_ours(tmp_path, make_model, tokenizer):
    from riftco.interchange import import_gguf_model

    ids = tokenizer.encode("the quick brown fox jumps over the lazy dog")
    rows, cases = [], 0
    for seed, overrides in ((0, {"kv_heads": 2}), (1, {}), (2, {"tie_embeddings": True})):
        model = make_model("llama", seed=seed, d_model=64, n_heads=4, d_ff=96, **overrides)
        arrays = model_arrays(model)
        f32 = export_gguf(tmp_path / f"{seed}-f32.gguf", model.config, arrays, tokenizer)
        for dtype in ("q8_0", "q4_0"):
            files = [
                export_gguf(
                    tmp_path / f"{seed}-{dtype}.gguf", model.config, arrays, tokenizer, dtype
                )
            ]
            for pure in (True, False):
                made = tmp_path / f"{seed}-{dtype}-{'pure' if pure else 'default'}.gguf"
                files.append(_llama_quantize(f32, made, dtype, pure))
            for path in files:
                llm = _load(path, model.config.context_length)
                llm.eval(ids)
                theirs = np.array(llm.scores[: len(ids)], dtype=np.float64)
                ours = import_gguf_model(path, weights="stored").logits(ids).astype(np.float64)
                rows.append(np.abs(theirs - ours).max(-1) / np.abs(theirs).max())
                cases += 1
    errors = np.concatenate(rows)
    assert cases == 18
    assert (errors <= QUANT_PARITY).mean() >= 0.75, errors
    assert errors.max() <= QUANT_FLIP


def test_the_reference_computes_what_llamacpp_computes_on_quantized_gpt2(
    tmp_path, make_model, tokenizer
):
    """``gpt2`` on quantized weights: llama.cpp takes GELU from a table of halves, whose
    error the quantized inputs of the next product turn into about 1e-2 on the logits
    (riftco computes the exact tanh form). riftco-testing's reference with ggml's GELU
    and input quantization gives llama.cpp's logits to float32 rounding."""
    from riftco.testing.llamacpp import llamacpp_logits

    ids = tokenizer.encode("the quick brown fox jumps over the lazy dog")
    rows = []
    for seed in (0, 1):
        model = make_model("gpt2", seed=seed, d_model=64, n_heads=4, d_ff=96)
        for dtype in ("q8_0", "q4_0"):
            path = export_gguf(
                tmp_path / f"{seed}-{dtype}.gguf",
                model.config,
                model_arrays(model),
                tokenizer,
                dtype,
            )
            llm = _load(path, model.config.context_length)
            llm.eval(ids)
            theirs = np.array(llm.scores[: len(ids)], dtype=np.float64)
            reference = llamacpp_logits(path, ids, activations="ggml", gelu="ggml")
            rows.append(np.abs(theirs - reference).max(-1) / np.abs(theirs).max())
    errors = np.concatenate(rows)
    assert (errors <= QUANT_PARITY).mean() >= 0.75, errors
    assert errors.max() <= QUANT_FLIP


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_weights_in_process_decode_as_llamacpp_decodes_the_converted_file(
    tmp_path, make_model, tokenizer, dtype
):
    """``generate --weights DTYPE`` (riftco's in-process quantization) and llama.cpp on
    the file ``convert --dtype DTYPE`` writes choose the same greedy tokens."""
    from riftco.interchange import RunnableModel
    from riftco.interchange.quantization import quantize_model

    model = make_model("llama", d_model=64, n_heads=4, d_ff=96, context_length=64)
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer, dtype)
    quantize_model(model, dtype)
    runnable = RunnableModel(model, tokenizer)
    llm = _load(path, 64)
    for prompt in ("the quick brown", "hello there", "lazy dog jumps"):
        ids = tokenizer.encode(prompt)
        ours = runnable.generate_ids(ids, max_new_tokens=24).tokens
        llm.reset()
        llm.eval(ids)
        theirs = []
        for _ in range(24):
            # riftco samples only ids the tokenizer has (the vocabulary may be padded).
            theirs.append(int(np.argmax(llm.scores[llm.n_tokens - 1][: tokenizer.vocab_size])))
            llm.eval(theirs[-1:])
        assert ours == theirs, prompt
