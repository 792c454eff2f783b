//! Matrix products through cuBLASLt with a fused epilogue: the bias added to the
//! product (`CUBLASLT_EPILOGUE_BIAS`) or the bias gradient of a weight-gradient
//! product (`CUBLASLT_EPILOGUE_BGRADA` / `BGRADB`). float32 or bfloat16 operands,
//! float32 accumulation (`CUBLAS_COMPUTE_32F`, never TF32), float32 results and bias;
//! float32 operands may be multiplied as their bfloat16 roundings
//! (`CUBLAS_COMPUTE_32F_FAST_16BF`, [`Compute::Bf16Products`]).
//!
//! Determinism: the algorithm of a product is chosen once per device and shape key
//! (element, dims, transposes, leading dimensions, epilogue, operand alignments) by
//! `cublasLtMatmulAlgoGetHeuristic` and reused for every later call with that key, so
//! a shape always runs the same kernel. The search is restricted to
//! `CUBLASLT_REDUCTION_SCHEME_NONE`: no split-K of any kind (neither in-place nor
//! through the workspace), so each output is one kernel's sum in its own fixed order
//! and no partial sums are combined with atomics. The workspace (32 MiB a device,
//! enough for Hopper's kernels) is allocated once from the device's pool.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;

use crate::blas::{check_extent, Compute, Element, Operand};
use crate::device::{Buffer, Device};
use crate::{error, Result};

/// Bytes of the workspace each device's products share.
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// What the product does after its float32 sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `D = op(A) op(B)`.
    None,
    /// `D = op(A) op(B) + bias`, bias one value per row of `D` (length `m`).
    Bias,
    /// `D = op(A) op(B)` and `bias[i] = sum_k op(A)[i, k]` (length `m`).
    BgradA,
    /// `D = op(A) op(B)` and `bias[j] = sum_k op(B)[k, j]` (length `n`).
    BgradB,
}

impl Epilogue {
    /// The name used across the Python boundary.
    pub fn parse(name: &str) -> Result<Epilogue> {
        Ok(match name {
            "none" => Epilogue::None,
            "bias" => Epilogue::Bias,
            "bgrada" => Epilogue::BgradA,
            "bgradb" => Epilogue::BgradB,
            other => {
                return Err(error(format!(
                    "gemm_epilogue: expected none, bias, bgrada or bgradb, found {other}"
                )))
            }
        })
    }

    fn lt(self) -> sys::cublasLtEpilogue_t {
        use sys::cublasLtEpilogue_t::*;
        match self {
            Epilogue::None => CUBLASLT_EPILOGUE_DEFAULT,
            Epilogue::Bias => CUBLASLT_EPILOGUE_BIAS,
            Epilogue::BgradA => CUBLASLT_EPILOGUE_BGRADA,
            Epilogue::BgradB => CUBLASLT_EPILOGUE_BGRADB,
        }
    }

    /// The bias vector's length for an `m x n` product, if the epilogue has one.
    pub fn bias_len(self, m: i64, n: i64) -> Option<i64> {
        match self {
            Epilogue::None => None,
            Epilogue::Bias | Epilogue::BgradA => Some(m),
            Epilogue::BgradB => Some(n),
        }
    }
}

fn status(s: sys::cublasStatus_t, what: &str) -> Result<()> {
    s.result()
        .map_err(|e| error(format!("cuBLASLt {what} failed: {e:?}")))
}

fn data_type(element: Element) -> sys::cudaDataType {
    match element {
        Element::F32 => sys::cudaDataType::CUDA_R_32F,
        Element::Bf16 => sys::cudaDataType::CUDA_R_16BF,
    }
}

/// The largest power of two (up to 256) dividing a device address: cuBLASLt's
/// kernels need their operands at least as aligned as the preference says.
fn alignment(address: u64) -> u32 {
    if address == 0 {
        return 256;
    }
    (1u64 << address.trailing_zeros().min(8)) as u32
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    element: Element,
    compute: Compute,
    dims: (i64, i64, i64),
    transposes: (bool, bool),
    lds: (i64, i64, i64),
    epilogue: Epilogue,
    aligns: (u32, u32, u32, u32),
}

/// One device's cuBLASLt handle, workspace and chosen algorithms.
struct State {
    handle: usize,
    workspace: Buffer,
    algos: HashMap<Key, sys::cublasLtMatmulAlgo_t>,
}

fn states() -> &'static Mutex<HashMap<i32, State>> {
    static STATES: OnceLock<Mutex<HashMap<i32, State>>> = OnceLock::new();
    STATES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Descriptors destroyed when the call ends, whatever way it ends.
struct Descriptors {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: sys::cublasLtMatmulPreference_t,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each was created by this call and is destroyed once.
        unsafe {
            if !self.pref.is_null() {
                let _ = lt::destroy_matmul_pref(self.pref);
            }
            for &l in &self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
        }
    }
}

