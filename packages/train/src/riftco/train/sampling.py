"""Text from a model in training: a continuation of plain text, or a chat reply,
through riftco.nn's shared sampler."""

from __future__ import annotations

import os

from riftco.autograd import no_grad
from riftco.interchange import read_bundle
from riftco.nn import DecoderOnlyTransformer, SamplingConfig, TransformerConfig, generate
from riftco.text import Tokenizer, tokenizer_from_state
from riftco.train.tokens import known_text

END_MARKERS = ("<|end|>", "<|endoftext|>")


def load_model(path: str | os.PathLike[str]) -> tuple[DecoderOnlyTransformer, Tokenizer]:
    """The model and tokenizer of a ``.rift`` bundle (validated as it is read)."""
    bundle = read_bundle(path)
    model = DecoderOnlyTransformer(TransformerConfig.from_dict(bundle.config))
    model.load_state_dict(bundle.tensors)
    return model, tokenizer_from_state(bundle.tokenizer_state)


def _stop_ids(tokenizer: Tokenizer) -> tuple[int, ...]:
    return tuple(i for t, i in tokenizer.special_tokens.items() if t in END_MARKERS)


def complete(
    model: object,
    tokenizer: Tokenizer,
    prompt: str,
    *,
    max_new_tokens: int = 80,
    temperature: float = 0.7,
    top_k: int | None = 40,
    seed: int = 0,
    chat: bool = False,
) -> str:
    """The model's continuation of ``prompt`` (``chat``: its reply to ``prompt`` as a
    user message, through the tokenizer's chat template), stopping at an end marker."""
    prompt = known_text(tokenizer, prompt)
    if chat:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        ).ids
    else:
        ids = tokenizer.encode(prompt) or [tokenizer.eos_id]
    context = model.config.context_length  # type: ignore[attr-defined]
    ids = ids[-context:]
    budget = max(0, min(max_new_tokens, context - len(ids)))
    config = SamplingConfig(
        max_new_tokens=budget,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
        stop_ids=_stop_ids(tokenizer),
    )
    eval_mode = getattr(model, "eval", None)
    if callable(eval_mode):
        eval_mode()
    with no_grad():
        result = generate(model, [ids], config)[0]
    return tokenizer.decode(result.tokens, skip_special=True)


__all__ = ["complete", "load_model"]
