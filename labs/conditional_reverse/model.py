"""A variant's programmed decoder for a profile."""

from __future__ import annotations

from labs.conditional_reverse.programs import program_for
from labs.conditional_reverse.task import Profile
from riftco.cajal.programmed import ProgrammedConfig, ProgrammedDecoder, Span


def build_model(variant: str, profile: Profile, seed: int) -> ProgrammedDecoder:
    """One layer: ``attention_branches`` x ``heads`` causal attention, a GELU
    feed-forward branch and (F, P, T) the program branch reading the source span and
    writing the target-predicting span."""
    length, symbols = profile.length, profile.symbols
    program = program_for(variant, length, symbols)
    inputs: tuple[Span, ...] = ()
    output = None
    if program is not None:
        sequence = Span(0, length, symbols)
        inputs = (sequence, Span(0, 1, 2)) if variant in ("F", "T") else (sequence,)
        output = Span(length, length, symbols)
    config = ProgrammedConfig(
        vocab_size=symbols + 1,
        context_length=2 * length,
        d_model=profile.d_model,
        n_layers=1,
        attention_branches=profile.attention_branches,
        heads=profile.heads,
        d_ff=profile.d_ff,
        inputs=inputs,
        output=output,
        trainable_program=variant == "T",
        program_init="normal" if variant == "T" else "map",
        program_seed=seed,
    )
    return ProgrammedDecoder(config, program, seed=seed)
