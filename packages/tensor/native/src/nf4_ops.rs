//! NF4 quantized weights: dequantization and the quantized linear (forward and
//! input gradient). A packed weight arrives as its code bytes, its block scales
//! (uint8 with a float32 range per group when double-quantized, else float32),
//! the scale offset, its shape and its block size.

use numpy::PyUntypedArray;
use pyo3::prelude::*;
use riftco_kernels::nf4::{self, Nf4Weight, Scales};

use crate::convert::{alloc, error, run, shape_of, slice};

type Array<'py> = Bound<'py, PyUntypedArray>;

fn weight<'a>(
    codes: &'a Array<'_>,
    absmax: &'a Array<'_>,
    group_range: Option<&'a Array<'_>>,
    offset: f32,
    rows: usize,
    cols: usize,
    block_size: usize,
) -> PyResult<Nf4Weight<'a>> {
    let scales = match group_range {
        Some(ranges) => Scales::Double {
            codes: slice::<u8>(absmax)?,
            ranges: slice::<f32>(ranges)?,
            offset,
        },
        None => Scales::Plain(slice::<f32>(absmax)?),
    };
    Ok(Nf4Weight {
        codes: slice::<u8>(codes)?,
        scales,
        rows,
        cols,
        block: block_size,
    })
}

/// Leading rows of `shape` when its last axis is `last`.
fn rows_before(op: &str, shape: &[usize], last: usize) -> PyResult<usize> {
    match shape.last() {
        Some(&d) if d == last => Ok(shape[..shape.len() - 1].iter().product()),
        _ => Err(error(format!(
            "{op}: expected an input [..., {last}], found {shape:?}"
        ))),
    }
}

fn with_last(shape: &[usize], last: usize) -> Vec<usize> {
    let mut out = shape.to_vec();
    *out.last_mut().expect("at least one axis") = last;
    out
}

/// The weight as float32 `[rows, cols]`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nf4_dequantize<'py>(
    py: Python<'py>,
    codes: &Array<'py>,
    absmax: &Array<'py>,
    group_range: Option<&Array<'py>>,
    offset: f32,
    rows: usize,
    cols: usize,
    block_size: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let w = weight(codes, absmax, group_range, offset, rows, cols, block_size)?;
    let (out, os) = alloc::<f32>(py, &[rows, cols]);
    run(py, || nf4::dequantize(&w, os))?;
    Ok(out.into_any())
}

/// `x [..., cols] @ dequant(W)^T (+ bias)` -> `[..., rows]`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nf4_linear<'py>(
    py: Python<'py>,
    x: &Array<'py>,
    codes: &Array<'py>,
    absmax: &Array<'py>,
    group_range: Option<&Array<'py>>,
    offset: f32,
    rows: usize,
    cols: usize,
    block_size: usize,
    bias: Option<&Array<'py>>,
) -> PyResult<Bound<'py, PyAny>> {
    let sx = shape_of(x);
    let m = rows_before("nf4_linear", &sx, cols)?;
    let w = weight(codes, absmax, group_range, offset, rows, cols, block_size)?;
    let (xs, b) = (slice::<f32>(x)?, bias.map(slice::<f32>).transpose()?);
    let (out, os) = alloc::<f32>(py, &with_last(&sx, rows));
    run(py, || nf4::linear(&w, xs, m, b, os))?;
    Ok(out.into_any())
}

/// `dy [..., rows] @ dequant(W)` -> `[..., cols]`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nf4_linear_backward<'py>(
    py: Python<'py>,
    dy: &Array<'py>,
    codes: &Array<'py>,
    absmax: &Array<'py>,
    group_range: Option<&Array<'py>>,
    offset: f32,
    rows: usize,
    cols: usize,
    block_size: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let sd = shape_of(dy);
    let m = rows_before("nf4_linear_backward", &sd, rows)?;
    let w = weight(codes, absmax, group_range, offset, rows, cols, block_size)?;
    let ds = slice::<f32>(dy)?;
    let (out, os) = alloc::<f32>(py, &with_last(&sd, cols));
    run(py, || nf4::linear_backward(&w, ds, m, os))?;
    Ok(out.into_any())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nf4_dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(nf4_linear, m)?)?;
    m.add_function(wrap_pyfunction!(nf4_linear_backward, m)?)?;
    Ok(())
}
