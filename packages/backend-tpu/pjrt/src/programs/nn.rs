//! Fused normalization, activation, loss and attention programs.
