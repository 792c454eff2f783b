//! The fused optimizer update, which writes into existing numpy arrays.
//!
//! Parameters and moment pages are borrowed read-write through the numpy
//! crate's borrow tracking, so an array passed twice (a parameter that is
//! also its own gradient, a page shared by two parameters) is refused
//! instead of being read and written at once.

use numpy::{PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArray};
use pyo3::prelude::*;
use riftco_kernels::adam::{self, AdamHyper, AdamParam};

use crate::convert::{error, run};

type Array<'py> = Bound<'py, PyUntypedArray>;

fn as_f32<'a, 'py>(what: &str, a: &'a Array<'py>) -> PyResult<&'a Bound<'py, PyArrayDyn<f32>>> {
    a.cast::<PyArrayDyn<f32>>()
        .map_err(|_| error(format!("adam_update: {what} is not a float32 array")))
}

fn writable<'py>(what: String, a: &Array<'py>) -> PyResult<PyReadwriteArrayDyn<'py, f32>> {
    as_f32(&what, a)?.try_readwrite().map_err(|e| {
        error(format!(
            "adam_update: {what} cannot be written ({e}); is it passed twice?"
        ))
    })
}

fn readable<'py>(what: String, a: &Array<'py>) -> PyResult<PyReadonlyArrayDyn<'py, f32>> {
    as_f32(&what, a)?.try_readonly().map_err(|e| {
        error(format!(
            "adam_update: {what} cannot be read ({e}); is it also written?"
        ))
    })
}

fn not_contiguous(what: String) -> impl FnOnce(numpy::AsSliceError) -> PyErr {
    move |_| error(format!("adam_update: {what} is not C-contiguous"))
}

fn pages<'py>(
    what: &str,
    i: usize,
    xs: &[Array<'py>],
) -> PyResult<Vec<PyReadwriteArrayDyn<'py, f32>>> {
    xs.iter()
        .enumerate()
        .map(|(j, x)| writable(format!("{what} page {j} of parameter {i}"), x))
        .collect()
}

fn page_slices<'a>(
    what: &str,
    i: usize,
    xs: &'a mut [PyReadwriteArrayDyn<'_, f32>],
) -> PyResult<Vec<&'a mut [f32]>> {
    xs.iter_mut()
        .enumerate()
        .map(|(j, x)| {
            x.as_slice_mut()
                .map_err(not_contiguous(format!("{what} page {j} of parameter {i}")))
        })
        .collect()
}

/// Adam / AdamW over every parameter at once; see `riftco_kernels::adam`.
///
/// `lr`, `beta1`, `beta2`, `eps`, `weight_decay` and `step` hold one entry per
/// parameter. Returns None when the update was written, or the index of the
/// first parameter with a non-finite candidate (then nothing was written).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn adam_update<'py>(
    py: Python<'py>,
    params: Vec<Array<'py>>,
    grads: Vec<Array<'py>>,
    m: Vec<Vec<Array<'py>>>,
    v: Vec<Vec<Array<'py>>>,
    page_size: usize,
    lr: Vec<f64>,
    beta1: Vec<f64>,
    beta2: Vec<f64>,
    eps: Vec<f64>,
    weight_decay: Vec<f64>,
    decoupled: bool,
    step: Vec<u64>,
    grad_scale: f64,
) -> PyResult<Option<usize>> {
    let n = params.len();
    let counts = [
        grads.len(),
        m.len(),
        v.len(),
        lr.len(),
        beta1.len(),
        beta2.len(),
        eps.len(),
        weight_decay.len(),
        step.len(),
    ];
    if counts.iter().any(|&c| c != n) {
        return Err(error(format!(
            "adam_update: {n} parameters, but the gradients, moments, lr, beta1, beta2, eps, weight_decay and step lists have {counts:?} entries"
        )));
    }
    let mut p_guards = Vec::with_capacity(n);
    let mut g_guards = Vec::with_capacity(n);
    let mut m_guards = Vec::with_capacity(n);
    let mut v_guards = Vec::with_capacity(n);
    for i in 0..n {
        p_guards.push(writable(format!("parameter {i}"), &params[i])?);
        m_guards.push(pages("first-moment", i, &m[i])?);
        v_guards.push(pages("second-moment", i, &v[i])?);
    }
    for (i, g) in grads.iter().enumerate() {
        g_guards.push(readable(format!("gradient {i}"), g)?);
    }
    let mut views = Vec::with_capacity(n);
    let guards = p_guards
        .iter_mut()
        .zip(&g_guards)
        .zip(m_guards.iter_mut().zip(v_guards.iter_mut()));
    for (i, ((p, g), (ms, vs))) in guards.enumerate() {
        views.push(AdamParam {
            param: p
                .as_slice_mut()
                .map_err(not_contiguous(format!("parameter {i}")))?,
            grad: g
                .as_slice()
                .map_err(not_contiguous(format!("gradient {i}")))?,
            m: page_slices("first-moment", i, ms)?,
            v: page_slices("second-moment", i, vs)?,
            hyper: AdamHyper {
                lr: lr[i],
                beta1: beta1[i],
                beta2: beta2[i],
                eps: eps[i],
                weight_decay: weight_decay[i],
                step: step[i],
            },
        });
    }
    run(py, || {
        adam::adam_update(&mut views, page_size, decoupled, grad_scale)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(adam_update, m)?)?;
    Ok(())
}
