//! The AVX-512 versions of the NF4 integer row products (see [`super`]): two
//! blocks of 32 a 512-bit register, block `b` in lanes 0-7 and block `b + 1` in
//! lanes 8-15, so that the accumulator's halves are the AVX2 version's two sets.
//! VNNI: `vpdpbusd` of the codebook offset by 128 (unsigned bytes 1..255) with
//! the input codes, less 128 times the input's group sums; AVX-512 BW: `|C8|`
//! with the weight's sign moved onto the input codes, `vpmaddubsw` + `vpmaddwd`.
//! Both integer sums are exact and the float32 steps are the AVX2 ones, so the
//! bits are the same at every level. A last odd block is added by a masked fused
//! multiply-add that leaves set 1 as it is.

use std::arch::x86_64::*;

use super::{Row, CODEBOOK_I8, QK};

/// Lanes 0-7 (block `b`) of a 16-lane register.
const LOW: __mmask16 = 0x00ff;

/// `finish8` of set 0 plus set 1 (the low and high halves of `v`).
#[inline(always)]
unsafe fn reduce(v: __m512) -> f32 {
    let v = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v));
    let h4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps::<1>(h2, h2)))
}

/// A 16-byte table in every 128-bit lane.
#[inline(always)]
unsafe fn table(bytes: [u8; 16]) -> __m512i {
    _mm512_broadcast_i32x4(_mm_loadu_si128(bytes.as_ptr() as *const __m128i))
}

/// Blocks `b` and `b + 1` (only `b` when not `PAIR`) of each row into `acc`.
/// `SHARED`: both blocks of every row have one weight scale.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn blocks<const R: usize, const VNNI: bool, const SHARED: bool, const PAIR: bool>(
    rows: &[Row; R],
    shift: u32,
    q: &[i8],
    s: &[f32],
    sums: &[i32],
    b: usize,
    lut: __m512i,
    acc: &mut [__m512; R],
) {
    let xp = q.as_ptr().add(b * QK);
    let op = sums.as_ptr().add(b * 8);
    let (x, off, s2) = if PAIR {
        (
            _mm512_loadu_si512(xp as *const __m512i),
            _mm512_loadu_si512(op as *const __m512i),
            _mm_castpd_ps(_mm_load_sd(s.as_ptr().add(b) as *const f64)),
        )
    } else {
        (
            _mm512_zextsi256_si512(_mm256_loadu_si256(xp as *const __m256i)),
            _mm512_zextsi256_si512(_mm256_loadu_si256(op as *const __m256i)),
            _mm_set_ss(*s.get_unchecked(b)),
        )
    };
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let sx = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(s2));
    let nibble = _mm512_set1_epi8(15);
    // Per block: the low nibbles (positions 0..15), then the high ones (16..31).
    let shifts = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    for r in 0..R {
        let cp = rows[r].codes.as_ptr().add(b * QK / 2);
        let raw = if PAIR {
            let c = _mm512_castsi256_si512(_mm256_loadu_si256(cp as *const __m256i));
            _mm512_shuffle_i64x2::<0x50>(c, c)
        } else {
            let c = _mm256_broadcastsi128_si256(_mm_loadu_si128(cp as *const __m128i));
            _mm512_zextsi256_si512(c)
        };
        let idx = _mm512_and_si512(_mm512_srlv_epi64(raw, shifts), nibble);
        let p = if VNNI {
            let u = _mm512_shuffle_epi8(lut, idx);
            _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x), off)
        } else {
            let aw = _mm512_shuffle_epi8(lut, idx);
            // Codes 0..6 are the negative values.
            let negative = _mm512_cmplt_epu8_mask(idx, _mm512_set1_epi8(7));
            let sxq = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
            _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sxq), _mm512_set1_epi16(1))
        };
        let w0 = rows[r].scale_unchecked(shift, b);
        let ws = if SHARED || !PAIR {
            _mm512_set1_ps(w0)
        } else {
            let w1 = rows[r].scale_unchecked(shift, b + 1);
            _mm512_insertf32x8::<1>(_mm512_set1_ps(w0), _mm256_set1_ps(w1))
        };
        let d = _mm512_mul_ps(ws, sx);
        let pf = _mm512_cvtepi32_ps(p);
        acc[r] = if PAIR {
            _mm512_fmadd_ps(pf, d, acc[r])
        } else {
            _mm512_mask3_fmadd_ps(pf, d, acc[r], LOW)
        };
    }
}

#[inline(always)]
unsafe fn run<const R: usize, const VNNI: bool, const SHARED: bool>(
    rows: &[Row; R],
    shift: u32,
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    let lut = if VNNI {
        table(CODEBOOK_I8.map(|c| (c as i32 + 128) as u8))
    } else {
        table(CODEBOOK_I8.map(|c| c.unsigned_abs()))
    };
    let mut acc = [_mm512_setzero_ps(); R];
    let mut b = 0;
    while b + 2 <= s.len() {
        blocks::<R, VNNI, SHARED, true>(rows, shift, q, s, sums, b, lut, &mut acc);
        b += 2;
    }
    if b < s.len() {
        blocks::<R, VNNI, SHARED, false>(rows, shift, q, s, sums, b, lut, &mut acc);
    }
    // A loop, not `map`: a closure would not inherit the target features.
    let mut out = [0.0f32; R];
    for (o, &a) in out.iter_mut().zip(&acc) {
        *o = reduce(a) / 127.0;
    }
    out
}

/// Whether blocks `b` and `b + 1` (`b` even) of every row share a weight scale.
#[inline(always)]
fn shared<const R: usize>(rows: &[Row; R], shift: u32) -> bool {
    shift >= 1 && rows.iter().all(|r| r.phase % 2 == 0)
}

/// The rows with AVX-512 VNNI. The caller checks the CPU and the lengths.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn dots_vnni<const R: usize>(
    rows: [Row; R],
    shift: u32,
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    if shared(&rows, shift) {
        run::<R, true, true>(&rows, shift, q, s, sums)
    } else {
        run::<R, true, false>(&rows, shift, q, s, sums)
    }
}

/// The rows with AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub(super) unsafe fn dots_bw<const R: usize>(
    rows: [Row; R],
    shift: u32,
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    if shared(&rows, shift) {
        run::<R, false, true>(&rows, shift, q, s, sums)
    } else {
        run::<R, false, false>(&rows, shift, q, s, sums)
    }
}
