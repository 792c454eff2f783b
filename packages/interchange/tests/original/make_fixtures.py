"""Write model files with the original Riftco Transformer, and its logits for them.

Run with an interpreter that has ``riftco-transformer==0.6.1`` installed (it is not
a dependency of this stack):

    python make_fixtures.py                # the committed fixtures, beside this script
    python make_fixtures.py --out DIR --seed 7 --random   # random configurations

It writes, from tiny models trained a few steps by the original itself: a byte and
a BPE base bundle (stage ``pretraining``), a fully fine-tuned child and a LoRA child
(adapters merged by the original, stage ``post_training``, parent the base), and
the byte child's exports (Hugging Face-style directory, GGUF, ONNX with its
sidecar). ``expected.json`` records, for each file, the original's artifact id,
parent id, stage, token ids of fixed texts and the logits of fixed inputs.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

from riftco_transformer import (
    Adam,
    DecoderOnlyTransformer,
    LoraConfig,
    Tokenizer,
    TransformerConfig,
    cross_entropy,
)
from riftco_transformer.artifacts import ModelBundle
from riftco_transformer.interchange import export_model

CORPUS = (
    "def greet(name):\n    return 'hello, ' + name\n"
    "tiny models learn from text; a tuple is an immutable sequence. "
) * 3
EXPORTS = (
    ("huggingface", "byte-child-hf"),
    ("gguf", "byte-child.gguf"),
    ("onnx", "byte-child.onnx"),
)
TEXTS = ["hello, name", "def f(x):\n    return x", "a tuple is", "tiny"]


def train(model, ids: list[int], steps: int, context: int, seed: int, params=None) -> None:
    """A few Adam steps of next-token loss on windows of ``ids``."""
    rng = random.Random(seed)
    with params if params is not None else model.parameters() as parameters:
        with Adam(parameters, learning_rate=1e-2) as optimizer:
            for _ in range(steps):
                start = rng.randrange(len(ids) - context - 1)
                window = ids[start : start + context + 1]
                with model([window[:-1]]) as logits:
                    with cross_entropy(logits, [window[1:]]) as loss:
                        loss.backward()
                        optimizer.step()


def logits_of(model, rows: list[list[int]]) -> list:
    with model(rows) as logits:
        flat = logits.tolist()
    return flat


def make_config(tokenizer, rng: random.Random | None, seed: int) -> TransformerConfig:
    if rng is None:
        width, heads, blocks, ff, context = 8, 2, 2, 16, 12
    else:
        # At least 8 features: a LayerNorm over fewer is so ill-conditioned that float32
        # rounding alone moves logits by more than the 1e-5 the tests allow.
        heads = rng.choice([1, 2, 4])
        width = heads * rng.choice([d for d in (4, 8, 16) if heads * d >= 8])
        blocks, ff, context = rng.randint(1, 3), rng.choice([8, 16, 24]), rng.choice([6, 12, 16])
    return TransformerConfig(
        vocabulary_size=tokenizer.vocab_size,
        maximum_context=context,
        model_width=width,
        head_count=heads,
        block_count=blocks,
        feed_forward_width=ff,
        random_seed=seed,
    )


def inputs_for(tokenizer, context: int, rng: random.Random) -> list[list[int]]:
    ids = tokenizer.encode(CORPUS)
    length = min(context, 6)
    start = rng.randrange(len(ids) - length)
    return [ids[start : start + length]]


def record(path: Path, bundle: ModelBundle, model, tokenizer, rows, out: Path) -> dict:
    return {
        "file": str(path.relative_to(out)),
        "artifact_id": bundle.artifact_id,
        "parent_artifact_id": bundle.parent_artifact_id,
        "stage": bundle.stage,
        "method": tokenizer.method,
        "texts": TEXTS,
        "ids": [tokenizer.encode(text) for text in TEXTS],
        "inputs": rows,
        "logits": [float(f"{v:.9g}") for v in logits_of(model, rows)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "fixtures")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--random", action="store_true", help="random configurations")
    args = parser.parse_args(argv)
    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng = random.Random(args.seed)
    shape_rng = rng if args.random else None
    expected: dict[str, dict] = {}

    for method in ("byte", "bpe"):
        options = {"vocabulary_size": 256 + rng.randint(8, 24)} if method == "bpe" else {}
        tokenizer = Tokenizer(CORPUS, method=method, **options)
        config = make_config(tokenizer, shape_rng, args.seed)
        ids = tokenizer.encode(CORPUS)
        rows = inputs_for(tokenizer, config.maximum_context, rng)
        with DecoderOnlyTransformer(config).to("cpu") as model:
            train(model, ids, 3, config.maximum_context, args.seed)
            base = ModelBundle.capture(model, tokenizer, stage="pretraining")
            path = base.save(out / f"{method}-base.rift")
            expected[f"{method}-base"] = record(path, base, model, tokenizer, rows, out)
            if method == "byte":
                train(model, ids, 2, config.maximum_context, args.seed + 1)
                child = ModelBundle.capture(
                    model,
                    tokenizer,
                    stage="post_training",
                    parent_artifact_id=base.artifact_id,
                    metadata={"method": "full"},
                )
                path = child.save(out / "byte-full-child.rift")
                expected["byte-full-child"] = record(path, child, model, tokenizer, rows, out)
                for kind, name in EXPORTS:
                    export_model(child, out / name, format=kind)
                    expected[name] = {"file": name, "same_as": "byte-full-child"}
        with base.instantiate("cpu") as runtime:
            model = runtime.model
            lora = {"rank": 2, "alpha": 4.0}
            if args.random:
                targets = (
                    "attention.query",
                    "attention.key",
                    "feed_forward.project",
                    "language_model_head",
                )
                chosen = tuple(t for t in targets if rng.random() < 0.6) or targets[:1]
                lora = {
                    "rank": rng.choice([1, 2, 4]),
                    "alpha": rng.choice([2.0, 8.0]),
                    "targets": chosen,
                }
            model.attach_lora(LoraConfig(**lora, random_seed=args.seed))
            train(model, ids, 3, config.maximum_context, args.seed + 2, model.adapter_parameters())
            model.merge_lora()
            child = ModelBundle.capture(
                model,
                tokenizer,
                stage="post_training",
                parent_artifact_id=base.artifact_id,
                metadata={"method": "lora"},
            )
            path = child.save(out / f"{method}-lora-child.rift")
            expected[f"{method}-lora-child"] = record(path, child, model, tokenizer, rows, out)
        tokenizer.close()

    (out / "expected.json").write_text(json.dumps(expected, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
