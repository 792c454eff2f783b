//! The AVX-512 versions of the Q8_0 and Q4_0 row products (see [`super`]): two
//! blocks a 512-bit register, block `b` in lanes 0-7 and block `b + 1` in lanes
//! 8-15, so that the accumulator's low half is set 0 (even blocks) and its high
//! half set 1 (odd blocks), exactly the two AVX2 accumulators. The integer sums
//! of four products per lane come from `vpdpbusd` (VNNI) or from
//! `vpmaddubsw` + `vpmaddwd` (AVX-512 BW); both are exact, and the float32 steps
//! are the AVX2 ones in the same order, so the bits are the same at every level.
//! A last odd block is loaded into the low half only and added by a masked
//! fused multiply-add that leaves set 1 as it is.

// The AVX-512 intrinsics are stable from Rust 1.89 (the workspace's MSRV is older).

use std::arch::x86_64::*;

use crate::blockq::QK;

/// Lanes 0-7 (block `b`) of a 16-lane register.
const LOW: __mmask16 = 0x00ff;

/// Four products of unsigned `a` and signed `b` bytes summed per 32-bit lane.
#[inline(always)]
unsafe fn dot4<const VNNI: bool>(a: __m512i, b: __m512i) -> __m512i {
    if VNNI {
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, b)
    } else {
        // Pairs fit in 16 bits: at most 2 * 128 * 127 in magnitude.
        _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1))
    }
}

/// `finish8` of set 0 plus set 1 (the low and high halves of `v`).
#[inline(always)]
unsafe fn reduce(v: __m512) -> f32 {
    let v = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v));
    let h4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps::<1>(h2, h2)))
}

/// `d_r * s_b` in lanes 0-7 and `d_r' * s_(b+1)` in lanes 8-15 for each row, the
/// weight's half scales of blocks `b` and `b + 1` (`stride` bytes a block;
/// block `b + 1` is read only when `pair`).
#[inline(always)]
unsafe fn scales<const R: usize>(
    rows: &[&[u8]; R],
    stride: usize,
    s: &[f32],
    b: usize,
    pair: bool,
) -> [__m512; R] {
    let s2 = if pair {
        _mm_castpd_ps(_mm_load_sd(s.as_ptr().add(b) as *const f64))
    } else {
        _mm_set_ss(*s.get_unchecked(b))
    };
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let mut out = [_mm512_setzero_ps(); R];
    for (o, row) in out.iter_mut().zip(rows) {
        let p = row.as_ptr().add(b * stride);
        let h0 = std::ptr::read_unaligned(p as *const u16) as u32;
        let h1 = if pair {
            std::ptr::read_unaligned(p.add(stride) as *const u16) as u32
        } else {
            0
        };
        let d = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((h0 | h1 << 16) as i32)), s2);
        *o = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(d));
    }
    out
}

/// Blocks `b` and `b + 1` (only `b` when not `pair`) of each Q8_0 row into `acc`.
#[inline(always)]
unsafe fn q8_blocks<const R: usize, const VNNI: bool>(
    rows: &[&[u8]; R],
    q: &[i8],
    s: &[f32],
    b: usize,
    pair: bool,
    acc: &mut [__m512; R],
) {
    let xp = q.as_ptr().add(b * QK) as *const __m256i;
    let x = if pair {
        _mm512_loadu_si512(xp as *const __m512i)
    } else {
        _mm512_zextsi256_si512(_mm256_loadu_si256(xp))
    };
    let d = scales(rows, 34, s, b, pair);
    for r in 0..R {
        let blk = rows[r].as_ptr().add(b * 34);
        let lo = _mm256_loadu_si256(blk.add(2) as *const __m256i);
        let w = if pair {
            let hi = _mm256_loadu_si256(blk.add(36) as *const __m256i);
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
        } else {
            _mm512_zextsi256_si512(lo)
        };
        // |w| (as unsigned bytes: -128 reads 128) times x with w's sign.
        let negative = _mm512_movepi8_mask(w);
        let sx = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
        let p = _mm512_cvtepi32_ps(dot4::<VNNI>(_mm512_abs_epi8(w), sx));
        acc[r] = if pair {
            _mm512_fmadd_ps(p, d[r], acc[r])
        } else {
            _mm512_mask3_fmadd_ps(p, d[r], acc[r], LOW)
        };
    }
}

