"""Parity with independent implementations: transformers' GPT-2 and Llama on the same
weights, in both directions, and the tokenizers library on our tokenizer.json.

Opt-in: these run where torch, transformers and tokenizers are installed (the
``parity`` extra) and skip elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from riftco.interchange import (
    RunnableModel,
    export_huggingface_model,
    import_huggingface_model,
)
from riftco.interchange.hf_tokenizer import read_tokenizer_files, write_tokenizer_files
from riftco.text import BpeTokenizer, ByteTokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = pytest.mark.parity
TOLERANCE = 1e-4
TEXTS = [
    "the quick brown fox",
    "hello there, <|endoftext|> the lazy dog!",
    "  spaces\tand\nnewlines 123 ünïcödé 🙂",
    "<|user|>hi<|end|><|assistant|>",
]
CASES = [
    ("gpt2", {}),
    ("gpt2", {"tie_embeddings": True}),
    ("gpt2", {"gelu": "exact"}),
    ("llama", {}),
    ("llama", {"kv_heads": 1, "rope_theta": 500.0}),
    ("llama", {"tie_embeddings": True}),
]


def _ids(tokenizer, count=3, length=20):
    rng = np.random.default_rng(0)
    return rng.integers(0, tokenizer.vocab_size, size=(count, length))


def _theirs(folder):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    return model.eval()


def _their_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=lambda v: str(v))
def test_our_export_runs_in_transformers_with_our_logits(
    tmp_path, make_model, tokenizer, preset, overrides
):
    model = make_model(preset, **overrides)
    ours = RunnableModel(model, tokenizer)
    export_huggingface_model(ours, tmp_path)
    theirs = _theirs(tmp_path)
    expected = "GPT2LMHeadModel" if preset == "gpt2" else "LlamaForCausalLM"
    assert type(theirs).__name__ == expected
    ids = _ids(tokenizer)
    difference = np.abs(ours.logits(ids) - _their_logits(theirs, ids)).max()
    assert difference <= TOLERANCE, difference


def _transformers_model(kind, tied, seed=0):
    torch.manual_seed(seed)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=320,
            n_positions=32,
            n_embd=16,
            n_layer=2,
            n_head=2,
            tie_word_embeddings=tied,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=320,
            max_position_embeddings=32,
            hidden_size=16,
            intermediate_size=40,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=tied,
            rope_theta=1000.0,
        )
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # random norms and biases too, so that every tensor matters
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.eval()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("tied", [False, True])
def test_save_pretrained_directories_import_with_their_logits(tmp_path, tokenizer, kind, tied):
    theirs = _transformers_model(kind, tied)
    theirs.save_pretrained(tmp_path)
    write_tokenizer_files(tokenizer, tmp_path, context_length=32)
    ours = import_huggingface_model(tmp_path)
    assert ours.config.tie_embeddings is tied
    ids = _ids(tokenizer)
    difference = np.abs(ours.logits(ids) - _their_logits(theirs, ids)).max()
    assert difference <= TOLERANCE, difference


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_greedy_generation_matches_transformers(tmp_path, make_model, tokenizer, preset):
    # The vocabulary is the tokenizer's: ours never samples ids the tokenizer lacks.
    ours = RunnableModel(make_model(preset, vocab_size=tokenizer.vocab_size), tokenizer)
    export_huggingface_model(ours, tmp_path)
    theirs = _theirs(tmp_path)
    prompt = tokenizer.encode("the quick brown fox")
    mine = ours.generate_ids(prompt, max_new_tokens=10).tokens
    with torch.no_grad():
        out = theirs.generate(
            torch.tensor([prompt]),
            max_new_tokens=10,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    assert len(mine) == 10
    assert mine == out[0, len(prompt) :].tolist()


def test_a_tokenizer_resaved_by_transformers_imports_with_its_chat_template(tmp_path, tokenizer):
    write_tokenizer_files(tokenizer, tmp_path / "ours", context_length=32)
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    auto.save_pretrained(tmp_path / "theirs")
    back = read_tokenizer_files(tmp_path / "theirs")
    assert back.chat_template == tokenizer.chat_template
    for text in TEXTS:
        assert back.encode(text) == tokenizer.encode(text)


def test_transformers_generate_stops_at_the_end_of_a_turn(tmp_path, make_model, tokenizer):
    # A model that always answers <|end|>: the final norm outputs a constant vector
    # that only the end marker's head row picks up.
    model = make_model("gpt2", vocab_size=tokenizer.vocab_size)
    end = tokenizer.special_tokens["<|end|>"]
    state = {name: np.array(value.numpy()) for name, value in model.state_dict().items()}
    state["final_norm.weight"][:] = 0.0
    state["final_norm.bias"][:] = 0.0
    state["final_norm.bias"][0] = 1.0
    state["language_model_head.weight"][end, 0] = 1000.0
    model.load_state_dict(state)
    ours = RunnableModel(model, tokenizer)
    export_huggingface_model(ours, tmp_path)
    prompt = ours.encode_prompt("hi", chat=True)
    mine = ours.generate_ids(prompt, max_new_tokens=10, stop_ids=ours.stop_ids(chat=True))
    assert mine.tokens == [] and mine.finish_reason == "stop"
    theirs = _theirs(tmp_path)
    with torch.no_grad():  # generation_config.json's stop tokens, nothing passed here
        out = theirs.generate(
            torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=0
        )
    assert out[0, len(prompt) :].tolist() == [end]


@pytest.mark.parametrize(
    "make",
    [
        lambda: BpeTokenizer.train(" ".join(TEXTS) * 8, vocab_size=300, pretokenize="gpt2"),
        lambda: BpeTokenizer.train(" ".join(TEXTS) * 8, vocab_size=300, pretokenize="none"),
        lambda: ByteTokenizer.train(" ".join(TEXTS)),
    ],
    ids=["bpe-gpt2", "bpe-none", "byte"],
)
def test_tokenizers_and_transformers_agree_on_ids(tmp_path, make):
    ours = make()
    write_tokenizer_files(ours, tmp_path, context_length=64)
    theirs = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        expected = ours.encode(text, allow_special=True)
        assert theirs.encode(text).ids == expected
        assert auto(text)["input_ids"] == expected
        assert theirs.decode(expected, skip_special_tokens=False) == ours.decode(expected)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the fox"}]
    rendered = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    encoding = ours.apply_chat_template(messages, add_generation_prompt=True)
    assert rendered == encoding.text
    assert auto(rendered)["input_ids"] == encoding.ids
