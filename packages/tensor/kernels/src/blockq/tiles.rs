//! Q8_0, Q4_0 and NF4 weights repacked into tiles of [`TILE`] rows for the
//! decode step's integer products: one pass over an input block's 8-bit codes
//! feeds all sixteen rows of a tile.
//!
//! A tile holds, per block of 32 columns, the sixteen rows' scales (Q8_0 / Q4_0:
//! the blocks' halves; NF4: float32, the block scale as `Nf4Weight::scale`
//! decodes it), then the codes group by group: group `j` (elements `4j .. 4j + 4`
//! in the order the row products read them) of the sixteen rows is one 64-byte
//! line, row `r` in bytes `4r .. 4r + 4`. Q4_0 and NF4 keep the packed nibbles (a
//! line holds groups `j` and `j + 4`, low and high nibbles), Q8_0 its int8 codes,
//! so Q8_0 and Q4_0 tiles are as large as the GGUF rows. Rows past the weight's
//! last are zero.
//!
//! Each output is computed with exactly the operations of the row products it
//! stands for ([`super::dot`], [`crate::nf4_int`]): lane `j` of a row is the
//! exact integer product of group `j`, converted to float32 and fused-multiply-
//! added with `d_b * s_b` into set `b % 2`; the sets are added lane by lane and
//! the lanes by halves (NF4: then divided by 127). Only the lanes are rows
//! here: a register holds lane `j` of sixteen rows. So the bits equal those of
//! every other vector level, at every thread count and batch. The tiles are
//! read at `avx512-vnni` (`vpdpbusd`) and `avx512` (`vpmaddubsw` + `vpmaddwd`);
//! below, the row products read the GGUF bytes (see [`runs`]).

use super::{BlockFormat, BlockWeight, QK};
use crate::isa::Isa;
use crate::nf4::Nf4Weight;

/// Rows of a tile.
pub const TILE: usize = 16;

/// What a tile's codes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileKind {
    Q8_0,
    Q4_0,
    Nf4,
}

impl TileKind {
    /// Bytes of one block of 32 columns of a tile.
    pub fn block_bytes(self) -> usize {
        match self {
            TileKind::Q8_0 => self.scale_bytes() + 8 * 64,
            TileKind::Q4_0 | TileKind::Nf4 => self.scale_bytes() + 4 * 64,
        }
    }

    /// Bytes of the sixteen rows' scales of a block: halves (Q8_0, Q4_0) or float32 (NF4).
    pub fn scale_bytes(self) -> usize {
        match self {
            TileKind::Nf4 => 4 * TILE,
            _ => 2 * TILE,
        }
    }
}

/// A weight `[rows, cols]` as tiles.
#[derive(Debug, Clone, Copy)]
pub struct Tiles<'a> {
    pub kind: TileKind,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

/// Bytes of the tiles of a `[rows, cols]` weight.
pub fn tile_bytes(kind: TileKind, rows: usize, cols: usize) -> usize {
    rows.div_ceil(TILE) * (cols / QK) * kind.block_bytes()
}

impl Tiles<'_> {
    /// Check the bytes against the shape.
    pub fn check(&self) -> crate::Result<()> {
        let want = tile_bytes(self.kind, self.rows, self.cols);
        crate::ensure!(
            self.cols.is_multiple_of(QK) && self.data.len() == want,
            "tiles: a [{}, {}] {:?} weight needs {want} bytes of tiles in whole blocks of {QK} \
             columns, found {}",
            self.rows,
            self.cols,
            self.kind,
            self.data.len()
        );
        Ok(())
    }
}

/// Whether the tiles are read at level `isa` (else the row products run on the
/// weight's own bytes, with the same bits).
pub fn runs(isa: Isa) -> bool {
    isa >= Isa::Avx512
}

/// Minus each of `sums` (what [`tile_dots`] takes).
#[cfg(test)]
pub(crate) fn negated(sums: &[i32]) -> Vec<i32> {
    let mut out = Vec::new();
    negated_into(sums, &mut out);
    out
}

/// [`negated`] into `out`'s buffer.
pub(crate) fn negated_into(sums: &[i32], out: &mut Vec<i32>) {
    out.clear();
    out.extend(sums.iter().map(|&v| -v));
}

/// Whether tiles are worth building on this CPU.
pub fn useful() -> bool {
    runs(crate::isa::detected())
}

