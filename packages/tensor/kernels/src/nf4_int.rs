//! NF4 weights against 8-bit inputs: the decode step's integer row products.
//!
//! The float NF4 product ([`crate::nf4`], [`crate::nf4_vector`]) multiplies
//! float32 inputs by the block's scaled codebook. This one reads the same packed
//! codes and block scales in place (the decode step's tiles, `blockq::tiles`,
//! are a copy of them with the same bits), but multiplies integers, as the Q4_0
//! product does:
//!
//! * the codebook as int8: `C8[c] = round(127 * CODEBOOK[c])` ([`CODEBOOK_I8`]);
//!   weight element `i` stands for `C8[code_i] * S / 127`, `S` its NF4 block's
//!   scale (`Nf4Weight::scale`: the float32 absmax, or the double-quantized one
//!   decoded as the float kernels decode it), at most `0.5 / 127 * S` from the
//!   dequantized weight;
//! * each input row quantized per block of 32 (see [`quantize_input`]): `a =
//!   max |x|`, the float32 scale `s = a / 127`, the codes `q = round(x * (127 /
//!   a))` ties to even (all zero when `a` is 0), so `|s q - x| <= a / 254` up to
//!   float32 rounding. The codes are stored in the order the packed nibbles come
//!   in: per block, the even elements (low nibbles of the block's 16 code bytes),
//!   then the odd ones (high nibbles);
//! * per block of 32 `b` (an NF4 block of 64 is two of them; the block size
//!   must divide into them, any power of two from 32 on does), lane `j` of eight
//!   is the exact integer `sum C8[code] q` over positions `4j .. 4j + 4` of that
//!   order; it is converted to float32 and fused-multiply-added with `S_b * s_b`
//!   (one float32 product) into lane `j` of set `b % 2`; the sets are added lane
//!   by lane, the eight lanes by halves (`v[j] + v[j + 4]`, then `+ [j + 2]`,
//!   then the two), and the sum divided by 127.
//!
//! The integer sums are exact on every path (AVX-512 VNNI `vpdpbusd` on the
//! codebook offset by 128 with the input's group sums subtracted; AVX-512 BW and
//! AVX2 `maddubs` + `madd` on `|C8|` with the weight's sign moved onto the input;
//! plain integer loops), and the float32 steps are the same operations in the
//! same order, so every vector level, every thread count and every batch gives
//! the same bits.
//!
//! Bound against the float32 product of the dequantized weight, for output `y =
//! sum_i w_i x_i`: `|y_int - y| <= sum_i S_i a_i (0.5/127 (1 + 1/254) + 1/254) +
//! float32 rounding`, where `S_i` is weight `i`'s block scale and `a_i` the
//! largest magnitude of its input block of 32: `0.00789 sum_i S_i a_i` plus
//! float32 rounding (about `(cols / 64 + 5) 2^-24` of the same sum), stated as
//! `0.008 sum_i S_i a_i` (tested) for rows of up to a million columns.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::isa::Isa;
use crate::nf4::{Nf4Weight, Scales, SCALE_GROUP};
use crate::pool::Shared;
use crate::{ensure, Result};

/// Elements per input block (one input scale each).
pub const QK: usize = 32;

/// `round(127 * CODEBOOK[c])`, in code order.
pub const CODEBOOK_I8: [i8; 16] = [
    -127, -88, -67, -50, -36, -23, -12, 0, 10, 20, 31, 43, 56, 71, 92, 127,
];

/// Weight rows dotted with one input row at once.
pub(crate) const AT_ONCE: usize = 4;

/// Output rows per piece handed to the team by [`linear`].
const ROWS: usize = 16;

/// Whether a weight can take the integer product: rows of whole input blocks.
pub fn supports(w: &Nf4Weight) -> bool {
    w.cols > 0 && w.cols.is_multiple_of(QK) && w.block >= QK
}

// The decode step's choice: 0 not read yet, 1 float32 inputs, 2 8-bit inputs.
static DECODE: AtomicU8 = AtomicU8::new(0);

