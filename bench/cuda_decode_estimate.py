"""A roofline for the cuda backend's whole-step decoder (riftco.backends.cuda.ops.decode):
the bytes one decode step must read (every weight once per step, whatever the batch; each
row's cached keys and values) and write (its new key and value rows, the logits), at an
H200's 4.8 TB/s. No GPU is needed; these are bounds, not measurements.

    python bench/cuda_decode_estimate.py [--context 512] [--batch 1,16]

``bench/bench_cuda.py --estimate`` prints the same after its training estimate."""

from __future__ import annotations

import argparse

#: HBM3e bandwidth of an H200 (bytes per second).
BANDWIDTH = 4.8e12
#: GPT-2 124M.
GPT2 = dict(vocab=50257, d=768, layers=12, heads=12, kv_heads=12, head_dim=64, hidden=3072)


def step_bytes(model: dict, weight_bytes: int, batch: int, context: int) -> dict[str, float]:
    """Bytes of one decode step of ``batch`` rows, each with ``context`` cached keys."""
    d, L, h = model["d"], model["layers"], model["hidden"]
    qkv = (model["heads"] + 2 * model["kv_heads"]) * model["head_dim"]
    kvw = model["kv_heads"] * model["head_dim"]
    per_layer = qkv * d + d * model["heads"] * model["head_dim"] + 2 * h * d
    weights = (L * per_layer + model["vocab"] * d) * weight_bytes
    norms_biases = (L * (4 * d + qkv + d + h + d) + 2 * d) * 4
    cache_read = batch * L * 2 * context * kvw * 4
    cache_write = batch * L * 2 * kvw * 4
    embed = batch * 2 * d * 4
    logits = batch * model["vocab"] * 4
    total = weights + norms_biases + cache_read + cache_write + embed + logits
    return dict(
        weights=weights,
        cache=cache_read + cache_write,
        other=norms_biases + embed + logits,
        total=total,
    )


def launches(model: dict, rotary: bool = False) -> int:
    """Kernels of one step (DecodePlan.launches_per_step): one graph launch replays them."""
    return 3 + (10 + int(rotary)) * model["layers"]


def report(batches: list[int], context: int) -> list[str]:
    lines = [
        f"decode roofline at {BANDWIDTH / 1e12:.1f} TB/s: GPT-2 124M, {context} cached positions "
        f"per row, {launches(GPT2)} kernels a step in one graph launch"
    ]
    for weights, size in (("float32", 4), ("bfloat16", 2)):
        for b in batches:
            r = step_bytes(GPT2, size, b, context)
            seconds = r["total"] / BANDWIDTH
            lines.append(
                f"  {weights:8s} weights, batch {b:3d}: {r['total'] / 1e6:8.1f} MB a step "
                f"(weights {r['weights'] / 1e6:.1f}, cache {r['cache'] / 1e6:.1f}, other "
                f"{r['other'] / 1e6:.1f}) -> >= {seconds * 1e6:7.1f} us, <= {b / seconds:9,.0f} tok/s"
            )
    return lines


def print_estimate(batches: list[int] | None = None, context: int = 512) -> None:
    for line in report(batches or [1, 16], context):
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--batch", default="1,16")
    args = parser.parse_args()
    print_estimate([int(b) for b in args.batch.split(",")], args.context)


if __name__ == "__main__":
    main()
