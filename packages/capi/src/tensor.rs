//! Tensors through the C ABI: created from a caller's buffer (copied) with a shape and a
//! dtype (float32, float16 or bfloat16; held as float32), queried, read out in any of
//! those dtypes, and the core CPU ops of the kernels crate over them (matmul, elementwise
//! add and multiply with trailing broadcast, softmax, layer and RMS norm, attention). Every
//! op returns a new float32 tensor the caller frees.

use std::ffi::c_void;

use riftco_kernels::attention::{Heads, Segment};
use riftco_kernels::binary::{binary, BinaryOp};
use riftco_kernels::flash::flash_forward;
use riftco_kernels::matmul::{matmul_f32, MatmulSpec};
use riftco_kernels::norm::{norm_forward, Norm};
use riftco_kernels::softmax::{softmax_f32, Causal};
use riftco_kernels::strided::Walk;

use crate::error::{guard, in_slice, out_ptr, out_slice, Error, Result, Status};
use crate::gguf::f16_bits_to_f32;
use crate::handle::{self, tag, Handle};

/// The most dimensions a tensor has.
pub const RIFTCO_TENSOR_MAX_DIMS: usize = 8;
/// The most elements a tensor holds (2^40).
pub const RIFTCO_TENSOR_MAX_ELEMENTS: usize = 1 << 40;

/// Element types of tensor buffers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RiftcoDtype {
    F32 = 0,
    F16 = 1,
    Bf16 = 2,
}

impl RiftcoDtype {
    fn from_raw(v: i32) -> Result<Self> {
        Ok(match v {
            0 => RiftcoDtype::F32,
            1 => RiftcoDtype::F16,
            2 => RiftcoDtype::Bf16,
            _ => {
                return Err(Error::invalid(format!(
                    "dtype {v}: expected RIFTCO_DTYPE_F32 (0), F16 (1) or BF16 (2)"
                )))
            }
        })
    }
    fn size(self) -> usize {
        match self {
            RiftcoDtype::F32 => 4,
            _ => 2,
        }
    }
}

/// A dense row-major tensor (held as float32). Thread safety: immutable once created;
/// any number of threads may read one tensor and use it as an op input at once.
pub struct RiftcoTensor {
    _opaque: [u8; 0],
}

pub struct Tensor {
    pub shape: Vec<usize>,
    pub dtype: RiftcoDtype,
    pub data: Vec<f32>,
}

unsafe impl Handle for RiftcoTensor {
    type Inner = Tensor;
    const TAG: u64 = tag(b"TENS");
    const NAME: &'static str = "RiftcoTensor";
}

use riftco_kernels::blockq::f32_to_f16;

fn bf16_from_f32(x: f32) -> u16 {
    riftco_kernels::bf16::from_f32(x)
}

fn numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= RIFTCO_TENSOR_MAX_ELEMENTS)
        .ok_or_else(|| {
            Error::limit(format!(
                "shape {shape:?} holds more than {RIFTCO_TENSOR_MAX_ELEMENTS} elements"
            ))
        })
}

fn new_tensor(out: *mut *mut RiftcoTensor, shape: Vec<usize>, data: Vec<f32>) -> Result<()> {
    let out = unsafe { out_ptr(out, "out")? };
    *out = handle::new::<RiftcoTensor>(Tensor {
        shape,
        dtype: RiftcoDtype::F32,
        data,
    });
    Ok(())
}

unsafe fn tensor<'a>(t: *const RiftcoTensor, what: &str) -> Result<&'a Tensor> {
    handle::get::<RiftcoTensor>(t).map_err(|e| e.context(what))
}

/// Create a tensor of `shape` (`ndim` dimensions, each > 0 or 0 for an empty tensor) from
/// `data` in `dtype` (`RiftcoDtype` value), copied.
///
/// # Safety
/// `data` holds the tensor's elements in `dtype`; `shape` holds `ndim` sizes.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_create(
    data: *const c_void,
    dtype: i32,
    shape: *const usize,
    ndim: usize,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| {
        let slot = out_ptr(out, "out")?;
        *slot = std::ptr::null_mut();
        let dtype = RiftcoDtype::from_raw(dtype)?;
        if ndim > RIFTCO_TENSOR_MAX_DIMS {
            return Err(Error::limit(format!(
                "a tensor of {ndim} dimensions (at most {RIFTCO_TENSOR_MAX_DIMS})"
            )));
        }
        let shape = in_slice(shape, ndim, "shape")?.to_vec();
        let n = numel(&shape)?;
        let values: Vec<f32> = match dtype {
            RiftcoDtype::F32 => in_slice(data as *const f32, n, "data")?.to_vec(),
            RiftcoDtype::F16 => in_slice(data as *const u16, n, "data")?
                .iter()
                .map(|&h| f16_bits_to_f32(h))
                .collect(),
            RiftcoDtype::Bf16 => in_slice(data as *const u16, n, "data")?
                .iter()
                .map(|&h| f32::from_bits((h as u32) << 16))
                .collect(),
        };
        *slot = handle::new::<RiftcoTensor>(Tensor {
            shape,
            dtype,
            data: values,
        });
        Ok(())
    })
}

