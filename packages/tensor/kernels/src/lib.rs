//! CPU kernels for riftco-tensor.
//!
//! Every kernel works on flat, contiguous, row-major slices whose shapes the
//! caller has already validated; kernels still check lengths and return a
//! [`KernelError`] rather than reading or writing out of bounds. Work is split
//! into fixed-size pieces whose results are combined in index order, so the
//! output is bit-identical whatever the thread count.

pub mod activation_grad;
pub mod adam;
pub mod attention;
pub mod bf16;
pub mod binary;
pub mod blockq;
pub mod decode;
pub mod f32_rows;
pub mod flash;
pub mod index;
pub mod isa;
mod lanes;
pub mod layout;
pub mod loss;
pub mod math;
pub mod matmul;
pub mod nf4;
pub mod nf4_int;
mod nf4_vector;
pub mod norm;
pub mod packed;
pub mod paged;
pub mod pool;
pub mod reduce;
pub mod rotary;
pub mod softmax;
pub mod strided;
pub mod team;
pub mod unary;

use std::fmt;

/// A kernel refused its arguments (they disagree with each other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError(pub String);

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KernelError {}

pub type Result<T> = std::result::Result<T, KernelError>;

/// Return an error unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::KernelError(format!($($arg)+)));
        }
    };
}

/// Compile a kernel body three times, for AVX-512, for AVX2 + FMA and for the
/// baseline, and pick at run time ([`isa::current`], which `RIFTCO_CPU_ISA` may
/// lower). Helpers the body calls must be `#[inline(always)]`. The bodies are the
/// same IEEE operations in the same order at every width (the reductions keep
/// their own eight lanes, see [`lanes`]), so every version gives the same bits.
#[macro_export]
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident $(<$($gen:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")]
                unsafe fn wide $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? $body
                if $crate::isa::current() >= $crate::isa::Isa::Avx512 {
                    // SAFETY: the CPU supports the features `wide` was compiled for.
                    return unsafe { wide($($arg),*) };
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn fast $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? $body
                if $crate::pool::has_avx2_fma() {
                    // SAFETY: the CPU supports the features `fast` was compiled for.
                    return unsafe { fast($($arg),*) };
                }
            }
            #[inline(always)]
            fn base $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? $body
            base($($arg),*)
        }
    };
}
