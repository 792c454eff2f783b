//! The `#[pyfunction]`s of `_native`, one per kernel family.

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use riftco_kernels::binary::{self as bin, Arith, BinaryOp, CompareOp};
use riftco_kernels::matmul::{matmul_bias_f32, MatmulSpec};
use riftco_kernels::reduce::{self as red, ReduceOp};
use riftco_kernels::softmax::{softmax_f32, Causal};
use riftco_kernels::strided::Walk;
use riftco_kernels::unary::{self as una, UnaryOp};
use riftco_kernels::{bf16, index, layout, pool, KernelError};

use crate::convert::{
    alloc, broadcast_strides, error, kind, run, shape_of, slice, split_axis, Kind,
};

type Array<'py> = Bound<'py, PyUntypedArray>;
type Out<'py> = PyResult<Bound<'py, PyAny>>;

/// Bind `$T` to the Rust element type of `$kind` and evaluate `$body`.
macro_rules! for_each_kind {
    ($kind:expr, $T:ident => $body:expr) => {
        match $kind {
            Kind::F32 => {
                type $T = f32;
                $body
            }
            Kind::I64 => {
                type $T = i64;
                $body
            }
            Kind::Bool => {
                type $T = bool;
                $body
            }
            Kind::U8 => {
                type $T = u8;
                $body
            }
            Kind::U16 => {
                type $T = u16;
                $body
            }
        }
    };
}

fn kerr(e: KernelError) -> PyErr {
    error(e.0)
}

fn same_kind(op: &str, arrays: &[&Array<'_>]) -> PyResult<Kind> {
    let k = kind(arrays[0])?;
    for a in &arrays[1..] {
        if kind(a)? != k {
            return Err(error(format!("{op}: operands have different dtypes")));
        }
    }
    Ok(k)
}

#[pyfunction]
fn unary<'py>(py: Python<'py>, op: &str, x: &Array<'py>) -> Out<'py> {
    let shape = shape_of(x);
    match kind(x)? {
        Kind::Bool if op == "logical_not" => {
            let xs = slice::<bool>(x)?;
            let (arr, out) = alloc::<bool>(py, &shape);
            run(py, || una::logical_not(xs, out))?;
            Ok(arr.into_any())
        }
        Kind::F32 => {
            let op =
                UnaryOp::from_name(op).ok_or_else(|| error(format!("unknown unary op {op:?}")))?;
            let xs = slice::<f32>(x)?;
            let (arr, out) = alloc::<f32>(py, &shape);
            run(py, || una::unary_f32(op, xs, out))?;
            Ok(arr.into_any())
        }
        Kind::I64 => {
            let op =
                UnaryOp::from_name(op).ok_or_else(|| error(format!("unknown unary op {op:?}")))?;
            let xs = slice::<i64>(x)?;
            let (arr, out) = alloc::<i64>(py, &shape);
            run(py, || una::unary_i64(op, xs, out))?;
            Ok(arr.into_any())
        }
        k => Err(error(format!("unary {op} is not defined for {k:?}"))),
    }
}

fn walk2(a: &Array<'_>, b: &Array<'_>, out_shape: &[usize]) -> PyResult<Walk<2>> {
    let sa = broadcast_strides(&shape_of(a), out_shape)?;
    let sb = broadcast_strides(&shape_of(b), out_shape)?;
    Walk::new(out_shape, [&sa, &sb], [0, 0], [a.len(), b.len()]).map_err(kerr)
}

fn binary_typed<'py, T: Arith + numpy::Element>(
    py: Python<'py>,
    op: BinaryOp,
    a: &Array<'py>,
    b: &Array<'py>,
    shape: &[usize],
) -> Out<'py> {
    let walk = walk2(a, b, shape)?;
    let (xa, xb) = (slice::<T>(a)?, slice::<T>(b)?);
    let (arr, out) = alloc::<T>(py, shape);
    run(py, || bin::binary(op, xa, xb, &walk, out))?;
    Ok(arr.into_any())
}

