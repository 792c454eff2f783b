//! The fused Adam / AdamW update (backend API 1.1), all-or-nothing.

use std::sync::Arc;

use pyo3::prelude::*;
use riftco_pjrt::programs::optim::{self as opt, page_lengths, AdamScalars, PAGES_PER_PROGRAM};
use riftco_pjrt::Buffer;

use crate::storage::read_bools;
use crate::{error, run, upload_f32, upload_i64, Device, Storage};

type Pages<'py> = Vec<Vec<Bound<'py, Storage>>>;

/// A parameter's index with its new value and new m and v pages.
type Candidate = (usize, Arc<Buffer>, Vec<Arc<Buffer>>, Vec<Arc<Buffer>>);

/// One flat vector from a moment's pages (concatenated eight at a time).
fn pack(py: Python<'_>, device: &Device, pages: &[&Storage]) -> PyResult<Storage> {
    let mut level: Vec<Storage> = pages.iter().map(|p| Storage::new(p.buffer())).collect();
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(PAGES_PER_PROGRAM));
        for chunk in level.chunks(PAGES_PER_PROGRAM) {
            if chunk.len() == 1 {
                next.push(Storage::new(chunk[0].buffer()));
                continue;
            }
            let refs: Vec<&Storage> = chunk.iter().collect();
            let mut outs = run(py, device, &refs, |i, _| opt::pack(i))?;
            next.push(Storage::new(outs.remove(0)));
        }
        level = next;
    }
    Ok(level.remove(0))
}

/// The pages of `lengths` cut from a flat vector.
fn unpack(
    py: Python<'_>,
    device: &Device,
    flat: Arc<Buffer>,
    lengths: &[i64],
) -> PyResult<Vec<Arc<Buffer>>> {
    if lengths.len() == 1 {
        return Ok(vec![flat]);
    }
    let flat = Storage::new(flat);
    if lengths.len() <= PAGES_PER_PROGRAM {
        return run(py, device, &[&flat], |i, _| opt::unpack(&i[0], lengths));
    }
    let mut pages = Vec::with_capacity(lengths.len());
    let mut offset = 0;
    for chunk in lengths.chunks(PAGES_PER_PROGRAM) {
        let at = upload_i64(py, device, &[offset])?;
        pages.extend(run(py, device, &[&flat, &at], |i, _| {
            opt::pages_at(&i[0], &i[1], chunk)
        })?);
        offset += chunk.iter().sum::<i64>();
    }
    Ok(pages)
}

/// One step over every parameter. Candidates are computed for all of them
/// first; they replace the parameters and moments only when all are finite,
/// otherwise nothing changes and the index of the first bad parameter is returned.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn adam_update<'py>(
    py: Python<'py>,
    device: &Bound<'py, Device>,
    params: Vec<Bound<'py, Storage>>,
    grads: Vec<Bound<'py, Storage>>,
    m: Pages<'py>,
    v: Pages<'py>,
    sizes: Vec<i64>,
    page_size: i64,
    lr: Vec<f64>,
    beta1: Vec<f64>,
    beta2: Vec<f64>,
    eps: Vec<f64>,
    weight_decay: Vec<f64>,
    decoupled: bool,
    step: Vec<i64>,
    grad_scale: f64,
) -> PyResult<Option<usize>> {
    let n = params.len();
    let lists = [
        grads.len(),
        m.len(),
        v.len(),
        sizes.len(),
        lr.len(),
        beta1.len(),
        beta2.len(),
    ];
    let more = [eps.len(), weight_decay.len(), step.len()];
    if lists.iter().chain(&more).any(|&len| len != n) {
        return Err(error(format!(
            "adam_update: every list needs {n} entries (one per parameter)"
        )));
    }
    if page_size < 1 {
        return Err(error(format!(
            "adam_update: page_size {page_size} must be positive"
        )));
    }
    let dev = device.get();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut flags = Vec::with_capacity(n);
    for i in 0..n {
        let (p, g) = (params[i].get(), grads[i].get());
        let count: i64 = p.shape().iter().product();
        let grad_count: i64 = g.shape().iter().product();
        let lengths = page_lengths(sizes[i], page_size);
        let got = |pages: &[Bound<'py, Storage>]| -> Vec<i64> {
            pages
                .iter()
                .map(|x| x.get().shape().iter().product())
                .collect()
        };
        if count != sizes[i]
            || grad_count != sizes[i]
            || got(&m[i]) != lengths
            || got(&v[i]) != lengths
            || step[i] < 1
        {
            return Err(error(format!(
                "adam_update: parameter {i} of {count} elements (size {}), gradient of {grad_count}, \
                 pages {:?} and {:?} (expected {lengths:?}), step {}",
                sizes[i],
                got(&m[i]),
                got(&v[i]),
                step[i]
            )));
        }
        if sizes[i] == 0 {
            continue;
        }
        let scalars = AdamScalars::new(
            lr[i],
            beta1[i],
            beta2[i],
            eps[i],
            weight_decay[i],
            step[i],
            grad_scale,
        );
        let decay = scalars.weight_decay != 0.0;
        let scalars = upload_f32(py, dev, &scalars.to_vec())?;
        let m_pages: Vec<&Storage> = m[i].iter().map(|x| x.get()).collect();
        let v_pages: Vec<&Storage> = v[i].iter().map(|x| x.get()).collect();
        let m_flat = pack(py, dev, &m_pages)?;
        let v_flat = pack(py, dev, &v_pages)?;
        let mut outs = run(py, dev, &[p, g, &m_flat, &v_flat, &scalars], |inp, _| {
            opt::adam_update(
                &inp[0], &inp[1], &inp[2], &inp[3], &inp[4], decay, decoupled,
            )
        })?;
        flags.push((i, outs.pop().unwrap()));
        let v_new = unpack(py, dev, outs.pop().unwrap(), &lengths)?;
        let m_new = unpack(py, dev, outs.pop().unwrap(), &lengths)?;
        candidates.push((i, outs.pop().unwrap(), m_new, v_new));
    }
    let finite = read_bools(py, flags.iter().map(|(_, f)| f.clone()).collect())?;
    if let Some(pos) = finite.iter().position(|ok| !ok) {
        return Ok(Some(flags[pos].0));
    }
    for (i, p_new, m_new, v_new) in candidates {
        params[i].get().set_buffer(p_new);
        for (page, buffer) in m[i].iter().zip(m_new).chain(v[i].iter().zip(v_new)) {
            page.get().set_buffer(buffer);
        }
    }
    Ok(None)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(adam_update, m)?)
}