/// Whether the whole-step decoder's NF4 linears use the integer product (8-bit
/// inputs, the default). `RIFTCO_NF4_DECODE=float` (read once) or
/// [`set_decode_int8`] keeps the float32 product, whose bits equal the op-by-op
/// `nf4_linear` of one row.
pub fn decode_int8() -> bool {
    match DECODE.load(Ordering::Relaxed) {
        0 => {
            let on = !std::env::var("RIFTCO_NF4_DECODE")
                .is_ok_and(|v| v.trim().eq_ignore_ascii_case("float"));
            DECODE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Choose the decode step's NF4 product (see [`decode_int8`]); returns the previous choice.
pub fn set_decode_int8(on: bool) -> bool {
    let before = decode_int8();
    DECODE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    before
}

/// Input rows `[m, cols]` quantized for the integer product (module docs): the
/// codes in nibble order, a float32 scale per block, and per group of four codes
/// 128 times their sum (the VNNI path's offset).
#[derive(Default)]
pub struct Nf4Input {
    pub q: Vec<i8>,
    pub scales: Vec<f32>,
    pub sums: Vec<i32>,
    pub cols: usize,
}

/// The largest magnitude of `x`, NaN when `x` has one.
#[inline(always)]
fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |a, &v| {
        if v.is_nan() || a.is_nan() {
            f32::NAN
        } else {
            a.max(v.abs())
        }
    })
}

/// `v` rounded to the nearest integer, ties to even (`|v| <= 2^22`): adding and
/// removing 1.5 * 2^23 leaves the integer float32 rounding picks.
#[inline(always)]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// The factors of a block's codes `q = round((x * first) * second)` for its largest
/// magnitude `a`: `(1, 127 / a)`, or where `127 / a` overflows (`a` below about
/// 3.7e-37) `(2^64, 127 / (a * 2^64))`, exact scalings that keep the codes' range;
/// `(1, 0)` for `a` 0 (all codes 0). A NaN or infinite `a` gives codes 0.
#[inline(always)]
pub(crate) fn block_factors(a: f32) -> (f32, f32) {
    const UP: f32 = 18_446_744_073_709_551_616.0; // 2^64
    if a == 0.0 {
        return (1.0, 0.0);
    }
    let inv = 127.0 / a;
    if inv.is_finite() {
        (1.0, inv)
    } else {
        (UP, 127.0 / (a * UP))
    }
}

/// Quantize `x` (`[m, cols]`, `cols` a multiple of 32) for the integer product.
/// A block with a NaN or an infinity gets a non-finite scale and codes 0: its
/// products are NaN.
pub fn quantize_input(x: &[f32], cols: usize) -> Nf4Input {
    quantize_input_with(x, cols, true)
}

/// [`quantize_input`] into `into`'s buffers (resized, so a loop of inputs of one
/// size allocates once).
pub fn quantize_input_into(x: &[f32], cols: usize, into: &mut Nf4Input) {
    fill(x, cols, true, into);
}

/// [`quantize_input`], `vector`: with the AVX2 version where the CPU has it (the same
/// results).
fn quantize_input_with(x: &[f32], cols: usize, vector: bool) -> Nf4Input {
    let mut input = Nf4Input::default();
    fill(x, cols, vector, &mut input);
    input
}

fn fill(x: &[f32], cols: usize, vector: bool, into: &mut Nf4Input) {
    assert!(cols.is_multiple_of(QK) && x.len().is_multiple_of(cols.max(1)));
    let blocks = x.len() / QK;
    into.cols = cols;
    let Nf4Input {
        q, scales, sums, ..
    } = into;
    q.resize(x.len(), 0);
    scales.resize(blocks, 0.0);
    sums.resize(blocks * 8, 0);
    #[cfg(target_arch = "x86_64")]
    if vector && crate::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the buffers have the lengths it needs.
        unsafe { avx2::quantize(x, q, scales, sums) };
        return;
    }
    for (b, (xb, qb)) in x.chunks_exact(QK).zip(q.chunks_exact_mut(QK)).enumerate() {
        let a = absmax(xb);
        let (up, inv) = block_factors(a);
        for p in 0..QK / 2 {
            // |x * inv| <= 127 (up to rounding): the cast is exact; NaN reads 0.
            qb[p] = round_even((xb[2 * p] * up) * inv) as i8;
            qb[QK / 2 + p] = round_even((xb[2 * p + 1] * up) * inv) as i8;
        }
        scales[b] = a / 127.0;
        for (j, g) in qb.chunks_exact(4).enumerate() {
            sums[b * 8 + j] = 128 * g.iter().map(|&v| v as i32).sum::<i32>();
        }
    }
}