#[pyfunction]
fn binary<'py>(
    py: Python<'py>,
    op: &str,
    a: &Array<'py>,
    b: &Array<'py>,
    shape: Vec<usize>,
) -> Out<'py> {
    let bop = BinaryOp::from_name(op).ok_or_else(|| error(format!("unknown binary op {op:?}")))?;
    match same_kind(op, &[a, b])? {
        Kind::F32 => binary_typed::<f32>(py, bop, a, b, &shape),
        Kind::I64 => binary_typed::<i64>(py, bop, a, b, &shape),
        k => Err(error(format!("{op} is not defined for {k:?}"))),
    }
}

#[pyfunction]
fn compare<'py>(
    py: Python<'py>,
    op: &str,
    a: &Array<'py>,
    b: &Array<'py>,
    shape: Vec<usize>,
) -> Out<'py> {
    let cop =
        CompareOp::from_name(op).ok_or_else(|| error(format!("unknown comparison {op:?}")))?;
    let walk = walk2(a, b, &shape)?;
    let (arr, out) = alloc::<bool>(py, &shape);
    match same_kind(op, &[a, b])? {
        Kind::F32 => {
            let (xa, xb) = (slice::<f32>(a)?, slice::<f32>(b)?);
            run(py, || bin::compare_op(cop, xa, xb, &walk, out))?
        }
        Kind::I64 => {
            let (xa, xb) = (slice::<i64>(a)?, slice::<i64>(b)?);
            run(py, || bin::compare_op(cop, xa, xb, &walk, out))?
        }
        Kind::Bool => {
            let (xa, xb) = (slice::<bool>(a)?, slice::<bool>(b)?);
            run(py, || bin::compare_op(cop, xa, xb, &walk, out))?
        }
        k => return Err(error(format!("{op} is not defined for {k:?}"))),
    }
    Ok(arr.into_any())
}

#[pyfunction]
#[pyo3(name = "where")]
fn select<'py>(
    py: Python<'py>,
    cond: &Array<'py>,
    a: &Array<'py>,
    b: &Array<'py>,
    shape: Vec<usize>,
) -> Out<'py> {
    let sc = broadcast_strides(&shape_of(cond), &shape)?;
    let sa = broadcast_strides(&shape_of(a), &shape)?;
    let sb = broadcast_strides(&shape_of(b), &shape)?;
    let walk = Walk::new(
        &shape,
        [&sc, &sa, &sb],
        [0, 0, 0],
        [cond.len(), a.len(), b.len()],
    )
    .map_err(kerr)?;
    let c = slice::<bool>(cond)?;
    for_each_kind!(same_kind("where", &[a, b])?, T => {
        let (xa, xb) = (slice::<T>(a)?, slice::<T>(b)?);
        let (arr, out) = alloc::<T>(py, &shape);
        run(py, || bin::select(c, xa, xb, &walk, out))?;
        Ok(arr.into_any())
    })
}

/// Contiguous copy of the view `x.flat[offset + sum(i_d * strides[d])]` of `shape`.
#[pyfunction]
fn copy_strided<'py>(
    py: Python<'py>,
    x: &Array<'py>,
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
) -> Out<'py> {
    let walk = Walk::new(&shape, [&strides], [offset], [x.len()]).map_err(kerr)?;
    for_each_kind!(kind(x)?, T => {
        let xs = slice::<T>(x)?;
        let (arr, out) = alloc::<T>(py, &shape);
        run(py, || layout::copy_strided(xs, &walk, out))?;
        Ok(arr.into_any())
    })
}

#[pyfunction]
fn concat<'py>(py: Python<'py>, xs: Vec<Array<'py>>, axis: usize) -> Out<'py> {
    let first = xs.first().ok_or_else(|| error("concat of no arrays"))?;
    let refs: Vec<&Array<'py>> = xs.iter().collect();
    let k = same_kind("concat", &refs)?;
    let mut shape = shape_of(first);
    let (outer, _, inner) = split_axis(&shape, axis);
    let mut inners = Vec::with_capacity(xs.len());
    for x in &xs {
        let s = shape_of(x);
        inners.push(s[axis] * inner);
    }
    shape[axis] = xs.iter().map(|x| x.shape()[axis]).sum();
    for_each_kind!(k, T => {
        let inputs: Vec<&[T]> = xs.iter().map(|x| slice::<T>(x)).collect::<PyResult<_>>()?;
        let (arr, out) = alloc::<T>(py, &shape);
        run(py, || layout::concat(&inputs, &inners, outer, out))?;
        Ok(arr.into_any())
    })
}

