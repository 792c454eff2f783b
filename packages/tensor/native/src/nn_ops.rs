//! Fused neural-network kernels: normalization, activation gradients,
//! cross-entropy, rotary embedding and attention.

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use riftco_kernels::activation_grad::{activation_backward as act_backward, Activation};
use riftco_kernels::attention::{
    batch_segments, materialized_backward, materialized_forward, Heads, Segment,
};
use riftco_kernels::flash::{flash_backward, flash_forward};
use riftco_kernels::loss;
use riftco_kernels::norm::{norm_backward, norm_forward, Norm};
use riftco_kernels::rotary::rotary as rotary_kernel;

use crate::convert::{alloc, error, run, shape_of, slice};

type Array<'py> = Bound<'py, PyUntypedArray>;
type Out<'py> = Bound<'py, PyAny>;

fn last_dim(op: &str, x: &Array<'_>) -> PyResult<usize> {
    x.shape()
        .last()
        .copied()
        .ok_or_else(|| error(format!("{op}: expected at least one axis")))
}

fn rows_of(shape: &[usize]) -> Vec<usize> {
    shape[..shape.len() - 1].to_vec()
}

fn opt_slice<'a>(x: Option<&'a Array<'_>>) -> PyResult<Option<&'a [f32]>> {
    x.map(slice::<f32>).transpose()
}

#[pyfunction]
#[pyo3(signature = (x, weight, bias, eps))]
fn layer_norm<'py>(
    py: Python<'py>,
    x: &Array<'py>,
    weight: Option<&Array<'py>>,
    bias: Option<&Array<'py>>,
    eps: f32,
) -> PyResult<(Out<'py>, Out<'py>, Out<'py>)> {
    let d = last_dim("layer_norm", x)?;
    let shape = shape_of(x);
    let (xs, w, b) = (slice::<f32>(x)?, opt_slice(weight)?, opt_slice(bias)?);
    let (y, ys) = alloc::<f32>(py, &shape);
    let (mean, ms) = alloc::<f32>(py, &rows_of(&shape));
    let (rstd, rs) = alloc::<f32>(py, &rows_of(&shape));
    run(py, || {
        norm_forward(Norm::Layer, xs, d, w, b, eps, ys, Some(ms), rs)
    })?;
    Ok((y.into_any(), mean.into_any(), rstd.into_any()))
}

type Grads3<'py> = (Out<'py>, Option<Out<'py>>, Option<Out<'py>>);

#[allow(clippy::too_many_arguments)]
fn norm_grads<'py>(
    py: Python<'py>,
    norm: Norm,
    dy: &Array<'py>,
    x: &Array<'py>,
    weight: Option<&Array<'py>>,
    mean: Option<&Array<'py>>,
    rstd: &Array<'py>,
    with_bias: bool,
) -> PyResult<Grads3<'py>> {
    let d = last_dim("norm backward", x)?;
    let shape = shape_of(x);
    let (xs, gs, w, m, r) = (
        slice::<f32>(x)?,
        slice::<f32>(dy)?,
        opt_slice(weight)?,
        opt_slice(mean)?,
        slice::<f32>(rstd)?,
    );
    let (dx, dxs) = alloc::<f32>(py, &shape);
    let (dw, dws) = if w.is_some() {
        let (a, s) = alloc::<f32>(py, &[d]);
        (Some(a), Some(s))
    } else {
        (None, None)
    };
    let (db, dbs) = if with_bias {
        let (a, s) = alloc::<f32>(py, &[d]);
        (Some(a), Some(s))
    } else {
        (None, None)
    };
    run(py, || {
        norm_backward(norm, xs, gs, d, w, m, r, dxs, dws, dbs)
    })?;
    Ok((
        dx.into_any(),
        dw.map(|a| a.into_any()),
        db.map(|a| a.into_any()),
    ))
}

