//! Attention capabilities: materialized and flash with their VJPs (API 1.2),
//! packed ragged sequences over contiguous (1.2) or paged (1.3) keys, and
//! in-place key/value-cache row writes.

use pyo3::prelude::*;
use riftco_pjrt::programs::{attention as att, layout, packed};

use crate::nn_ops::{three, wrap};
use crate::{error, out_of_range, run, run_checked, upload_i64, Device, Storage};

type Dev<'a, 'py> = &'a Bound<'py, Device>;
type St<'a, 'py> = &'a Bound<'py, Storage>;

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
    let order = packed::segments(
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
            packed::attention_segment(
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
    let order = packed::segments(
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
                packed::paged_segment(
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
        |i, _| packed::write_rows(&i[0], &i[1], &i[2]),
        out_of_range("write_rows", size),
    )?;
    dst.get().set_buffer(outs.remove(0));
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(flash_attention, m)?)?;
    m.add_function(wrap_pyfunction!(flash_attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(attention_varlen, m)?)?;
    m.add_function(wrap_pyfunction!(paged_attention, m)?)?;
    m.add_function(wrap_pyfunction!(write_rows, m)?)
}