/// # Safety
/// `desc` is a live descriptor and `T` the attribute's documented type.
unsafe fn set_desc<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    value: &T,
) -> Result<()> {
    lt::set_matmul_desc_attribute(
        desc,
        attr,
        value as *const T as *const c_void,
        std::mem::size_of::<T>(),
    )
    .map_err(|e| error(format!("cuBLASLt matmul descriptor {attr:?}: {e:?}")))
}

/// # Safety
/// `pref` is a live preference and `T` the attribute's documented type.
unsafe fn set_pref<T>(
    pref: sys::cublasLtMatmulPreference_t,
    attr: sys::cublasLtMatmulPreferenceAttributes_t,
    value: &T,
) -> Result<()> {
    lt::set_matmul_pref_attribute(
        pref,
        attr,
        value as *const T as *const c_void,
        std::mem::size_of::<T>(),
    )
    .map_err(|e| error(format!("cuBLASLt preference {attr:?}: {e:?}")))
}

/// Column-major `C[m, n] = op(A)[m, k] op(B)[k, n]` with `epilogue` (cuBLAS's
/// convention, as [`crate::blas::gemm_compute`]; one product, no batch). `C` and `bias`
/// are float32; `bias` is `(buffer, element offset)` and is read (`Bias`) or
/// written (`BgradA`, `BgradB`) with the epilogue's length.
#[allow(clippy::too_many_arguments)]
pub fn gemm_epilogue(
    device: &Arc<Device>,
    element: Element,
    m: i64,
    n: i64,
    k: i64,
    a: Operand<'_>,
    b: Operand<'_>,
    c: Operand<'_>,
    epilogue: Epilogue,
    bias: Option<(&Buffer, usize)>,
) -> Result<()> {
    gemm_epilogue_compute(
        device,
        element,
        Compute::F32,
        m,
        n,
        k,
        a,
        b,
        c,
        epilogue,
        bias,
    )
}