#[pyfunction]
fn reduce<'py>(py: Python<'py>, op: &str, x: &Array<'py>, axis: usize) -> Out<'py> {
    let rop = ReduceOp::from_name(op).ok_or_else(|| error(format!("unknown reduction {op:?}")))?;
    let mut shape = shape_of(x);
    let (outer, n, inner) = split_axis(&shape, axis);
    shape.remove(axis);
    match kind(x)? {
        Kind::F32 => {
            let xs = slice::<f32>(x)?;
            let (arr, out) = alloc::<f32>(py, &shape);
            run(py, || red::reduce_f32(rop, xs, outer, n, inner, out))?;
            Ok(arr.into_any())
        }
        Kind::I64 => {
            let xs = slice::<i64>(x)?;
            let (arr, out) = alloc::<i64>(py, &shape);
            run(py, || red::reduce_i64(rop, xs, outer, n, inner, out))?;
            Ok(arr.into_any())
        }
        k => Err(error(format!("{op} is not defined for {k:?}"))),
    }
}

#[pyfunction]
fn argmax<'py>(py: Python<'py>, x: &Array<'py>, axis: usize) -> Out<'py> {
    let mut shape = shape_of(x);
    let (outer, n, inner) = split_axis(&shape, axis);
    shape.remove(axis);
    let (arr, out) = alloc::<i64>(py, &shape);
    match kind(x)? {
        Kind::F32 => {
            let xs = slice::<f32>(x)?;
            run(py, || red::argmax(xs, outer, n, inner, out))?
        }
        Kind::I64 => {
            let xs = slice::<i64>(x)?;
            run(py, || red::argmax(xs, outer, n, inner, out))?
        }
        k => return Err(error(format!("argmax is not defined for {k:?}"))),
    }
    Ok(arr.into_any())
}

