"""``riftco inspect`` exits 1 whenever import (and convert) refuse the file: the checks
are the importers' own, made once. Hugging Face directories refuse NaN weights as
``convert`` does."""

from __future__ import annotations

import numpy as np
import pytest

from riftco.interchange import (
    BundleError,
    ConversionError,
    WeightsError,
    convert,
    export_huggingface,
    import_huggingface,
    import_huggingface_model,
    load_bundle,
    save_bundle,
    write_bundle,
)
from riftco.interchange.cli import convert_main
from riftco.interchange.cli_inspect import describe
from riftco.interchange.cli_inspect import main as inspect_main
from riftco.nn import TransformerConfig
from riftco.text import save_hf_tokenizer_json

SIZES = dict(context_length=16, d_model=8, n_layers=1, n_heads=2, d_ff=16)


def _directory(path, tokenizer, arrays_for, vocab_size, tokenizer_file=True, poison=None):
    config = TransformerConfig.preset("gpt2", vocab_size=vocab_size, **SIZES)
    arrays = arrays_for(config)
    export_huggingface(path, config, arrays, tokenizer if tokenizer_file else None)
    if poison is not None:  # written past export's own checks, as another tool might
        import safetensors.numpy

        from riftco.interchange.hf_gpt2 import gpt2_tensors

        tensors = gpt2_tensors(config, {**arrays, poison[0]: poison[1]})
        safetensors.numpy.save_file(tensors, str(path / "model.safetensors"), {"format": "pt"})
    return path


def _refused_everywhere(path, capsys, error, match):
    """import_huggingface_model, convert and inspect all refuse ``path``."""
    with pytest.raises(error, match=match):
        import_huggingface_model(path)
    with pytest.raises(error, match=match):
        convert(path, path.parent / "out.rift", "rift")
    assert not (path.parent / "out.rift").exists()
    capsys.readouterr()
    assert convert_main([str(path), str(path.parent / "out.rift")]) == 1
    assert inspect_main([str(path)]) == 1
    return capsys.readouterr()


def test_a_directory_that_imports_inspects_with_exit_0(tmp_path, tokenizer, random_arrays, capsys):
    path = _directory(tmp_path / "hf", tokenizer, random_arrays, tokenizer.vocab_size)
    assert import_huggingface_model(path).tokenizer == tokenizer
    assert inspect_main([str(path)]) == 0
    assert "import: ok" in capsys.readouterr().out


def test_a_tokenizer_one_id_larger_than_the_vocabulary(tmp_path, tokenizer, random_arrays, capsys):
    path = _directory(tmp_path / "hf", None, random_arrays, tokenizer.vocab_size - 1)
    save_hf_tokenizer_json(tokenizer, path / "tokenizer.json")
    found = (
        f"{tokenizer.vocab_size} ids do not fit the model's vocab_size {tokenizer.vocab_size - 1}"
    )
    streams = _refused_everywhere(path, capsys, ConversionError, found)
    assert found in streams.err
    with pytest.raises(ConversionError, match=found):
        import_huggingface(path, require_tokenizer=False)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_in_a_directory(tmp_path, tokenizer, random_arrays, capsys, bad):
    config = TransformerConfig.preset("gpt2", vocab_size=tokenizer.vocab_size, **SIZES)
    name = "blocks.0.feed_forward.expand.weight"
    poisoned = random_arrays(config)[name].copy()
    poisoned[1, 2] = bad
    path = _directory(
        tmp_path / "hf", tokenizer, random_arrays, tokenizer.vocab_size, poison=(name, poisoned)
    )
    streams = _refused_everywhere(path, capsys, (WeightsError, ConversionError), "finite values")
    assert "expected finite values" in streams.err
    with pytest.raises(WeightsError, match=r"expected finite values; found .* at index"):
        import_huggingface(path, require_tokenizer=False)


def test_a_directory_without_a_tokenizer(tmp_path, tokenizer, random_arrays, capsys):
    path = _directory(
        tmp_path / "hf", tokenizer, random_arrays, tokenizer.vocab_size, tokenizer_file=False
    )
    with pytest.raises(ConversionError, match="tokenizer.json"):
        import_huggingface_model(path)
    imported = import_huggingface(path, require_tokenizer=False)
    assert imported.tokenizer is None and "no tokenizer.json" in imported.tokenizer_error
    assert inspect_main([str(path)]) == 1
    assert "import: refused: " in capsys.readouterr().out
    # With a tokenizer passed, import takes the same directory.
    assert import_huggingface_model(path, tokenizer).tokenizer == tokenizer


def test_bundles_refused_by_load_bundle_are_refused_by_inspect(
    tmp_path, make_model, tokenizer, capsys
):
    from riftco.text import BpeTokenizer

    model = make_model()
    good = tmp_path / "good.rift"
    save_bundle(good, model, tokenizer)
    assert inspect_main([str(good)]) == 0
    assert describe(good)["import"] == "ok"
    arrays = {n: np.array(v.numpy()) for n, v in model.state_dict().items()}
    config = model.config.to_dict()
    big = BpeTokenizer([(k, k + 1) for k in range(70)])  # 326 ids for a vocabulary of 320
    cases = {
        "too-many-ids": (config, arrays, big.to_state()),
        "bad-merges": (config, arrays, dict(tokenizer.to_state(), merges=[[1, 2, 999]])),
        "bad-config": (dict(config, n_heads=3), arrays, tokenizer.to_state()),
    }
    for label, (c, a, state) in cases.items():
        path = tmp_path / f"{label}.rift"
        write_bundle(path, c, a, state)
        with pytest.raises(BundleError):
            load_bundle(path)
        capsys.readouterr()
        assert inspect_main([str(path)]) == 1, label
        assert "integrity: FAILED" in capsys.readouterr().out
