//! The base capabilities (backend API 1.0): storage, layout, elementwise,
//! reductions, matmul, indexing and softmax.

use pyo3::prelude::*;
use riftco_pjrt::programs::{elementwise as ew, index, layout, linalg, reduce};
use riftco_pjrt::ElementType;

use crate::storage::{from_numpy, to_numpy};
use crate::{error, out_of_range, run_checked, run_one, Device, Storage};

type Dev<'a, 'py> = &'a Bound<'py, Device>;
type St<'a, 'py> = &'a Bound<'py, Storage>;

fn elem(name: &str) -> PyResult<ElementType> {
    ElementType::from_name(name)
        .ok_or_else(|| error(format!("dtype {name} is not supported on tpu")))
}

#[pyfunction]
fn reshape(x: St<'_, '_>, new_shape: Vec<i64>) -> PyResult<Storage> {
    x.get().view(new_shape)
}

/// Make `dst` hold `src`'s values: buffers never change, so this swaps in `src`'s.
#[pyfunction]
fn assign(dst: St<'_, '_>, src: St<'_, '_>) -> PyResult<()> {
    let (d, s) = (dst.get(), src.get());
    if d.shape() != s.shape() || d.elem() != s.elem() {
        return Err(error(format!(
            "assign: {:?} {} from {:?} {}",
            d.shape(),
            d.elem().name(),
            s.shape(),
            s.elem().name()
        )));
    }
    d.set_buffer(s.buffer());
    Ok(())
}

#[pyfunction]
fn astype(py: Python<'_>, device: Dev<'_, '_>, x: St<'_, '_>, dtype: &str) -> PyResult<Storage> {
    let dst = elem(dtype)?;
    run_one(py, device.get(), &[x.get()], |i, _| ew::astype(&i[0], dst))
}

#[pyfunction]
fn copy_strided(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    out_shape: Vec<i64>,
    strides: Vec<i64>,
    offset: i64,
) -> PyResult<Storage> {
    run_one(py, device.get(), &[x.get()], |i, _| {
        layout::copy_strided(&i[0], &out_shape, &strides, offset)
    })
}

#[pyfunction]
fn concat(
    py: Python<'_>,
    device: Dev<'_, '_>,
    xs: Vec<Bound<'_, Storage>>,
    axis: usize,
) -> PyResult<Storage> {
    let refs: Vec<&Storage> = xs.iter().map(|x| x.get()).collect();
    run_one(py, device.get(), &refs, |i, _| layout::concat(i, axis))
}

#[pyfunction]
fn unary(py: Python<'_>, device: Dev<'_, '_>, op: &str, x: St<'_, '_>) -> PyResult<Storage> {
    run_one(py, device.get(), &[x.get()], |i, _| ew::unary(op, &i[0]))
}

#[pyfunction]
fn binary(
    py: Python<'_>,
    device: Dev<'_, '_>,
    op: &str,
    a: St<'_, '_>,
    b: St<'_, '_>,
    out_shape: Vec<i64>,
) -> PyResult<Storage> {
    run_one(py, device.get(), &[a.get(), b.get()], |i, _| {
        ew::binary(op, &i[0], &i[1], &out_shape)
    })
}

#[pyfunction]
fn compare(
    py: Python<'_>,
    device: Dev<'_, '_>,
    op: &str,
    a: St<'_, '_>,
    b: St<'_, '_>,
    out_shape: Vec<i64>,
) -> PyResult<Storage> {
    run_one(py, device.get(), &[a.get(), b.get()], |i, _| {
        ew::compare(op, &i[0], &i[1], &out_shape)
    })
}

#[pyfunction]
fn select(
    py: Python<'_>,
    device: Dev<'_, '_>,
    cond: St<'_, '_>,
    a: St<'_, '_>,
    b: St<'_, '_>,
    out_shape: Vec<i64>,
) -> PyResult<Storage> {
    run_one(py, device.get(), &[cond.get(), a.get(), b.get()], |i, _| {
        ew::select(&i[0], &i[1], &i[2], &out_shape)
    })
}

