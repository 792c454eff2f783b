"""Research labs of Riftco Transformer, run from a source checkout (never in a wheel)."""
