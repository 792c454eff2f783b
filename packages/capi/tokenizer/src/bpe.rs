//! Byte-level BPE encoding with riftco-text's contract: merge 0 applied to the whole
//! piece (non-overlapping, left to right), then merge 1, and so on.
//!
//! Done here as "merge the leftmost occurrence of the lowest-ranked pair present" with a
//! heap over a linked list of symbols, which is the same: a merge only creates pairs
//! holding its new id, and every merge using that id ranks higher, so all occurrences of
//! a rank are merged left to right before any higher rank, exactly as a sweep would.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

pub const NUM_BYTES: usize = 256;

pub struct BpeEncoder {
    ranks: HashMap<(u32, u32), u32>,
}

impl BpeEncoder {
    pub fn new(merges: &[(u32, u32)]) -> Self {
        let ranks = merges
            .iter()
            .enumerate()
            .map(|(k, &pair)| (pair, k as u32))
            .collect();
        BpeEncoder { ranks }
    }

    /// The ids of one piece of bytes, appended to `out`.
    pub fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        match piece.len() {
            0 => return,
            1 => {
                out.push(piece[0] as u32);
                return;
            }
            _ => {}
        }
        let n = piece.len();
        let mut ids: Vec<u32> = piece.iter().map(|&b| b as u32).collect();
        // next[k] / prev[k]: neighbours among live symbols; usize::MAX for none.
        let mut next: Vec<usize> = (1..=n).collect();
        next[n - 1] = usize::MAX;
        let mut prev: Vec<usize> = (0..n).map(|k| k.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        for k in 0..n - 1 {
            if let Some(&r) = self.ranks.get(&(ids[k], ids[k + 1])) {
                heap.push(Reverse((r, k)));
            }
        }
        while let Some(Reverse((rank, left))) = heap.pop() {
            if !alive[left] {
                continue;
            }
            let right = next[left];
            if right == usize::MAX || self.ranks.get(&(ids[left], ids[right])) != Some(&rank) {
                continue;
            }
            ids[left] = NUM_BYTES as u32 + rank;
            alive[right] = false;
            let after = next[right];
            next[left] = after;
            if after != usize::MAX {
                prev[after] = left;
                if let Some(&r) = self.ranks.get(&(ids[left], ids[after])) {
                    heap.push(Reverse((r, left)));
                }
            }
            let before = prev[left];
            if before != usize::MAX {
                if let Some(&r) = self.ranks.get(&(ids[before], ids[left])) {
                    heap.push(Reverse((r, before)));
                }
            }
        }
        let mut k = 0;
        while k != usize::MAX {
            out.push(ids[k]);
            k = next[k];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(merges: &[(u32, u32)], s: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        BpeEncoder::new(merges).encode_piece(s, &mut out);
        out
    }

    #[test]
    fn merges_in_learned_order_left_to_right() {
        assert_eq!(encode(&[(97, 98), (256, 256)], b"abababab"), [257, 257]);
        assert_eq!(encode(&[(97, 97)], b"aaaaa"), [256, 256, 97]);
        assert_eq!(encode(&[(97, 97)], b"aaa"), [256, 97]);
        // (b, c) ranks before (a, b): "abc" -> a, bc
        assert_eq!(encode(&[(98, 99), (97, 98)], b"abc"), [97, 256]);
        assert_eq!(encode(&[], b"xy"), [120, 121]);
    }
}