/// Offsets (in elements) of each broadcast batch entry of an operand.
fn batch_offsets(batch: &[usize], out_batch: &[usize], matrix: usize) -> PyResult<Vec<usize>> {
    let strides = broadcast_strides(batch, out_batch)?;
    let count: usize = out_batch.iter().product();
    let mut offsets = Vec::with_capacity(count);
    let mut index = vec![0usize; out_batch.len()];
    for _ in 0..count {
        offsets.push(
            index
                .iter()
                .zip(&strides)
                .map(|(i, s)| i * s)
                .sum::<usize>()
                * matrix,
        );
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < out_batch[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(offsets)
}

fn broadcast_shapes(a: &[usize], b: &[usize]) -> PyResult<Vec<usize>> {
    let rank = a.len().max(b.len());
    let pad = |s: &[usize], d: usize| {
        if d + s.len() >= rank {
            s[d + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|d| match (pad(a, d), pad(b, d)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(error(format!(
                "batch dims {a:?} and {b:?} do not broadcast"
            ))),
        })
        .collect()
}

#[pyfunction]
#[pyo3(signature = (a, b, transpose_a, transpose_b, bias=None))]
fn matmul<'py>(
    py: Python<'py>,
    a: &Array<'py>,
    b: &Array<'py>,
    transpose_a: bool,
    transpose_b: bool,
    bias: Option<&Array<'py>>,
) -> Out<'py> {
    let (sa, sb) = (shape_of(a), shape_of(b));
    if sa.len() < 2 || sb.len() < 2 {
        return Err(error("matmul operands need at least two dims"));
    }
    let (ra, ca) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (rb, cb) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    let (m, k) = if transpose_a { (ca, ra) } else { (ra, ca) };
    let (k2, n) = if transpose_b { (cb, rb) } else { (rb, cb) };
    if k != k2 {
        return Err(error(format!("matmul inner dims disagree: {k} vs {k2}")));
    }
    let batch = broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
    let a_offsets = batch_offsets(&sa[..sa.len() - 2], &batch, m * k)?;
    let b_offsets = batch_offsets(&sb[..sb.len() - 2], &batch, k * n)?;
    let mut shape = batch;
    shape.extend([m, n]);
    let bias = match bias {
        Some(v) if shape_of(v) == [n] => Some(slice::<f32>(v)?),
        Some(v) => {
            return Err(error(format!(
                "matmul: a float32 bias [{n}] for {n} output columns, found {:?}",
                shape_of(v)
            )))
        }
        None => None,
    };
    let (arr, out) = alloc::<f32>(py, &shape);
    let spec = MatmulSpec {
        m,
        k,
        n,
        transpose_a,
        transpose_b,
        a_offsets: &a_offsets,
        b_offsets: &b_offsets,
    };
    match same_kind("matmul", &[a, b])? {
        Kind::F32 => {
            let (xa, xb) = (slice::<f32>(a)?, slice::<f32>(b)?);
            run(py, || matmul_bias_f32(&spec, xa, xb, bias, out))?
        }
        // bfloat16 bit patterns: float32 products and sums, a float32 result.
        Kind::U16 => {
            let (xa, xb) = (slice::<u16>(a)?, slice::<u16>(b)?);
            run(py, || bf16::matmul_bf16_bias(&spec, xa, xb, bias, out))?
        }
        k => return Err(error(format!("matmul is not defined for {k:?}"))),
    }
    Ok(arr.into_any())
}

#[pyfunction]
fn index_select<'py>(
    py: Python<'py>,
    x: &Array<'py>,
    axis: usize,
    indices: &Array<'py>,
) -> Out<'py> {
    let mut shape = shape_of(x);
    let (outer, n, inner) = split_axis(&shape, axis);
    let idx = slice::<i64>(indices)?;
    shape[axis] = idx.len();
    for_each_kind!(kind(x)?, T => {
        let xs = slice::<T>(x)?;
        let (arr, out) = alloc::<T>(py, &shape);
        run(py, || index::index_select(xs, outer, n, inner, idx, out))?;
        Ok(arr.into_any())
    })
}

fn copy_of<'py>(
    py: Python<'py>,
    base: &Array<'py>,
) -> PyResult<(Bound<'py, PyAny>, &'py mut [f32])> {
    let src = slice::<f32>(base)?;
    let (arr, out) = alloc::<f32>(py, &shape_of(base));
    out.copy_from_slice(src);
    Ok((arr.into_any(), out))
}

#[pyfunction]
fn index_add<'py>(
    py: Python<'py>,
    base: &Array<'py>,
    axis: usize,
    indices: &Array<'py>,
    src: &Array<'py>,
) -> Out<'py> {
    let (outer, n, inner) = split_axis(&shape_of(base), axis);
    let (idx, s) = (slice::<i64>(indices)?, slice::<f32>(src)?);
    let (arr, out) = copy_of(py, base)?;
    run(py, || index::index_add_f32(out, outer, n, inner, idx, s))?;
    Ok(arr)
}

#[pyfunction]
fn gather<'py>(py: Python<'py>, x: &Array<'py>, axis: usize, indices: &Array<'py>) -> Out<'py> {
    let (outer, n, inner) = split_axis(&shape_of(x), axis);
    let idx = slice::<i64>(indices)?;
    let shape = shape_of(indices);
    for_each_kind!(kind(x)?, T => {
        let xs = slice::<T>(x)?;
        let (arr, out) = alloc::<T>(py, &shape);
        run(py, || index::gather(xs, outer, n, inner, idx, out))?;
        Ok(arr.into_any())
    })
}

#[pyfunction]
fn scatter_add<'py>(
    py: Python<'py>,
    base: &Array<'py>,
    axis: usize,
    indices: &Array<'py>,
    src: &Array<'py>,
) -> Out<'py> {
    let (outer, n, inner) = split_axis(&shape_of(base), axis);
    let (idx, s) = (slice::<i64>(indices)?, slice::<f32>(src)?);
    let (arr, out) = copy_of(py, base)?;
    run(py, || index::scatter_add_f32(out, outer, n, inner, idx, s))?;
    Ok(arr)
}

