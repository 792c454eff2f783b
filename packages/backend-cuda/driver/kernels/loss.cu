// Fused softmax cross-entropy (forward and backward) and rotary embeddings.

// losses[r] = lse[r] - logits[r, target] (0 on ignored rows). A target outside
// [0, classes) that is not ignore_index is reported in bad (first row).
__device__ void cross_entropy_rows(const float* logits, const i64* targets, float* losses, float* lse_out, i64 rows,
                                   i64 classes, i64 ignore, i64* bad) {
    __shared__ double dscratch[THREADS];
    __shared__ float fscratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = logits + row * classes;
        float m = NEG_INF;
        for (i64 k = threadIdx.x; k < classes; k += blockDim.x) m = nan_max(m, xr[k]);
        m = block_max(m, fscratch);
        double acc = 0.0;
        for (i64 k = threadIdx.x; k < classes; k += blockDim.x) acc += exp((double)xr[k] - (double)m);
        double lse = (double)m + log(block_sum(acc, dscratch));
        if (threadIdx.x == 0) {
            i64 t = targets[row];
            lse_out[row] = (float)lse;
            if (t == ignore) {
                losses[row] = 0.0f;
            } else if (t < 0 || t >= classes) {
                losses[row] = 0.0f;
                report_bad(bad, row);
            } else {
                losses[row] = (float)(lse - (double)xr[t]);
            }
        }
    }
}

extern "C" __global__ void cross_entropy_f32(const float* logits, const i64* targets, float* losses,
                                             float* lse_out, i64 rows, i64 classes, i64 ignore, i64* bad) {
    cross_entropy_rows(logits, targets, losses, lse_out, rows, classes, ignore, bad);
}

// The rows' losses as cross_entropy_f32 writes them, then the last block to finish
// takes their mean over the kept rows (targets not ignore_index): kept counted
// exactly, scale = 1 / max(kept, 1) in double rounded once (binary div's bits), the
// losses summed in double in a fixed order (threads over rows, then a tree) and
// rounded once (reduce's arithmetic), times scale in double rounded once (binary
// mul's): loss[0] and scale[0].
extern "C" __global__ void cross_entropy_mean_f32(const float* logits, const i64* targets, float* losses,
                                                  float* lse_out, float* loss, float* scale, unsigned int* done,
                                                  i64 rows, i64 classes, i64 ignore, i64* bad) {
    __shared__ double dscratch[THREADS];
    cross_entropy_rows(logits, targets, losses, lse_out, rows, classes, ignore, bad);
    if (!last_block_to_finish(done)) return;
    const volatile float* written = losses;
    double sum = 0.0, kept = 0.0;
    for (i64 row = threadIdx.x; row < rows; row += blockDim.x) {
        sum += (double)written[row];
        kept += targets[row] != ignore ? 1.0 : 0.0;
    }
    sum = block_sum(sum, dscratch);
    kept = block_sum(kept, dscratch);
    if (threadIdx.x == 0) {
        float count = (float)kept;
        float s = (float)(1.0 / (double)(count > 1.0f ? count : 1.0f));
        scale[0] = s;
        loss[0] = (float)((double)(float)sum * (double)s);
    }
}

// grad null: every row's gradient is scale[0] * g[0] (the mean loss's, one float32
// product as binary mul rounds it).
extern "C" __global__ void cross_entropy_backward_f32(const float* logits, const i64* targets, const float* lse,
                                                      const float* grad, const float* g, const float* scale,
                                                      float* dlogits, i64 rows, i64 classes, i64 ignore) {
    float shared_grad = grad ? 0.0f : (float)((double)g[0] * (double)scale[0]);
    FOR_EACH(i, rows * classes) {
        i64 row = i / classes, k = i % classes;
        i64 t = targets[row];
        if (t == ignore || t < 0 || t >= classes) {
            dlogits[i] = 0.0f;
        } else {
            double p = exp((double)logits[i] - (double)lse[row]);
            dlogits[i] = (float)((p - (k == t ? 1.0 : 0.0)) * (double)(grad ? grad[row] : shared_grad));
        }
    }
}

// x [rows, heads, dh] at positions [rows]: pair (i, i + dh/2) turns by
// pos * inv_freq[i], inv_freq[i] = 1 / theta^(2i/dh) in float32 (as Llama).
extern "C" __global__ void rotary_f32(const float* x, const i64* positions, float* y, i64 rows, i64 heads,
                                      i64 dh, float theta, i64 inverse) {
    i64 half = dh / 2;
    FOR_EACH(j, rows * heads * half) {
        i64 i = j % half, rh = j / half, row = rh / heads;
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)dh);
        double angle = (double)((float)positions[row] * inv_freq);
        float c = (float)cos(angle), s = (float)sin(angle);
        if (inverse) s = -s;
        const float* xr = x + rh * dh;
        float a = xr[i], b = xr[i + half];
        y[rh * dh + i] = a * c - b * s;
        y[rh * dh + i + half] = b * c + a * s;
    }
}
