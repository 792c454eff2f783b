"""Text from a model in training: a continuation of plain text, or a chat reply,
through riftco.nn's shared sampler. A ``.rift`` bundle loads through
riftco-interchange's ``load_bundle`` (its model and tokenizer are what ``complete``
takes)."""

from __future__ import annotations

from riftco.autograd import no_grad
from riftco.nn import SamplingConfig, generate
from riftco.text import Tokenizer
from riftco.train.tokens import known_text


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
    user message, through the tokenizer's chat template), stopping where the tokenizer
    says text ends (``tokenizer.stop_ids(chat)``) and drawing only ids it has."""
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
        stop_ids=tokenizer.stop_ids(chat),
        vocab_limit=tokenizer.vocab_size,
    )
    eval_mode = getattr(model, "eval", None)
    if callable(eval_mode):
        eval_mode()
    with no_grad():
        result = generate(model, [ids], config)[0]
    return tokenizer.decode(result.tokens, skip_special=True)


__all__ = ["complete"]
