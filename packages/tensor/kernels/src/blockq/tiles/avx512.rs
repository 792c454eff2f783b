//! The tiles' products with AVX-512 VNNI (see [`super`]): register `j` of set
//! `b % 2` holds lane `j` of the sixteen rows; `vpdpbusd` gives the exact group
//! products, unsigned weights (Q4_0 nibbles, NF4's codebook offset by 128, Q8_0
//! magnitudes) against signed input codes (Q8_0: with the weight's signs).

use std::arch::x86_64::*;

use super::{TileKind, TILE};
use crate::blockq::QK;
use crate::nf4_int::CODEBOOK_I8;

/// The four bytes of `q` from `at` broadcast to every 32-bit lane.
#[inline(always)]
unsafe fn group(q: *const i8, at: usize) -> __m512i {
    _mm512_set1_epi32(std::ptr::read_unaligned(q.add(at) as *const i32))
}

/// The rows' `d_b * s_b`: the tile's sixteen scales (halves, converted exactly, or
/// float32) times the input's.
#[inline(always)]
unsafe fn scales(base: *const u8, s: f32, halves: bool) -> __m512 {
    let d = if halves {
        _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i))
    } else {
        _mm512_loadu_ps(base as *const f32)
    };
    _mm512_mul_ps(d, _mm512_set1_ps(s))
}

/// `finish8` of set 0 plus set 1 for the sixteen rows at once, into `out`.
#[inline(always)]
unsafe fn finish(acc: &[[__m512; 8]; 2], nf4: bool, out: &mut [f32; TILE]) {
    let mut v = [_mm512_setzero_ps(); 8];
    for j in 0..8 {
        v[j] = _mm512_add_ps(acc[0][j], acc[1][j]);
    }
    let h4: [__m512; 4] = [
        _mm512_add_ps(v[0], v[4]),
        _mm512_add_ps(v[1], v[5]),
        _mm512_add_ps(v[2], v[6]),
        _mm512_add_ps(v[3], v[7]),
    ];
    let h2 = [_mm512_add_ps(h4[0], h4[2]), _mm512_add_ps(h4[1], h4[3])];
    let mut y = _mm512_add_ps(h2[0], h2[1]);
    if nf4 {
        y = _mm512_div_ps(y, _mm512_set1_ps(127.0));
    }
    _mm512_storeu_ps(out.as_mut_ptr(), y);
}

/// Block `b` of a Q4_0 or NF4 tile into `acc`.
#[inline(always)]
unsafe fn nibble_block<const NF4: bool>(
    tile: *const u8,
    b: usize,
    q: *const i8,
    s: &[f32],
    neg_sums: *const i32,
    acc: &mut [__m512; 8],
) {
    let kind = if NF4 { TileKind::Nf4 } else { TileKind::Q4_0 };
    let base = tile.add(b * kind.block_bytes());
    let d = scales(base, *s.get_unchecked(b), !NF4);
    let lines = base.add(kind.scale_bytes());
    let low = _mm512_set1_epi8(15);
    let mut lut = [0u8; 16];
    for (l, &c) in lut.iter_mut().zip(&CODEBOOK_I8) {
        *l = (c as i32 + 128) as u8;
    }
    let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(lut.as_ptr() as *const __m128i));
    let (xq, sm) = (q.add(b * QK), neg_sums.add(b * 8));
    for c in 0..4 {
        let raw = _mm512_loadu_si512(lines.add(64 * c) as *const __m512i);
        let mut lo = _mm512_and_si512(raw, low);
        let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), low);
        if NF4 {
            lo = _mm512_shuffle_epi8(lut, lo);
            hi = _mm512_shuffle_epi8(lut, hi);
        }
        // Starting from minus the group sums: the same exact integers as subtracting them.
        let pl = _mm512_dpbusd_epi32(_mm512_set1_epi32(*sm.add(c)), lo, group(xq, 4 * c));
        let ph = _mm512_dpbusd_epi32(
            _mm512_set1_epi32(*sm.add(c + 4)),
            hi,
            group(xq, QK / 2 + 4 * c),
        );
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pl), d, acc[c]);
        acc[c + 4] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ph), d, acc[c + 4]);
    }
}

/// A Q4_0 (`NF4` false) or NF4 tile of `kb` blocks. The caller checks the CPU and the lengths.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn nibbles<const NF4: bool>(
    tile: &[u8],
    kb: usize,
    q: &[i8],
    s: &[f32],
    neg_sums: &[i32],
    out: &mut [f32; TILE],
) {
    let (t, x, sm) = (tile.as_ptr(), q.as_ptr(), neg_sums.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 8]; 2];
    let mut b = 0;
    while b + 2 <= kb {
        nibble_block::<NF4>(t, b, x, s, sm, &mut acc[0]);
        nibble_block::<NF4>(t, b + 1, x, s, sm, &mut acc[1]);
        b += 2;
    }
    if b < kb {
        nibble_block::<NF4>(t, b, x, s, sm, &mut acc[0]);
    }
    finish(&acc, NF4, out);
}

/// Block `b` of a Q8_0 tile into `acc`.
#[inline(always)]
unsafe fn q8_block(tile: *const u8, b: usize, q: *const i8, s: &[f32], acc: &mut [__m512; 8]) {
    let base = tile.add(b * TileKind::Q8_0.block_bytes());
    let d = scales(base, *s.get_unchecked(b), true);
    let lines = base.add(TileKind::Q8_0.scale_bytes());
    let xq = q.add(b * QK);
    let zero = _mm512_setzero_si512();
    for (j, a) in acc.iter_mut().enumerate() {
        let w = _mm512_loadu_si512(lines.add(64 * j) as *const __m512i);
        // |w| (as unsigned bytes: -128 reads 128) times x with w's sign.
        let x = group(xq, 4 * j);
        let sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), zero, x);
        let p = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(w), sx);
        *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, *a);
    }
}

/// A Q8_0 tile of `kb` blocks. The caller checks the CPU and the lengths.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn q8_0(tile: &[u8], kb: usize, q: &[i8], s: &[f32], out: &mut [f32; TILE]) {
    let (t, x) = (tile.as_ptr(), q.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 8]; 2];
    let mut b = 0;
    while b + 2 <= kb {
        q8_block(t, b, x, s, &mut acc[0]);
        q8_block(t, b + 1, x, s, &mut acc[1]);
        b += 2;
    }
    if b < kb {
        q8_block(t, b, x, s, &mut acc[0]);
    }
    finish(&acc, false, out);
}