/// One weight row as the kernels read it: its `cols / 2` code bytes, the block
/// scales from its first block on, and the index (in blocks of 32) of its first
/// element inside that block.
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    pub codes: &'a [u8],
    pub scales: &'a [f32],
    pub phase: usize,
}

impl Row<'_> {
    /// The weight's scale of input block `b`: `scales[(phase + b) >> shift]`.
    #[inline(always)]
    fn scale(&self, shift: u32, b: usize) -> f32 {
        self.scales[(self.phase + b) >> shift]
    }

    /// [`Row::scale`] without the bounds check.
    ///
    /// # Safety
    /// `(phase + b) >> shift < scales.len()`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn scale_unchecked(&self, shift: u32, b: usize) -> f32 {
        *self.scales.get_unchecked((self.phase + b) >> shift)
    }
}

/// The eight lanes of `v` added by halves.
#[inline(always)]
fn finish8(v: &[f32; 8]) -> f32 {
    let h4: [f32; 4] = std::array::from_fn(|j| v[j] + v[j + 4]);
    let h2 = [h4[0] + h4[2], h4[1] + h4[3]];
    h2[0] + h2[1]
}

fn dot_portable(row: &Row, shift: u32, q: &[i8], s: &[f32]) -> f32 {
    let mut sets = [[0.0f32; 8]; 2];
    for (b, xq) in q.chunks_exact(QK).enumerate() {
        let bytes = &row.codes[b * QK / 2..(b + 1) * QK / 2];
        let code = |p: usize| -> usize {
            if p < QK / 2 {
                (bytes[p] & 15) as usize
            } else {
                (bytes[p - QK / 2] >> 4) as usize
            }
        };
        let d = row.scale(shift, b) * s[b];
        for (j, lane) in sets[b % 2].iter_mut().enumerate() {
            let p: i32 = (4 * j..4 * j + 4)
                .map(|p| CODEBOOK_I8[code(p)] as i32 * xq[p] as i32)
                .sum();
            *lane = (p as f32).mul_add(d, *lane);
        }
    }
    let v: [f32; 8] = std::array::from_fn(|j| sets[0][j] + sets[1][j]);
    finish8(&v) / 127.0
}

/// Each of `R` rows against input codes `q` (scales `s`, group sums `sums`), on
/// the path of level `isa` (at most the detected one).
pub(crate) fn dots_at<const R: usize>(
    isa: Isa,
    rows: [Row; R],
    shift: u32,
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    let blocks = s.len();
    assert!(q.len() == blocks * QK && sums.len() == blocks * 8);
    for row in &rows {
        assert!(row.codes.len() == blocks * QK / 2);
        assert!(blocks == 0 || (row.phase + blocks - 1) >> shift < row.scales.len());
    }
    assert!(isa <= crate::isa::detected());
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY (each arm): the CPU has the level's features; the lengths are checked above.
        Isa::Avx512Vnni => return unsafe { avx512::dots_vnni(rows, shift, q, s, sums) },
        Isa::Avx512 => return unsafe { avx512::dots_bw(rows, shift, q, s, sums) },
        Isa::Avx2 => return unsafe { avx2::dots(rows, shift, q, s) },
        Isa::Portable => {}
    }
    rows.map(|row| dot_portable(&row, shift, q, s))
}

thread_local! {
    /// A thread's decoded double-quantized block scales.
    static SCALES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The block scales `first .. first + out.len()` of a double-quantized weight,
/// each `decode_scale` of its byte (the same float32 as `Nf4Weight::scale`).
fn decode_scales(codes: &[u8], ranges: &[f32], offset: f32, first: usize, out: &mut [f32]) {
    let mut b = first;
    let mut o = 0;
    while o < out.len() {
        let group = b / SCALE_GROUP;
        let stop = ((group + 1) * SCALE_GROUP).min(first + out.len());
        let range = ranges[group];
        #[allow(unused_mut)]
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if crate::pool::has_avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA; the slices are in bounds.
            done = unsafe { avx2::decode_scales(&codes[b..stop], range, offset, &mut out[o..]) };
        }
        for (v, &c) in out[o + done..o + stop - b]
            .iter_mut()
            .zip(&codes[b + done..stop])
        {
            *v = crate::nf4::decode_scale(c, range, offset);
        }
        o += stop - b;
        b = stop;
    }
}

