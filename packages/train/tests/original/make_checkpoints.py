"""Write ``.riftckpt`` checkpoints with the original Riftco Transformer, and what it
does next.

Run with an interpreter that has ``riftco-transformer==0.6.1`` installed:

    python make_checkpoints.py                           # the committed fixtures
    python make_checkpoints.py --out DIR --seed 7 --random   # random configurations

For each method (``full``: every parameter trains; ``lora``: adapters on a float32
base; ``qlora``: adapters on a packed NF4 base, double-quantized scales, plain ones
in some random configurations) it trains a
tiny model two Adam steps and saves a checkpoint. ``expected.json`` records the
logits at the checkpoint, the next batch, the original's loss on it, and the values
and Adam moments of the trained parameters after one more step, which a
continuation here must reproduce.
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
from riftco_transformer.checkpoints import TrainingCheckpoint

CORPUS = "checkpoints resume training exactly where it stopped; " * 4
TARGETS = (
    ("attention.query", "attention.value"),
    ("attention.key", "attention.output", "feed_forward.expand"),
    ("feed_forward.project", "language_model_head", "attention.query"),
)


def floats(values) -> list[float]:
    return [float(f"{v:.9g}") for v in values]


def batch(ids: list[int], context: int, rng: random.Random) -> tuple[list[int], list[int]]:
    start = rng.randrange(len(ids) - context - 1)
    window = ids[start : start + context + 1]
    return window[:-1], window[1:]


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
    random.seed(args.seed)  # the checkpoint records Python's global random state
    expected = {}
    for index, method in enumerate(("full", "lora", "qlora")):
        kind = "bpe" if (args.random and rng.random() < 0.5) else "byte"
        options = {"vocabulary_size": 264} if kind == "bpe" else {}
        tokenizer = Tokenizer(CORPUS, method=kind, **options)
        heads = rng.choice([1, 2]) if args.random else 2
        config = TransformerConfig(
            vocabulary_size=tokenizer.vocab_size,
            maximum_context=8,
            model_width=rng.choice([8, 16]) if args.random else heads * 4,
            head_count=heads,
            block_count=rng.randint(1, 2) if args.random else 1,
            feed_forward_width=16,
            random_seed=args.seed + index,
        )
        ids = tokenizer.encode(CORPUS)
        model = DecoderOnlyTransformer(config).to("cpu")
        entry: dict = {"method": method, "tokenizer": kind}
        if method == "qlora":
            block = rng.choice([32, 64]) if args.random else 32
            double = rng.random() < 0.7 if args.random else True
            group = rng.choice([32, 64, 256]) if args.random else 32
            model.quantize_nf4(block, double_quantization=double, scale_block_size=group)
            entry["nf4"] = {
                "block_size": block,
                "double_quantization": double,
                "scale_block_size": group,
            }
        if method != "full":
            targets = TARGETS[rng.randrange(3)] if args.random else TARGETS[0]
            rank, alpha = (
                (rng.choice([1, 2, 4]), rng.choice([2.0, 4.0, 8.0])) if args.random else (2, 4.0)
            )
            model.attach_lora(
                LoraConfig(rank=rank, alpha=alpha, targets=targets, random_seed=args.seed)
            )
            parameters = model.adapter_parameters()
        else:
            parameters = model.parameters()
        with parameters as params:
            storage = "paged" if method == "qlora" else "contiguous"
            adam = dict(learning_rate=1e-2, maximum_gradient_norm=0.5, state_storage=storage)
            with Adam(params, **adam) as optimizer:
                for _ in range(2):
                    tokens, targets_ = batch(ids, config.maximum_context, rng)
                    with model([tokens]) as logits, cross_entropy(logits, [targets_]) as loss:
                        loss.backward()
                        optimizer.step()
                checkpoint = TrainingCheckpoint.capture(model, optimizer)
                checkpoint.save(out / f"{method}.riftckpt")
                probe = batch(ids, config.maximum_context, rng)[0][:6]
                with model([probe]) as logits:
                    entry["probe"] = [probe]
                    entry["logits"] = floats(logits.tolist())
                tokens, targets_ = batch(ids, config.maximum_context, rng)
                with model([tokens]) as logits, cross_entropy(logits, [targets_]) as loss:
                    entry["batch"] = {"tokens": [tokens], "targets": [targets_]}
                    entry["loss"] = loss.item()
                    loss.backward()
                    optimizer.step()
                state = optimizer.state()
                entry["after"] = {
                    "names": list(optimizer.parameter_names),
                    "values": floats(state.parameter_values),
                    "first_moments": floats(state.first_moments),
                    "second_moments": floats(state.second_moments),
                    "step": state.step_count,
                }
                entry["checkpoint_id"] = checkpoint.checkpoint_id
        model.close()
        tokenizer.close()
        expected[method] = entry
    (out / "expected.json").write_text(json.dumps(expected, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
