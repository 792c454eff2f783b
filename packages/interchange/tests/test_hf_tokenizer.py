"""Tokenizer files of Hugging Face directories, written and read back with the same ids."""

from __future__ import annotations

import json

import pytest

from riftco.interchange import ConversionError
from riftco.interchange.hf_tokenizer import (
    STATE_KEY,
    jinja_chat_template,
    read_tokenizer_files,
    write_tokenizer_files,
)
from riftco.text import DEFAULT_CHAT_TEMPLATE, BpeTokenizer, ByteTokenizer

TEXT = "hello there <|endoftext|> the lazy dog"


def test_exact_round_trip_through_the_saved_state(tmp_path, tokenizer):
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["eos_token"] == "<|endoftext|>" and config["model_max_length"] == 64
    assert read_tokenizer_files(tmp_path) == tokenizer


@pytest.mark.parametrize("pretokenize", ["gpt2", "none"])
def test_rebuilt_from_tokenizer_json_alone(tmp_path, pretokenize):
    tokenizer = BpeTokenizer.train(TEXT * 5, vocab_size=280, pretokenize=pretokenize)
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    del config[STATE_KEY]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    rebuilt = read_tokenizer_files(tmp_path)
    assert rebuilt.encode(TEXT, allow_special=True) == tokenizer.encode(TEXT, allow_special=True)
    assert rebuilt.vocab_size == tokenizer.vocab_size
    assert rebuilt.eos_token == "<|endoftext|>"
    # The Jinja chat template in tokenizer_config.json comes back as the template.
    assert rebuilt.chat_template == tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE


def _as_transformers_saves_it(folder, jinja_file=False, post_processor=None):
    """What ``save_pretrained`` writes: no riftco state, a post_processor that adds
    nothing, and (in newer releases) the chat template in chat_template.jinja."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config[STATE_KEY]
    if jinja_file:
        (folder / "chat_template.jinja").write_text(config.pop("chat_template"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    document = json.loads((folder / "tokenizer.json").read_text())
    document["post_processor"] = post_processor or {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {},
    }
    (folder / "tokenizer.json").write_text(json.dumps(document))


@pytest.mark.parametrize("jinja_file", [False, True], ids=["tokenizer_config", "jinja_file"])
def test_a_directory_resaved_by_transformers_imports_with_its_chat_template(
    tmp_path, tokenizer, jinja_file
):
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    _as_transformers_saves_it(tmp_path, jinja_file)
    rebuilt = read_tokenizer_files(tmp_path)
    assert rebuilt.chat_template == tokenizer.chat_template is not None
    assert rebuilt.encode(TEXT, allow_special=True) == tokenizer.encode(TEXT, allow_special=True)
    chat = [{"role": "user", "content": "hi"}]
    assert rebuilt.apply_chat_template(chat, add_generation_prompt=True).ids == (
        tokenizer.apply_chat_template(chat, add_generation_prompt=True).ids
    )


def test_post_processors_that_add_tokens_and_foreign_templates(tmp_path, tokenizer):
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    adds = {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["x"]}},
    }
    _as_transformers_saves_it(tmp_path, post_processor=adds)
    with pytest.raises(ConversionError, match="post_processor that adds tokens"):
        read_tokenizer_files(tmp_path)
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    _as_transformers_saves_it(tmp_path, post_processor={"type": "ByteLevel", "trim_offsets": False})
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match="cannot represent"):
        assert read_tokenizer_files(tmp_path).chat_template is None


def test_a_stale_state_is_ignored_for_tokenizer_json(tmp_path, tokenizer):
    other = BpeTokenizer.train(TEXT * 5, vocab_size=270, pretokenize="gpt2")
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config[STATE_KEY] = other.to_state()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert read_tokenizer_files(tmp_path).vocab_size == tokenizer.vocab_size


def test_byte_tokenizer(tmp_path):
    tokenizer = ByteTokenizer.train(TEXT)
    write_tokenizer_files(tokenizer, tmp_path, context_length=32)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    rebuilt = read_tokenizer_files(tmp_path)
    assert isinstance(rebuilt, ByteTokenizer)
    assert rebuilt.encode(TEXT, allow_special=True) == tokenizer.encode(TEXT, allow_special=True)


def test_refuses_a_vocabulary_in_another_order(tmp_path, tokenizer):
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    document = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab = document["model"]["vocab"]
    first, second = (
        next(t for t, i in vocab.items() if i == 0),
        next(t for t, i in vocab.items() if i == 1),
    )
    vocab[first], vocab[second] = 1, 0
    (tmp_path / "tokenizer.json").write_text(json.dumps(document))
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ConversionError, match="pass the tokenizer explicitly"):
        read_tokenizer_files(tmp_path)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d["model"].update(type="Unigram"), "expected a BPE model"),
        (lambda d: d.update(normalizer={"type": "NFC"}), "normalizer is not supported"),
        (lambda d: d["pre_tokenizer"].update(add_prefix_space=True), "add_prefix_space"),
        (lambda d: d.update(pre_tokenizer={"type": "Metaspace"}), "ByteLevel"),
        (lambda d: d["model"].update(byte_fallback=True), "byte_fallback"),
    ],
)
def test_refuses_what_riftco_cannot_represent(tmp_path, tokenizer, change, match):
    write_tokenizer_files(tokenizer, tmp_path, context_length=64)
    document = json.loads((tmp_path / "tokenizer.json").read_text())
    change(document)
    (tmp_path / "tokenizer.json").write_text(json.dumps(document))
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ConversionError, match=match):
        read_tokenizer_files(tmp_path)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConversionError, match="cannot read"):
        read_tokenizer_files(tmp_path)
    (tmp_path / "tokenizer.json").write_text("[1]")
    with pytest.raises(ConversionError, match="expected a JSON object"):
        read_tokenizer_files(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"a": NaN}')
    with pytest.raises(ConversionError, match="expected UTF-8 JSON"):
        read_tokenizer_files(tmp_path)


def test_jinja_template_names_every_role():
    text = jinja_chat_template(DEFAULT_CHAT_TEMPLATE)
    for role in ("system", "user", "assistant"):
        assert f"message['role'] == \"{role}\"" in text
    assert "add_generation_prompt" in text


def test_tokenizer_files_go_into_a_folder_made_for_them(tmp_path, tokenizer):
    folder = tmp_path / "new" / "model"
    write_tokenizer_files(tokenizer, folder, context_length=32)
    back = read_tokenizer_files(folder)
    assert back.encode("def f(x): return x") == tokenizer.encode("def f(x): return x")