/// Blocks `b` and `b + 1` (only `b` when not `pair`) of each Q4_0 row into `acc`.
#[inline(always)]
unsafe fn q4_blocks<const R: usize, const VNNI: bool>(
    rows: &[&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
    b: usize,
    pair: bool,
    acc: &mut [__m512; R],
) {
    let xp = q.as_ptr().add(b * QK) as *const __m256i;
    let op = sums.as_ptr().add(b * 8) as *const __m256i;
    let (x, off) = if pair {
        (
            _mm512_loadu_si512(xp as *const __m512i),
            _mm512_loadu_si512(op as *const __m512i),
        )
    } else {
        (
            _mm512_zextsi256_si512(_mm256_loadu_si256(xp)),
            _mm512_zextsi256_si512(_mm256_loadu_si256(op)),
        )
    };
    let d = scales(rows, 18, s, b, pair);
    let nibble = _mm512_set1_epi8(15);
    // Per block: low nibbles (elements 0..15), then high nibbles (16..31).
    let shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    for r in 0..R {
        let blk = rows[r].as_ptr().add(b * 18);
        let c0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(blk.add(2) as *const __m128i));
        let c1 = if pair {
            _mm256_broadcastsi128_si256(_mm_loadu_si128(blk.add(20) as *const __m128i))
        } else {
            _mm256_setzero_si256()
        };
        let raw = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(c0), c1);
        let w = _mm512_and_si512(_mm512_srlv_epi64(raw, shift), nibble);
        let p = _mm512_sub_epi32(dot4::<VNNI>(w, x), off);
        let p = _mm512_cvtepi32_ps(p);
        acc[r] = if pair {
            _mm512_fmadd_ps(p, d[r], acc[r])
        } else {
            _mm512_mask3_fmadd_ps(p, d[r], acc[r], LOW)
        };
    }
}

#[inline(always)]
unsafe fn rows_q8_0<const R: usize, const VNNI: bool>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
) -> [f32; R] {
    let mut acc = [_mm512_setzero_ps(); R];
    let mut b = 0;
    while b + 2 <= s.len() {
        q8_blocks::<R, VNNI>(&rows, q, s, b, true, &mut acc);
        b += 2;
    }
    if b < s.len() {
        q8_blocks::<R, VNNI>(&rows, q, s, b, false, &mut acc);
    }
    // A loop, not `map`: a closure would not inherit the target features.
    let mut out = [0.0f32; R];
    for (o, &a) in out.iter_mut().zip(&acc) {
        *o = reduce(a);
    }
    out
}

#[inline(always)]
unsafe fn rows_q4_0<const R: usize, const VNNI: bool>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    let mut acc = [_mm512_setzero_ps(); R];
    let mut b = 0;
    while b + 2 <= s.len() {
        q4_blocks::<R, VNNI>(&rows, q, s, sums, b, true, &mut acc);
        b += 2;
    }
    if b < s.len() {
        q4_blocks::<R, VNNI>(&rows, q, s, sums, b, false, &mut acc);
    }
    // A loop, not `map`: a closure would not inherit the target features.
    let mut out = [0.0f32; R];
    for (o, &a) in out.iter_mut().zip(&acc) {
        *o = reduce(a);
    }
    out
}

/// Q8_0 rows with AVX-512 VNNI. The caller checks the CPU and the lengths.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_q8_0_vnni<const R: usize>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
) -> [f32; R] {
    rows_q8_0::<R, true>(rows, q, s)
}

/// Q4_0 rows with AVX-512 VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_q4_0_vnni<const R: usize>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    rows_q4_0::<R, true>(rows, q, s, sums)
}

/// Q8_0 rows with AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_q8_0_bw<const R: usize>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
) -> [f32; R] {
    rows_q8_0::<R, false>(rows, q, s)
}

/// Q4_0 rows with AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_q4_0_bw<const R: usize>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    rows_q4_0::<R, false>(rows, q, s, sums)
}
