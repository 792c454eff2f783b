//! The tiles' products with AVX-512 (see [`super`]): register `j` of set `b % 2`
//! holds lane `j` of the sixteen rows; `vpdpbusd` (VNNI) or `vpmaddubsw` +
//! `vpmaddwd` (BW) give the exact group products, unsigned weights (Q4_0 nibbles, NF4's codebook offset by 128, Q8_0
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

/// `init` plus the four products of unsigned `a` and signed `b` bytes per 32-bit
/// lane: `vpdpbusd` (VNNI) or `vpmaddubsw` + `vpmaddwd` (exact where a pair's sum
/// fits 16 bits: `a` at most 128 against `|b|` at most 127).
#[inline(always)]
unsafe fn dot4<const VNNI: bool>(init: __m512i, a: __m512i, b: __m512i) -> __m512i {
    if VNNI {
        _mm512_dpbusd_epi32(init, a, b)
    } else {
        let pairs = _mm512_maddubs_epi16(a, b);
        _mm512_add_epi32(init, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)))
    }
}

/// The codebook's 16 entries as bytes (offset by 128, or their magnitudes) in each 128-bit lane.
#[inline(always)]
unsafe fn codebook(offset: bool) -> __m512i {
    let mut lut = [0u8; 16];
    for (l, &c) in lut.iter_mut().zip(&CODEBOOK_I8) {
        *l = if offset {
            (c as i32 + 128) as u8
        } else {
            c.unsigned_abs()
        };
    }
    _mm512_broadcast_i32x4(_mm_loadu_si128(lut.as_ptr() as *const __m128i))
}

/// Block `b` of a Q4_0 or NF4 tile into `acc`. NF4 with VNNI: the codebook offset by
/// 128 against the input, minus 128 times its sums (`neg_sums`); without VNNI: the
/// codebook's magnitudes against the input with the codes' signs (codes 0-6 are
/// negative), `neg_sums` unread.
#[inline(always)]
unsafe fn nibble_block<const NF4: bool, const VNNI: bool>(
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
    let lut = codebook(VNNI);
    let zero = _mm512_setzero_si512();
    let (xq, sm) = (q.add(b * QK), neg_sums.add(b * 8));
    let offset = !NF4 || VNNI;
    for c in 0..4 {
        let raw = _mm512_loadu_si512(lines.add(64 * c) as *const __m512i);
        let codes = [
            _mm512_and_si512(raw, low),
            _mm512_and_si512(_mm512_srli_epi16::<4>(raw), low),
        ];
        for (h, &code) in codes.iter().enumerate() {
            let j = c + 4 * h;
            let mut x = group(xq, 4 * c + QK / 2 * h);
            let w = if NF4 {
                _mm512_shuffle_epi8(lut, code)
            } else {
                code
            };
            if NF4 && !VNNI {
                let negative = _mm512_cmplt_epu8_mask(code, _mm512_set1_epi8(7));
                x = _mm512_mask_sub_epi8(x, negative, zero, x);
            }
            // Starting from minus the group sums: the same exact integers as subtracting them.
            let init = if offset {
                _mm512_set1_epi32(*sm.add(j))
            } else {
                zero
            };
            let p = dot4::<VNNI>(init, w, x);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[j]);
        }
    }
}

#[inline(always)]
unsafe fn nibbles_with<const NF4: bool, const VNNI: bool>(
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
        nibble_block::<NF4, VNNI>(t, b, x, s, sm, &mut acc[0]);
        nibble_block::<NF4, VNNI>(t, b + 1, x, s, sm, &mut acc[1]);
        b += 2;
    }
    if b < kb {
        nibble_block::<NF4, VNNI>(t, b, x, s, sm, &mut acc[0]);
    }
    finish(&acc, NF4, out);
}

/// Block `b` of a Q8_0 tile into `acc`.
#[inline(always)]
unsafe fn q8_block<const VNNI: bool>(
    tile: *const u8,
    b: usize,
    q: *const i8,
    s: &[f32],
    acc: &mut [__m512; 8],
) {
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
        let p = dot4::<VNNI>(zero, _mm512_abs_epi8(w), sx);
        *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, *a);
    }
}

#[inline(always)]
unsafe fn q8_0_with<const VNNI: bool>(
    tile: &[u8],
    kb: usize,
    q: &[i8],
    s: &[f32],
    out: &mut [f32; TILE],
) {
    let (t, x) = (tile.as_ptr(), q.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 8]; 2];
    let mut b = 0;
    while b + 2 <= kb {
        q8_block::<VNNI>(t, b, x, s, &mut acc[0]);
        q8_block::<VNNI>(t, b + 1, x, s, &mut acc[1]);
        b += 2;
    }
    if b < kb {
        q8_block::<VNNI>(t, b, x, s, &mut acc[0]);
    }
    finish(&acc, false, out);
}

/// A Q4_0 (`NF4` false) or NF4 tile of `kb` blocks with AVX-512 VNNI. The caller
/// checks the CPU and the lengths.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn nibbles_vnni<const NF4: bool>(
    tile: &[u8],
    kb: usize,
    q: &[i8],
    s: &[f32],
    neg_sums: &[i32],
    out: &mut [f32; TILE],
) {
    nibbles_with::<NF4, true>(tile, kb, q, s, neg_sums, out)
}

/// [`nibbles_vnni`] with AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub(super) unsafe fn nibbles_bw<const NF4: bool>(
    tile: &[u8],
    kb: usize,
    q: &[i8],
    s: &[f32],
    neg_sums: &[i32],
    out: &mut [f32; TILE],
) {
    nibbles_with::<NF4, false>(tile, kb, q, s, neg_sums, out)
}

/// A Q8_0 tile of `kb` blocks with AVX-512 VNNI. The caller checks the CPU and the lengths.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn q8_0_vnni(tile: &[u8], kb: usize, q: &[i8], s: &[f32], out: &mut [f32; TILE]) {
    q8_0_with::<true>(tile, kb, q, s, out)
}

/// [`q8_0_vnni`] with AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub(super) unsafe fn q8_0_bw(tile: &[u8], kb: usize, q: &[i8], s: &[f32], out: &mut [f32; TILE]) {
    q8_0_with::<false>(tile, kb, q, s, out)
}
