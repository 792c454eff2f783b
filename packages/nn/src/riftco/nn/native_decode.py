"""Whole-step decoding of a ``DecoderOnlyTransformer``: the one place where a model is
described for riftco.tensor's ``Decoder`` (the native backend capability
``decode_step``), so that a decode step is one backend call instead of about 150 ops.

The model is still defined once, by its modules, and its op-by-op forward is the
reference and the fallback. Each layer says how it joins the program (riftco.nn.joins:
``decode_layer``, ``decode_norm``, ``decode_linear``); ``decoder_for`` reads their
parameters in place (nothing is copied) and says None where the program cannot hold the
model (a backend without the native kernel, mixed precision, a layer that cannot join,
such as a LoRA-adapted one), which then decodes op by op on its own device. The decoder
is kept on the model and rebuilt when a parameter, buffer or layer is replaced.

Which path a row takes depends on that row's sequence alone: in
``forward_incremental`` the sequences that add one token go through the decoder,
those that add several (a prompt) through the op-by-op forward, whose batched
products suit them; so a sequence's logits never depend on what else is batched.
"""

from __future__ import annotations

from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

import riftco.tensor as rt
from riftco.autograd import Parameter, rebind_epoch
from riftco.nn.joins import decode_norm
from riftco.nn.module import structure_epoch
from riftco.nn.precision import compute_dtype

if TYPE_CHECKING:
    from riftco.nn.transformer import DecoderOnlyTransformer


_VALUE = attrgetter("value")


class _Watch:
    """The parameters the description read, and their values then: the decoder is
    current while each parameter still holds the value it read."""

    def __init__(self) -> None:
        self.pairs: list[tuple[Parameter, rt.Tensor]] = []

    def __call__(self, p: Parameter | None) -> rt.Tensor | None:
        if p is None:
            return None
        self.pairs.append((p, p.value))
        return p.value


def describe(model: DecoderOnlyTransformer, read: Any) -> rt.Decoder | None:
    """The model as a whole-step ``Decoder``, or None when a part cannot join."""
    c = model.config
    layers, kinds = [], set()
    for block in model.blocks:
        joined = block.decode_layer(read)
        if joined is None:
            return None
        kinds.add(joined[0])
        layers.append(joined[1])
    final = decode_norm(model.final_norm, read)
    if final is None or len(kinds | {final[:2]}) != 1:
        return None  # the program has one kind of norm, with one epsilon
    norm, eps, final_norm = final
    head = model.language_model_head
    joins = getattr(head, "decode_linear", None)  # a BlockHead (quantize_for_inference)
    if joins is not None:
        head_linear = joins(read)
        if head_linear is None:
            return None
    else:
        head_weight = read(model.token_embedding.weight if head.tied else head.weight)
        assert head_weight is not None
        head_linear = rt.DecodeLinear.of(head_weight, read(head.bias))
    embedding = read(model.token_embedding.weight)
    assert embedding is not None
    rotary = c.positions == "rotary"
    spec = rt.DecodeSpec(
        heads=c.n_heads,
        kv_heads=c.n_kv_heads,
        head_dim=c.head_dim,
        norm=norm,
        eps=eps,
        token_embedding=embedding,
        position_embedding=None if rotary else read(model.position_embedding.weight),
        rope_theta=c.rope_theta if rotary else None,
        window=c.sliding_window or 0,
        scale=model.blocks[0].attention.scale if len(model.blocks) else None,
        layers=tuple(layers),
        final_norm=final_norm,
        head=head_linear,
    )
    try:
        return rt.Decoder(spec)
    except rt.CapabilityMissing:  # a part the backend's native step does not decode
        return None


def decoder_for(model: DecoderOnlyTransformer) -> rt.Decoder | None:
    """The model's whole-step decoder, or None where decoding stays op by op."""
    if compute_dtype() is not None:
        return None
    cached = model.__dict__.get("_native_decoder")
    # What the decoder depends on: the modules' structure and the tensors its
    # parameters hold (one comparison while no module or parameter was rebound).
    epochs = (structure_epoch(), rebind_epoch())
    if cached is not None:
        made, decoder, watch = cached
        if made == epochs:
            return decoder
        if made[0] == epochs[0] and all(map(is_, map(_VALUE, watch[0]), watch[1])):
            model.__dict__["_native_decoder"] = (epochs, decoder, watch)
            return decoder
    if not rt.Decoder.available(model.backend):
        return None
    read = _Watch()
    decoder = describe(model, read)
    watch = (tuple(p for p, _ in read.pairs), tuple(v for _, v in read.pairs))
    model.__dict__["_native_decoder"] = (epochs, decoder, watch)
    return decoder


__all__ = ["decoder_for", "describe"]
