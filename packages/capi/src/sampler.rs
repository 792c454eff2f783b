//! riftco-nn's sampler, ported exactly: `sequence_rng(seed, index)` is numpy's
//! `Generator(PCG64(SeedSequence([seed, index])))`, `random()` its `next_double`, and
//! `sample_next` the same float32 repetition penalty, float64 ranking (a stable sort of
//! `-logit`), top-k, top-p (`searchsorted(cumulative, p - 1e-12) + 1`) and draw (the first
//! kept id whose cumulative probability exceeds `u`), with numpy's pairwise summation for
//! the normalizers. `exp` is the platform's libm (numpy may use its own SIMD `exp`,
//! which can differ in the last bit; a draw changes only if `u` falls within that
//! rounding of a boundary).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};

// -- numpy's SeedSequence (pool of 4 32-bit words) ---------------------------------

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL: usize = 4;

fn words_of(mut n: u64, out: &mut Vec<u32>) {
    if n == 0 {
        out.push(0);
    }
    while n > 0 {
        out.push(n as u32);
        n >>= 32;
    }
}

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

/// `SeedSequence(entropy).generate_state(n_words64, uint64)` for integer entropy words.
pub fn seed_sequence_state(entropy: &[u64], n_words64: usize) -> Vec<u64> {
    let mut ent = Vec::new();
    for &e in entropy {
        words_of(e, &mut ent);
    }
    let mut pool = [0u32; POOL];
    let mut hc = INIT_A;
    for (i, p) in pool.iter_mut().enumerate() {
        *p = hashmix(ent.get(i).copied().unwrap_or(0), &mut hc);
    }
    for src in 0..POOL {
        for dst in 0..POOL {
            if src != dst {
                let h = hashmix(pool[src], &mut hc);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    for &e in ent.iter().skip(POOL) {
        for p in pool.iter_mut() {
            let h = hashmix(e, &mut hc);
            *p = mix(*p, h);
        }
    }
    let mut hc = INIT_B;
    let mut words = Vec::with_capacity(2 * n_words64);
    for i in 0..2 * n_words64 {
        let mut v = pool[i % POOL] ^ hc;
        hc = hc.wrapping_mul(MULT_B);
        v = v.wrapping_mul(hc);
        words.push(v ^ (v >> XSHIFT));
    }
    words
        .chunks(2)
        .map(|w| w[0] as u64 | (w[1] as u64) << 32)
        .collect()
}

// -- numpy's PCG64 (128-bit LCG, XSL-RR output) -------------------------------------

const PCG_MULT: u128 = 0x2360_ED05_1FC6_5DA4_4385_DF64_9FCC_F645;

#[derive(Debug, Clone)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
}

impl Pcg64 {
    /// `PCG64(SeedSequence(entropy))`.
    pub fn from_entropy_words(entropy: &[u64]) -> Pcg64 {
        let s = seed_sequence_state(entropy, 4);
        let seed = (s[0] as u128) << 64 | s[1] as u128;
        let inc = (s[2] as u128) << 64 | s[3] as u128;
        let mut rng = Pcg64 {
            state: 0,
            inc: (inc << 1) | 1,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(seed);
        rng.step();
        rng
    }

    /// riftco-nn's `sequence_rng(seed, index)`.
    pub fn sequence(seed: u64, index: u64) -> Pcg64 {
        Self::from_entropy_words(&[seed, index])
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        let x = ((s >> 64) as u64) ^ (s as u64);
        x.rotate_right((s >> 122) as u32)
    }

    /// numpy's `Generator.random()`.
    pub fn random(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

// -- sample_next ---------------------------------------------------------------------

/// numpy's pairwise summation of float64 (`np.add.reduce` over a contiguous array).
pub fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut r = 0.0;
        for &x in a {
            r += x;
        }
        r
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for j in 0..8 {
                r[j] += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// `cumsum(w) / sum(w)`.
fn cumulative(w: &[f64]) -> Vec<f64> {
    let total = pairwise_sum(w);
    let mut acc = 0.0;
    w.iter()
        .map(|&x| {
            acc += x;
            acc / total
        })
        .collect()
}

/// `searchsorted(c, v, side="right")`: the first index whose value exceeds `v`.
fn search_right(c: &[f64], v: f64) -> usize {
    c.partition_point(|&x| x <= v)
}

/// `searchsorted(c, v, side="left")`: the first index whose value is at least `v`.
fn search_left(c: &[f64], v: f64) -> usize {
    c.partition_point(|&x| x < v)
}

/// riftco-nn's `SamplingConfig`, the fields a draw reads.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingConfig {
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub repetition_penalty: f64,
    pub vocab_limit: Option<usize>,
    /// OpenAI's presence and frequency penalties over the generated tokens, in [-2, 2].
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    /// `(id, bias)` pairs sorted by id, each bias in [-100, 100].
    pub logit_bias: Vec<(usize, f64)>,
}

impl SamplingConfig {
    pub fn counts_tokens(&self) -> bool {
        self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }
}

impl SamplingConfig {
    pub fn check(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(Error::invalid(format!(
                "sampling: temperature must be >= 0, found {}",
                self.temperature
            )));
        }
        if self.top_k == Some(0) {
            return Err(Error::invalid(
                "sampling: top_k must be None or positive, found 0",
            ));
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(Error::invalid(format!(
                    "sampling: top_p must be None or in (0, 1], found {p}"
                )));
            }
        }
        let r = self.repetition_penalty;
        if !r.is_finite() || r <= 0.0 {
            return Err(Error::invalid(format!(
                "sampling: repetition_penalty must be a finite number > 0, found {r}"
            )));
        }
        if self.vocab_limit == Some(0) {
            return Err(Error::invalid(
                "sampling: vocab_limit must be None or positive, found 0",
            ));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(Error::invalid(format!(
                    "sampling: {name} must be a number in [-2.0, 2.0], found {v}"
                )));
            }
        }
        for w in self.logit_bias.windows(2) {
            if w[0].0 >= w[1].0 {
                return Err(Error::invalid(
                    "sampling: logit_bias ids must be distinct and sorted",
                ));
            }
        }
        if let Some(&(id, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return Err(Error::invalid(format!(
                "sampling: logit_bias[{id}] must be a number in [-100.0, 100.0], found {b}"
            )));
        }

        Ok(())
    }
}

/// The next token from one row of float32 logits, as riftco-nn's `sample_next` draws it.
pub fn sample_next(
    logits: &[f32],
    config: &SamplingConfig,
    rng: &mut Pcg64,
    seen: &BTreeSet<i64>,
    counts: &BTreeMap<i64, u64>,
) -> Result<usize> {
    let width = match config.vocab_limit {
        Some(l) if l < logits.len() => l,
        _ => logits.len(),
    };
    if width == 0 {
        return Err(Error::invalid("sampling: an empty row of logits"));
    }
    let mut row32: Vec<f32> = logits[..width].to_vec();
    if config.repetition_penalty != 1.0 {
        let p = config.repetition_penalty as f32;
        for &t in seen.range(0..width as i64) {
            let v = &mut row32[t as usize];
            *v = if *v > 0.0 { *v / p } else { *v * p };
        }
    }
    let mut row: Vec<f64> = row32.iter().map(|&v| v as f64).collect();
    if !counts.is_empty() && config.counts_tokens() {
        for (&t, &n) in counts.range(0..width as i64) {
            let n = n as f64;
            row[t as usize] -= config.presence_penalty * 1.0 + config.frequency_penalty * n;
        }
    }
    for &(token, bias) in &config.logit_bias {
        if token >= width {
            return Err(Error::invalid(format!(
                "sampling: logit_bias names token {token}; the vocabulary has {width} ids"
            )));
        }
        row[token] += bias;
    }
    if config.temperature == 0.0 {
        // np.argmax: the first maximum (a NaN counts as the maximum).
        let mut best = 0;
        for (i, &v) in row.iter().enumerate() {
            if row[best].is_nan() {
                break;
            }
            if v > row[best] || v.is_nan() {
                best = i;
            }
        }
        return Ok(best);
    }
    let scaled: Vec<f64> = row.iter().map(|&v| v / config.temperature).collect();
    if config.top_k.is_none() && config.top_p.is_none() {
        let top = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let probs: Vec<f64> = scaled.iter().map(|&v| (v - top).exp()).collect();
        let c = cumulative(&probs);
        let u = rng.random();
        return Ok(search_right(&c, u).min(probs.len() - 1));
    }
    // Rank by descending logit, ties toward lower ids (a stable sort of -logit).
    let mut order: Vec<usize> = (0..width).collect();
    order.sort_by(|&a, &b| {
        (-scaled[a])
            .partial_cmp(&-scaled[b])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut keep = width;
    if let Some(k) = config.top_k {
        keep = keep.min(k);
    }
    let first = scaled[order[0]];
    let probs: Vec<f64> = scaled.iter().map(|&v| (v - first).exp()).collect();
    if let Some(p) = config.top_p {
        let ranked: Vec<f64> = order[..keep].iter().map(|&i| probs[i]).collect();
        let c = cumulative(&ranked);
        keep = keep.min(search_left(&c, p - 1e-12) + 1);
    }
    let mut kept: Vec<usize> = order[..keep].to_vec();
    kept.sort_unstable();
    let weights: Vec<f64> = kept.iter().map(|&i| probs[i]).collect();
    let c = cumulative(&weights);
    let u = rng.random();
    Ok(kept[search_right(&c, u).min(kept.len() - 1)])
}

/// One sequence's draws: its generator and the ids the repetition penalty sees.
#[derive(Debug, Clone)]
pub struct Sampler {
    pub config: SamplingConfig,
    pub rng: Pcg64,
    pub seen: BTreeSet<i64>,
    /// Generated tokens kept, by id (the presence and frequency penalties see them).
    pub counts: BTreeMap<i64, u64>,
}

impl Sampler {
    pub fn new(config: SamplingConfig, seed: u64, index: u64) -> Result<Sampler> {
        config.check()?;
        Ok(Sampler {
            config,
            rng: Pcg64::sequence(seed, index),
            seen: BTreeSet::new(),
            counts: BTreeMap::new(),
        })
    }

    /// Tokens now in the sequence (kept only while a repetition penalty is on).
    pub fn observe(&mut self, tokens: &[i64]) {
        if self.config.repetition_penalty != 1.0 {
            self.seen.extend(tokens.iter().copied());
        }
    }

    /// A drawn token the sequence keeps.
    pub fn accept(&mut self, token: i64) {
        self.observe(&[token]);
        if self.config.counts_tokens() {
            *self.counts.entry(token).or_insert(0) += 1;
        }
    }

    pub fn draw(&mut self, logits: &[f32]) -> Result<usize> {
        sample_next(
            logits,
            &self.config,
            &mut self.rng,
            &self.seen,
            &self.counts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_sequence_and_pcg64_equal_numpy() {
        // numpy 2.4: SeedSequence([1, 2]).generate_state(4, uint64) and Generator(PCG64(.)).random().
        assert_eq!(
            seed_sequence_state(&[1, 2], 4),
            vec![
                0xd78548c15f2d64ab,
                0x8ce90a298a5eaca9,
                0x5743855731a4b752,
                0x4c5b2bcb9204ad93
            ]
        );
        let mut g = Pcg64::sequence(0, 0);
        assert_eq!(g.random(), 0.6369616873214543);
        assert_eq!(g.random(), 0.2697867137638703);
        let mut g = Pcg64::sequence(u64::MAX, 7);
        assert_eq!(g.random(), 0.25457927448096485);
        let mut g = Pcg64::sequence(1099511627781, 3);
        assert_eq!(g.next_u64(), 13426263644868770523);
    }
}
