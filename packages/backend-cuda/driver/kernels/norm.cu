// Layer and RMS normalization (forward and backward), activation gradients.
// One block per row; row statistics in double through fixed trees; parameter
// gradients summed over rows in fixed chunks, then the chunks in order (one launch).

// One row of a layer norm, by the whole block (thread t takes elements t, t + blockDim.x, ...).
__device__ __forceinline__ void layer_norm_row(const float* xr, const float* w, const float* b, float* yr,
                                               float* mean_out, float* rstd_out, i64 d, float eps,
                                               i64 has_w, i64 has_b, double* scratch) {
    double s = 0.0;
    for (i64 k = threadIdx.x; k < d; k += blockDim.x) s += (double)xr[k];
    double mean = block_sum(s, scratch) / (double)d;
    double q = 0.0;
    for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
        double c = (double)xr[k] - mean;
        q += c * c;
    }
    double var = block_sum(q, scratch) / (double)d;
    float m = (float)mean;
    float r = (float)(1.0 / sqrt(var + (double)eps));
    for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
        float v = (xr[k] - m) * r;
        if (has_w) v *= w[k];
        if (has_b) v += b[k];
        yr[k] = v;
    }
    if (threadIdx.x == 0) { *mean_out = m; *rstd_out = r; }
}

extern "C" __global__ void layer_norm_f32(const float* x, const float* w, const float* b, float* y,
                                          float* mean_out, float* rstd_out, i64 rows, i64 d, float eps,
                                          i64 has_w, i64 has_b) {
    __shared__ double scratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        layer_norm_row(x + row * d, w, b, y + row * d, mean_out + row, rstd_out + row, d, eps, has_w,
                       has_b, scratch);
    }
}

// s = x + res (binary_f32's add), then layer_norm_f32 of s: a residual stream and its
// norm in one pass. Each thread reads back only the sums it wrote.
extern "C" __global__ void add_layer_norm_f32(const float* x, const float* res, const float* w, const float* b,
                                              float* sum, float* y, float* mean_out, float* rstd_out, i64 rows,
                                              i64 d, float eps, i64 has_w, i64 has_b) {
    __shared__ double scratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        float* sr = sum + row * d;
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) sr[k] = x[row * d + k] + res[row * d + k];
        layer_norm_row(sr, w, b, y + row * d, mean_out + row, rstd_out + row, d, eps, has_w, has_b,
                       scratch);
    }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w, for one row (every
// thread of the block calls it); plus res's row when res is not null (a float32 add:
// the residual's gradient, as binary("add") sums it).
__device__ void layer_norm_dx_row(const float* dy, const float* x, const float* w, const float* mean,
                                  const float* rstd, const float* res, float* dx, i64 row, i64 d,
                                  i64 has_w, double* scratch) {
    float m = mean[row], r = rstd[row];
    double sg = 0.0, sgx = 0.0;
    for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
        double g = (double)dy[row * d + k] * (has_w ? (double)w[k] : 1.0);
        double xh = (double)((x[row * d + k] - m) * r);
        sg += g;
        sgx += g * xh;
    }
    double mg = block_sum(sg, scratch) / (double)d;
    double mgx = block_sum(sgx, scratch) / (double)d;
    for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
        double g = (double)dy[row * d + k] * (has_w ? (double)w[k] : 1.0);
        double xh = (double)((x[row * d + k] - m) * r);
        float v = (float)((double)r * (g - mg - xh * mgx));
        dx[row * d + k] = res ? v + res[row * d + k] : v;
    }
}

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
extern "C" __global__ void rms_norm_f32(const float* x, const float* w, float* y, float* rstd_out,
                                        i64 rows, i64 d, float eps, i64 has_w) {
    __shared__ double scratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * d;
        double q = 0.0;
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) q += (double)xr[k] * (double)xr[k];
        double ms = block_sum(q, scratch) / (double)d;
        float r = (float)(1.0 / sqrt(ms + (double)eps));
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
            float v = xr[k] * r;
            y[row * d + k] = has_w ? v * w[k] : v;
        }
        if (threadIdx.x == 0) rstd_out[row] = r;
    }
}

// dx = rstd * (g - xhat * mean(g * xhat)), xhat = x * rstd, g = dy * w.
extern "C" __global__ void rms_norm_dx_f32(const float* dy, const float* x, const float* w,
                                           const float* rstd, float* dx, i64 rows, i64 d, i64 has_w) {
    __shared__ double scratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        float r = rstd[row];
        double sgx = 0.0;
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
            double g = (double)dy[row * d + k] * (has_w ? (double)w[k] : 1.0);
            sgx += g * (double)(x[row * d + k] * r);
        }
        double mgx = block_sum(sgx, scratch) / (double)d;
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
            double g = (double)dy[row * d + k] * (has_w ? (double)w[k] : 1.0);
            double xh = (double)(x[row * d + k] * r);
            dx[row * d + k] = (float)((double)r * (g - xh * mgx));
        }
    }
}

