"""The ``riftco generate``, ``riftco convert`` and ``riftco inspect`` commands.

Each is a ``main(argv) -> int`` contributed through the ``riftco.commands``
entry points; the first docstring line is the summary ``riftco --help`` shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from riftco.interchange.cli_inspect import main as _inspect_main
from riftco.tensor import RiftcoError

TARGETS = ("rift", "safetensors", "huggingface", "gguf", "onnx")
SUFFIXES = {".rift": "rift", ".safetensors": "safetensors", ".gguf": "gguf", ".onnx": "onnx"}


def generate_main(argv: list[str]) -> int:
    """Generate text from a .rift bundle or a GGUF file (greedy, or sampled with a seed)."""
    parser = argparse.ArgumentParser(prog="riftco generate", description=generate_main.__doc__)
    parser.add_argument(
        "bundle", type=Path, help="a .rift bundle, or a GGUF file (llama.cpp's gpt2 or llama)"
    )
    parser.add_argument(
        "--prompt", required=True, help="the prompt (or the user message with --chat)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64, metavar="N")
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="0 (the default) is greedy decoding"
    )
    parser.add_argument("--top-k", type=int, default=None, metavar="K")
    parser.add_argument("--top-p", type=float, default=None, metavar="P")
    parser.add_argument("--seed", type=int, default=0, help="seeds sampling (default 0)")
    parser.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        metavar="R",
        help="> 1 discourages tokens already in the text (default 1: off)",
    )
    parser.add_argument(
        "--presence-penalty",
        type=float,
        default=0.0,
        metavar="P",
        help="OpenAI's: subtract P from every generated token's logit (-2..2; default 0)",
    )
    parser.add_argument(
        "--frequency-penalty",
        type=float,
        default=0.0,
        metavar="F",
        help="OpenAI's: subtract F times each token's count so far (-2..2; default 0)",
    )
    parser.add_argument(
        "--logit-bias",
        action="append",
        default=[],
        metavar="ID=BIAS",
        help="add BIAS (-100..100) to token ID's logit; repeatable",
    )
    parser.add_argument(
        "--logprobs",
        type=int,
        default=None,
        metavar="K",
        help="after each sample, print every token's log-probability and its K (0..20) "
        "most likely alternatives",
    )
    parser.add_argument(
        "-n",
        "--num-samples",
        type=int,
        default=1,
        metavar="N",
        help="draw N samples (sample i seeded SEED + i; default 1)",
    )
    parser.add_argument("--chat", action="store_true", help="apply the bundle's chat template")
    parser.add_argument("--system", default=None, help="a system message (with --chat)")
    parser.add_argument(
        "--backend", default=None, help="tensor backend (default: RIFTCO_BACKEND or cpu)"
    )
    parser.add_argument(
        "--weights",
        default=None,
        choices=("float32", "stored", "f16", "q8_0", "q4_0"),
        help="precision of the weights: llama.cpp's F16, Q8_0 or Q4_0 quantized in process "
        "(the model `convert --dtype` writes), float32, or a GGUF file's own blocks "
        "(stored; the default for GGUF, float32 for a bundle)",
    )
    parser.add_argument(
        "--keep-float",
        type=_keep_float,
        default=None,
        metavar="NAMES",
        help="with --weights f16/q8_0/q4_0: the matrices that stay float32, 'token_embd', "
        "'output' or both comma-separated (default none: as convert --dtype)",
    )
    args = parser.parse_args(argv)
    if args.max_new_tokens < 0:
        parser.error("--max-new-tokens must be >= 0")
    if args.system is not None and not args.chat:
        parser.error("--system needs --chat")
    if not 0.0 < args.repetition_penalty < float("inf"):
        parser.error("--repetition-penalty must be a finite number > 0")
    for flag in ("presence_penalty", "frequency_penalty"):
        if not -2.0 <= getattr(args, flag) <= 2.0:
            parser.error(f"--{flag.replace('_', '-')} must be in [-2, 2]")
    if args.logprobs is not None and not 0 <= args.logprobs <= 20:
        parser.error("--logprobs must be in 0..20")
    if args.num_samples < 1:
        parser.error("--num-samples must be >= 1")
    bias = {}
    for item in args.logit_bias:
        token, sep, value = item.partition("=")
        try:
            bias[int(token)] = float(value)
        except ValueError:
            parser.error(f"--logit-bias expects ID=BIAS (an integer and a number), found {item!r}")
        if not sep or int(token) < 0 or not -100.0 <= bias[int(token)] <= 100.0:
            parser.error(
                f"--logit-bias expects ID=BIAS with ID >= 0 and BIAS in -100..100, found {item!r}"
            )
    from riftco.interchange.runnable_files import open_runnable

    try:
        runnable = open_runnable(args.bundle, args.backend, args.weights, args.keep_float)
        vocab = runnable.tokenizer.vocab_size
        outside = [t for t in bias if t >= vocab]
        if outside:
            parser.error(
                f"--logit-bias: token {outside[0]} is past the vocabulary (0..{vocab - 1})"
            )
        samples = runnable.generate_samples(
            args.prompt,
            n=args.num_samples,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            chat=args.chat,
            system=args.system,
            repetition_penalty=args.repetition_penalty,
            presence_penalty=args.presence_penalty,
            frequency_penalty=args.frequency_penalty,
            logit_bias=bias,
            logprobs=args.logprobs,
        )
    except RiftcoError as exc:
        print(f"riftco generate: {exc}", file=sys.stderr)
        return 1
    for i, sample in enumerate(samples):
        if len(samples) > 1:
            print(f"--- sample {i} (seed {None if args.seed is None else args.seed + i}) ---")
        print(sample.text)
        for token, logprob, top in sample.logprobs or ():
            alternatives = "  ".join(f"{t!r}:{p:.4f}" for t, p in top)
            print(f"  {token!r}\t{logprob:.4f}" + (f"\t{alternatives}" if alternatives else ""))
    return 0


def convert_main(argv: list[str]) -> int:
    """Convert between .rift bundles, SafeTensors, Hugging Face directories, GGUF and ONNX."""
    parser = argparse.ArgumentParser(prog="riftco convert", description=convert_main.__doc__)
    parser.add_argument(
        "src",
        type=Path,
        help="a .rift bundle, a Hugging Face model directory, a GGUF file, a riftco ONNX "
        "export or a plain .safetensors file (with --config, default config.json beside it)",
    )
    parser.add_argument("dst", type=Path, help="the file or directory to write")
    parser.add_argument(
        "--to",
        choices=TARGETS,
        default=None,
        help="the format of DST (default: from its suffix, .rift, .safetensors, .gguf or .onnx)",
    )
    parser.add_argument(
        "--stage", default=None, help="stage recorded in a new .rift (default: kept, or 'imported')"
    )
    parser.add_argument(
        "--dtype",
        default="f32",
        choices=("f32", "f16", "q8_0", "q4_0"),
        help="GGUF tensor type of the matrices (default f32; q8_0 and q4_0 in llama.cpp's "
        "block layouts), the token embedding and head included unless --keep-float names them",
    )
    parser.add_argument(
        "--keep-float",
        type=_keep_float,
        default=None,
        metavar="NAMES",
        help="GGUF with --dtype f16/q8_0/q4_0: the matrices written float32, 'token_embd', "
        "'output' or both comma-separated (default none: every matrix in the type, as "
        "llama-quantize --pure writes; riftco generate --weights takes the same option)",
    )
    parser.add_argument(
        "--allow-tokenizer-mismatch",
        action="store_true",
        help="GGUF: export a tokenizer llama.cpp splits differently (recorded in the file)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a plain .safetensors source: its config, a Hugging Face config.json or a riftco "
        "config (default: config.json beside it)",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="a plain .safetensors source: the tokenizer, a .rift bundle, a tokenizer.json or "
        "its folder (default: tokenizer.json beside it)",
    )
    args = parser.parse_args(argv)
    if args.to is None:
        args.to = SUFFIXES.get(args.dst.suffix)
        if args.to is None:
            parser.error(f"cannot tell the format of {args.dst} from its suffix; pass --to")
    from riftco.interchange.convert import convert

    try:
        written = convert(
            args.src,
            args.dst,
            to=args.to,
            stage=args.stage,
            dtype=args.dtype,
            allow_tokenizer_mismatch=args.allow_tokenizer_mismatch,
            config_source=args.config,
            tokenizer_source=args.tokenizer,
            keep_float=args.keep_float,
        )
    except RiftcoError as exc:
        print(f"riftco convert: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0


def _keep_float(text: str) -> frozenset[str]:
    """``--keep-float``: ``none`` or names among token_embd, output (comma-separated)."""
    from riftco.interchange.quantization import parse_keep_float

    try:
        return parse_keep_float(text)
    except RiftcoError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def inspect_main(argv: list[str]) -> int:
    """Show a .rift bundle's config, size, stage, lineage, identity and integrity."""
    return _inspect_main(argv)
