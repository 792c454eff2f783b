//! The fused neural-network capabilities (backend API 1.2 and 1.3).

use pyo3::prelude::*;
use riftco_pjrt::programs::{attention as att, elementwise as ew, layout, nn};

use crate::{error, out_of_range, run, run_checked, upload_i64, Device, Storage};

type Dev<'a, 'py> = &'a Bound<'py, Device>;
type St<'a, 'py> = &'a Bound<'py, Storage>;
type OptSt<'a, 'py> = Option<&'a Bound<'py, Storage>>;

fn wrap(buffers: Vec<std::sync::Arc<riftco_pjrt::Buffer>>) -> Vec<Storage> {
    buffers.into_iter().map(Storage::new).collect()
}

fn three(mut v: Vec<Storage>) -> (Storage, Storage, Storage) {
    let c = v.pop().unwrap();
    let b = v.pop().unwrap();
    (v.pop().unwrap(), b, c)
}

#[pyfunction]
fn layer_norm(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    weight: OptSt<'_, '_>,
    bias: OptSt<'_, '_>,
    eps: f64,
) -> PyResult<(Storage, Storage, Storage)> {
    let mut inputs = vec![x.get()];
    inputs.extend(weight.map(|w| w.get()));
    inputs.extend(bias.map(|b| b.get()));
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let outs = run(py, device.get(), &inputs, |i, t| {
        let w = has_w.then(|| &i[1]);
        let b = has_b.then(|| &i[if has_w { 2 } else { 1 }]);
        nn::layer_norm(&i[0], w, b, eps, t)
    })?;
    Ok(three(wrap(outs)))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn layer_norm_backward(
    py: Python<'_>,
    device: Dev<'_, '_>,
    dy: St<'_, '_>,
    x: St<'_, '_>,
    weight: OptSt<'_, '_>,
    mean: St<'_, '_>,
    rstd: St<'_, '_>,
    with_bias: bool,
) -> PyResult<(Storage, Option<Storage>, Option<Storage>)> {
    let mut inputs = vec![dy.get(), x.get(), mean.get(), rstd.get()];
    inputs.extend(weight.map(|w| w.get()));
    let has_w = weight.is_some();
    let outs = run(py, device.get(), &inputs, |i, t| {
        nn::layer_norm_backward(
            &i[0],
            &i[1],
            has_w.then(|| &i[4]),
            &i[2],
            &i[3],
            with_bias,
            t,
        )
    })?;
    let mut outs = wrap(outs).into_iter();
    let dx = outs.next().unwrap();
    let dw = if has_w { outs.next() } else { None };
    let db = if with_bias { outs.next() } else { None };
    Ok((dx, dw, db))
}

#[pyfunction]
fn rms_norm(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    weight: OptSt<'_, '_>,
    eps: f64,
) -> PyResult<(Storage, Storage)> {
    let mut inputs = vec![x.get()];
    inputs.extend(weight.map(|w| w.get()));
    let has_w = weight.is_some();
    let outs = run(py, device.get(), &inputs, |i, t| {
        nn::rms_norm(&i[0], has_w.then(|| &i[1]), eps, t)
    })?;
    let mut outs = wrap(outs).into_iter();
    Ok((outs.next().unwrap(), outs.next().unwrap()))
}

#[pyfunction]
fn rms_norm_backward(
    py: Python<'_>,
    device: Dev<'_, '_>,
    dy: St<'_, '_>,
    x: St<'_, '_>,
    weight: OptSt<'_, '_>,
    rstd: St<'_, '_>,
) -> PyResult<(Storage, Option<Storage>)> {
    let mut inputs = vec![dy.get(), x.get(), rstd.get()];
    inputs.extend(weight.map(|w| w.get()));
    let has_w = weight.is_some();
    let outs = run(py, device.get(), &inputs, |i, t| {
        nn::rms_norm_backward(&i[0], &i[1], has_w.then(|| &i[3]), &i[2], t)
    })?;
    let mut outs = wrap(outs).into_iter();
    Ok((outs.next().unwrap(), outs.next()))
}

#[pyfunction]
fn activation_backward(
    py: Python<'_>,
    device: Dev<'_, '_>,
    op: &str,
    x: St<'_, '_>,
    dy: St<'_, '_>,
) -> PyResult<Storage> {
    let outs = run(py, device.get(), &[x.get(), dy.get()], |i, _| {
        ew::activation_backward(op, &i[0], &i[1])
    })?;
    Ok(wrap(outs).remove(0))
}

fn classes_of(logits: &Storage) -> i64 {
    logits.shape().last().copied().unwrap_or(0)
}

fn bad_target(classes: i64) -> impl FnOnce(i64, i64) -> String {
    move |_, value| format!("cross_entropy: target {value} is out of range for {classes} classes")
}

#[pyfunction]
fn cross_entropy(
    py: Python<'_>,
    device: Dev<'_, '_>,
    logits: St<'_, '_>,
    targets: St<'_, '_>,
    ignore_index: i64,
) -> PyResult<(Storage, Storage)> {
    let classes = classes_of(logits.get());
    let outs = run_checked(
        py,
        device.get(),
        &[logits.get(), targets.get()],
        |i, t| nn::cross_entropy(&i[0], &i[1], ignore_index, t),
        bad_target(classes),
    )?;
    let mut outs = wrap(outs).into_iter();
    Ok((outs.next().unwrap(), outs.next().unwrap()))
}

#[pyfunction]
fn cross_entropy_backward(
    py: Python<'_>,
    device: Dev<'_, '_>,
    logits: St<'_, '_>,
    targets: St<'_, '_>,
    lse: St<'_, '_>,
    grad: St<'_, '_>,
    ignore_index: i64,
) -> PyResult<Storage> {
    let classes = classes_of(logits.get());
    let outs = run_checked(
        py,
        device.get(),
        &[logits.get(), targets.get(), lse.get(), grad.get()],
        |i, t| nn::cross_entropy_backward(&i[0], &i[1], &i[2], &i[3], ignore_index, t),
        bad_target(classes),
    )?;
    Ok(wrap(outs).remove(0))
}

#[pyfunction]
fn rotary(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    positions: St<'_, '_>,
    theta: f64,
    inverse: bool,
) -> PyResult<Storage> {
    let outs = run_checked(
        py,
        device.get(),
        &[x.get(), positions.get()],
        |i, t| nn::rotary(&i[0], &i[1], theta, inverse, t),
        |pos, value| format!("rotary: negative position {value} at index {pos}"),
    )?;
    Ok(wrap(outs).remove(0))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention(
    py: Python<'_>,
    device: Dev<'_, '_>,
    q: St<'_, '_>,
    k: St<'_, '_>,
    v: St<'_, '_>,
    scale: f64,
    causal: bool,
    window: i64,
) -> PyResult<(Storage, Storage)> {
    let outs = run(py, device.get(), &[q.get(), k.get(), v.get()], |i, _| {
        att::attention(&i[0], &i[1], &i[2], scale, causal, window)
    })?;
    let mut outs = wrap(outs).into_iter();
    Ok((outs.next().unwrap(), outs.next().unwrap()))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention_backward(
    py: Python<'_>,
    device: Dev<'_, '_>,
    dout: St<'_, '_>,
    q: St<'_, '_>,
    k: St<'_, '_>,
    v: St<'_, '_>,
    probs: St<'_, '_>,
    scale: f64,
) -> PyResult<(Storage, Storage, Storage)> {
    let outs = run(
        py,
        device.get(),
        &[dout.get(), q.get(), k.get(), v.get(), probs.get()],
        |i, _| att::attention_backward(&i[0], &i[1], &i[2], &i[3], &i[4], scale),
    )?;
    Ok(three(wrap(outs)))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn flash_attention(
    py: Python<'_>,
    device: Dev<'_, '_>,
    q: St<'_, '_>,
    k: St<'_, '_>,
    v: St<'_, '_>,
    scale: f64,
    causal: bool,
    window: i64,
) -> PyResult<(Storage, Storage, Storage)> {
    let outs = run(py, device.get(), &[q.get(), k.get(), v.get()], |i, _| {
        att::flash_attention(&i[0], &i[1], &i[2], scale, causal, window)
    })?;
    Ok(three(wrap(outs)))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn flash_attention_backward(
    py: Python<'_>,
    device: Dev<'_, '_>,
    dout: St<'_, '_>,
    q: St<'_, '_>,
    k: St<'_, '_>,
    v: St<'_, '_>,
    row_max: St<'_, '_>,
    row_sum: St<'_, '_>,
    scale: f64,
    causal: bool,
    window: i64,
) -> PyResult<(Storage, Storage, Storage)> {
    let inputs = [
        dout.get(),
        q.get(),
        k.get(),
        v.get(),
        row_max.get(),
        row_sum.get(),
    ];
    let outs = run(py, device.get(), &inputs, |i, _| {
        att::flash_attention_backward(
            &i[0], &i[1], &i[2], &i[3], &i[4], &i[5], scale, causal, window,
        )
    })?;
    Ok(three(wrap(outs)))
}

fn first_dim(x: &Storage) -> i64 {
    x.shape().first().copied().unwrap_or(0)
}

/// Concatenate per-sequence outputs along rows, `[0, H, Dh]` when there are none.
fn join_rows(
    py: Python<'_>,
    device: &Device,
    parts: Vec<Storage>,
    empty: &Storage,
) -> PyResult<Storage> {
    let mut level = parts;
    if level.is_empty() {
        let outs = run(py, device, &[empty], |i, _| {
            layout::copy_strided(&i[0], &i[0].shape, &[0; 3], 0)
        })?;
        return Ok(wrap(outs).remove(0));
    }
    while level.len() > 1 {
        let mut next = Vec::new();
        for chunk in level.chunks(JOIN_PER_PROGRAM) {
            let refs: Vec<&Storage> = chunk.iter().collect();
            let outs = run(py, device, &refs, |i, _| layout::concat(i, 0))?;
            next.extend(wrap(outs));
        }
        level = next;
    }
    Ok(level.remove(0))
}

/// How many per-sequence outputs one concatenation program joins.
const JOIN_PER_PROGRAM: usize = 16;

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention_varlen(
    py: Python<'_>,
    device: Dev<'_, '_>,
    q: St<'_, '_>,
    k: St<'_, '_>,
    v: St<'_, '_>,
    q_starts: Vec<i64>,
    q_counts: Vec<i64>,
    kv_starts: Vec<i64>,
    kv_lengths: Vec<i64>,
    scale: f64,
    window: i64,
) -> PyResult<Storage> {
    let dev = device.get();
    let (rows, keys) = (first_dim(q.get()), first_dim(k.get()));
    let order = att::segments(
        "attention_varlen",
        rows,
        keys,
        &q_starts,
        &q_counts,
        &kv_starts,
        &kv_lengths,
    )
    .map_err(crate::pjrt_error)?;
    let mut parts = Vec::with_capacity(order.len());
    for s in order.iter().filter(|s| s.q_count > 0) {
        let at = upload_i64(py, dev, &[s.q_start, s.kv_start])?;
        let outs = run(py, dev, &[q.get(), k.get(), v.get(), &at], |i, _| {
            att::attention_segment(
                &i[0],
                &i[1],
                &i[2],
                &i[3],
                s.q_count,
                s.kv_length,
                scale,
                window,
            )
        })?;
        parts.extend(wrap(outs));
    }
    join_rows(py, dev, parts, q.get())
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn paged_attention(
    py: Python<'_>,
    device: Dev<'_, '_>,
    q: St<'_, '_>,
    k_pages: St<'_, '_>,
    v_pages: St<'_, '_>,
    page_table: St<'_, '_>,
    q_starts: Vec<i64>,
    q_counts: Vec<i64>,
    kv_lengths: Vec<i64>,
    scale: f64,
    window: i64,
) -> PyResult<Storage> {
    let dev = device.get();
    let pages = k_pages.get().shape().to_vec();
    let table = page_table.get().shape().to_vec();
    if pages.len() != 4 || table.len() != 2 || table[0] != kv_lengths.len() as i64 {
        return Err(error(format!(
            "paged_attention: pages {pages:?} and page table {table:?} for {} sequences",
            kv_lengths.len()
        )));
    }
    for (j, &length) in kv_lengths.iter().enumerate() {
        let used = if pages[1] > 0 {
            (length + pages[1] - 1) / pages[1]
        } else {
            i64::MAX
        };
        if length < 0 || used > table[1] {
            return Err(error(format!(
                "paged_attention: sequence {j} needs {used} pages"
            )));
        }
    }
    // Each sequence's keys are its own; kv_start only orders the checks.
    let longest = kv_lengths.iter().copied().max().unwrap_or(0);
    let order = att::segments(
        "paged_attention",
        first_dim(q.get()),
        longest,
        &q_starts,
        &q_counts,
        &vec![0; kv_lengths.len()],
        &kv_lengths,
    )
    .map_err(crate::pjrt_error)?;
    let mut parts = Vec::with_capacity(order.len());
    for s in order.iter().filter(|s| s.q_count > 0) {
        let at = upload_i64(py, dev, &[s.q_start, s.index as i64])?;
        let inputs = [q.get(), k_pages.get(), v_pages.get(), page_table.get(), &at];
        let outs = run_checked(
            py,
            dev,
            &inputs,
            |i, _| {
                att::paged_segment(
                    &i[0],
                    &i[1],
                    &i[2],
                    &i[3],
                    &i[4],
                    s.q_count,
                    s.kv_length,
                    scale,
                    window,
                )
            },
            |_, value| {
                format!(
                    "paged_attention: page {value} is out of range for {} pages",
                    pages[0]
                )
            },
        )?;
        parts.extend(wrap(outs));
    }
    join_rows(py, dev, parts, q.get())
}

/// Overwrite rows of `dst` in place (a new buffer swapped into its cell).
#[pyfunction]
fn write_rows(
    py: Python<'_>,
    device: Dev<'_, '_>,
    dst: St<'_, '_>,
    rows: St<'_, '_>,
    src: St<'_, '_>,
) -> PyResult<()> {
    let size = first_dim(dst.get());
    let mut outs = run_checked(
        py,
        device.get(),
        &[dst.get(), rows.get(), src.get()],
        |i, _| att::write_rows(&i[0], &i[1], &i[2]),
        out_of_range("write_rows", size),
    )?;
    dst.get().set_buffer(outs.remove(0));
    Ok(())
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
    m.add_function(wrap_pyfunction!(paged_attention, m)?)?;
    m.add_function(wrap_pyfunction!(write_rows, m)?)
}
