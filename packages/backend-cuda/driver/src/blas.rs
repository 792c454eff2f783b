//! Matrix products through cuBLAS: float32 or bfloat16 operands, float32
//! accumulation and float32 results (never TF32: the default math mode); float32
//! operands may be multiplied as their bfloat16 roundings ([`Compute`]).

use std::ffi::c_void;

use cudarc::cublas::sys as blas;

use crate::device::{Buffer, Device};
use crate::{error, Result};

pub(crate) fn status(s: blas::cublasStatus_t, what: &str) -> Result<()> {
    if s == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(error(format!("cuBLAS {what} failed: {s:?}")))
    }
}

/// Element type of a matrix operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Element {
    F32,
    Bf16,
}

impl Element {
    fn cuda(self) -> blas::cudaDataType {
        match self {
            Element::F32 => blas::cudaDataType::CUDA_R_32F,
            Element::Bf16 => blas::cudaDataType::CUDA_R_16BF,
        }
    }
    pub fn size(self) -> usize {
        match self {
            Element::F32 => 4,
            Element::Bf16 => 2,
        }
    }
}

/// How a product's operands are multiplied. `F32` multiplies them as they are
/// (`CUBLAS_COMPUTE_32F`); `Bf16Products` rounds float32 operands to bfloat16 (to
/// nearest, ties to even) and multiplies the roundings on the bfloat16 tensor cores with
/// float32 sums (`CUBLAS_COMPUTE_32F_FAST_16BF`): the bits of the product of operands
/// converted to bfloat16 first, without the converted copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compute {
    F32,
    Bf16Products,
}

impl Compute {
    fn cuda(self) -> blas::cublasComputeType_t {
        match self {
            Compute::F32 => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            Compute::Bf16Products => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16BF,
        }
    }
}

/// One operand: a buffer, an element offset, its leading dimension and batch stride.
pub struct Operand<'a> {
    pub buffer: &'a Buffer,
    pub offset: usize,
    pub ld: i64,
    pub stride: i64,
    pub transpose: bool,
}

/// An operand read as `rows x cols` (after its transpose) must lie inside its buffer.
pub(crate) fn check_extent(
    name: &str,
    o: &Operand<'_>,
    rows: i64,
    cols: i64,
    batch: i64,
    size: usize,
) -> Result<()> {
    let (stored_rows, stored_cols) = if o.transpose {
        (cols, rows)
    } else {
        (rows, cols)
    };
    if rows <= 0 || cols <= 0 {
        return Ok(());
    }
    if o.ld < stored_rows || o.stride < 0 {
        return Err(error(format!(
            "gemm: operand {name} has leading dimension {} for {stored_rows} rows",
            o.ld
        )));
    }
    let last = o.offset as i64 + (batch - 1) * o.stride + (stored_cols - 1) * o.ld + stored_rows;
    let held = (o.buffer.bytes() / size) as i64;
    if last > held {
        return Err(error(format!(
            "gemm: operand {name} reaches element {last} of a buffer of {held}"
        )));
    }
    Ok(())
}

/// Batched column-major `C[m, n] = op(A)[m, k] op(B)[k, n]` (cuBLAS's own
/// convention; callers map row-major products onto it). `C` is float32.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    device: &Device,
    element: Element,
    m: i64,
    n: i64,
    k: i64,
    a: Operand<'_>,
    b: Operand<'_>,
    c: Operand<'_>,
    batch: i64,
) -> Result<()> {
    gemm_compute(
        device,
        element,
        Compute::F32,
        m,
        n,
        k,
        a,
        b,
        c,
        batch,
        false,
    )
}

/// [`gemm`] with the operands multiplied as `compute` says; `Bf16Products` takes
/// float32 operands only. `accumulate` adds the product to what `C` holds
/// (`beta = 1`: one more rounding per element) instead of overwriting it.
#[allow(clippy::too_many_arguments)]
pub fn gemm_compute(
    device: &Device,
    element: Element,
    compute: Compute,
    m: i64,
    n: i64,
    k: i64,
    a: Operand<'_>,
    b: Operand<'_>,
    c: Operand<'_>,
    batch: i64,
    accumulate: bool,
) -> Result<()> {
    if compute == Compute::Bf16Products && element != Element::F32 {
        return Err(error(format!(
            "gemm: bfloat16 products take float32 operands, found {element:?}"
        )));
    }
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    check_extent("A", &a, m, k, batch, element.size())?;
    check_extent("B", &b, k, n, batch, element.size())?;
    check_extent("C", &c, m, n, batch, 4)?;
    let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0f32 });
    let op = |t: bool| {
        if t {
            blas::cublasOperation_t::CUBLAS_OP_T
        } else {
            blas::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let addr =
        |o: &Operand<'_>, size: usize| (o.buffer.ptr() + (o.offset * size) as u64) as *mut c_void;
    device.with_blas(|h| {
        // SAFETY: the operands' extents were checked above against their
        // buffers; the call is enqueued on the device's stream.
        let s = unsafe {
            blas::cublasGemmStridedBatchedEx_64(
                h,
                op(a.transpose),
                op(b.transpose),
                m,
                n,
                k,
                &alpha as *const f32 as *const c_void,
                addr(&a, element.size()),
                element.cuda(),
                a.ld,
                a.stride,
                addr(&b, element.size()),
                element.cuda(),
                b.ld,
                b.stride,
                &beta as *const f32 as *const c_void,
                addr(&c, 4),
                blas::cudaDataType::CUDA_R_32F,
                c.ld,
                c.stride,
                batch,
                compute.cuda(),
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        status(s, "GemmStridedBatchedEx")
    })
}
