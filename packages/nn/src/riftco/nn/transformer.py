"""The decoder-only Transformer: pre-norm blocks over token (and learned position)
embeddings, a final norm and a language-model head, with the parameter names of
DESIGN §4. One class covers the GPT family and Llama; the configuration selects."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, TypeGuard

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter, Variable, checkpoint, is_grad_enabled, no_grad
from riftco.nn import functional as F
from riftco.nn.attention import CausalSelfAttention
from riftco.nn.cache import KVCache, WholeStepCache
from riftco.nn.config import TransformerConfig
from riftco.nn.errors import ConfigError
from riftco.nn.feed_forward import feed_forward_for
from riftco.nn.joins import Read, decode_feed_forward, decode_norm
from riftco.nn.layers import Dropout, Embedding, LayerNorm, RMSNorm
from riftco.nn.module import Module, ModuleList
from riftco.nn.native_decode import decoder_for
from riftco.nn.precision import compute_dtype, mixed_precision
from riftco.tensor import Backend, Tensor


def norm_for(config: TransformerConfig, backend: str | Backend | None = None) -> Module:
    if config.norm == "rms":
        return RMSNorm(config.d_model, config.norm_eps, backend=backend)
    return LayerNorm(config.d_model, config.norm_eps, bias=True, backend=backend)


def residual_norm(x: Any, branch: Any, norm: Module) -> tuple[Any, Any]:
    """``(x + branch, norm(x + branch))``: the residual stream and its norm, one pass
    (``F.add_layer_norm``) for a layer norm over two float32 operands of one shape."""
    xv, bv = F._value(x), F._value(branch)
    # A LayerNorm subclass may normalize otherwise: the class itself only.
    if isinstance(norm, LayerNorm) and type(norm) is LayerNorm and xv.shape == bv.shape:
        if xv.dtype is rt.float32 and bv.dtype is rt.float32:
            return F.add_layer_norm(x, branch, norm.weight, norm.bias, norm.eps)
    total = x + branch
    return total, norm(total)


class TransformerBlock(Module):
    """``x + attention(attention_norm(x))``, then ``+ feed_forward(feed_forward_norm(.))``."""

    def __init__(
        self, config: TransformerConfig, *, seed: int = 0, backend: str | Backend | None = None
    ) -> None:
        super().__init__()
        self.attention_norm = norm_for(config, backend)
        self.attention = CausalSelfAttention(config, backend=backend)
        self.feed_forward_norm = norm_for(config, backend)
        self.feed_forward = feed_forward_for(config, backend)
        self.residual_dropout = Dropout(config.dropout, seed=seed)

    def forward(
        self, x: Any, positions: Tensor | None = None, keys: Sequence[int] | None = None
    ) -> Any:
        """``keys``: dropout keys for the two residual branches (a checkpoint replay
        passes the same ones)."""
        x, branch = self.branches(x, positions, keys)
        return x + branch

    def branches(
        self,
        x: Any,
        positions: Tensor | None = None,
        keys: Sequence[int] | None = None,
        normed: Any = None,
    ) -> tuple[Any, Any]:
        """The block with its last residual add left to the caller: ``(x', f)`` with
        the block's output ``x' + f``, so the caller can add ``f`` and take the next
        norm in one pass; ``normed``: ``attention_norm(x)`` when the caller has it."""
        k1, k2 = keys if keys is not None else (None, None)
        if normed is None:
            normed = self.attention_norm(x)
        a = self.residual_dropout(self.attention(normed, positions), k1)
        x, normed = residual_norm(x, a, self.feed_forward_norm)
        return x, self.residual_dropout(self.feed_forward(normed), k2)

    def forward_incremental(
        self, x: Tensor, positions: Tensor, cache: KVCache, step: Any, layer: int
    ) -> Tensor:
        a = self.attention.forward_incremental(
            self.attention_norm(x), positions, cache, step, layer
        )
        x = x + a
        return x + self.feed_forward(self.feed_forward_norm(x))

    def decode_layer(self, read: Read) -> tuple[tuple[str, float], rt.DecodeLayer] | None:
        """This block as a whole-step program's layer, with its norms' kind and epsilon
        (the program has one of each), or None when a part cannot join."""
        projections = self.attention.decode_projections(read)
        feed_forward = decode_feed_forward(self.feed_forward, read)
        norms = [decode_norm(n, read) for n in (self.attention_norm, self.feed_forward_norm)]
        if projections is None or feed_forward is None or any(n is None for n in norms):
            return None
        (kind, eps, attention_norm), (kind2, eps2, feed_forward_norm) = norms  # type: ignore[misc]
        if (kind, eps) != (kind2, eps2):
            return None
        ff_kind, ff_linears = feed_forward
        norms_by_role = {"attention": attention_norm, "feed_forward": feed_forward_norm}
        layer = rt.DecodeLayer(norms_by_role, {**projections, **ff_linears}, ff_kind)
        return (kind, eps), layer


class LanguageModelHead(Module):
    """Logits ``x @ weight.T + bias``; with tied embeddings the weight is the token
    embedding's and only the (optional) bias belongs to the head."""

    def __init__(
        self,
        d_model: int,
        vocab_size: int,
        *,
        bias: bool,
        tied: bool,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        self.tied = tied
        if tied:
            self.register_parameter("weight", None)
        else:
            self.weight = Parameter(rt.zeros((vocab_size, d_model), backend=backend))
        if bias:
            self.bias = Parameter(rt.zeros(vocab_size, backend=backend))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any, embedding: Parameter) -> Any:
        return F.linear(x, embedding if self.tied else self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"tied={self.tied}, bias={self.bias is not None}"


class DecoderOnlyTransformer(Module):
    """A decoder-only language model. ``forward(tokens [B, T])`` returns logits
    ``[B, T, vocab]``; ``forward_incremental`` decodes against a key/value cache."""

    #: Version of the parameter layout, for migrating saved state.
    STATE_VERSION = 1

    def __init__(
        self,
        config: TransformerConfig | None = None,
        *,
        seed: int = 0,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        config = TransformerConfig() if config is None else config
        if not isinstance(config, TransformerConfig):
            raise TypeError(
                f"DecoderOnlyTransformer: expected a TransformerConfig, found "
                f"{type(config).__name__}"
            )
        self.config = config
        c = config
        self.token_embedding = Embedding(c.vocab_size, c.d_model, backend=backend)
        if c.positions == "learned":
            self.position_embedding = Embedding(c.context_length, c.d_model, backend=backend)
        self.embedding_dropout = Dropout(c.dropout, seed=seed)
        self.blocks = ModuleList(
            TransformerBlock(c, seed=seed + 1 + i, backend=backend) for i in range(c.n_layers)
        )
        self.final_norm = norm_for(c, backend)
        self.language_model_head = LanguageModelHead(
            c.d_model, c.vocab_size, bias=c.head_bias, tied=c.tie_embeddings, backend=backend
        )
        self._positions: dict[tuple, Tensor] = {}
        initialize(self, seed)

    @property
    def backend(self) -> Backend:
        return self.token_embedding.weight.backend

    def extra_repr(self) -> str:
        return f"{self.num_parameters():,} parameters"

    def required_capabilities(self, job: str) -> tuple[str, ...]:
        """The backend capabilities ``job`` (``train``, ``lora``, ``qlora``, ``generate``
        or ``serve``) on this model needs, in CAPABILITIES order: what its configuration
        implies and what the layers it holds now declare (NF4 or block-layout weights
        add their kernels). The whole-step ``decode_step`` is never among them (without
        it decoding runs op by op). See riftco.nn.capabilities."""
        from riftco.nn.capabilities import model_capabilities

        return model_capabilities(self, job)

    @staticmethod
    def required_capabilities_for(
        config: TransformerConfig, job: str, *, weights: str | None = None
    ) -> tuple[str, ...]:
        """``required_capabilities`` from a configuration alone, before the model is
        built, for linear layers holding ``weights`` (None: float32; ``nf4``, ``f16``,
        ``q8_0`` or ``q4_0``)."""
        from riftco.nn.capabilities import required_capabilities_for

        return required_capabilities_for(config, job, weights=weights)

    def quantize_for_inference(
        self, fmt: str, keep_float: Sequence[str] | None = None
    ) -> dict[str, str]:
        """Hold the weight matrices (linears, token embedding, head; ``keep_float`` as
        there) in llama.cpp's ``q8_0``, ``q4_0`` or ``f16`` layout for inference (see
        riftco.nn.inference_weights); returns each matrix's ggml type by name."""
        from riftco.nn.inference_weights import quantize_for_inference

        return quantize_for_inference(self, fmt, keep_float)

    # -- dense forward ------------------------------------------------------------
    def _tokens(self, tokens: Any) -> Tensor:
        t = (
            tokens
            if isinstance(tokens, Tensor)
            else rt.tensor(np.asarray(tokens, dtype=np.int64), backend=self.backend)
        )
        if t.dtype is not rt.int64 or t.ndim != 2:
            raise ConfigError(
                f"tokens must be int64 [batch, length], found {t.dtype.value} {t.shape}"
            )
        self.config.check_length(t.shape[1])
        return t

    def _position_ids(self, batch: int, length: int) -> Tensor:
        key = (batch, length, self.backend.name)
        ids = self._positions.get(key)
        if ids is None:
            if len(self._positions) > 64:
                self._positions.clear()
            ids = F.positions_for(batch, length, self.backend)
            self._positions[key] = ids
        return ids

    def hidden_states(self, tokens: Any) -> Any:
        """The final-norm output ``[B, T, d_model]`` (a Variable when recording)."""
        t = self._tokens(tokens)
        b, length = t.shape
        x = self.token_embedding(t)
        positions = None
        if self.config.positions == "learned":
            x = x + self.position_embedding(self._position_ids(1, length).reshape(length))
        else:
            positions = self._position_ids(b, length)
        x = self.embedding_dropout(x)
        use_checkpoint = self.config.checkpoint and is_grad_enabled() and isinstance(x, Variable)
        # A checkpoint replays its block during backward, outside any mixed_precision
        # context: the replay takes the precision of the forward pass with it.
        low = compute_dtype()
        if not use_checkpoint:
            # Each block's last residual add is taken with the next norm in one pass.
            branch, normed = None, None
            for block in self.blocks:
                if branch is not None:
                    x, normed = residual_norm(x, branch, block.attention_norm)
                x, branch = block.branches(x, positions, None, normed)
            if branch is None:
                return self.final_norm(x)
            return residual_norm(x, branch, self.final_norm)[1]
        for block in self.blocks:
            keys = None
            if block.residual_dropout.training and block.residual_dropout.p > 0:
                keys = (block.residual_dropout.next_key(), block.residual_dropout.next_key())
            x = checkpoint(lambda h, blk=block, k=keys: _replay(low, blk, h, positions, k), x)
        return self.final_norm(x)

    def forward(self, tokens: Any) -> Variable:
        """Logits ``[B, T, vocab]`` for int64 ``tokens [B, T]`` (a Tensor, an array or
        nested lists); a Variable (without a graph under ``no_grad``)."""
        out = self.language_model_head(self.hidden_states(tokens), self.token_embedding.weight)
        return out if isinstance(out, Variable) else Variable(out)

    def loss(
        self, tokens: Any, targets: Any, mask: Any = None, ignore_index: int = -100
    ) -> Variable:
        """Mean cross-entropy of the next-token logits against ``targets [B, T]`` over
        the positions ``mask`` keeps and whose target is not ``ignore_index``."""
        logits = self.forward(tokens)
        return F.cross_entropy(logits, targets, mask=mask, ignore_index=ignore_index)

    # -- incremental decoding -------------------------------------------------------
    def forward_incremental(
        self,
        tokens: Sequence[Sequence[int]],
        cache: KVCache,
        seq_ids: Sequence[int] | None = None,
        all_logits: bool = False,
        whole_step: bool = True,
    ) -> Tensor:
        """Append each sequence's new ``tokens[j]`` (a prompt or one token) to ``cache``
        under ``seq_ids[j]`` (default ``0..n-1``) in one forward, and return the logits
        of each sequence's last new token ``[n, vocab]`` (``all_logits``: of every new
        token, packed ``[sum of counts, vocab]``). Runs without recording gradients.

        The sequences that add one token run through the backend's whole-step decoder
        where there is one (riftco.nn.native_decode; ``whole_step=False`` keeps every
        sequence on the op-by-op forward)."""
        seq_ids = list(range(len(tokens))) if seq_ids is None else list(seq_ids)
        counts = [len(t) for t in tokens]
        if len(seq_ids) != len(tokens) or not tokens or min(counts) == 0:
            raise ConfigError(
                f"forward_incremental: {len(tokens)} token lists (each non-empty) "
                f"for {len(seq_ids)} sequences"
            )
        for s, n in zip(seq_ids, counts):
            self.config.check_length(cache.length(s) + n)
        with no_grad():
            use = whole_step and not all_logits
            steps = cache if use and _whole_step_cache(cache) else None
            decoder = None if steps is None else decoder_for(self)
            if steps is None or decoder is None:
                return self._forward_ops(tokens, cache, seq_ids, all_logits)
            if max(counts) == 1:
                return self._forward_native(decoder, [t[0] for t in tokens], steps, seq_ids)
            # A sequence's path depends on its own count alone (riftco.nn.native_decode).
            one = [j for j, n in enumerate(counts) if n == 1]
            more = [j for j, n in enumerate(counts) if n > 1]
            parts = []
            if more:
                parts.append(
                    (
                        more,
                        self._forward_ops(
                            [tokens[j] for j in more], cache, [seq_ids[j] for j in more], False
                        ),
                    )
                )
            if one:
                parts.append(
                    (
                        one,
                        self._forward_native(
                            decoder, [tokens[j][0] for j in one], steps, [seq_ids[j] for j in one]
                        ),
                    )
                )
            if len(parts) == 1:
                return parts[0][1]
            order = [j for idx, _ in parts for j in idx]
            where = np.argsort(np.asarray(order, dtype=np.int64), kind="stable")
            joined = rt.concatenate([logits for _, logits in parts], axis=0)
            return rt.index_select(joined, 0, rt.from_numpy(where, backend=self.backend))

    def _forward_native(
        self, decoder: Any, tokens: list[int], cache: WholeStepCache, seq_ids: list[int]
    ) -> Tensor:
        step = cache.begin(seq_ids, [1] * len(seq_ids))
        layout = cache.decode_layout(step)
        n = range(len(tokens))
        logits = decoder.step(
            tokens,
            step.positions,
            layout.rows,
            layout.keys,
            layout.values,
            n,
            n,
            [1] * len(n),
            layout.lengths,
            kv_starts=layout.starts,
            page_table=layout.page_table,
            page_size=layout.page_size,
        )
        cache.commit(step)
        return logits

    def _forward_ops(
        self,
        tokens: Sequence[Sequence[int]],
        cache: KVCache,
        seq_ids: Sequence[int],
        all_logits: bool,
    ) -> Tensor:
        step = cache.begin(seq_ids, [len(t) for t in tokens])
        backend = self.backend
        flat = np.fromiter((tok for seq in tokens for tok in seq), dtype=np.int64)
        ids = rt.from_numpy(flat, backend=backend)
        positions = rt.from_numpy(step.positions, backend=backend)
        x = rt.embedding(self.token_embedding.weight.value, ids)
        if self.config.positions == "learned":
            x = x + rt.embedding(self.position_embedding.weight.value, positions)
        for i, block in enumerate(self.blocks):
            x = block.forward_incremental(x, positions, cache, step, i)
        if not all_logits:
            rows = rt.from_numpy(np.asarray(step.last_rows, dtype=np.int64), backend=backend)
            x = rt.index_select(x, 0, rows)
        logits = self.language_model_head(self.final_norm(x), self.token_embedding.weight)
        cache.commit(step)
        return logits


def _seed_for(seed: int, name: str) -> int:
    return int(np.random.SeedSequence([seed, zlib.crc32(name.encode())]).generate_state(1)[0])


#: Whether each cache type is a WholeStepCache: a runtime Protocol check reads every
#: member's name, tens of microseconds a decoded token.
_WHOLE_STEP_TYPES: dict[type, bool] = {}


def _whole_step_cache(cache: KVCache) -> TypeGuard[WholeStepCache]:
    kind = type(cache)
    known = _WHOLE_STEP_TYPES.get(kind)
    if known is None:
        known = _WHOLE_STEP_TYPES[kind] = isinstance(cache, WholeStepCache)
    return known


_RESIDUAL_OUTPUTS = (
    "attention.output.weight",
    "feed_forward.project.weight",
    "feed_forward.down.weight",
)


def initialize(model: DecoderOnlyTransformer, seed: int = 0) -> None:
    """GPT-2's initialization, seeded per parameter name (so it does not depend on the
    order of creation): weights ``N(0, init_std)``, residual output projections
    ``N(0, init_std / sqrt(2 * n_layers))``, biases 0, norm weights 1."""
    c = model.config
    for name, p in model.named_parameters():
        shape, backend = p.value.shape, p.value.backend
        if name.endswith("norm.weight"):
            value = rt.ones(shape, backend=backend)
        elif name.endswith(".bias"):
            value = rt.zeros(shape, backend=backend)
        else:
            std = c.init_std
            if name.endswith(_RESIDUAL_OUTPUTS):
                std = std / (2 * c.n_layers) ** 0.5
            value = rt.normal(shape, std=std, seed=_seed_for(seed, name), backend=backend)
        p.value.assign_(value)


def _replay(low: rt.DType | None, block: Any, h: Any, positions: Any, keys: Any) -> Any:
    """``block(h, positions, keys)`` in the precision ``low`` (None: float32)."""
    if low is None:
        return block(h, positions, keys)
    with mixed_precision(low):
        return block(h, positions, keys)


__all__ = [
    "DecoderOnlyTransformer",
    "LanguageModelHead",
    "TransformerBlock",
    "initialize",
    "norm_for",
]