/// Free a tensor (NULL is a no-op).
///
/// # Safety
/// `t` is NULL or a live tensor handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_free(t: *mut RiftcoTensor) -> Status {
    guard(|| handle::free::<RiftcoTensor>(t))
}

/// The tensor's dimensions: `*ndim` gets their count; `shape` (room for `cap`) their
/// sizes (`cap` may be 0 with `shape` NULL to ask for the count).
///
/// # Safety
/// `t` is a tensor handle; `shape` holds `cap` sizes; `ndim` points to a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_shape(
    t: *const RiftcoTensor,
    shape: *mut usize,
    cap: usize,
    ndim: *mut usize,
) -> Status {
    guard(|| {
        let t = tensor(t, "t")?;
        *out_ptr(ndim, "ndim")? = t.shape.len();
        if cap == 0 && shape.is_null() {
            return Ok(());
        }
        if cap < t.shape.len() {
            return Err(Error::invalid(format!(
                "a shape buffer of {cap} for {} dimensions",
                t.shape.len()
            )));
        }
        out_slice(shape, t.shape.len(), "shape")?.copy_from_slice(&t.shape);
        Ok(())
    })
}

/// The dtype the tensor was created in (`RiftcoDtype`; op results are F32).
///
/// # Safety
/// `t` is a tensor handle; `out` points to an `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_dtype(t: *const RiftcoTensor, out: *mut i32) -> Status {
    guard(|| {
        *out_ptr(out, "out")? = tensor(t, "t")?.dtype as i32;
        Ok(())
    })
}

/// The number of elements.
///
/// # Safety
/// `t` is a tensor handle; `out` points to a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_numel(t: *const RiftcoTensor, out: *mut usize) -> Status {
    guard(|| {
        *out_ptr(out, "out")? = tensor(t, "t")?.data.len();
        Ok(())
    })
}

/// Copy the elements out in `dtype` (float16 and bfloat16 round to nearest, ties to
/// even); `bytes` must be exactly `numel * size of dtype`.
///
/// # Safety
/// `t` is a tensor handle; `out` holds `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_read(
    t: *const RiftcoTensor,
    dtype: i32,
    out: *mut c_void,
    bytes: usize,
) -> Status {
    guard(|| {
        let t = tensor(t, "t")?;
        let dtype = RiftcoDtype::from_raw(dtype)?;
        let want = t.data.len() * dtype.size();
        if bytes != want {
            return Err(Error::invalid(format!(
                "a buffer of {bytes} bytes for {} elements of {} bytes",
                t.data.len(),
                dtype.size()
            )));
        }
        match dtype {
            RiftcoDtype::F32 => {
                out_slice(out as *mut f32, t.data.len(), "out")?.copy_from_slice(&t.data)
            }
            RiftcoDtype::F16 => {
                for (o, &x) in out_slice(out as *mut u16, t.data.len(), "out")?
                    .iter_mut()
                    .zip(&t.data)
                {
                    *o = f32_to_f16(x);
                }
            }
            RiftcoDtype::Bf16 => {
                for (o, &x) in out_slice(out as *mut u16, t.data.len(), "out")?
                    .iter_mut()
                    .zip(&t.data)
                {
                    *o = bf16_from_f32(x);
                }
            }
        }
        Ok(())
    })
}

fn kernel(e: riftco_kernels::KernelError) -> Error {
    Error::invalid(e.0)
}