/// Weight rows `rows` of `w` against every input row of `xq` (`m` rows):
/// `store(i, r, dot)` for each, four consecutive rows at a time (each row the
/// bits of the one-row product). `w` must be [`supports`]ed.
pub(crate) fn piece_rows(
    w: &Nf4Weight,
    xq: &Nf4Input,
    m: usize,
    rows: std::ops::Range<usize>,
    mut store: impl FnMut(usize, usize, f32),
) {
    if rows.is_empty() || m == 0 {
        return;
    }
    let k = w.cols;
    let kb = k / QK;
    let log = w.block.trailing_zeros();
    let shift = log - QK.trailing_zeros();
    let first_block = (rows.start * k) >> log;
    let end_block = (rows.end * k).div_ceil(w.block);
    let run = |scales: &[f32], store: &mut dyn FnMut(usize, usize, f32)| {
        let row = |r: usize| {
            let start = r * k;
            Row {
                codes: &w.codes[start / 2..(start + k) / 2],
                scales: &scales[(start >> log) - first_block..],
                phase: (start & (w.block - 1)) / QK,
            }
        };
        let isa = crate::isa::current();
        for i in 0..m {
            let q = &xq.q[i * k..(i + 1) * k];
            let s = &xq.scales[i * kb..(i + 1) * kb];
            let sums = &xq.sums[i * kb * 8..(i + 1) * kb * 8];
            let mut r = rows.start;
            while r + AT_ONCE <= rows.end {
                let y =
                    dots_at::<AT_ONCE>(isa, std::array::from_fn(|j| row(r + j)), shift, q, s, sums);
                for (j, &v) in y.iter().enumerate() {
                    store(i, r + j, v);
                }
                r += AT_ONCE;
            }
            for r in r..rows.end {
                store(i, r, dots_at::<1>(isa, [row(r)], shift, q, s, sums)[0]);
            }
        }
    };
    match w.scales {
        Scales::Plain(s) => run(&s[first_block..end_block], &mut store),
        Scales::Double {
            codes,
            ranges,
            offset,
        } => SCALES.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.resize(end_block - first_block, 0.0);
            decode_scales(codes, ranges, offset, first_block, &mut buf);
            run(&buf, &mut store)
        }),
    }
}

/// `out [m, rows] = dequant(w) @ x (+ bias)` with 8-bit inputs (module docs):
/// the decode step's NF4 product, for benchmarks and tests. The rows must hold
/// whole blocks of 32 ([`supports`]).
pub fn linear(
    w: &Nf4Weight,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    w.check()?;
    let (n, k) = (w.rows, w.cols);
    ensure!(
        supports(w),
        "nf4_linear_int8: the rows must hold whole blocks of {QK} elements, found {k} columns"
    );
    ensure!(
        x.len() == m * k,
        "nf4_linear_int8: input has {} elements, expected {m} x {k}",
        x.len()
    );
    ensure!(
        out.len() == m * n,
        "nf4_linear_int8: output has {} elements, expected {m} x {n}",
        out.len()
    );
    if let Some(b) = bias {
        ensure!(
            b.len() == n,
            "nf4_linear_int8: bias has {} elements, expected {n}",
            b.len()
        );
    }
    if out.is_empty() {
        return Ok(());
    }
    let xq = quantize_input(x, k);
    let dst = Shared::new(out);
    let piece = |p: usize| {
        let first = p * ROWS;
        piece_rows(w, &xq, m, first..(first + ROWS).min(n), |i, r, v| {
            let v = match bias {
                Some(b) => v + b[r],
                None => v,
            };
            // SAFETY: element (i, r) of `out` belongs to this piece alone.
            unsafe { *dst.at(i * n + r) = v };
        });
    };
    let pieces = n.div_ceil(ROWS);
    if crate::pool::parallel(m * n * k, 1 << 17) {
        crate::team::team().run(pieces, &piece);
    } else {
        (0..pieces).for_each(piece);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