#[pyfunction]
#[pyo3(signature = (dy, x, weight, mean, rstd, with_bias))]
fn layer_norm_backward<'py>(
    py: Python<'py>,
    dy: &Array<'py>,
    x: &Array<'py>,
    weight: Option<&Array<'py>>,
    mean: &Array<'py>,
    rstd: &Array<'py>,
    with_bias: bool,
) -> PyResult<Grads3<'py>> {
    norm_grads(py, Norm::Layer, dy, x, weight, Some(mean), rstd, with_bias)
}

#[pyfunction]
#[pyo3(signature = (x, weight, eps))]
fn rms_norm<'py>(
    py: Python<'py>,
    x: &Array<'py>,
    weight: Option<&Array<'py>>,
    eps: f32,
) -> PyResult<(Out<'py>, Out<'py>)> {
    let d = last_dim("rms_norm", x)?;
    let shape = shape_of(x);
    let (xs, w) = (slice::<f32>(x)?, opt_slice(weight)?);
    let (y, ys) = alloc::<f32>(py, &shape);
    let (rstd, rs) = alloc::<f32>(py, &rows_of(&shape));
    run(py, || {
        norm_forward(Norm::Rms, xs, d, w, None, eps, ys, None, rs)
    })?;
    Ok((y.into_any(), rstd.into_any()))
}

#[pyfunction]
#[pyo3(signature = (dy, x, weight, rstd))]
fn rms_norm_backward<'py>(
    py: Python<'py>,
    dy: &Array<'py>,
    x: &Array<'py>,
    weight: Option<&Array<'py>>,
    rstd: &Array<'py>,
) -> PyResult<(Out<'py>, Option<Out<'py>>)> {
    let (dx, dw, _) = norm_grads(py, Norm::Rms, dy, x, weight, None, rstd, false)?;
    Ok((dx, dw))
}

#[pyfunction]
fn activation_backward<'py>(
    py: Python<'py>,
    op: &str,
    x: &Array<'py>,
    dy: &Array<'py>,
) -> PyResult<Out<'py>> {
    let act = Activation::from_name(op)
        .ok_or_else(|| error(format!("activation_backward: unknown activation {op:?}")))?;
    let (xs, gs) = (slice::<f32>(x)?, slice::<f32>(dy)?);
    let (dx, out) = alloc::<f32>(py, &shape_of(x));
    run(py, || act_backward(act, xs, gs, out))?;
    Ok(dx.into_any())
}

#[pyfunction]
fn cross_entropy<'py>(
    py: Python<'py>,
    logits: &Array<'py>,
    targets: &Array<'py>,
    ignore_index: i64,
) -> PyResult<(Out<'py>, Out<'py>)> {
    let classes = last_dim("cross_entropy", logits)?;
    let (xs, ts) = (slice::<f32>(logits)?, slice::<i64>(targets)?);
    let (losses, ls) = alloc::<f32>(py, &[ts.len()]);
    let (lse, es) = alloc::<f32>(py, &[ts.len()]);
    run(py, || {
        loss::cross_entropy(xs, classes, ts, ignore_index, ls, es)
    })?;
    Ok((losses.into_any(), lse.into_any()))
}

#[pyfunction]
fn cross_entropy_backward<'py>(
    py: Python<'py>,
    logits: &Array<'py>,
    targets: &Array<'py>,
    lse: &Array<'py>,
    grad: &Array<'py>,
    ignore_index: i64,
) -> PyResult<Out<'py>> {
    let classes = last_dim("cross_entropy", logits)?;
    let (xs, ts, es, gs) = (
        slice::<f32>(logits)?,
        slice::<i64>(targets)?,
        slice::<f32>(lse)?,
        slice::<f32>(grad)?,
    );
    let (d, ds) = alloc::<f32>(py, &shape_of(logits));
    run(py, || {
        loss::cross_entropy_backward(xs, classes, ts, es, gs, ignore_index, ds)
    })?;
    Ok(d.into_any())
}

