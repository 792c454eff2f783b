//! Serving kernels: attention over a paged key/value cache.

use numpy::PyUntypedArray;
use pyo3::prelude::*;
use riftco_kernels::attention::Heads;
use riftco_kernels::paged::{paged_attention as paged_kernel, PagedLayout, PagedSegment};

use crate::convert::{alloc, error, run, shape_of, slice};

type Array<'py> = Bound<'py, PyUntypedArray>;

/// Causal attention of packed ragged sequences over paged keys and values:
/// q `[N, H, Dh]`, pools `[P, page_size, Hkv, Dh]`, page table int64 `[S, max_pages]`;
/// sequence j owns query rows `q_starts[j]..+q_counts[j]` and its first
/// `kv_lengths[j]` positions, found through row j of the page table.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn paged_attention<'py>(
    py: Python<'py>,
    q: &Array<'py>,
    k_pages: &Array<'py>,
    v_pages: &Array<'py>,
    page_table: &Array<'py>,
    q_starts: Vec<usize>,
    q_counts: Vec<usize>,
    kv_lengths: Vec<usize>,
    scale: f32,
    window: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (sq, sp, st) = (shape_of(q), shape_of(k_pages), shape_of(page_table));
    if sq.len() != 3 || sp.len() != 4 || sp[3] != sq[2] || shape_of(v_pages) != sp {
        return Err(error(format!(
            "paged_attention: expected q [N, H, Dh] and pools [P, page_size, Hkv, Dh], found {sq:?}, {sp:?} and {:?}",
            shape_of(v_pages)
        )));
    }
    let n = q_starts.len();
    if q_counts.len() != n || kv_lengths.len() != n || st.len() != 2 || st[0] != n {
        return Err(error(format!(
            "paged_attention: {n} query starts, {} counts, {} lengths and a page table of shape {st:?}",
            q_counts.len(),
            kv_lengths.len()
        )));
    }
    let segs: Vec<PagedSegment> = (0..n)
        .map(|j| PagedSegment {
            q_row: q_starts[j],
            q_len: q_counts[j],
            kv_len: kv_lengths[j],
        })
        .collect();
    let h = Heads {
        heads: sq[1],
        kv_heads: sp[2],
        head_dim: sq[2],
        scale,
        causal: true,
        window,
    };
    let layout = PagedLayout {
        pages: sp[0],
        page_size: sp[1],
        max_pages: st[1],
    };
    let (qs, ks, vs, ts) = (
        slice::<f32>(q)?,
        slice::<f32>(k_pages)?,
        slice::<f32>(v_pages)?,
        slice::<i64>(page_table)?,
    );
    let (out, os) = alloc::<f32>(py, &sq);
    run(py, || paged_kernel(&h, &layout, &segs, ts, qs, ks, vs, os))?;
    Ok(out.into_any())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(paged_attention, m)?)?;
    Ok(())
}