/// [`gemm_epilogue`] with the operands multiplied as `compute` says;
/// `Bf16Products` (`CUBLAS_COMPUTE_32F_FAST_16BF`) takes float32 operands only.
#[allow(clippy::too_many_arguments)]
pub fn gemm_epilogue_compute(
    device: &Arc<Device>,
    element: Element,
    compute: Compute,
    m: i64,
    n: i64,
    k: i64,
    a: Operand<'_>,
    b: Operand<'_>,
    c: Operand<'_>,
    epilogue: Epilogue,
    bias: Option<(&Buffer, usize)>,
) -> Result<()> {
    if m <= 0 || n <= 0 || k <= 0 {
        return Err(error(format!(
            "gemm_epilogue: expected positive dims, found m={m} n={n} k={k}"
        )));
    }
    if compute == Compute::Bf16Products && element != Element::F32 {
        return Err(error(
            "gemm_epilogue: bfloat16 products of float32 operands take float32 operands",
        ));
    }
    check_extent("A", &a, m, k, 1, element.size())?;
    check_extent("B", &b, k, n, 1, element.size())?;
    check_extent("C", &c, m, n, 1, 4)?;
    let bias_ptr = match (epilogue.bias_len(m, n), bias) {
        (None, None) => 0u64,
        (Some(len), Some((buf, offset))) => {
            if (offset as i64 + len) * 4 > buf.bytes() as i64 {
                return Err(error(format!(
                    "gemm_epilogue: a bias of {len} at {offset} exceeds a {}-byte buffer",
                    buf.bytes()
                )));
            }
            buf.ptr() + (offset * 4) as u64
        }
        (Some(_), None) => return Err(error(format!("gemm_epilogue: {epilogue:?} needs a bias"))),
        (None, Some(_)) => return Err(error("gemm_epilogue: no epilogue takes a bias here")),
    };
    let addr = |o: &Operand<'_>, size: usize| o.buffer.ptr() + (o.offset * size) as u64;
    let (pa, pb, pc) = (
        addr(&a, element.size()),
        addr(&b, element.size()),
        addr(&c, 4),
    );
    let key = Key {
        element,
        compute,
        dims: (m, n, k),
        transposes: (a.transpose, b.transpose),
        lds: (a.ld, b.ld, c.ld),
        epilogue,
        aligns: (
            alignment(pa),
            alignment(pb),
            alignment(pc),
            alignment(bias_ptr),
        ),
    };
    device.bind()?;
    let mut guard = states().lock().unwrap();
    let state = match guard.entry(device.ordinal()) {
        Entry::Occupied(entry) => entry.into_mut(),
        Entry::Vacant(entry) => {
            let handle =
                lt::create_handle().map_err(|e| error(format!("cublasLtCreate: {e:?}")))?;
            let workspace = device.alloc(WORKSPACE_BYTES)?;
            entry.insert(State {
                handle: handle as usize,
                workspace,
                algos: HashMap::new(),
            })
        }
    };
    let handle = state.handle as sys::cublasLtHandle_t;
    let op = |t: bool| {
        if t {
            cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let dt = data_type(element);
    let stored = |rows: i64, cols: i64, t: bool| if t { (cols, rows) } else { (rows, cols) };
    let (ar, ac) = stored(m, k, a.transpose);
    let (br, bc) = stored(k, n, b.transpose);
    let mut d = Descriptors {
        desc: std::ptr::null_mut(),
        layouts: Vec::new(),
        pref: std::ptr::null_mut(),
    };
    let err =
        |what: &'static str| move |e: lt::CublasError| error(format!("cuBLASLt {what}: {e:?}"));
    let compute_type = match compute {
        Compute::F32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        Compute::Bf16Products => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16BF,
    };
    d.desc = lt::create_matmul_desc(compute_type, sys::cudaDataType::CUDA_R_32F)
        .map_err(err("cublasLtMatmulDescCreate"))?;
    for (dtype, rows, cols, ld) in [
        (dt, ar, ac, a.ld),
        (dt, br, bc, b.ld),
        (sys::cudaDataType::CUDA_R_32F, m, n, c.ld),
    ] {
        let layout = lt::create_matrix_layout(dtype, rows as u64, cols as u64, ld)
            .map_err(err("cublasLtMatrixLayoutCreate"))?;
        d.layouts.push(layout);
    }
    use sys::cublasLtMatmulDescAttributes_t::*;
    use sys::cublasLtMatmulPreferenceAttributes_t::*;
    // SAFETY: the descriptors are live (owned by `d`); each attribute gets its
    // documented type; the addresses were checked against their buffers above.
    unsafe {
        set_desc(d.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op(a.transpose))?;
        set_desc(d.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op(b.transpose))?;
        set_desc(d.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue.lt())?;
        if bias_ptr != 0 {
            let ptr = bias_ptr as *const c_void;
            set_desc(d.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr)?;
            let bias_type = sys::cudaDataType::CUDA_R_32F;
            set_desc(d.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type)?;
        }
        let (la, lb, lc) = (d.layouts[0], d.layouts[1], d.layouts[2]);
        let algo = match state.algos.get(&key) {
            Some(algo) => *algo,
            None => {
                d.pref = lt::create_matmul_pref().map_err(err("cublasLtMatmulPreferenceCreate"))?;
                let bytes = WORKSPACE_BYTES as u64;
                set_pref(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes)?;
                let none = sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_NONE as u32;
                set_pref(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none)?;
                let (xa, xb, xc, _) = key.aligns;
                set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &xa)?;
                set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &xb)?;
                set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &xc)?;
                set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &xc)?;
                let found = lt::get_matmul_algo_heuristic(handle, d.desc, la, lb, lc, lc, d.pref)
                    .map_err(|e| {
                    error(format!(
                        "cuBLASLt has no algorithm without split-K for a {m}x{n}x{k} \
                             {element:?} ({compute:?}) product with {epilogue:?}: {e:?}"
                    ))
                })?;
                state.algos.insert(key, found.algo);
                found.algo
            }
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let s = sys::cublasLtMatmul(
            handle,
            d.desc,
            &alpha as *const f32 as *const c_void,
            pa as *const c_void,
            la,
            pb as *const c_void,
            lb,
            &beta as *const f32 as *const c_void,
            pc as *const c_void,
            lc,
            pc as *mut c_void,
            lc,
            &algo,
            state.workspace.ptr() as *mut c_void,
            WORKSPACE_BYTES,
            device.raw_stream() as sys::cudaStream_t,
        );
        status(s, "cublasLtMatmul")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epilogue_names_and_bias_lengths() {
        assert_eq!(Epilogue::parse("bias").unwrap(), Epilogue::Bias);
        assert_eq!(Epilogue::parse("bgradb").unwrap(), Epilogue::BgradB);
        assert!(Epilogue::parse("gelu").unwrap_err().0.contains("gelu"));
        assert_eq!(Epilogue::Bias.bias_len(3, 5), Some(3));
        assert_eq!(Epilogue::BgradA.bias_len(3, 5), Some(3));
        assert_eq!(Epilogue::BgradB.bias_len(3, 5), Some(5));
        assert_eq!(Epilogue::None.bias_len(3, 5), None);
    }

    #[test]
    fn alignment_is_the_largest_power_of_two_up_to_256() {
        assert_eq!(alignment(0x1000), 256);
        assert_eq!(alignment(0x1004), 4);
        assert_eq!(alignment(0x1002), 2);
        assert_eq!(alignment(0x1030), 16);
    }
}