#[pyfunction]
fn softmax<'py>(py: Python<'py>, x: &Array<'py>, causal: bool, log: bool) -> Out<'py> {
    let shape = shape_of(x);
    let n = *shape
        .last()
        .ok_or_else(|| error("softmax of a 0-d array"))?;
    let rows = x.len().checked_div(n).unwrap_or(0);
    let causal = if causal {
        let queries = if shape.len() >= 2 {
            shape[shape.len() - 2]
        } else {
            1
        };
        Some(Causal { queries })
    } else {
        None
    };
    let xs = slice::<f32>(x)?;
    let (arr, out) = alloc::<f32>(py, &shape);
    run(py, || softmax_f32(xs, rows, n, causal, log, out))?;
    Ok(arr.into_any())
}

/// float32 to bfloat16 bit patterns (nearest, ties to even; NaN stays NaN).
#[pyfunction]
fn bf16_from_f32<'py>(py: Python<'py>, x: &Array<'py>) -> Out<'py> {
    let xs = slice::<f32>(x)?;
    let (arr, out) = alloc::<u16>(py, &shape_of(x));
    run(py, || bf16::narrow(xs, out))?;
    Ok(arr.into_any())
}

/// bfloat16 bit patterns to float32 (exact).
#[pyfunction]
fn bf16_to_f32<'py>(py: Python<'py>, x: &Array<'py>) -> Out<'py> {
    let xs = slice::<u16>(x)?;
    let (arr, out) = alloc::<f32>(py, &shape_of(x));
    run(py, || bf16::widen(xs, out))?;
    Ok(arr.into_any())
}

#[pyfunction]
fn set_num_threads(threads: usize) {
    pool::set_num_threads(threads);
}

#[pyfunction]
fn num_threads() -> usize {
    pool::num_threads()
}

/// The vector level kernels use now (`portable`, `avx2`, `avx512`, `avx512-vnni`).
#[pyfunction]
fn cpu_isa() -> &'static str {
    riftco_kernels::isa::current().name()
}

/// The widest vector level this CPU has.
#[pyfunction]
fn cpu_isa_detected() -> &'static str {
    riftco_kernels::isa::detected().name()
}

/// Cap the vector level at `name` (lowered to what the CPU has); returns the level in use.
#[pyfunction]
fn set_cpu_isa(name: &str) -> PyResult<&'static str> {
    let isa = riftco_kernels::isa::Isa::parse(name).ok_or_else(|| {
        let names: Vec<&str> = riftco_kernels::isa::Isa::ALL
            .iter()
            .map(|i| i.name())
            .collect();
        pyo3::exceptions::PyValueError::new_err(format!(
            "set_cpu_isa: expected one of {}, found {name:?}",
            names.join(", ")
        ))
    })?;
    Ok(riftco_kernels::isa::set_cap(isa).name())
}

/// Why `RIFTCO_CPU_ISA` was ignored, if it was.
#[pyfunction]
fn cpu_isa_env_error() -> Option<String> {
    riftco_kernels::isa::env_error()
}

/// Panic inside a kernel call, to prove panics reach Python as KernelError.
#[pyfunction]
fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    run(py, || -> Result<(), KernelError> {
        panic!("deliberate panic for the test suite")
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(binary, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(select, m)?)?;
    m.add_function(wrap_pyfunction!(copy_strided, m)?)?;
    m.add_function(wrap_pyfunction!(concat, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(argmax, m)?)?;
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(index_select, m)?)?;
    m.add_function(wrap_pyfunction!(index_add, m)?)?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_add, m)?)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(bf16_from_f32, m)?)?;
    m.add_function(wrap_pyfunction!(bf16_to_f32, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_isa, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_isa_detected, m)?)?;
    m.add_function(wrap_pyfunction!(set_cpu_isa, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_isa_env_error, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    Ok(())
}
