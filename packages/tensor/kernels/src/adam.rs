//! The fused Adam / AdamW update over every parameter in one call.
//!
//! The update is all-or-nothing. A first, read-only pass computes every
//! candidate (new parameter, first and second moment) out of place and checks
//! that all of them are finite; only then does a second pass compute the same
//! candidates again and write them. Both passes run the same per-element
//! arithmetic on unchanged inputs, so the written values are exactly the ones
//! that were checked, and no scratch buffer the size of the model is needed.
//!
//! Moments may be stored in pages: each parameter's moments are a list of
//! pages of `page_size` elements (the last one shorter). The arithmetic is
//! elementwise, so every page layout and every thread count gives
//! bit-identical results.
//!
//! The arithmetic follows `torch.optim.Adam` (single-tensor path): scalars are
//! computed in float64 and rounded once to float32, then
//!
//! ```text
//! g  = grad * grad_scale                  (+ weight_decay * p   for L2 decay)
//! p  = p * (1 - lr * weight_decay)        (decoupled decay, AdamW)
//! m' = m + (1 - beta1) * (g - m)
//! v' = v * beta2 + (1 - beta2) * g * g
//! p' = p + (-lr / (1 - beta1^t)) * m' / (sqrt(v') / sqrt(1 - beta2^t) + eps)
//! ```

use crate::pool::{for_each_mut, parallel, CHUNK, PARALLEL_THRESHOLD};
use crate::{ensure, multiversion, Result};

/// Hyperparameters of one parameter's update (as given; rounded to float32 internally).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamHyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// The parameter's step being taken, counting from 1 (bias correction uses it).
    pub step: u64,
}

/// One parameter: its values, its gradient, its moment pages and its hyperparameters.
#[derive(Debug)]
pub struct AdamParam<'a> {
    pub param: &'a mut [f32],
    pub grad: &'a [f32],
    pub m: Vec<&'a mut [f32]>,
    pub v: Vec<&'a mut [f32]>,
    pub hyper: AdamHyper,
}

/// float32 coefficients of the per-element arithmetic.
#[derive(Debug, Clone, Copy)]
struct Coefficients {
    grad_scale: f32,
    l2: f32,
    decay: f32,
    decoupled: bool,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    neg_step_size: f32,
    bias_correction2_sqrt: f32,
    eps: f32,
}

impl Coefficients {
    fn new(h: &AdamHyper, decoupled: bool, grad_scale: f64) -> Self {
        // powf, as Python's `beta ** step` (powi may round differently).
        let t = h.step as f64;
        let bias_correction1 = 1.0 - h.beta1.powf(t);
        let bias_correction2 = 1.0 - h.beta2.powf(t);
        Self {
            grad_scale: grad_scale as f32,
            l2: if decoupled {
                0.0
            } else {
                h.weight_decay as f32
            },
            decay: (1.0 - h.lr * h.weight_decay) as f32,
            decoupled: decoupled && h.weight_decay != 0.0,
            one_minus_beta1: (1.0 - h.beta1) as f32,
            beta2: h.beta2 as f32,
            one_minus_beta2: (1.0 - h.beta2) as f32,
            neg_step_size: (-(h.lr / bias_correction1)) as f32,
            bias_correction2_sqrt: bias_correction2.sqrt() as f32,
            eps: h.eps as f32,
        }
    }
}

/// The candidate (p', m', v') of one element.
#[inline(always)]
fn candidate(k: &Coefficients, p: f32, g: f32, m: f32, v: f32) -> (f32, f32, f32) {
    let mut g = g * k.grad_scale;
    if k.l2 != 0.0 {
        g += k.l2 * p;
    }
    let p = if k.decoupled { p * k.decay } else { p };
    let m = m + k.one_minus_beta1 * (g - m);
    let v = v * k.beta2 + k.one_minus_beta2 * g * g;
    let denom = v.sqrt() / k.bias_correction2_sqrt + k.eps;
    (p + k.neg_step_size * m / denom, m, v)
}

#[inline(always)]
fn non_finite(x: f32) -> u32 {
    u32::from(!x.is_finite())
}