#[pyfunction]
#[pyo3(name = "reduce")]
fn reduce_op(
    py: Python<'_>,
    device: Dev<'_, '_>,
    op: &str,
    x: St<'_, '_>,
    axis: usize,
) -> PyResult<Storage> {
    run_one(py, device.get(), &[x.get()], |i, t| {
        reduce::reduce(op, &i[0], axis, t)
    })
}

#[pyfunction]
fn argmax(py: Python<'_>, device: Dev<'_, '_>, x: St<'_, '_>, axis: usize) -> PyResult<Storage> {
    run_one(py, device.get(), &[x.get()], |i, _| {
        reduce::argmax(&i[0], axis)
    })
}

#[pyfunction]
fn softmax(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    causal: bool,
    log: bool,
) -> PyResult<Storage> {
    run_one(py, device.get(), &[x.get()], |i, _| {
        reduce::softmax(&i[0], causal, log)
    })
}

#[pyfunction]
fn matmul(
    py: Python<'_>,
    device: Dev<'_, '_>,
    a: St<'_, '_>,
    b: St<'_, '_>,
    transpose_a: bool,
    transpose_b: bool,
) -> PyResult<Storage> {
    run_one(py, device.get(), &[a.get(), b.get()], |i, _| {
        linalg::matmul(&i[0], &i[1], transpose_a, transpose_b)
    })
}

/// Run an indexing program; raise if its check found an index out of range.
fn checked(
    py: Python<'_>,
    device: &Device,
    op: &str,
    size: i64,
    inputs: &[&Storage],
    make: impl FnOnce(&[riftco_pjrt::programs::Input]) -> riftco_pjrt::Result<riftco_pjrt::Program>
        + Send,
) -> PyResult<Storage> {
    let mut outs = run_checked(py, device, inputs, |i, _| make(i), out_of_range(op, size))?;
    Ok(Storage::new(outs.remove(0)))
}

fn axis_size(x: &Storage, axis: usize) -> i64 {
    x.shape().get(axis).copied().unwrap_or(0)
}

#[pyfunction]
fn index_select(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    axis: usize,
    indices: St<'_, '_>,
) -> PyResult<Storage> {
    let n = axis_size(x.get(), axis);
    checked(
        py,
        device.get(),
        "index_select",
        n,
        &[x.get(), indices.get()],
        |i| index::index_select(&i[0], axis, &i[1]),
    )
}

#[pyfunction]
fn index_add(
    py: Python<'_>,
    device: Dev<'_, '_>,
    base: St<'_, '_>,
    axis: usize,
    indices: St<'_, '_>,
    src: St<'_, '_>,
) -> PyResult<Storage> {
    let n = axis_size(base.get(), axis);
    checked(
        py,
        device.get(),
        "index_add",
        n,
        &[base.get(), indices.get(), src.get()],
        |i| index::index_add(&i[0], axis, &i[1], &i[2]),
    )
}

#[pyfunction]
fn gather(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    axis: usize,
    indices: St<'_, '_>,
) -> PyResult<Storage> {
    let n = axis_size(x.get(), axis);
    checked(
        py,
        device.get(),
        "gather",
        n,
        &[x.get(), indices.get()],
        |i| index::gather(&i[0], axis, &i[1]),
    )
}

#[pyfunction]
fn scatter_add(
    py: Python<'_>,
    device: Dev<'_, '_>,
    base: St<'_, '_>,
    axis: usize,
    indices: St<'_, '_>,
    src: St<'_, '_>,
) -> PyResult<Storage> {
    let n = axis_size(base.get(), axis);
    checked(
        py,
        device.get(),
        "scatter_add",
        n,
        &[base.get(), indices.get(), src.get()],
        |i| index::scatter_add(&i[0], axis, &i[1], &i[2]),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(from_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(to_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(reshape, m)?)?;
    m.add_function(wrap_pyfunction!(assign, m)?)?;
    m.add_function(wrap_pyfunction!(astype, m)?)?;
    m.add_function(wrap_pyfunction!(copy_strided, m)?)?;
    m.add_function(wrap_pyfunction!(concat, m)?)?;
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(binary, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(select, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_op, m)?)?;
    m.add_function(wrap_pyfunction!(argmax, m)?)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(index_select, m)?)?;
    m.add_function(wrap_pyfunction!(index_add, m)?)?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_add, m)?)
}