// Parameter gradients: partial[chunk, col] = sum over the chunk's rows, in order, of
// dy * xhat (what 0) or dy (what 1), xhat = (x - mean) * rstd (mean may be null: RMS);
// what 2: both, partial holding the dy * xhat sums then the dy sums ([2, chunks, d]).
// Then the last block to finish (`done`, a counter atomicInc wraps back to zero for the
// next launch) sums each column's chunks in order into out (and out2 from the second
// half of a what-2 partial). The counter only says which block sums, never the order:
// the bits depend on `chunk` alone, not on the grid or the blocks' timing.
// Chunk c's partial of column col (see norm_param_grads_f32).
__device__ __forceinline__ void param_partial(const float* dy, const float* x, const float* mean,
                                              const float* rstd, double* partial, i64 rows, i64 d,
                                              i64 chunk, i64 chunks, i64 c, i64 col, i64 what) {
    i64 end = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
    double acc = 0.0, plain = 0.0;
    for (i64 row = c * chunk; row < end; ++row) {
        double g = (double)dy[row * d + col];
        plain += g;
        if (what != 1) {
            float m = mean ? mean[row] : 0.0f;
            g *= (double)((x[row * d + col] - m) * rstd[row]);
        }
        acc += g;
    }
    partial[c * d + col] = acc;
    if (what == 2) partial[(chunks + c) * d + col] = plain;
}

// After every block wrote its partials: the last block to take a ticket sums each
// column's chunks in order (every thread of every block calls it).
__device__ void param_finish(double* partial, float* out, float* out2, unsigned int* done, i64 d,
                             i64 chunks) {
    // Every block's partials are visible device-wide before it takes its ticket.
    if (!last_block_to_finish(done)) return;
    const volatile double* sums = partial;  // written by other blocks: read past L1
    for (i64 col = threadIdx.x; col < d; col += blockDim.x) {
        double acc = 0.0;
        for (i64 c = 0; c < chunks; ++c) acc += sums[c * d + col];
        out[col] = (float)acc;
        if (out2) {
            double acc2 = 0.0;
            for (i64 c = 0; c < chunks; ++c) acc2 += sums[(chunks + c) * d + col];
            out2[col] = (float)acc2;
        }
    }
}

extern "C" __global__ void norm_param_grads_f32(const float* dy, const float* x, const float* mean,
                                                const float* rstd, double* partial, float* out, float* out2,
                                                unsigned int* done, i64 rows, i64 d, i64 chunk, i64 what) {
    i64 chunks = (rows + chunk - 1) / chunk;
    FOR_EACH(j, chunks * d) param_partial(dy, x, mean, rstd, partial, rows, d, chunk, chunks, j / d, j % d, what);
    param_finish(partial, out, out2, done, d, chunks);
}

// A layer norm's whole backward in one launch: a block per chunk of `chunk` rows (in
// turn, gridDim.x <= chunks) writes each row's dx (layer_norm_dx_f32's, plus res's row
// when res is not null: the residual's gradient of an add_layer_norm), then its chunk's
// parameter partials (what as in norm_param_grads_f32; what -1: none), and the last
// block sums the chunks: the bits of layer_norm_dx_f32, the add and norm_param_grads_f32.
extern "C" __global__ void layer_norm_backward_f32(const float* dy, const float* x, const float* w,
                                                   const float* mean, const float* rstd, const float* res,
                                                   float* dx, double* partial, float* out, float* out2,
                                                   unsigned int* done, i64 rows, i64 d, i64 has_w,
                                                   i64 chunk, i64 what) {
    __shared__ double scratch[THREADS];
    i64 chunks = (rows + chunk - 1) / chunk;
    for (i64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        i64 end = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
        for (i64 row = c * chunk; row < end; ++row)
            layer_norm_dx_row(dy, x, w, mean, rstd, res, dx, row, d, has_w, scratch);
        if (what >= 0)
            for (i64 col = threadIdx.x; col < d; col += blockDim.x)
                param_partial(dy, x, mean, rstd, partial, rows, d, chunk, chunks, c, col, what);
    }
    if (what >= 0) param_finish(partial, out, out2, done, d, chunks);
}

// dx = dy * f'(x) for gelu (0), gelu_tanh (1), silu (2).
// An activation travels as its code, named as riftco.tensor's vocabulary names it (the
// Python side reads this enum from the source: riftco.backends.cuda.ops.codes).
enum ActivationOp { ACTIVATION_GELU = 0, ACTIVATION_GELU_TANH = 1, ACTIVATION_SILU = 2 };

extern "C" __global__ void activation_backward_f32(const float* x, const float* dy, float* dx, i64 n, i64 op) {
    FOR_EACH(i, n) {
        double v = x[i], g;
        if (op == ACTIVATION_GELU) {
            double cdf = 0.5 * (1.0 + erf(v * 0.70710678118654752440));
            double pdf = exp(-0.5 * v * v) * 0.39894228040143267794;
            g = cdf + v * pdf;
        } else if (op == ACTIVATION_GELU_TANH) {
            const double c = 0.79788456080286535588;
            double u = c * (v + 0.044715 * v * v * v);
            double th = tanh(u);
            g = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * c * (1.0 + 3.0 * 0.044715 * v * v);
        } else {
            double s = 1.0 / (1.0 + exp(-v));
            g = s * (1.0 + v * (1.0 - s));
        }
        dx[i] = (float)((double)dy[i] * g);
    }
}