multiversion! {
    fn check_piece(k: &Coefficients, p: &[f32], g: &[f32], m: &[f32], v: &[f32]) -> bool {
        let mut bad = 0u32;
        for (((&p, &g), &m), &v) in p.iter().zip(g).zip(m).zip(v) {
            let (np, nm, nv) = candidate(k, p, g, m, v);
            bad |= non_finite(np) | non_finite(nm) | non_finite(nv);
        }
        bad == 0
    }
}

multiversion! {
    fn commit_piece(k: &Coefficients, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            (*p, *m, *v) = candidate(k, *p, g, *m, *v);
        }
    }
}

/// A run of at most [`CHUNK`] elements of one parameter and one moment page.
struct Piece<'a> {
    index: usize,
    k: Coefficients,
    p: &'a mut [f32],
    g: &'a [f32],
    m: &'a mut [f32],
    v: &'a mut [f32],
}

fn validate(params: &[AdamParam<'_>], page_size: usize, grad_scale: f64) -> Result<()> {
    ensure!(page_size > 0, "adam_update: page_size must be positive");
    ensure!(
        grad_scale.is_finite() && grad_scale >= 0.0,
        "adam_update: grad_scale must be finite and non-negative, found {grad_scale}"
    );
    for (i, a) in params.iter().enumerate() {
        let h = &a.hyper;
        ensure!(
            h.step >= 1,
            "adam_update: steps count from 1, found {} for parameter {i}",
            h.step
        );
        for (name, x) in [
            ("lr", h.lr),
            ("eps", h.eps),
            ("weight_decay", h.weight_decay),
        ] {
            ensure!(
                x.is_finite() && x >= 0.0,
                "adam_update: {name} must be finite and non-negative, found {x} for parameter {i}"
            );
        }
        for (name, b) in [("beta1", h.beta1), ("beta2", h.beta2)] {
            ensure!(
                (0.0..1.0).contains(&b),
                "adam_update: {name} must lie in [0, 1), found {b} for parameter {i}"
            );
        }
        let n = a.param.len();
        ensure!(
            a.grad.len() == n,
            "adam_update: parameter {i} has {n} elements but its gradient has {}",
            a.grad.len()
        );
        // An empty parameter still has one (empty) page.
        let pages = n.div_ceil(page_size).max(1);
        ensure!(
            a.m.len() == pages && a.v.len() == pages,
            "adam_update: parameter {i} ({n} elements, pages of {page_size}) needs {pages} moment pages, found {} and {}",
            a.m.len(),
            a.v.len()
        );
        for (j, (m, v)) in a.m.iter().zip(&a.v).enumerate() {
            let want = page_size.min(n - j * page_size);
            ensure!(
                m.len() == want && v.len() == want,
                "adam_update: page {j} of parameter {i} should hold {want} elements, found {} and {}",
                m.len(),
                v.len()
            );
        }
    }
    Ok(())
}

fn pieces<'s>(
    params: &'s mut [AdamParam<'_>],
    page_size: usize,
    decoupled: bool,
    grad_scale: f64,
) -> Vec<Piece<'s>> {
    let mut out = Vec::new();
    for (index, a) in params.iter_mut().enumerate() {
        let k = Coefficients::new(&a.hyper, decoupled, grad_scale);
        let pages = a.param.chunks_mut(page_size).zip(a.grad.chunks(page_size));
        for ((p, g), (m, v)) in pages.zip(a.m.iter_mut().zip(a.v.iter_mut())) {
            let runs = p.chunks_mut(CHUNK).zip(g.chunks(CHUNK));
            for ((p, g), (m, v)) in runs.zip(m.chunks_mut(CHUNK).zip(v.chunks_mut(CHUNK))) {
                out.push(Piece {
                    index,
                    k,
                    p,
                    g,
                    m,
                    v,
                });
            }
        }
    }
    out
}

