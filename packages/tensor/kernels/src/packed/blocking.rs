//! The three-level blocking on x86-64 with AVX2 and FMA (see [`super`]): the
//! loops over NC-column blocks, KC-deep slices and MC-row blocks that feed the
//! packed panels to the register tile.

use std::cell::RefCell;

use super::panels::{pack_a, pack_b};
use super::tile::tile;
use super::tile512::tile2;
use super::{Mat, MR, NR};

/// Greatest depth of one packed slice. The depth is `k` split evenly into as
/// few slices as this allows: a function of `k` alone, because the slices fix
/// the summation order. 192 keeps the AVX-512 tile's two panels (192 x 32
/// floats, 24 KB) in a 48 KB L1 while the six rows of the left operand stream
/// past them (at 384 the pair alone filled it and came from L2 for every tile).
const KC: usize = 192;
/// Rows of the left operand packed at once (a multiple of MR).
const MC: usize = 144;
/// Columns of the right operand packed at once (a multiple of NR).
const NC: usize = 4080;

/// Outputs (elements) from which a product of three slices or more takes the
/// slices inside each row block (see [`gemm`]): square products of 1,024 and
/// 2,048 ran 4% and 6% faster at 2 threads, a training step's (at most 393,216
/// elements a band) the same either way.
pub(super) const DEEP_OUTPUT: usize = 1 << 19;
/// Floats of the right operand packed for all slices at once in that order (1 MiB,
/// half of this machine's L2 a core).
const DEEP_PANELS: usize = 1 << 18;

thread_local! {
    /// Packing buffers of the left and right operand, reused across calls.
    static PACKS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Depth of each slice of a `k`-deep product: `k` split evenly into as few
/// slices as KC allows (a function of `k` alone).
pub(super) fn slice_depth(k: usize) -> usize {
    k.div_ceil(k.div_ceil(KC))
}

#[cfg(test)]
thread_local! {
    /// Set by tests to run the AVX2 tile on this thread whatever the level.
    pub(super) static NARROW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// Set by tests to take the slices outermost whatever the output's size.
    pub(super) static SHALLOW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[inline]
fn shallow_for_tests() -> bool {
    #[cfg(test)]
    return SHALLOW.with(|n| n.get());
    #[cfg(not(test))]
    false
}

#[inline]
fn narrow_for_tests() -> bool {
    #[cfg(test)]
    return NARROW.with(|n| n.get());
    #[cfg(not(test))]
    false
}

fn grow(buffer: &mut Vec<f32>, len: usize) {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
}

/// Rows `i0..i1` of `dst[:, 0..nc] (+)= alpha * a[:, pc..pc + kc] @ panels`, the
/// `nc` columns packed at `bp` for this slice; `dst` addresses row 0. A non-null
/// `bias` (of the `nc` columns) is added to every stored element (the last slice's).
#[allow(clippy::too_many_arguments)]
unsafe fn rows_times_panels(
    a: Mat,
    i0: usize,
    i1: usize,
    pc: usize,
    kc: usize,
    bp: *const f32,
    nc: usize,
    dst: *mut f32,
    ldc: usize,
    alpha: f32,
    add: bool,
    bias: *const f32,
    apack: &mut Vec<f32>,
) {
    let wide = crate::isa::current() >= crate::isa::Isa::Avx512 && !narrow_for_tests();
    for ic in (i0..i1).step_by(MC) {
        let mc = MC.min(i1 - ic);
        // A row-major left operand is read in place: its rows are already
        // contiguous along p, and the MC block stays in L2.
        // (start, row stride, column stride, offset of the next MR rows)
        let (ap, a_rs, a_cs, step) = if a.2 == 1 {
            (a.0.add(ic * a.1 + pc), a.1, 1, a.1)
        } else {
            grow(apack, mc.next_multiple_of(MR) * kc);
            pack_a(a, ic, mc, pc, kc, apack);
            (apack.as_ptr(), 1, MR, kc)
        };
        let mut jr = 0;
        while wide && jr + NR < nc {
            // Two panels at a time on AVX-512 (the same bits as one at a time).
            let cols = (2 * NR).min(nc - jr);
            let (p0, p1) = (bp.add(jr * kc), bp.add((jr + NR) * kc));
            for ir in (0..mc).step_by(MR) {
                let rows = MR.min(mc - ir);
                let out = dst.add((ic + ir) * ldc + jr);
                tile2(
                    kc,
                    ap.add(ir * step),
                    a_rs,
                    a_cs,
                    p0,
                    p1,
                    out,
                    ldc,
                    rows,
                    cols,
                    alpha,
                    add,
                    at(bias, jr),
                );
            }
            jr += 2 * NR;
        }
        for jr in (jr..nc).step_by(NR) {
            let cols = NR.min(nc - jr);
            let panel = bp.add(jr * kc);
            for ir in (0..mc).step_by(MR) {
                let rows = MR.min(mc - ir);
                let out = dst.add((ic + ir) * ldc + jr);
                tile(
                    kc,
                    ap.add(ir * step),
                    a_rs,
                    a_cs,
                    panel,
                    out,
                    ldc,
                    rows,
                    cols,
                    alpha,
                    add,
                    at(bias, jr),
                );
            }
        }
    }
}

/// `bias + offset`, or null for no bias.
#[inline]
fn at(bias: *const f32, offset: usize) -> *const f32 {
    if bias.is_null() {
        bias
    } else {
        bias.wrapping_add(offset)
    }
}

/// See [`super::gemm_into`]; `m`, `n` and `k` are positive.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    ldc: usize,
    accumulate: bool,
    a: Mat,
    b: Mat,
    alpha: f32,
    bias: *const f32,
) {
    PACKS.with(|cell| {
        let mut packs = cell.borrow_mut();
        let (apack, bpack) = &mut *packs;
        let depth = slice_depth(k);
        // Rows [r0, r1) of A times the packed panels of depth slice pc..pc + kc, into
        // columns jc..jc + nc: the first slice stores (or accumulates), later ones
        // add, the last adds the bias.
        let slice = |r0, r1, pc, kc, panel, jc, nc, apack: &mut Vec<f32>| {
            let last = if pc + kc == k {
                at(bias, jc)
            } else {
                std::ptr::null()
            };
            rows_times_panels(
                a,
                r0,
                r1,
                pc,
                kc,
                panel,
                nc,
                dst.add(jc),
                ldc,
                alpha,
                accumulate || pc > 0,
                last,
                apack,
            )
        };
        if a.2 == 1 && k > 2 * depth && m * n >= DEEP_OUTPUT && !shallow_for_tests() {
            // A large output over three slices or more: all the slices of a block
            // of DEEP_COLUMNS columns packed at once, then each MC-row block takes
            // every slice in turn, so that its part of the output stays in L2
            // between slices instead of going out and back once a slice. Each
            // element still sums the slices in order: the same bits.
            let nb = (DEEP_PANELS / k).max(2 * NR) / (2 * NR) * (2 * NR);
            let nb = nb.min(n.next_multiple_of(NR));
            grow(bpack, nb * k);
            for jc in (0..n).step_by(nb) {
                let nc = nb.min(n - jc);
                let panels = nc.div_ceil(NR);
                for pc in (0..k).step_by(depth) {
                    let kc = depth.min(k - pc);
                    pack_b(b, pc, kc, jc, nc, &mut bpack[pc * panels * NR..]);
                }
                for ic in (0..m).step_by(MC) {
                    for pc in (0..k).step_by(depth) {
                        let kc = depth.min(k - pc);
                        let panel = bpack.as_ptr().add(pc * panels * NR);
                        slice(ic, (ic + MC).min(m), pc, kc, panel, jc, nc, apack);
                    }
                }
            }
            return;
        }
        grow(bpack, NC.min(n.next_multiple_of(NR)) * depth);
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(depth) {
                let kc = depth.min(k - pc);
                pack_b(b, pc, kc, jc, nc, bpack);
                slice(0, m, pc, kc, bpack.as_ptr(), jc, nc, apack);
            }
        }
    });
}

