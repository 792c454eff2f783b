//! NF4 quantized weights (backend API 1.4).

use pyo3::prelude::*;
use riftco_pjrt::programs::quantized::{self as q, Packed};
use riftco_pjrt::programs::Input;

use crate::{run_one, upload_f32, Device, Storage};

type Dev<'a, 'py> = &'a Bound<'py, Device>;
type St<'a, 'py> = &'a Bound<'py, Storage>;
type OptSt<'a, 'py> = Option<&'a Bound<'py, Storage>>;

/// The packed operands as storages, with the decode constants of a
/// double-quantized weight uploaded.
fn packed_storages(
    py: Python<'_>,
    device: &Device,
    codes: St<'_, '_>,
    absmax: St<'_, '_>,
    group_range: OptSt<'_, '_>,
    offset: f64,
) -> PyResult<(Vec<Storage>, bool)> {
    let mut out = vec![
        codes.get().view(codes.get().shape().to_vec())?,
        absmax.get().view(absmax.get().shape().to_vec())?,
    ];
    if let Some(g) = group_range {
        out.push(g.get().view(g.get().shape().to_vec())?);
        out.push(upload_f32(py, device, &q::decode_constants(offset))?);
    }
    Ok((out, group_range.is_some()))
}

fn packed_at(i: &[Input], first: usize, double: bool) -> Packed<'_> {
    Packed {
        codes: &i[first],
        absmax: &i[first + 1],
        double: double.then(|| (&i[first + 2], &i[first + 3])),
    }
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nf4_dequantize(
    py: Python<'_>,
    device: Dev<'_, '_>,
    codes: St<'_, '_>,
    absmax: St<'_, '_>,
    group_range: OptSt<'_, '_>,
    offset: f64,
    w_shape: Vec<i64>,
    block_size: i64,
) -> PyResult<Storage> {
    let (packed, double) = packed_storages(py, device.get(), codes, absmax, group_range, offset)?;
    let inputs: Vec<&Storage> = packed.iter().collect();
    run_one(py, device.get(), &inputs, |i, _| {
        q::nf4_dequantize(&packed_at(i, 0, double), &w_shape, block_size)
    })
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nf4_linear(
    py: Python<'_>,
    device: Dev<'_, '_>,
    x: St<'_, '_>,
    codes: St<'_, '_>,
    absmax: St<'_, '_>,
    group_range: OptSt<'_, '_>,
    offset: f64,
    w_shape: Vec<i64>,
    block_size: i64,
    bias: OptSt<'_, '_>,
) -> PyResult<Storage> {
    let (packed, double) = packed_storages(py, device.get(), codes, absmax, group_range, offset)?;
    let mut inputs = vec![x.get()];
    inputs.extend(packed.iter());
    inputs.extend(bias.map(|b| b.get()));
    let has_bias = bias.is_some();
    run_one(py, device.get(), &inputs, |i, _| {
        let bias = has_bias.then(|| &i[i.len() - 1]);
        q::nf4_linear(&i[0], &packed_at(i, 1, double), &w_shape, block_size, bias)
    })
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nf4_linear_backward(
    py: Python<'_>,
    device: Dev<'_, '_>,
    dy: St<'_, '_>,
    codes: St<'_, '_>,
    absmax: St<'_, '_>,
    group_range: OptSt<'_, '_>,
    offset: f64,
    w_shape: Vec<i64>,
    block_size: i64,
) -> PyResult<Storage> {
    let (packed, double) = packed_storages(py, device.get(), codes, absmax, group_range, offset)?;
    let mut inputs = vec![dy.get()];
    inputs.extend(packed.iter());
    run_one(py, device.get(), &inputs, |i, _| {
        q::nf4_linear_backward(&i[0], &packed_at(i, 1, double), &w_shape, block_size)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nf4_dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(nf4_linear, m)?)?;
    m.add_function(wrap_pyfunction!(nf4_linear_backward, m)?)
}
