//! The fused normalization, activation, loss and rotary capabilities (backend API 1.2).

use pyo3::prelude::*;
use riftco_pjrt::programs::{elementwise as ew, nn};

use crate::{run, run_checked, Device, Storage};

type Dev<'a, 'py> = &'a Bound<'py, Device>;
type St<'a, 'py> = &'a Bound<'py, Storage>;
type OptSt<'a, 'py> = Option<&'a Bound<'py, Storage>>;

pub(crate) fn wrap(buffers: Vec<std::sync::Arc<riftco_pjrt::Buffer>>) -> Vec<Storage> {
    buffers.into_iter().map(Storage::new).collect()
}

pub(crate) fn three(mut v: Vec<Storage>) -> (Storage, Storage, Storage) {
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(activation_backward, m)?)?;
    m.add_function(wrap_pyfunction!(cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(cross_entropy_backward, m)?)?;
    m.add_function(wrap_pyfunction!(rotary, m)?)
}
