"""Write the fuzzers' seeds: for each harness a few valid files made by riftco itself
and hand-made hostile ones (truncations, bit flips, huge and negative size fields,
chained merges, configurations far larger than their tensors, deep nesting,
5,000-digit integers, line separators inside JSONL strings, wrongly typed fields).

    python fuzz/make_corpus.py [WORK]     # default build/fuzz: WORK/seeds/<harness>/, WORK/valid/
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import WORK

CORPUS_TEXT = "the quick brown fox jumps over the lazy dog. hello world, hello there.\n" * 30
DEEP = b"[" * 100_000 + b"]" * 100_000
DIGITS = b"9" * 5000


def _tiny():
    import riftco.nn as nn
    import riftco.text as text

    tokenizer = text.BpeTokenizer.train(CORPUS_TEXT, vocab_size=280, pretokenize="gpt2")
    config = nn.TransformerConfig.preset(
        "gpt2",
        vocab_size=tokenizer.vocab_size,
        context_length=16,
        d_model=8,
        n_layers=1,
        n_heads=2,
        d_ff=16,
    )
    return nn.DecoderOnlyTransformer(config, seed=0), tokenizer


def _variants(raw: bytes, count: int = 12) -> list[bytes]:
    """Truncations at spread-out offsets and single-bit flips of ``raw``."""
    rng = np.random.default_rng(0)
    out = [raw[: len(raw) * k // count] for k in range(count)]
    for position in rng.integers(0, len(raw), count):
        flipped = bytearray(raw)
        flipped[position] ^= 1 << int(rng.integers(0, 8))
        out.append(bytes(flipped))
    return out


def _safetensors(header: bytes, data: bytes = b"\0" * 8) -> bytes:
    return struct.pack("<Q", len(header)) + header + data


def _rewrite_header(raw: bytes, change) -> bytes:
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    change(header)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + raw[8 + size :]


def _write(folder: Path, seeds: list[bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds):
        (folder / f"seed-{i:03d}").write_bytes(seed)


def _state_seeds(tokenizer) -> list[bytes]:
    state = tokenizer.to_state()
    chained = dict(state, merges=[[97, 97, 256]] + [[256 + k, 256 + k, 257 + k] for k in range(40)])
    return [
        json.dumps(state).encode(),
        json.dumps(dict(chained, special_tokens=[], eos_token=None, chat_template=None)).encode(),
        json.dumps(dict(state, method=["bpe"])).encode(),
        json.dumps(dict(state, eos_token={"a": 1})).encode(),
        json.dumps(dict(state, options={"pretokenize": ["gpt2"]})).encode(),
        json.dumps(dict(state, special_tokens=[{"id": [1], "content": "x"}])).encode(),
        DEEP,
        b'{"format_version": ' + DIGITS + b"}",
    ]


def _pretrain_files(folder: Path) -> tuple[Path, Path]:
    from riftco.train.pretraining import ModelOptions, PretrainOptions, pretrain
    from riftco.train.stage import TrainingOptions

    corpus = folder / "corpus.txt"
    corpus.write_text(CORPUS_TEXT)
    options = PretrainOptions(
        data=str(corpus),
        tokenizer="byte",
        validation_fraction=0.2,
        model=ModelOptions(context_length=8, d_model=8, n_layers=1, n_heads=2, d_ff=16),
        training=TrainingOptions(
            steps=2, batch_size=2, warmup_steps=1, eval_every=2, eval_batches=1, checkpoint_every=0
        ),
    )
    result = pretrain(options, folder / "run", progress=io.StringIO())
    return result.bundle, result.checkpoint


def _choices(count: int) -> list[bytes]:
    """Choice bytes for the structure-aware harnesses: a spread of edits of the seed."""
    rng = np.random.default_rng(1)
    return [bytes(rng.integers(0, 256, 24, dtype=np.uint8)) for _ in range(count)]


def _edited(document, change):
    document = json.loads(json.dumps(document))
    change(document)
    return document


def _hf_json_seeds(folder: Path) -> list[bytes]:
    """hf_json inputs: the file's index (config.json, tokenizer.json,
    tokenizer_config.json), then a document and the choice bytes that edit it."""
    from structure import seed

    config, document, tokenizer_config = (
        json.loads((folder / name).read_text())
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json")
    )
    stateless = {k: v for k, v in tokenizer_config.items() if k != "riftco_tokenizer"}
    model = document["model"]
    first = document["added_tokens"][0]
    seeds = [
        bytes([i]) + seed(d, c)
        for i, d in enumerate((config, document, tokenizer_config))
        for c in [b"", *_choices(4)]
    ]
    hostile_documents = [
        dict(document, model=dict(model, merges=["ab", *model["merges"][1:]])),
        dict(document, model=dict(model, merges=[7, *model["merges"][1:]])),
        dict(document, model=dict(model, merges=[["a", "b", "c"], *model["merges"][1:]])),
        dict(document, model=dict(model, merges=["a b c", *model["merges"][1:]])),
        dict(document, added_tokens=[{k: v for k, v in first.items() if k != "content"}]),
        dict(document, added_tokens=[dict(first, id=str(first["id"]))]),
        dict(document, added_tokens=["<|endoftext|>"]),
        dict(document, added_tokens=[first, first]),
        dict(document, model=dict(model, vocab=dict(model["vocab"], a="97"))),
        dict(document, model=["BPE"]),
    ]
    for hostile in hostile_documents:  # beside the valid riftco state, and without it
        seeds.append(bytes([1]) + seed(hostile))
    seeds += [
        bytes([2]) + seed(dict(stateless, eos_token=["<|endoftext|>"])),
        bytes([2]) + seed(dict(stateless, eos_token={"id": 1})),
        bytes([2]) + seed(dict(tokenizer_config, riftco_tokenizer=[1])),
        bytes([2]) + seed(dict(stateless, chat_template=3)),
        bytes([0]) + seed(dict(config, n_layer="1")),
        bytes([0]) + seed(dict(config, architectures="GPT2LMHeadModel")),
    ]
    return seeds


def _checkpoint_state_seeds(manifest: dict, tensor_names: list[str]) -> list[bytes]:
    """checkpoint_state inputs: the edits --resume once answered with a raw traceback
    (and the engine step of 10**12 it resumed), each fed as it is."""
    from structure import seed

    def options(m):
        return m["run"]["options"]

    def engine(m):
        return m["state"]["engine"]

    seeds = [seed(manifest, c) for c in [b"", *_choices(6)]]
    for name in ("optimizer.0.exp_avg", "optimizer.3.exp_avg_sq", "model.final_norm.weight"):
        seeds.append(seed(manifest, bytes([0, tensor_names.index(name)])))  # that one dropped
    for change in (
        lambda m: m["run"].pop("options"),
        lambda m: options(m)["training"].update(steps="x"),
        lambda m: options(m).update(colour="red"),
        lambda m: options(m).update(windows="nope"),
        lambda m: engine(m).update(moving_average="bad"),
        lambda m: engine(m)["moving_average"].update(value="x"),
        lambda m: engine(m).update(step=10**12),
        lambda m: (m.update(step=10**12), engine(m).update(step=10**12)),
        lambda m: engine(m).update(step=-1),
        lambda m: engine(m).update(tokens="x"),
        lambda m: m["run"].pop("tokenizer"),
        lambda m: options(m).update(training=3),
    ):
        seeds.append(seed(_edited(manifest, change)))
    return seeds


def _bundle_manifest_seeds(bundle: Path) -> list[bytes]:
    from structure import seed

    from riftco.interchange import MANIFEST_KEY, read_safetensors

    manifest = json.loads(read_safetensors(bundle).metadata[MANIFEST_KEY])
    seeds = [seed(manifest, c) for c in [b"", *_choices(8)]]
    for change in (
        lambda m: m["config"].update(n_layers="1"),
        lambda m: m["tokenizer"].update(merges=[[1, 2]]),
        lambda m: m.update(parent_id=7),
        lambda m: m["weights"].update(tensors=10**12),
        lambda m: m.update(metadata=[1]),
    ):
        seeds.append(seed(_edited(manifest, change)))
    return seeds


def main(work: Path = WORK) -> None:
    from riftco.interchange import (
        canonical_json,
        content_id,
        export_gguf_model,
        export_huggingface_model,
        export_onnx_model,
        model_arrays,
        save_bundle,
        write_bundle,
    )

    seeds_root, valid = work / "seeds", work / "valid"
    for folder in (seeds_root, valid):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    model, tokenizer = _tiny()
    scratch = work / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)

    # .rift bundles
    bundle = scratch / "tiny.rift"
    save_bundle(bundle, model, tokenizer)
    raw = bundle.read_bytes()
    layers_file = scratch / "layers.rift"
    write_bundle(
        layers_file,
        dict(model.config.to_dict(), n_layers=10**7),
        model_arrays(model),
        tokenizer.to_state(),
    )
    layers = layers_file.read_bytes()
    _write(
        seeds_root / "bundle",
        [raw, *_variants(raw), layers, _safetensors(DEEP), _safetensors(b'{"a": ' + DIGITS + b"}")],
    )

    # plain SafeTensors
    tensors = [
        _safetensors(b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'),
        _safetensors(
            b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 18446744073709551615]}}'
        ),
        _safetensors(b'{"x": {"dtype": "F32", "shape": [-2], "data_offsets": [-8, 0]}}'),
        _safetensors(b'{"\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'),
        _safetensors(
            b'{"x": {"dtype": "F32", "shape": [' + DIGITS + b'], "data_offsets": [0, 8]}}'
        ),
        struct.pack("<Q", 2**63) + b"{}",
        _safetensors(DEEP),
    ]
    _write(seeds_root / "safetensors", tensors + _variants(raw[:400]))

    # checkpoints (and a bundle made by a real run)
    run_bundle, checkpoint = _pretrain_files(scratch)
    ckpt = checkpoint.read_bytes()
    (size,) = struct.unpack("<Q", ckpt[:8])
    header = json.loads(ckpt[8 : 8 + size])
    key = next(k for k in header["__metadata__"])
    manifest = json.loads(header["__metadata__"][key])
    hostile = []
    for change in (
        {"step": 10**12},
        {"step": "3"},
        {"run": dict(manifest["run"], config=dict(manifest["run"]["config"], d_model=65536))},
        {"run": dict(manifest["run"], config=dict(manifest["run"]["config"], n_layers=10**7))},
    ):
        changed = dict(manifest, **change)
        changed["checkpoint_id"] = content_id(changed, exclude="checkpoint_id")
        hostile.append(
            _rewrite_header(
                ckpt,
                lambda h, m=changed: h["__metadata__"].update({key: canonical_json(m).decode()}),
            )
        )
    _write(seeds_root / "checkpoint", [ckpt, *_variants(ckpt), *hostile])
    shutil.copy(run_bundle, seeds_root / "bundle" / "seed-run")

    # GGUF
    gguf_file = scratch / "tiny.gguf"
    export_gguf_model(model, gguf_file, tokenizer)
    gguf = gguf_file.read_bytes()
    _write(seeds_root / "gguf", [gguf, *_variants(gguf), gguf[:24] + b"\xff" * 16])

    # Hugging Face directories (the same scheme)
    hf_folder = valid / "hf"
    export_huggingface_model(model, hf_folder, tokenizer)
    names = sorted(p.name for p in hf_folder.iterdir())
    hf_seeds = []
    config = json.loads((hf_folder / "config.json").read_text())
    for index, name in enumerate(names):
        content = (hf_folder / name).read_bytes()
        hf_seeds += [bytes([index]) + v for v in [content, *_variants(content, 4)]]
        if name == "config.json":
            for key_, value in (
                ("tie_word_embeddings", "false"),
                ("n_layer", 10**7),
                ("n_embd", 65536),
                ("layer_norm_epsilon", "1e-5"),
                ("n_positions", 2**40),
            ):
                hf_seeds.append(bytes([index]) + json.dumps(dict(config, **{key_: value})).encode())
            hf_seeds.append(bytes([index]) + b'{"n_layer": ' + DIGITS + b"}")
        if name == "tokenizer.json":
            hf_seeds.append(bytes([index]) + DEEP)
    _write(seeds_root / "hf_directory", hf_seeds)

    # tokenizer states, JSONL, HTTP bodies
    _write(seeds_root / "tokenizer_state", _state_seeds(tokenizer))
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    _write(
        seeds_root / "jsonl",
        [
            b'{"prompt": "a", "response": "b"}\n' + json.dumps(chat).encode() + b"\n",
            json.dumps({"prompt": "a\u2028b", "response": "c\u0085d"}, ensure_ascii=False).encode(),
            b'{"prompt": "a", "response": ' + DIGITS + b"}\n",
            DEEP + b"\n",
            b'{"messages": [{"role": ["user"], "content": "x"}]}\n',
            b"\xef\xbb\xbf" + b'{"prompt": "a", "response": "b"}\r\n',
        ],
    )
    body = {"model": "fuzz", "messages": [{"role": "user", "content": "hi"}], "seed": 3}
    _write(
        seeds_root / "http_request",
        [
            json.dumps(body).encode(),
            json.dumps(
                {"model": "fuzz", "prompt": [1, 2, 3], "max_tokens": 4, "stop": ["x"]}
            ).encode(),
            json.dumps(dict(body, messages=[{"role": ["user"], "content": "x"}])).encode(),
            json.dumps(dict(body, messages=[{"role": {"a": 1}, "content": "x"}])).encode(),
            json.dumps(dict(body, temperature=10**400)).encode(),
            b'{"model": "fuzz", "seed": ' + DIGITS + b"}",
            b'{"model": "fuzz", "prompt": ' + DEEP + b"}",
            json.dumps(dict(body, stream=True, stream_options={"include_usage": True})).encode(),
        ],
    )
    # The structure-aware harnesses: valid documents to edit, and the hostile ones the
    # readers once answered with a raw traceback, fed as they are.
    shutil.copy(checkpoint, valid / "checkpoint.riftckpt")
    shutil.copy(bundle, valid / "bundle.rift")
    _write(seeds_root / "hf_json", _hf_json_seeds(hf_folder))
    _write(
        seeds_root / "checkpoint_state",
        _checkpoint_state_seeds(manifest, sorted(set(header) - {"__metadata__"})),
    )
    _write(seeds_root / "bundle_manifest", _bundle_manifest_seeds(bundle))

    # ONNX (a valid export kept whole; each seed replaces one of its files)
    onnx_folder = valid / "onnx"
    onnx_folder.mkdir()
    export_onnx_model(model, onnx_folder / "tiny.onnx", tokenizer, external_data=False)
    names = sorted(p.name for p in onnx_folder.iterdir())
    onnx_seeds = []
    for index, name in enumerate(names):
        content = (onnx_folder / name).read_bytes()
        onnx_seeds += [bytes([index]) + v for v in [content, *_variants(content, 4)]]
        onnx_seeds += [bytes([index]) + DEEP[:2000], bytes([index]) + b"{" + DIGITS + b"}"]
    _write(seeds_root / "onnx", onnx_seeds)

    shutil.rmtree(scratch, ignore_errors=True)
    counts = {p.name: len(list(p.iterdir())) for p in sorted(seeds_root.iterdir())}
    print(f"seeds in {seeds_root}: {counts}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ.get("RIFTCO_FUZZ_WORK", WORK)))
