//! Weights in llama.cpp's block layouts (Q8_0, Q4_0, F16) for inference:
//! dequantization and the linear. A weight arrives as its raw bytes (uint8,
//! row after row as in a GGUF tensor), its format name and its shape.

use numpy::PyUntypedArray;
use pyo3::prelude::*;
use riftco_kernels::blockq::{self, BlockFormat, BlockWeight};

use crate::convert::{alloc, error, run, shape_of, slice};

type Array<'py> = Bound<'py, PyUntypedArray>;

fn weight<'a>(
    data: &'a Array<'_>,
    format: &str,
    rows: usize,
    cols: usize,
) -> PyResult<BlockWeight<'a>> {
    let format = BlockFormat::parse(format).map_err(|e| error(e.0))?;
    Ok(BlockWeight {
        format,
        data: slice::<u8>(data)?,
        rows,
        cols,
    })
}

/// The weight as float32 `[rows, cols]`.
#[pyfunction]
fn block_dequantize<'py>(
    py: Python<'py>,
    data: &Array<'py>,
    format: &str,
    rows: usize,
    cols: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let w = weight(data, format, rows, cols)?;
    let (out, os) = alloc::<f32>(py, &[rows, cols]);
    run(py, || blockq::dequantize(&w, os))?;
    Ok(out.into_any())
}

/// `x [..., cols] @ W^T (+ bias)` -> `[..., rows]`.
#[pyfunction]
#[pyo3(signature = (x, data, format, rows, cols, bias=None))]
fn block_linear<'py>(
    py: Python<'py>,
    x: &Array<'py>,
    data: &Array<'py>,
    format: &str,
    rows: usize,
    cols: usize,
    bias: Option<&Array<'py>>,
) -> PyResult<Bound<'py, PyAny>> {
    let sx = shape_of(x);
    let m = match sx.last() {
        Some(&d) if d == cols => sx[..sx.len() - 1].iter().product(),
        _ => {
            return Err(error(format!(
                "block_linear: expected an input [..., {cols}], found {sx:?}"
            )))
        }
    };
    let w = weight(data, format, rows, cols)?;
    let (xs, b) = (slice::<f32>(x)?, bias.map(slice::<f32>).transpose()?);
    let mut so = sx.clone();
    *so.last_mut().expect("at least one axis") = rows;
    let (out, os) = alloc::<f32>(py, &so);
    run(py, || blockq::linear(&w, xs, m, b, os))?;
    Ok(out.into_any())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(block_dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(block_linear, m)?)?;
    Ok(())
}