/// Update every parameter and its moments in place, or nothing.
///
/// `decoupled` selects AdamW's weight decay; `grad_scale` multiplies every
/// gradient first (gradient clipping). Returns `Ok(None)` when the update
/// was written, `Ok(Some(i))` when some candidate of parameter `i` (the first
/// such parameter) is not finite, in which case nothing was written, and an
/// error when the arguments disagree.
pub fn adam_update(
    params: &mut [AdamParam<'_>],
    page_size: usize,
    decoupled: bool,
    grad_scale: f64,
) -> Result<Option<usize>> {
    validate(params, page_size, grad_scale)?;
    let total: usize = params.iter().map(|a| a.param.len()).sum();
    let parallel = parallel(total, PARALLEL_THRESHOLD);
    let mut work = pieces(params, page_size, decoupled, grad_scale);

    let check = |w: &Piece<'_>| {
        if check_piece(&w.k, w.p, w.g, w.m, w.v) {
            None
        } else {
            Some(w.index)
        }
    };
    let first_bad = if parallel {
        let mut bad = vec![None; work.len()];
        for_each_mut(&mut bad, true, |i, b| *b = check(&work[i]));
        bad.into_iter().flatten().min()
    } else {
        work.iter().find_map(check)
    };
    if first_bad.is_some() {
        return Ok(first_bad);
    }

    let commit = |w: &mut Piece<'_>| commit_piece(&w.k, w.p, w.g, w.m, w.v);
    for_each_mut(&mut work, parallel, |_, w| commit(w));
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hyper(step: u64) -> AdamHyper {
        AdamHyper {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            step,
        }
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n as u64)
            .map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 - 1000.0) * 1e-3)
            .collect()
    }

    /// Run one update with moments paged by `page_size`.
    fn step(
        p: &mut [Vec<f32>],
        g: &[Vec<f32>],
        m: &mut [Vec<f32>],
        v: &mut [Vec<f32>],
        page_size: usize,
        h: AdamHyper,
        decoupled: bool,
    ) -> Result<Option<usize>> {
        let mut params: Vec<AdamParam<'_>> = p
            .iter_mut()
            .zip(g)
            .zip(m.iter_mut().zip(v.iter_mut()))
            .map(|((p, g), (m, v))| AdamParam {
                param: p.as_mut_slice(),
                grad: g.as_slice(),
                m: m.chunks_mut(page_size).collect(),
                v: v.chunks_mut(page_size).collect(),
                hyper: h,
            })
            .collect();
        adam_update(&mut params, page_size, decoupled, 1.0)
    }

    #[test]
    fn first_step_moves_each_parameter_by_about_lr() {
        let mut p = vec![vec![1.0f32, -2.0, 0.5]];
        let g = vec![vec![0.3f32, -0.1, 0.0]];
        let (mut m, mut v) = (vec![vec![0.0f32; 3]], vec![vec![0.0f32; 3]]);
        assert_eq!(
            step(&mut p, &g, &mut m, &mut v, 4096, hyper(1), false).unwrap(),
            None
        );
        // m_hat = g and v_hat = g², so the step is lr * sign(g) (up to eps).
        assert!((p[0][0] - 0.99).abs() < 1e-6);
        assert!((p[0][1] + 1.99).abs() < 1e-6);
        assert_eq!(p[0][2], 0.5);
        assert!((m[0][0] - 0.03).abs() < 1e-7 && (v[0][0] - 0.3f32 * 0.3 * 0.001).abs() < 1e-9);
    }

    #[test]
    fn pages_threads_and_contiguous_agree_bitwise() {
        let sizes = [1usize, 4095, 4096, 4097, 300_001];
        let p0: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| values(n, i as u64))
            .collect();
        let g: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| values(n, 10 + i as u64))
            .collect();
        let run = |page_size: usize, threads: usize| {
            crate::pool::set_num_threads(threads);
            let mut p = p0.clone();
            let mut m: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
            let mut v = m.clone();
            for t in 1..=3 {
                let h = AdamHyper {
                    weight_decay: 0.1,
                    ..hyper(t)
                };
                assert_eq!(
                    step(&mut p, &g, &mut m, &mut v, page_size, h, true).unwrap(),
                    None
                );
            }
            let bits =
                |x: &Vec<Vec<f32>>| x.iter().flatten().map(|f| f.to_bits()).collect::<Vec<_>>();
            (bits(&p), bits(&m), bits(&v))
        };
        let contiguous = run(usize::MAX, 1);
        assert_eq!(run(4096, 1), contiguous);
        assert_eq!(run(4096, 3), contiguous);
        assert_eq!(run(1000, 2), contiguous);
        assert_eq!(run(usize::MAX, 4), contiguous);
    }

    #[test]
    fn a_non_finite_candidate_changes_nothing() {
        let sizes = [5usize, 200_000, 9000];
        let mut p: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| values(n, i as u64))
            .collect();
        let mut g: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| values(n, 5 + i as u64))
            .collect();
        let mut m: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.25; n]).collect();
        let mut v: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.5; n]).collect();
        g[2][8999] = f32::NAN; // on the last page of the last parameter
        let before = (p.clone(), m.clone(), v.clone());
        assert_eq!(
            step(&mut p, &g, &mut m, &mut v, 4096, hyper(2), false).unwrap(),
            Some(2)
        );
        assert_eq!((p.clone(), m.clone(), v.clone()), before);
        g[2][8999] = 0.0;
        g[1][7] = f32::INFINITY;
        g[2][0] = f32::INFINITY;
        assert_eq!(
            step(&mut p, &g, &mut m, &mut v, 4096, hyper(2), false).unwrap(),
            Some(1)
        );
        assert_eq!((p, m, v), before);
    }

    #[test]
    fn parameters_keep_their_own_hyperparameters() {
        let mut p = [vec![1.0f32; 4], vec![1.0f32; 4]];
        let g = [vec![0.0f32; 4], vec![0.0f32; 4]];
        let (mut m, mut v) = (vec![vec![0.0f32; 4]; 2], vec![vec![0.0f32; 4]; 2]);
        let mut params: Vec<AdamParam<'_>> = Vec::new();
        for (i, ((p, g), (m, v))) in p
            .iter_mut()
            .zip(&g)
            .zip(m.iter_mut().zip(v.iter_mut()))
            .enumerate()
        {
            let hyper = AdamHyper {
                weight_decay: if i == 0 { 0.5 } else { 0.0 },
                ..hyper(1)
            };
            params.push(AdamParam {
                param: p,
                grad: g,
                m: vec![m],
                v: vec![v],
                hyper,
            });
        }
        assert_eq!(adam_update(&mut params, 4, true, 1.0).unwrap(), None);
        assert_eq!(p[0], [(1.0 - 1e-2 * 0.5) as f32; 4]);
        assert_eq!(p[1], [1.0f32; 4]);
    }

    #[test]
    fn disagreeing_arguments_are_refused() {
        let mut p = vec![vec![0.0f32; 10]];
        let g = vec![vec![0.0f32; 10]];
        let (mut m, mut v) = (vec![vec![0.0f32; 10]], vec![vec![0.0f32; 10]]);
        assert!(step(&mut p, &g, &mut m, &mut v, 4, hyper(0), false).is_err());
        let mut params = vec![AdamParam {
            param: &mut p[0],
            grad: &g[0][..9],
            m: vec![&mut m[0]],
            v: vec![&mut v[0]],
            hyper: hyper(1),
        }];
        assert!(adam_update(&mut params, 16, false, 1.0).is_err());
        let mut params = vec![AdamParam {
            param: &mut p[0],
            grad: &g[0],
            m: vec![&mut m[0][..4]],
            v: vec![&mut v[0][..4]],
            hyper: hyper(1),
        }];
        assert!(adam_update(&mut params, 4, false, 1.0).is_err());
        let bad = AdamHyper {
            beta2: 1.0,
            ..hyper(1)
        };
        let mut params = vec![AdamParam {
            param: &mut p[0],
            grad: &g[0],
            m: vec![&mut m[0]],
            v: vec![&mut v[0]],
            hyper: bad,
        }];
        assert!(adam_update(&mut params, 16, false, 1.0).is_err());
        let mut params = vec![AdamParam {
            param: &mut p[0],
            grad: &g[0],
            m: vec![&mut m[0]],
            v: vec![&mut v[0]],
            hyper: hyper(1),
        }];
        assert!(adam_update(&mut params, 16, false, f64::NAN).is_err());
    }
}