#[pyfunction]
fn rotary<'py>(
    py: Python<'py>,
    x: &Array<'py>,
    positions: &Array<'py>,
    theta: f64,
    inverse: bool,
) -> PyResult<Out<'py>> {
    let head_dim = last_dim("rotary", x)?;
    let (xs, ps) = (slice::<f32>(x)?, slice::<i64>(positions)?);
    let (y, ys) = alloc::<f32>(py, &shape_of(x));
    run(py, || rotary_kernel(xs, head_dim, ps, theta, inverse, ys))?;
    Ok(y.into_any())
}

/// `(batch, rows, heads, head_dim)` of a `[B, T, H, Dh]` array.
fn dims4(what: &str, x: &Array<'_>) -> PyResult<[usize; 4]> {
    let s = shape_of(x);
    <[usize; 4]>::try_from(s.as_slice()).map_err(|_| {
        error(format!(
            "attention: {what} must be [B, T, H, Dh], found {s:?}"
        ))
    })
}

fn geometry(
    q: &Array<'_>,
    k: &Array<'_>,
    scale: f32,
    causal: bool,
    window: usize,
) -> PyResult<(Heads, usize, usize, usize)> {
    let [b, t, heads, dh] = dims4("queries", q)?;
    let [bk, s, kv_heads, dhk] = dims4("keys", k)?;
    if b != bk || dh != dhk {
        return Err(error(format!(
            "attention: queries {:?} and keys {:?} disagree",
            shape_of(q),
            shape_of(k)
        )));
    }
    Ok((
        Heads {
            heads,
            kv_heads,
            head_dim: dh,
            scale,
            causal,
            window,
        },
        b,
        t,
        s,
    ))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention<'py>(
    py: Python<'py>,
    q: &Array<'py>,
    k: &Array<'py>,
    v: &Array<'py>,
    scale: f32,
    causal: bool,
    window: usize,
) -> PyResult<(Out<'py>, Out<'py>)> {
    let (h, b, t, s) = geometry(q, k, scale, causal, window)?;
    let (qs, ks, vs) = (slice::<f32>(q)?, slice::<f32>(k)?, slice::<f32>(v)?);
    let (out, os) = alloc::<f32>(py, &shape_of(q));
    let (probs, ps) = alloc::<f32>(py, &[b, h.heads, t, s]);
    run(py, || materialized_forward(&h, b, t, s, qs, ks, vs, os, ps))?;
    Ok((out.into_any(), probs.into_any()))
}

type Grads<'py> = (Out<'py>, Out<'py>, Out<'py>);

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention_backward<'py>(
    py: Python<'py>,
    dout: &Array<'py>,
    q: &Array<'py>,
    k: &Array<'py>,
    v: &Array<'py>,
    probs: &Array<'py>,
    scale: f32,
    causal: bool,
    window: usize,
) -> PyResult<Grads<'py>> {
    let (h, b, t, s) = geometry(q, k, scale, causal, window)?;
    let (qs, ks, vs, ps, gs) = (
        slice::<f32>(q)?,
        slice::<f32>(k)?,
        slice::<f32>(v)?,
        slice::<f32>(probs)?,
        slice::<f32>(dout)?,
    );
    let (dq, dqs) = alloc::<f32>(py, &shape_of(q));
    let (dk, dks) = alloc::<f32>(py, &shape_of(k));
    let (dv, dvs) = alloc::<f32>(py, &shape_of(v));
    run(py, || {
        materialized_backward(&h, b, t, s, qs, ks, vs, ps, gs, dqs, dks, dvs)
    })?;
    Ok((dq.into_any(), dk.into_any(), dv.into_any()))
}