/// `out = a @ b`: `a` `[M, K]` and `b` `[K, N]`, or batched `[B, M, K]` and `[B, K, N]`
/// (a 2-d `b` is shared by every batch entry).
///
/// # Safety
/// `a`, `b` are tensor handles; `out` points to storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_matmul(
    a: *const RiftcoTensor,
    b: *const RiftcoTensor,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| {
        let (x, y) = (tensor(a, "a")?, tensor(b, "b")?);
        let (batch, m, k) = match x.shape.as_slice() {
            [m, k] => (1, *m, *k),
            [bt, m, k] => (*bt, *m, *k),
            s => {
                return Err(Error::invalid(format!(
                    "matmul: a is {s:?}, expected [M, K] or [B, M, K]"
                )))
            }
        };
        let (shared, k2, n) = match y.shape.as_slice() {
            [k2, n] => (true, *k2, *n),
            [bt, k2, n] if *bt == batch => (false, *k2, *n),
            s => {
                return Err(Error::invalid(format!(
                    "matmul: b is {s:?}, expected [K, N] or [{batch}, K, N]"
                )))
            }
        };
        if k != k2 {
            return Err(Error::invalid(format!(
                "matmul: a {:?} and b {:?} disagree on K ({k} vs {k2})",
                x.shape, y.shape
            )));
        }
        let a_off: Vec<usize> = (0..batch).map(|i| i * m * k).collect();
        let b_off: Vec<usize> = (0..batch)
            .map(|i| if shared { 0 } else { i * k * n })
            .collect();
        let spec = MatmulSpec {
            m,
            k,
            n,
            transpose_a: false,
            transpose_b: false,
            a_offsets: &a_off,
            b_offsets: &b_off,
        };
        let mut data = vec![0.0f32; numel(&[batch, m, n])?];
        matmul_f32(&spec, &x.data, &y.data, &mut data).map_err(kernel)?;
        let shape = if x.shape.len() == 2 {
            vec![m, n]
        } else {
            vec![batch, m, n]
        };
        new_tensor(out, shape, data)
    })
}

fn elementwise(
    op: BinaryOp,
    a: *const RiftcoTensor,
    b: *const RiftcoTensor,
    out: *mut *mut RiftcoTensor,
) -> Result<()> {
    let (x, y) = unsafe { (tensor(a, "a")?, tensor(b, "b")?) };
    let (r, s) = (x.shape.len(), y.shape.len());
    if s > r || x.shape[r - s..] != y.shape[..] {
        return Err(Error::invalid(format!(
            "{op:?}: b {:?} must equal a {:?} or its trailing dimensions",
            y.shape, x.shape
        )));
    }
    let mut sa = vec![0usize; r];
    let mut acc = 1;
    for d in (0..r).rev() {
        sa[d] = acc;
        acc *= x.shape[d];
    }
    let mut sb = vec![0usize; r];
    let mut acc = 1;
    for d in (r - s..r).rev() {
        sb[d] = acc;
        acc *= x.shape[d];
    }
    let mut data = vec![0.0f32; x.data.len()];
    if !data.is_empty() {
        let walk = Walk::new(
            &x.shape,
            [&sa, &sb],
            [0, 0],
            [x.data.len(), y.data.len().max(1)],
        )
        .map_err(kernel)?;
        binary(op, &x.data, &y.data, &walk, &mut data).map_err(kernel)?;
    }
    new_tensor(out, x.shape.clone(), data)
}

/// `out = a + b`; `b` has `a`'s shape or its trailing dimensions (broadcast).
///
/// # Safety
/// `a`, `b` are tensor handles; `out` points to storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_add(
    a: *const RiftcoTensor,
    b: *const RiftcoTensor,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| elementwise(BinaryOp::Add, a, b, out))
}

/// `out = a * b` (elementwise); `b` has `a`'s shape or its trailing dimensions.
///
/// # Safety
/// As `riftco_tensor_add`.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_mul(
    a: *const RiftcoTensor,
    b: *const RiftcoTensor,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| elementwise(BinaryOp::Mul, a, b, out))
}

fn rows_of(t: &Tensor, what: &str) -> Result<(usize, usize)> {
    let n = *t
        .shape
        .last()
        .ok_or_else(|| Error::invalid(format!("{what}: a tensor of no dimensions")))?;
    if n == 0 {
        return Err(Error::invalid(format!("{what}: rows of zero elements")));
    }
    Ok((t.data.len() / n, n))
}

/// Softmax over the last dimension; `causal` nonzero masks row `i` of each block of
/// `causal` rows to its first `n - causal + i + 1` columns (queries last among the keys).
///
/// # Safety
/// `x` is a tensor handle; `out` points to storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_softmax(
    x: *const RiftcoTensor,
    causal: usize,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| {
        let t = tensor(x, "x")?;
        let (rows, n) = rows_of(t, "softmax")?;
        let mut data = vec![0.0f32; t.data.len()];
        let mask = (causal > 0).then_some(Causal { queries: causal });
        softmax_f32(&t.data, rows, n, mask, false, &mut data).map_err(kernel)?;
        new_tensor(out, t.shape.clone(), data)
    })
}

