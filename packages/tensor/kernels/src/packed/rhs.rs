//! A right operand packed once and shared by the threads that take row blocks
//! of the output.

#[cfg(target_arch = "x86_64")]
use super::blocking;
use super::{Mat, NR};

/// The right operand of one product packed once, so that threads can take row
/// blocks of the output in any number and order without packing it again. For
/// each depth slice `pc..pc + kc` (see `slice_depth`), its NR-column panels lie
/// at `pc * panels * NR`, each `kc x NR`.
pub struct PackedRhs {
    data: Vec<f32>,
    k: usize,
    n: usize,
}

/// The buffer of the last [`PackedRhs`] dropped, kept for the next one.
static SPARE: std::sync::Mutex<Vec<f32>> = std::sync::Mutex::new(Vec::new());

impl Drop for PackedRhs {
    fn drop(&mut self) {
        let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
        if spare.capacity() < self.data.capacity() {
            *spare = std::mem::take(&mut self.data);
        }
    }
}

impl PackedRhs {
    /// Whether this machine runs the packed kernel (AVX2 and FMA).
    pub fn available() -> bool {
        cfg!(target_arch = "x86_64") && crate::pool::has_avx2_fma()
    }

    /// Column panels of `n` columns.
    pub fn panels(n: usize) -> usize {
        n.div_ceil(NR)
    }

    /// Pack `b` (`k x n`, both positive), one panel per call of `each_panel`,
    /// which may run the calls in parallel.
    ///
    /// # Safety
    /// `b` addresses a valid `k x n` matrix, and [`Self::available`] holds.
    pub unsafe fn new(
        b: Mat,
        k: usize,
        n: usize,
        each_panel: impl FnOnce(&(dyn Fn(usize) + Sync)),
    ) -> Self {
        // Reuse the last product's buffer: packing writes every element, and a
        // fresh allocation would be zero-filled and faulted in page by page.
        let mut data = std::mem::take(&mut *SPARE.lock().unwrap_or_else(|e| e.into_inner()));
        data.resize(k * Self::panels(n) * NR, 0.0);
        let all = crate::pool::Shared::new(&mut data);
        #[cfg(target_arch = "x86_64")]
        each_panel(&|q| blocking::pack_panel(b, k, n, q, all.at(0)));
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (b, all, each_panel);
        PackedRhs { data, k, n }
    }

    /// Rows `i0..i1` of `dst = alpha * lhs @ b` (`lhs` is `m x k`, `dst` addresses
    /// row 0 with row stride `ldc`), then `+ bias[j]` for a non-null `bias` of `n`.
    ///
    /// # Safety
    /// `lhs` and `dst` address valid matrices covering rows `i0..i1`, and no
    /// other thread writes those rows of `dst` during the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rows(
        &self,
        lhs: Mat,
        i0: usize,
        i1: usize,
        dst: *mut f32,
        ldc: usize,
        alpha: f32,
        bias: *const f32,
    ) {
        #[cfg(target_arch = "x86_64")]
        blocking::rows_of_packed(
            lhs,
            i0,
            i1,
            self.data.as_ptr(),
            self.k,
            self.n,
            dst,
            ldc,
            alpha,
            bias,
        );
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (lhs, i0, i1, dst, ldc, alpha, bias);
    }
}