#[pyfunction]
fn flash_attention<'py>(
    py: Python<'py>,
    q: &Array<'py>,
    k: &Array<'py>,
    v: &Array<'py>,
    scale: f32,
    causal: bool,
    window: usize,
) -> PyResult<(Out<'py>, Out<'py>, Out<'py>)> {
    let (h, b, t, s) = geometry(q, k, scale, causal, window)?;
    let (qs, ks, vs) = (slice::<f32>(q)?, slice::<f32>(k)?, slice::<f32>(v)?);
    let (out, os) = alloc::<f32>(py, &shape_of(q));
    let (m, ms) = alloc::<f32>(py, &[b, h.heads, t]);
    let (l, ls) = alloc::<f32>(py, &[b, h.heads, t]);
    run(py, || {
        flash_forward(&h, &batch_segments(b, t, s), qs, ks, vs, os, Some((ms, ls)))
    })?;
    Ok((out.into_any(), m.into_any(), l.into_any()))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn flash_attention_backward<'py>(
    py: Python<'py>,
    dout: &Array<'py>,
    q: &Array<'py>,
    k: &Array<'py>,
    v: &Array<'py>,
    out: &Array<'py>,
    row_max: &Array<'py>,
    row_sum: &Array<'py>,
    scale: f32,
    causal: bool,
    window: usize,
) -> PyResult<Grads<'py>> {
    let (h, b, t, s) = geometry(q, k, scale, causal, window)?;
    let (qs, ks, vs, os, gs) = (
        slice::<f32>(q)?,
        slice::<f32>(k)?,
        slice::<f32>(v)?,
        slice::<f32>(out)?,
        slice::<f32>(dout)?,
    );
    let (ms, ls) = (slice::<f32>(row_max)?, slice::<f32>(row_sum)?);
    let (dq, dqs) = alloc::<f32>(py, &shape_of(q));
    let (dk, dks) = alloc::<f32>(py, &shape_of(k));
    let (dv, dvs) = alloc::<f32>(py, &shape_of(v));
    run(py, || {
        flash_backward(&h, b, t, s, qs, ks, vs, os, gs, ms, ls, dqs, dks, dvs)
    })?;
    Ok((dq.into_any(), dk.into_any(), dv.into_any()))
}

/// Causal attention of packed ragged sequences: q `[N, H, Dh]`, k and v `[M, Hkv, Dh]`;
/// sequence j owns query rows `q_starts[j]..+q_counts[j]` and key rows
/// `kv_starts[j]..+kv_lengths[j]`, its queries being its last `q_counts[j]` positions.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention_varlen<'py>(
    py: Python<'py>,
    q: &Array<'py>,
    k: &Array<'py>,
    v: &Array<'py>,
    q_starts: Vec<usize>,
    q_counts: Vec<usize>,
    kv_starts: Vec<usize>,
    kv_lengths: Vec<usize>,
    scale: f32,
    window: usize,
) -> PyResult<Out<'py>> {
    let (sq, sk) = (shape_of(q), shape_of(k));
    if sq.len() != 3 || sk.len() != 3 || sq[2] != sk[2] {
        return Err(error(format!(
            "attention_varlen: expected q [N, H, Dh] and k [M, Hkv, Dh], found {sq:?} and {sk:?}"
        )));
    }
    let n = q_starts.len();
    if q_counts.len() != n || kv_starts.len() != n || kv_lengths.len() != n {
        return Err(error(
            "attention_varlen: segment lists of different lengths",
        ));
    }
    let segs: Vec<Segment> = (0..n)
        .map(|j| Segment {
            q_row: q_starts[j],
            q_len: q_counts[j],
            kv_row: kv_starts[j],
            kv_len: kv_lengths[j],
        })
        .collect();
    let h = Heads {
        heads: sq[1],
        kv_heads: sk[1],
        head_dim: sq[2],
        scale,
        causal: true,
        window,
    };
    let (qs, ks, vs) = (slice::<f32>(q)?, slice::<f32>(k)?, slice::<f32>(v)?);
    let (out, os) = alloc::<f32>(py, &sq);
    run(py, || flash_forward(&h, &segs, qs, ks, vs, os, None))?;
    Ok(out.into_any())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(activation_backward, m)?)?;
    m.add_function(wrap_pyfunction!(cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(cross_entropy_backward, m)?)?;
    m.add_function(wrap_pyfunction!(rotary, m)?)?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(flash_attention, m)?)?;
    m.add_function(wrap_pyfunction!(flash_attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(attention_varlen, m)?)?;
    Ok(())
}
