//! Byte-level BPE encoding with riftco-text's contract: merge 0 applied to the whole
//! piece (non-overlapping, left to right), then merge 1, and so on.
//!
//! Done here as "merge the leftmost occurrence of the lowest-ranked pair present" with a
//! heap over a linked list of symbols, which is the same: a merge only creates pairs
//! holding its new id, and every merge using that id ranks higher, so all occurrences of
//! a rank are merged left to right before any higher rank, exactly as a sweep would.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

pub const NUM_BYTES: usize = 256;
/// Pieces up to this many bytes are merged by rescanning (pre-tokenized words are short);
/// longer ones through the heap.
const SHORT_PIECE: usize = 24;

/// A multiplicative hash of a pair of ids packed in a `u64` (the keys come from the
/// tokenizer's own merges, so no caller input chooses them).
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 ^= self.0 >> 32;
    }
}

pub struct BpeEncoder {
    ranks: HashMap<u64, u32, BuildHasherDefault<PairHasher>>,
    /// `joins[x * 256 + y]`: some merge joins a token ending in byte `x` to one starting
    /// with `y`. Between two adjacent bytes that no merge joins, no token can span, so the
    /// text on either side encodes alone to the same ids (riftco-text's safe cuts).
    joins: Vec<bool>,
}

fn key(left: u32, right: u32) -> u64 {
    (left as u64) << 32 | right as u64
}

impl BpeEncoder {
    pub fn new(merges: &[(u32, u32)]) -> Self {
        let ranks = merges
            .iter()
            .enumerate()
            .map(|(k, &(l, r))| (key(l, r), k as u32))
            .collect();
        let mut first: Vec<u8> = (0..=255).collect();
        let mut last = first.clone();
        let mut joins = vec![false; NUM_BYTES * NUM_BYTES];
        for &(l, r) in merges {
            let (l, r) = (l as usize, r as usize);
            joins[last[l] as usize * NUM_BYTES + first[r] as usize] = true;
            first.push(first[l]);
            last.push(last[r]);
        }
        BpeEncoder { ranks, joins }
    }

    /// The ids of `data` encoded whole (no pre-tokenization), appended to `out`: piece by
    /// piece between safe cuts, which keeps each merge's work local.
    pub fn encode_whole(&self, data: &[u8], out: &mut Vec<u32>) {
        let mut start = 0;
        for i in 1..data.len() {
            if !self.joins[data[i - 1] as usize * NUM_BYTES + data[i] as usize] {
                self.encode_piece(&data[start..i], out);
                start = i;
            }
        }
        self.encode_piece(&data[start..], out);
    }

    fn rank(&self, left: u32, right: u32) -> Option<u32> {
        self.ranks.get(&key(left, right)).copied()
    }

    /// riftco-text's contract read literally: the lowest rank present, merged left to right
    /// over the whole piece, until no pair has a rank.
    fn encode_short(&self, piece: &[u8], out: &mut Vec<u32>) {
        let mut ids: Vec<u32> = piece.iter().map(|&b| b as u32).collect();
        loop {
            let best = ids.windows(2).filter_map(|w| self.rank(w[0], w[1])).min();
            let Some(rank) = best else { break };
            let (new, mut i, mut j) = (NUM_BYTES as u32 + rank, 0, 0);
            while i < ids.len() {
                if i + 1 < ids.len() && self.rank(ids[i], ids[i + 1]) == Some(rank) {
                    ids[j] = new;
                    i += 2;
                } else {
                    ids[j] = ids[i];
                    i += 1;
                }
                j += 1;
            }
            ids.truncate(j);
        }
        out.extend_from_slice(&ids);
    }

    /// The ids of one piece of bytes, appended to `out`.
    pub fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        match piece.len() {
            0 => return,
            1 => {
                out.push(piece[0] as u32);
                return;
            }
            n if n <= SHORT_PIECE => return self.encode_short(piece, out),
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
            if let Some(&r) = self.ranks.get(&key(ids[k], ids[k + 1])) {
                heap.push(Reverse((r, k)));
            }
        }
        while let Some(Reverse((rank, left))) = heap.pop() {
            if !alive[left] {
                continue;
            }
            let right = next[left];
            if right == usize::MAX || self.rank(ids[left], ids[right]) != Some(rank) {
                continue;
            }
            ids[left] = NUM_BYTES as u32 + rank;
            alive[right] = false;
            let after = next[right];
            next[left] = after;
            if after != usize::MAX {
                prev[after] = left;
                if let Some(&r) = self.ranks.get(&key(ids[left], ids[after])) {
                    heap.push(Reverse((r, left)));
                }
            }
            let before = prev[left];
            if before != usize::MAX {
                if let Some(&r) = self.ranks.get(&key(ids[before], ids[left])) {
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
        let enc = BpeEncoder::new(merges);
        let mut short = Vec::new();
        enc.encode_short(s, &mut short);
        let mut heap = Vec::new();
        enc.encode_piece(s, &mut heap);
        assert_eq!(short, heap, "the two paths agree on {s:?}");
        short
    }

    #[test]
    fn every_path_agrees_on_long_pieces() {
        let merges = [
            (97, 98),
            (256, 97),
            (98, 98),
            (257, 256),
            (97, 97),
            (259, 258),
        ];
        let enc = BpeEncoder::new(&merges);
        let mut seed = 7u64;
        for len in [25, 40, 100, 1000] {
            let piece: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    b"ab"[(seed >> 63) as usize]
                })
                .collect();
            let (mut short, mut heap) = (Vec::new(), Vec::new());
            enc.encode_short(&piece, &mut short);
            enc.encode_piece(&piece, &mut heap);
            assert_eq!(short, heap, "{len}");
            // safe cuts (around x, y, z, which no merge joins) change nothing
            let mut text = piece.clone();
            text.extend_from_slice(b"xyzab");
            let (mut one, mut cut) = (Vec::new(), Vec::new());
            enc.encode_short(&text, &mut one);
            enc.encode_whole(&text, &mut cut);
            assert_eq!(one, cut, "{len}");
        }
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