/// Pack panel `q` of every slice of `b` (`k x n`) into `all`, laid out as
/// [`super::PackedRhs`] describes.
pub(super) unsafe fn pack_panel(b: Mat, k: usize, n: usize, q: usize, all: *mut f32) {
    let (depth, panels) = (slice_depth(k), n.div_ceil(NR));
    for pc in (0..k).step_by(depth) {
        let kc = depth.min(k - pc);
        let dst = std::slice::from_raw_parts_mut(all.add(pc * panels * NR + q * NR * kc), NR * kc);
        pack_b(b, pc, kc, q * NR, NR.min(n - q * NR), dst);
    }
}

/// Rows `i0..i1` of `dst = alpha * a @ b` from `b` packed whole at `all`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn rows_of_packed(
    a: Mat,
    i0: usize,
    i1: usize,
    all: *const f32,
    k: usize,
    n: usize,
    dst: *mut f32,
    ldc: usize,
    alpha: f32,
    bias: *const f32,
) {
    PACKS.with(|cell| {
        let apack = &mut cell.borrow_mut().0;
        let (depth, panels) = (slice_depth(k), n.div_ceil(NR));
        for pc in (0..k).step_by(depth) {
            let kc = depth.min(k - pc);
            rows_times_panels(
                a,
                i0,
                i1,
                pc,
                kc,
                all.add(pc * panels * NR),
                n,
                dst,
                ldc,
                alpha,
                pc > 0,
                if pc + kc == k { bias } else { std::ptr::null() },
                apack,
            );
        }
    });
}
