//! The fused Adam / AdamW update.