unsafe fn norm_op(
    kind: Norm,
    x: *const RiftcoTensor,
    weight: *const RiftcoTensor,
    bias: *const RiftcoTensor,
    eps: f32,
    out: *mut *mut RiftcoTensor,
) -> Result<()> {
    let t = tensor(x, "x")?;
    let (rows, d) = rows_of(t, "norm")?;
    let vector = |p: *const RiftcoTensor, what: &str| -> Result<Option<&[f32]>> {
        if p.is_null() {
            return Ok(None);
        }
        let v = tensor(p, what)?;
        if v.shape != [d] {
            return Err(Error::invalid(format!(
                "norm: {what} is {:?}, expected [{d}]",
                v.shape
            )));
        }
        Ok(Some(&v.data))
    };
    let (w, b) = (vector(weight, "weight")?, vector(bias, "bias")?);
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(format!(
            "norm: eps must be finite and >= 0, found {eps}"
        )));
    }
    let mut y = vec![0.0f32; t.data.len()];
    let mut mean = vec![0.0f32; rows];
    let mut rstd = vec![0.0f32; rows];
    let mean = matches!(kind, Norm::Layer).then_some(&mut mean[..]);
    norm_forward(kind, &t.data, d, w, b, eps, &mut y, mean, &mut rstd).map_err(kernel)?;
    new_tensor(out, t.shape.clone(), y)
}

/// Layer norm over the last dimension; `weight` and `bias` (`[d]`) may be NULL.
///
/// # Safety
/// `x` is a tensor handle, `weight` and `bias` NULL or tensor handles.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_layer_norm(
    x: *const RiftcoTensor,
    weight: *const RiftcoTensor,
    bias: *const RiftcoTensor,
    eps: f32,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| norm_op(Norm::Layer, x, weight, bias, eps, out))
}

/// RMS norm over the last dimension; `weight` (`[d]`) may be NULL.
///
/// # Safety
/// `x` is a tensor handle, `weight` NULL or a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_rms_norm(
    x: *const RiftcoTensor,
    weight: *const RiftcoTensor,
    eps: f32,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| norm_op(Norm::Rms, x, weight, std::ptr::null(), eps, out))
}

/// Scaled dot-product attention of one sequence: `q` `[T, H, D]`, `k` and `v` `[S, KV, D]`
/// (`H` a multiple of `KV`: grouped-query heads), out `[T, H, D]`. `causal` nonzero: the
/// queries are the last `T` positions of the `S` keys; `window` nonzero hides keys
/// `window` or more positions back (causal only); `scale` 0 means `1 / sqrt(D)`.
///
/// # Safety
/// `q`, `k`, `v` are tensor handles; `out` points to storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn riftco_tensor_attention(
    q: *const RiftcoTensor,
    k: *const RiftcoTensor,
    v: *const RiftcoTensor,
    causal: u32,
    window: usize,
    scale: f32,
    out: *mut *mut RiftcoTensor,
) -> Status {
    guard(|| {
        let (q, k, v) = (tensor(q, "q")?, tensor(k, "k")?, tensor(v, "v")?);
        let ([t, h, d], [s, kv, d2]) = (q.shape.as_slice(), k.shape.as_slice()) else {
            return Err(Error::invalid(format!(
                "attention: q {:?} and k {:?} must be [T, H, D] and [S, KV, D]",
                q.shape, k.shape
            )));
        };
        if v.shape != k.shape || d != d2 || *kv == 0 || h % kv != 0 {
            return Err(Error::invalid(format!("attention: q {:?}, k {:?}, v {:?}: expected [T, H, D], [S, KV, D] twice, H a multiple of KV", q.shape, k.shape, v.shape)));
        }
        if window > 0 && causal == 0 {
            return Err(Error::invalid("attention: a window needs causal attention"));
        }
        let scale = if scale == 0.0 {
            1.0 / (*d as f32).sqrt()
        } else {
            scale
        };
        let heads = Heads {
            heads: *h,
            kv_heads: *kv,
            head_dim: *d,
            scale,
            causal: causal != 0,
            window,
        };
        let segments = [Segment {
            q_row: 0,
            q_len: *t,
            kv_row: 0,
            kv_len: *s,
        }];
        let mut data = vec![0.0f32; q.data.len()];
        flash_forward(
            &heads, &segments, &q.data, &k.data, &v.data, &mut data, None,
        )
        .map_err(kernel)?;
        new_tensor(out, q.shape.clone(), data)
    })
}
