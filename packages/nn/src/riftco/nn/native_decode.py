"""Whole-step decoding of a ``DecoderOnlyTransformer``: the model handed to
riftco.tensor's ``Decoder`` (the backend capability ``decode_step``), so that a decode
step is one backend call instead of about 150 op calls.

The model is still defined once, by its modules: ``decoder_for`` reads their
parameters (in place; nothing is copied) and their topology, and says None for what
the whole-step kernel does not cover (a backend without the capability, mixed
precision, LoRA adapters or any layer other than ``Linear``, ``BlockLinear`` and
``QuantizedLinear``), which then decodes op by op. The decoder is kept on the model
and rebuilt when a parameter, buffer or layer is replaced.

Which path a row takes depends on that row's sequence alone: in
``forward_incremental`` the sequences that add one token go through the decoder,
those that add several (a prompt) through the op-by-op forward, whose batched
products suit them; so a sequence's logits never depend on what else is batched.
"""

from __future__ import annotations

from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

import riftco.tensor as rt
from riftco.nn.feed_forward import FeedForward, SwiGLU
from riftco.nn.inference_weights import BlockLinear
from riftco.nn.layers import Linear, RMSNorm
from riftco.nn.module import Module, structure_epoch
from riftco.nn.precision import compute_dtype
from riftco.nn.quantized import QuantizedLinear

if TYPE_CHECKING:
    from riftco.nn.transformer import DecoderOnlyTransformer


_VALUE = attrgetter("value")


class _Unsupported(Exception):
    pass


def _value(p: Any) -> rt.Tensor | None:
    return None if p is None else p.value


class _Build:
    """Collects the decoder's pieces and what to watch for a rebuild."""

    def __init__(self) -> None:
        self.watch: list[tuple[Any, Any]] = []

    def param(self, p: Any) -> rt.Tensor | None:
        if p is None:
            return None
        self.watch.append((p, p.value))
        return p.value

    def linear(self, m: Module) -> rt.DecoderLinear:
        kind = type(m)
        if kind is Linear:
            assert isinstance(m, Linear)
            w = self.param(m.weight)
            assert w is not None
            return rt.DecoderLinear(w, self.param(m.bias))
        if kind is BlockLinear:
            assert isinstance(m, BlockLinear)
            return rt.DecoderLinear(m.weight, self.param(m.bias))
        if kind is QuantizedLinear:
            assert isinstance(m, QuantizedLinear)
            return rt.DecoderLinear(m.weight, self.param(m.bias))
        raise _Unsupported

    def norm(self, m: Any) -> rt.DecoderNorm:
        return rt.DecoderNorm(self.param(m.weight), self.param(getattr(m, "bias", None)))

    def tensor(self, p: Any) -> rt.Tensor:
        t = self.param(p)
        assert t is not None
        return t


def _build(model: DecoderOnlyTransformer) -> tuple[rt.Decoder, list[tuple[Any, Any]]]:
    c, b = model.config, _Build()
    layers = []
    for block in model.blocks:
        a, ff = block.attention, block.feed_forward
        lins: tuple[Module, ...]
        if isinstance(ff, SwiGLU):
            kind, lins = "swiglu", (ff.gate, ff.up, ff.down)
        elif isinstance(ff, FeedForward):
            kind = "gelu" if ff.approximate == "none" else "gelu_tanh"
            lins = (ff.expand, ff.project)
        else:
            raise _Unsupported
        layers.append(
            rt.DecoderLayer(
                b.norm(block.attention_norm),
                b.linear(a.query),
                b.linear(a.key),
                b.linear(a.value),
                b.linear(a.output),
                b.norm(block.feed_forward_norm),
                kind,
                tuple(b.linear(m) for m in lins),
            )
        )
    head = model.language_model_head
    head_weight = model.token_embedding.weight if head.tied else head.weight
    rotary = c.positions == "rotary"
    decoder = rt.Decoder(
        heads=c.n_heads,
        kv_heads=c.n_kv_heads,
        head_dim=c.head_dim,
        norm="rms" if isinstance(model.final_norm, RMSNorm) else "layer",
        eps=c.norm_eps,
        token_embedding=b.tensor(model.token_embedding.weight),
        position_embedding=None if rotary else b.param(model.position_embedding.weight),
        rope_theta=c.rope_theta if rotary else None,
        window=c.sliding_window or 0,
        scale=model.blocks[0].attention.scale if len(model.blocks) else None,
        layers=layers,
        final_norm=b.norm(model.final_norm),
        head=rt.DecoderLinear(b.tensor(head_weight), b.param(head.bias)),
    )
    return decoder, b.watch


def decoder_for(model: DecoderOnlyTransformer) -> rt.Decoder | None:
    """The model's whole-step decoder, or None where decoding stays op by op."""
    if compute_dtype() is not None or not rt.Decoder.available(model.backend):
        return None
    cached = model.__dict__.get("_native_decoder")
    epoch = structure_epoch()
    if cached is not None:
        made, decoder, watch = cached
        if made == epoch and all(map(is_, map(_VALUE, watch[0]), watch[1])):
            return decoder
    norms = {type(m) for blk in model.blocks for m in (blk.attention_norm, blk.feed_forward_norm)}
    built: tuple[rt.Decoder | None, list[tuple[Any, Any]]] = (None, [])
    if len(norms | {type(model.final_norm)}) == 1:
        try:
            built = _build(model)
        except _Unsupported:
            pass
    decoder, pairs = built
    watch = (tuple(p for p, _ in pairs), tuple(v for _, v in pairs))
    model.__dict__["_native_decoder"] = (epoch, decoder, watch)
    return decoder


__all__ = ["decoder_for"]