/// The tiles of a Q8_0 or Q4_0 weight (`None` for F16 or a weight that fails its check).
pub fn tile_block(w: &BlockWeight) -> Option<Vec<u8>> {
    let kind = match w.format {
        BlockFormat::Q8_0 => TileKind::Q8_0,
        BlockFormat::Q4_0 => TileKind::Q4_0,
        BlockFormat::F16 => return None,
    };
    w.check().ok()?;
    let (kb, bb) = (w.cols / QK, kind.block_bytes());
    let stride = w.format.row_bytes(QK);
    let mut out = vec![0u8; tile_bytes(kind, w.rows, w.cols)];
    for r in 0..w.rows {
        let (t, lane) = (r / TILE, r % TILE);
        let row = w.row(r);
        for b in 0..kb {
            let blk = &row[b * stride..(b + 1) * stride];
            let at = &mut out[(t * kb + b) * bb..(t * kb + b + 1) * bb];
            at[2 * lane..2 * lane + 2].copy_from_slice(&blk[..2]);
            let lines = kind.scale_bytes();
            match kind {
                TileKind::Q8_0 => {
                    for j in 0..8 {
                        for e in 0..4 {
                            at[lines + 64 * j + 4 * lane + e] = blk[2 + 4 * j + e];
                        }
                    }
                }
                _ => {
                    for c in 0..4 {
                        let line = lines + 64 * c + 4 * lane;
                        at[line..line + 4].copy_from_slice(&blk[2 + 4 * c..6 + 4 * c]);
                    }
                }
            }
        }
    }
    Some(out)
}

/// The tiles of an NF4 weight whose rows hold whole blocks of 32 (`None` otherwise).
pub fn tile_nf4(w: &Nf4Weight) -> Option<Vec<u8>> {
    if !crate::nf4_int::supports(w) || w.check().is_err() {
        return None;
    }
    let (k, kb, bb) = (w.cols, w.cols / QK, TileKind::Nf4.block_bytes());
    let mut out = vec![0u8; tile_bytes(TileKind::Nf4, w.rows, w.cols)];
    for r in 0..w.rows {
        let (t, lane) = (r / TILE, r % TILE);
        for b in 0..kb {
            let start = r * k + b * QK;
            let codes = &w.codes[start / 2..start / 2 + QK / 2];
            let at = &mut out[(t * kb + b) * bb..(t * kb + b + 1) * bb];
            let s = w.scale(start / w.block);
            at[4 * lane..4 * lane + 4].copy_from_slice(&s.to_le_bytes());
            for c in 0..4 {
                let line = 4 * TILE + 64 * c + 4 * lane;
                at[line..line + 4].copy_from_slice(&codes[4 * c..4 * c + 4]);
            }
        }
    }
    Some(out)
}

/// Tile `tile` of `t` against one input row's codes `q` (its block scales `s`
/// and `neg_sums`, minus the group sums the row products subtract: Q4_0 eight
/// times, NF4 128 times the codes' sums; Q8_0 none): the sixteen rows' products
/// into `out`.
/// On the path of level `isa`, one where the tiles [`run`](runs).
pub(crate) fn tile_dots(
    isa: Isa,
    t: &Tiles,
    tile: usize,
    q: &[i8],
    s: &[f32],
    neg_sums: &[i32],
    out: &mut [f32; TILE],
) {
    let kb = t.cols / QK;
    let bb = t.kind.block_bytes();
    let data = &t.data[tile * kb * bb..(tile + 1) * kb * bb];
    assert!(q.len() == kb * QK && s.len() == kb);
    assert!(t.kind == TileKind::Q8_0 || neg_sums.len() == kb * 8);
    assert!(runs(isa) && isa <= crate::isa::detected());
    #[cfg(target_arch = "x86_64")]
    // SAFETY (each arm): the CPU has the level's features (checked above); the lengths
    // are checked above.
    unsafe {
        let vnni = isa == Isa::Avx512Vnni;
        match (t.kind, vnni) {
            (TileKind::Q8_0, true) => avx512::q8_0_vnni(data, kb, q, s, out),
            (TileKind::Q8_0, false) => avx512::q8_0_bw(data, kb, q, s, out),
            (TileKind::Q4_0, true) => avx512::nibbles_vnni::<false>(data, kb, q, s, neg_sums, out),
            (TileKind::Q4_0, false) => avx512::nibbles_bw::<false>(data, kb, q, s, neg_sums, out),
            (TileKind::Nf4, true) => avx512::nibbles_vnni::<true>(data, kb, q, s, neg_sums, out),
            (TileKind::Nf4, false) => avx512::nibbles_bw::<true>(data, kb, q, s, neg_sums, out),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("tiles run only with AVX-512");
}

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(test)]
mod tests;
