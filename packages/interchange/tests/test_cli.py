"""The generate, convert and inspect commands, through their entry points."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

import numpy as np
import pytest

from riftco.interchange import load_bundle, load_safetensors, read_manifest, save_bundle
from riftco.interchange.cli import convert_main, generate_main, inspect_main


@pytest.fixture
def bundle(tmp_path, make_model, tokenizer):
    path = tmp_path / "model.rift"
    save_bundle(path, make_model(), tokenizer, metadata={"note": "cli"})
    return path


def test_commands_are_contributed_through_entry_points():
    found = {ep.name: ep.value for ep in entry_points(group="riftco.commands")}
    assert found["generate"] == "riftco.interchange.cli:generate_main"
    assert found["convert"] == "riftco.interchange.cli:convert_main"
    assert found["inspect"] == "riftco.interchange.cli:inspect_main"
    for main in (generate_main, convert_main, inspect_main):
        assert main.__doc__.strip().splitlines()[0]


def test_generate_greedy_and_seeded(bundle, capsys):
    runnable = load_bundle(bundle)
    assert generate_main([str(bundle), "--prompt", "the quick", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == runnable.generate("the quick", max_new_tokens=8) + "\n"
    args = [
        str(bundle),
        "--prompt",
        "the",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0.9",
        "--top-k",
        "30",
        "--seed",
        "4",
    ]
    assert generate_main(args) == 0
    first = capsys.readouterr().out
    assert generate_main(args) == 0
    assert capsys.readouterr().out == first
    expected = runnable.generate("the", max_new_tokens=8, temperature=0.9, top_k=30, seed=4)
    assert first == expected + "\n"


def test_generate_runs_past_the_context(bundle, capsys):
    runnable = load_bundle(bundle)
    context = runnable.config.context_length
    long = runnable.generate_ids([5, 6, 7], max_new_tokens=2 * context + 3)
    assert len(long.tokens) == 2 * context + 3 and long.finish_reason == "length"
    argv = [str(bundle), "--prompt", "the", "--max-new-tokens", str(2 * context)]
    assert generate_main(argv) == 0
    expected = runnable.generate("the", max_new_tokens=2 * context)
    assert capsys.readouterr().out == expected + "\n"


def test_generate_chat(bundle, capsys):
    runnable = load_bundle(bundle)
    argv = [
        str(bundle),
        "--prompt",
        "hi",
        "--chat",
        "--system",
        "be brief",
        "--max-new-tokens",
        "6",
    ]
    assert generate_main(argv) == 0
    expected = runnable.generate("hi", max_new_tokens=6, chat=True, system="be brief")
    assert capsys.readouterr().out == expected + "\n"


def test_generate_repetition_penalty(bundle, capsys):
    runnable = load_bundle(bundle)
    argv = [str(bundle), "--prompt", "the", "--max-new-tokens", "8", "--repetition-penalty", "9"]
    assert generate_main(argv) == 0
    expected = runnable.generate("the", max_new_tokens=8, repetition_penalty=9.0)
    assert capsys.readouterr().out == expected + "\n"
    assert expected != runnable.generate("the", max_new_tokens=8)
    with pytest.raises(SystemExit):
        generate_main([str(bundle), "--prompt", "x", "--repetition-penalty", "0"])


def test_generate_reports_a_bad_file(tmp_path, capsys):
    (tmp_path / "bad.rift").write_bytes(b"short")
    assert generate_main([str(tmp_path / "bad.rift"), "--prompt", "x"]) == 1
    assert "truncated" in capsys.readouterr().err


def test_inspect_a_bundle(bundle, capsys):
    assert inspect_main([str(bundle), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    manifest = read_manifest(bundle)
    assert report["artifact_id"] == manifest["artifact_id"]
    assert report["integrity"] == "ok" and report["stage"] == "pretraining"
    assert report["parameters"] == manifest["weights"]["parameters"]
    assert report["config"]["d_model"] == 16 and report["parent_id"] is None
    assert inspect_main([str(bundle)]) == 0
    text = capsys.readouterr().out
    assert f"artifact_id: {manifest['artifact_id']}" in text and "integrity: ok" in text


@pytest.mark.parametrize("target", ["gguf", "onnx"])
def test_inspect_gguf_and_onnx(tmp_path, bundle, target, capsys):
    pytest.importorskip(target)
    original = load_bundle(bundle)
    path = tmp_path / f"m.{target}"
    assert convert_main([str(bundle), str(path), "--to", target]) == 0
    capsys.readouterr()
    assert inspect_main([str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == target and report["integrity"] == "ok"
    assert report["config"] == original.config.to_dict()
    assert report["lineage"]["artifact_id"] == original.artifact_id
    assert report["parameters"] == original.manifest["weights"]["parameters"]
    if target == "gguf":
        assert report["name"] == "m" and report["architecture"] == "gpt2"
    assert inspect_main([str(path)]) == 0
    assert "integrity: ok" in capsys.readouterr().out
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF  # a weight byte: the recorded digest no longer matches
    path.write_bytes(bytes(raw))
    assert inspect_main([str(path)]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_convert_a_plain_safetensors_file_with_its_config(tmp_path, bundle, capsys):
    original = load_bundle(bundle)
    weights = tmp_path / "w.safetensors"
    assert convert_main([str(bundle), str(weights), "--to", "safetensors"]) == 0
    # No config beside it: a clear error naming what is expected.
    assert convert_main([str(weights), str(tmp_path / "x.rift")]) == 1
    assert "needs its config" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps(original.config.to_dict()))
    assert convert_main([str(weights), str(tmp_path / "x.rift")]) == 1
    assert "needs a tokenizer" in capsys.readouterr().err
    back = tmp_path / "back.rift"
    assert convert_main([str(weights), str(back), "--tokenizer", str(bundle)]) == 0
    reloaded = load_bundle(back)
    assert reloaded.manifest["stage"] == "imported" and reloaded.tokenizer == original.tokenizer
    for name, value in original.model.state_dict().items():
        np.testing.assert_array_equal(reloaded.model.state_dict()[name].numpy(), value.numpy())
    # transformers' own layout: model.safetensors with its config.json, half precision.
    folder = tmp_path / "hf"
    assert convert_main([str(bundle), str(folder), "--to", "huggingface"]) == 0
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_bytes((folder / "config.json").read_bytes())
    arrays = load_safetensors(folder / "model.safetensors")
    save_half = {k: v.astype(np.float16) for k, v in arrays.items()}
    import safetensors.numpy

    safetensors.numpy.save_file(save_half, str(half / "model.safetensors"))
    out = tmp_path / "from-half.rift"
    with pytest.warns(UserWarning, match=r"converted \d+ F16 tensor\(s\) to float32"):
        code = convert_main([str(half / "model.safetensors"), str(out), "--tokenizer", str(folder)])
    assert code == 0
    assert load_bundle(out).config == original.config
    first = sorted(arrays)[0]
    ints = {**arrays, first: arrays[first].astype(np.int32)}
    safetensors.numpy.save_file(ints, str(half / "model.safetensors"))
    assert (
        convert_main([str(half / "model.safetensors"), str(out), "--tokenizer", str(folder)]) == 1
    )
    assert f"{first}: expected floating-point weights" in capsys.readouterr().err


def test_inspect_reports_corruption(bundle, capsys):
    raw = bytearray(bundle.read_bytes())
    raw[-3] ^= 0xFF
    bundle.write_bytes(bytes(raw))
    assert inspect_main([str(bundle)]) == 1
    assert "integrity: FAILED" in capsys.readouterr().out
    bundle.write_bytes(bytes(raw[:-40]))
    assert inspect_main([str(bundle)]) == 1
    assert "truncated" in capsys.readouterr().err


def test_convert_to_every_format_and_back(tmp_path, bundle, capsys):
    original = load_bundle(bundle)
    copy = tmp_path / "copy.rift"
    assert convert_main([str(bundle), str(copy), "--to", "rift"]) == 0
    assert read_manifest(copy)["artifact_id"] == original.artifact_id

    weights = tmp_path / "w.safetensors"
    assert convert_main([str(bundle), str(weights), "--to", "safetensors"]) == 0
    for name, value in original.model.state_dict().items():
        np.testing.assert_array_equal(load_safetensors(weights)[name], value.numpy())
    assert inspect_main([str(weights)]) == 0

    folder = tmp_path / "hf"
    assert convert_main([str(bundle), str(folder), "--to", "huggingface"]) == 0
    assert (folder / "config.json").exists()
    assert inspect_main([str(folder), "--json"]) == 0
    capsys.readouterr()

    back = tmp_path / "back.rift"
    assert convert_main([str(folder), str(back), "--to", "rift"]) == 0
    reloaded = load_bundle(back)
    assert reloaded.manifest["stage"] == "imported"
    assert reloaded.manifest["metadata"] == {"source": "huggingface", "model_type": "gpt2"}
    ids = original.tokenizer.encode("the lazy dog")
    np.testing.assert_array_equal(reloaded.logits(ids), original.logits(ids))


def test_convert_refuses_what_huggingface_cannot_hold(tmp_path, make_model, tokenizer, capsys):
    path = tmp_path / "v1.rift"
    save_bundle(path, make_model("riftco_v1"), tokenizer)
    assert convert_main([str(path), str(tmp_path / "hf"), "--to", "huggingface"]) == 1
    assert "no language-model head bias" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_written_files_follow_the_umask(tmp_path, bundle, umask):
    import os
    import stat

    old = os.umask(umask)
    try:
        outputs = [tmp_path / "copy.rift", tmp_path / "w.safetensors", tmp_path / "hf"]
        for out, to in zip(outputs, ["rift", "safetensors", "huggingface"]):
            assert convert_main([str(bundle), str(out), "--to", to]) == 0
    finally:
        os.umask(old)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "model.rift"]
    assert len(files) >= 2 + 5
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


@pytest.mark.parametrize("weights", ["f16", "q8_0", "q4_0"])
def test_generate_on_reduced_precision_weights(tmp_path, make_model, tokenizer, capsys, weights):
    path = tmp_path / "wide.rift"
    save_bundle(path, make_model(d_model=32, d_ff=64), tokenizer)
    from riftco.interchange.quantization import quantize_model

    runnable = load_bundle(path)
    types = quantize_model(runnable.model, weights)  # the embedding and the head too
    assert len(types) == 14 and set(types.values()) == {weights.upper()}
    args = [str(path), "--prompt", "the quick", "--max-new-tokens", "8", "--weights", weights]
    assert generate_main(args) == 0
    assert capsys.readouterr().out == runnable.generate("the quick", max_new_tokens=8) + "\n"
    # --keep-float token_embd,output: only the linears, by riftco-nn's one quantizer.
    linears_only = load_bundle(path)
    kept = linears_only.model.quantize_for_inference(weights, ("token_embd", "output"))
    assert [k for k in kept.values() if k != "F32"] == [weights.upper()] * 12
    assert generate_main([*args, "--keep-float", "token_embd,output"]) == 0
    want = linears_only.generate("the quick", max_new_tokens=8) + "\n"
    assert capsys.readouterr().out == want
