"""A model with its tokenizer and chat template: text in, text out.

``generate`` runs riftco-nn's token-level sampler (greedy when ``temperature``
is 0; temperature, top-k and top-p otherwise, seeded; optional repetition,
presence and frequency penalties and a logit bias), over the ids the tokenizer has
(a padded vocabulary is never drawn),
stopping where the tokenizer says text ends (``Tokenizer.stop_ids``: end-of-text
and, for chat prompts, the chat template's markers). A prompt longer than the
context keeps its last ``context_length - 1`` tokens, so that at least one token
can follow. ``generate_samples`` draws ``n`` choices (choice i seeded ``seed + i``,
riftco-nn's ``choice_seed``, as the server's ``n`` does) with their tokens'
log-probabilities when asked for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.autograd import no_grad
from riftco.nn import (
    DecoderOnlyTransformer,
    GenerationResult,
    SamplingConfig,
    TransformerConfig,
    choice_seed,
)
from riftco.nn import generate as generate_tokens
from riftco.text import ChatTemplate, Tokenizer


@dataclass(frozen=True)
class TextSample:
    """One drawn continuation: its ``text``, why it ended (``stop`` or ``length``), and
    per token (when asked for) ``(text, logprob, top)`` with ``top`` the most likely
    ``(text, logprob)`` alternatives (riftco-nn's raw log-probabilities)."""

    text: str
    finish_reason: str
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None


@dataclass
class RunnableModel:
    """A loaded model: ``model``, ``tokenizer`` and, when it came from a bundle, ``manifest``.

    ``origin`` holds the stage, parent and metadata a model that did not come from one
    of riftco's bundles (an imported directory, a file of the original riftco-transformer)
    is saved with by default.
    """

    model: DecoderOnlyTransformer
    tokenizer: Tokenizer
    manifest: dict[str, Any] | None = field(default=None, repr=False)
    path: Path | None = None
    origin: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def config(self) -> TransformerConfig:
        return self.model.config

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self.tokenizer.chat_template

    @property
    def artifact_id(self) -> str | None:
        return None if self.manifest is None else self.manifest["artifact_id"]

    # -- tokens ---------------------------------------------------------------------

    def encode_prompt(
        self, prompt: str, chat: bool = False, system: str | None = None
    ) -> list[int]:
        """The ids of ``prompt``: plain text (special-token text stays text), or with
        ``chat`` a user message (after an optional system message) and the reply prompt."""
        if not chat:
            return self.tokenizer.encode(prompt)
        messages = [] if system is None else [{"role": "system", "content": system}]
        messages.append({"role": "user", "content": prompt})
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True).ids

    def stop_ids(self, chat: bool = False) -> tuple[int, ...]:
        """Where generated text ends: the tokenizer's ``stop_ids(chat)``."""
        return self.tokenizer.stop_ids(chat)

    def logits(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Logits ``[T, vocab]`` for one sequence of ids (``[B, T, vocab]`` for a batch)."""
        tokens = np.asarray(ids, dtype=np.int64)
        batch = tokens.ndim == 2
        with no_grad():
            out = self.model(tokens if batch else tokens[None, :]).numpy()
        return np.array(out if batch else out[0])

    def generate_ids(
        self,
        ids: Sequence[int],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = 0,
        stop_ids: Sequence[int] = (),
        repetition_penalty: float = 1.0,
        *,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Mapping[int, float] | None = None,
        logprobs: int | None = None,
    ) -> GenerationResult:
        """Continue ``ids`` (cropped to the context); the new tokens and why they ended
        (and their log-probabilities with ``logprobs`` = k alternatives). Decodes with
        ``riftco.nn.generate``: a ``DecodeSession`` over the paged key/value cache."""
        keep = self.config.context_length - 1
        prompt = list(ids)[-keep:] if len(ids) > keep else list(ids)
        sampling = SamplingConfig(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            stop_ids=tuple(stop_ids),
            repetition_penalty=repetition_penalty,
            vocab_limit=self.tokenizer.vocab_size,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            logit_bias=dict(logit_bias or {}),
            logprobs=logprobs,
        )
        with no_grad():
            return generate_tokens(self.model, [prompt], sampling)[0]

    # -- text -----------------------------------------------------------------------

    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = 0,
        chat: bool = False,
        system: str | None = None,
        repetition_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Mapping[int, float] | None = None,
    ) -> str:
        """The text that follows ``prompt`` (greedy unless ``temperature`` > 0)."""
        ids = self._prompt_ids(prompt, chat, system)
        result = self.generate_ids(
            ids,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            seed,
            self.stop_ids(chat),
            repetition_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            logit_bias=logit_bias,
        )
        return self.tokenizer.decode(result.tokens)

    def generate_samples(
        self,
        prompt: str,
        n: int = 1,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = 0,
        chat: bool = False,
        system: str | None = None,
        repetition_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Mapping[int, float] | None = None,
        logprobs: int | None = None,
    ) -> list[TextSample]:
        """``n`` continuations of ``prompt``: choice i seeded ``seed + i`` (so choice i
        equals ``generate`` seeded ``seed + i``), each with its tokens'
        log-probabilities when ``logprobs`` (0..20 alternatives) is given."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"generate_samples: n must be a positive int, found {n!r}")
        ids = self._prompt_ids(prompt, chat, system)
        name = self.tokenizer.token_bytes
        samples = []
        for i in range(n):
            result = self.generate_ids(
                ids,
                max_new_tokens,
                temperature,
                top_k,
                top_p,
                choice_seed(seed, i),
                self.stop_ids(chat),
                repetition_penalty,
                presence_penalty=presence_penalty,
                frequency_penalty=frequency_penalty,
                logit_bias=logit_bias,
                logprobs=logprobs,
            )
            entries = None
            if result.logprobs is not None:
                entries = [
                    (
                        name(e.token).decode("utf-8", "replace"),
                        e.logprob,
                        [(name(t).decode("utf-8", "replace"), p) for t, p in e.top],
                    )
                    for e in result.logprobs
                ]
            text = self.tokenizer.decode(result.tokens)
            samples.append(TextSample(text, result.finish_reason, entries))
        return samples

    def _prompt_ids(self, prompt: str, chat: bool, system: str | None) -> list[int]:
        ids = self.encode_prompt(prompt, chat, system)
        if not ids:  # an empty prompt starts from end-of-text, as a new document would
            ids = list(self.stop_ids()[:1])
        if not ids:
            raise ValueError(
                "generate: an empty prompt needs a tokenizer with an end-of-text token"
            )
        return ids

    def save(
        self,
        path: str | os.PathLike[str],
        stage: str | None = None,
        parent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write a bundle; the stage and metadata default to this model's own."""
        from riftco.interchange.models import save_bundle

        manifest = self.origin or self.manifest or {}
        return save_bundle(
            path,
            self.model,
            self.tokenizer,
            stage=stage or manifest.get("stage", "pretraining"),
            parent_id=parent_id if parent_id is not None else manifest.get("parent_id"),
            metadata=metadata if metadata is not None else manifest.get("metadata"),
        )
