"""Benchmark batch-1 greedy decode through libriftco's C ABI (bench/bench_capi.c, no
Python in the loop), side by side with llama.cpp's ``llama-bench`` on the same GGUF files
and threads, or, where llama.cpp is not built, with riftco's in-process decoder (riftco-nn
through Python) on the same files.

The model is bench_decode.py's (GPT-2 topology, ``small`` shapes by default: D=384, L=6,
H=6, V=512; random weights), written as a ``.rift`` bundle and exported as GGUF at F16
(``export_gguf_model``), Q8_0 and Q4_0 (riftco's export, byte for byte what
``llama-quantize --pure`` makes). Each round runs every figure of every side once,
alternating sides; each figure is the median over ``--rounds`` and is printed with its
ratio; then the same files through ``riftco_session_step_batch`` with ``--batch``
sessions (continuous batching), against batch 1. Nothing asserts on time.

    make capi && python bench/bench_capi.py [--threads 2] [--rounds 3] [--gen 128]
                                            [--peer-dir ~/.cache/riftco/llamacpp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_decode  # noqa: E402
import llamacpp_peer as peer  # noqa: E402

KINDS = ("f32", "f16", "q8_0", "q4_0")


def capi_round(binary: Path, files: dict[str, Path], gen: int, threads: int) -> dict[str, float]:
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = {}
    for kind, path in files.items():
        run = subprocess.run(
            [str(binary), str(path), "--prompt", "1", "--gen", str(gen)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        out[kind] = json.loads(run.stdout.strip().splitlines()[-1])["decode_tok_s"]
    return out


def batch_round(binary: Path, files: dict[str, Path], gen: int, threads: int, batch: int) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = {}
    for kind, path in files.items():
        run = subprocess.run(
            [str(binary), str(path), "--prompt", "1", "--gen", str(gen), "--batch", str(batch)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        out[kind] = json.loads(run.stdout.strip().splitlines()[-1])["decode_tok_s"]
    return out


def inprocess_models(files: dict[str, Path]) -> dict:
    from riftco.interchange import import_gguf_model, load_bundle

    models = {"f32": load_bundle(files["f32"]).model}
    for kind in KINDS[1:]:
        models[kind] = import_gguf_model(files[kind], weights="stored").model
    return models


def inprocess_round(models: dict, gen: int) -> dict[str, float]:
    return {kind: bench_decode.decode(m, [1], gen) for kind, m in models.items()}


def peer_round(args, files: dict[str, Path]) -> dict[str, float]:
    return {
        kind: peer.bench(args.peer_dir, path, args.threads, prompt=0, gen=args.gen)["decode"]
        for kind, path in files.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--gen", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus-bytes", type=int, default=60_000)
    parser.add_argument("--peer-dir", type=Path, default=peer.DEFAULT_CACHE)
    parser.add_argument("--no-peer", action="store_true", help="compare with in-process riftco")
    parser.add_argument("--batch", type=int, default=8, help="sessions of the batched step")
    parser.add_argument("--binary", type=Path, default=ROOT / "build/capi/bin/bench_capi")
    args = parser.parse_args()
    if not args.binary.is_file():
        print(f"{args.binary} not found: run `make capi` first", file=sys.stderr)
        return 2
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    from riftco.interchange import export_gguf_model, save_bundle

    model, tokenizer = bench_decode.build_model(args)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        save_bundle(folder / "model.rift", model, tokenizer)
        files = {"f32": folder / "model.rift"}
        for kind in KINDS[1:]:
            files[kind] = export_gguf_model(model, folder / f"model-{kind}.gguf", tokenizer, kind)
        use_peer = not args.no_peer and peer.available(args.peer_dir)
        if use_peer:
            peer_files = dict(files, f32=export_gguf_model(model, folder / "f32.gguf", tokenizer))
            name = "llama.cpp"
        else:
            models = inprocess_models(files)
            name = "in-process"
        ours, theirs, batched = [], [], []
        for r in range(args.rounds):
            batched.append(batch_round(args.binary, files, args.gen, args.threads, args.batch))
            sides = [("c", None), ("peer", None)]
            for side, _ in sides if r % 2 == 0 else sides[::-1]:
                if side == "c":
                    ours.append(capi_round(args.binary, files, args.gen, args.threads))
                elif use_peer:
                    theirs.append(peer_round(args, peer_files))
                else:
                    theirs.append(inprocess_round(models, args.gen))
    print(
        f"batch-1 greedy decode, {args.gen} tokens, {args.threads} threads, "
        f"D={args.d_model} L={args.layers} H={args.heads} V={args.vocab}; median of "
        f"{args.rounds} alternating rounds"
    )
    header = f"{'weights':<8}  {'C ABI':>9}  {name:>10}  {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for kind in KINDS:
        a = statistics.median(r[kind] for r in ours)
        b = statistics.median(r[kind] for r in theirs)
        print(f"{kind:<8}  {a:9.0f}  {b:10.0f}  {a / b:5.2f}x")
    print(f"\n{args.batch} sessions in riftco_session_step_batch (tok/s, all sessions):")
    for kind in KINDS:
        a = statistics.median(r[kind] for r in batched)
        one = statistics.median(r[kind] for r in ours)
        print(f"{kind:<8}  {a:9.0f}  ({a / one:4.2f}x batch 1)")
    if not use_peer:
        print(f"(llama.cpp not built in {args.peer_dir}: bench_decode.py --build-peer builds it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
