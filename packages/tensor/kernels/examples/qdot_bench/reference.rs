//! The float32 reference: four weight rows at a time against one input row,
//! eight-lane fused multiply-adds (the decode step's float32 approach).

pub fn dot_rows_f32(w: &[f32], x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2(w, x, out) };
    }
    let k = x.len();
    for (r, o) in out.iter_mut().enumerate() {
        *o = w[r * k..(r + 1) * k]
            .iter()
            .zip(x)
            .map(|(a, b)| a * b)
            .sum();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2(w: &[f32], x: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let k = x.len();
    assert!(k.is_multiple_of(8) && out.len().is_multiple_of(4) && w.len() >= out.len() * k);
    for g in 0..out.len() / 4 {
        let p: [*const f32; 4] = std::array::from_fn(|r| w.as_ptr().add((4 * g + r) * k));
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut c = 0;
        while c < k {
            let xv = _mm256_loadu_ps(x.as_ptr().add(c));
            for r in 0..4 {
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(p[r].add(c)), xv, acc[r]);
            }
            c += 8;
        }
        for r in 0..4 {
            let mut lanes = [0.0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r]);
            out[4 * g + r] = lanes.iter().sum();
        }
    }
}
