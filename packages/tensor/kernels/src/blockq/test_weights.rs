//! Block-layout weights with patterned bytes for the tests.

use super::{BlockFormat, QK};

pub(super) fn half(v: f32) -> [u8; 2] {
    // Exact for the small dyadic values the tests use.
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = ((bits >> 13) & 0x3ff) as u16;
    let h = if v == 0.0 {
        sign
    } else {
        sign | ((exp as u16) << 10) | mant
    };
    h.to_le_bytes()
}

/// A weight of `rows x cols` in `format` with patterned bytes.
pub(super) fn weight(format: BlockFormat, rows: usize, cols: usize) -> Vec<u8> {
    let mut data = Vec::new();
    for r in 0..rows {
        match format {
            BlockFormat::F16 => {
                for c in 0..cols {
                    data.extend(half(((r * 7 + c * 3) % 19) as f32 / 8.0 - 1.0));
                }
            }
            _ => {
                for b in 0..cols / QK {
                    data.extend(half(0.25 + ((r + b) % 5) as f32 / 16.0));
                    let n = if format == BlockFormat::Q8_0 { 32 } else { 16 };
                    data.extend((0..n).map(|j| ((r * 31 + b * 17 + j * 13) % 256) as u8));
                }
            }
        }
    }
    data
}
