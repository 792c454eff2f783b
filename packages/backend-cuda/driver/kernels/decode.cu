// Whole-step decoding (riftco.backends.cuda.ops.decode): the kernels of one
// incremental step of a decoder-only Transformer, run from a plan built once.
//
// Every kernel reads the step's indices from one int64 parameter block `params`
// (uploaded once per step, validated on the host):
//   [tokens N | positions N | cache rows N | meta N x 3 | page table S x W | logit rows M]
// where meta row i is (sequence, first key row of a contiguous cache, keys visible to
// row i). Activations are float32; weights float32 or bfloat16 (widened as read).
// Every sum has a fixed order (a fixed tree over a block's threads, in double), so a
// row's results depend on that row alone and repeat bit for bit.

#define P_TOKENS(n) 0
#define P_POSITIONS(n) (n)
#define P_ROWS(n) (2 * (n))
#define P_META(n) (3 * (n))
#define P_TABLE(n) (6 * (n))
#define DECODE_MAX_HEAD_DIM 256

// x[i] = token_embedding[tokens[i]] (+ position_embedding[positions[i]]).
extern "C" __global__ void decode_embed(const float* tok, const float* pos_emb, const i64* params, float* x, i64 n,
                                        i64 d) {
    FOR_EACH(e, n * d) {
        i64 i = e / d, c = e % d;
        float v = tok[params[P_TOKENS(n) + i] * d + c];
        if (pos_emb) v += pos_emb[params[P_POSITIONS(n) + i] * d + c];
        x[e] = v;
    }
}

// One block per output row: y[r] = norm(x[src]) with src = r, or the r-th logit row
// (`gather`: its offset in params). Layer norm (rms == 0) or RMS norm; weight and bias
// may be null.
extern "C" __global__ void decode_norm(const float* x, const float* w, const float* b, float* y, const i64* params,
                                       i64 gather, i64 rows, i64 d, float eps, i64 rms) {
    __shared__ double scratch[THREADS];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 src = gather >= 0 ? params[gather + r] : r;
        const float* xr = x + src * d;
        double s = 0.0;
        for (i64 c = threadIdx.x; c < d; c += blockDim.x) s += (double)xr[c];
        float mean = rms ? 0.0f : (float)(block_sum(s, scratch) / (double)d);
        double q = 0.0;
        for (i64 c = threadIdx.x; c < d; c += blockDim.x) {
            float t = xr[c] - mean;
            q += (double)t * (double)t;
        }
        float var = (float)(block_sum(q, scratch) / (double)d);
        float rstd = 1.0f / sqrtf(var + eps);
        for (i64 c = threadIdx.x; c < d; c += blockDim.x) {
            float v = (xr[c] - mean) * rstd;
            if (w) v = v * w[c];
            if (b) v = v + b[c];
            y[r * d + c] = v;
        }
    }
}

// y[i, r] = (accumulate ? y[i, r] : 0) + (x[i] . W[r] + bias[r]) for n input rows:
// one block per weight row (read once for all n inputs), a fixed tree per sum.
template <typename W>
__device__ void linear_rows(const W* w, const float* bias, const float* x, float* y, i64 n, i64 rows, i64 cols,
                            i64 accumulate) {
    __shared__ double scratch[THREADS];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const W* wr = w + r * cols;
        for (i64 i = 0; i < n; ++i) {
            const float* xi = x + i * cols;
            double s = 0.0;
            for (i64 c = threadIdx.x; c < cols; c += blockDim.x) s += (double)(ld(wr, c) * xi[c]);
            double total = block_sum(s, scratch);
            if (threadIdx.x == 0) {
                float v = (float)total + (bias ? bias[r] : 0.0f);
                y[i * rows + r] = accumulate ? y[i * rows + r] + v : v;
            }
        }
    }
}

extern "C" __global__ void decode_linear_f32(const float* w, const float* bias, const float* x, float* y, i64 n,
                                             i64 rows, i64 cols, i64 accumulate) {
    linear_rows<float>(w, bias, x, y, n, rows, cols, accumulate);
}

extern "C" __global__ void decode_linear_bf16(const bf16* w, const float* bias, const float* x, float* y, i64 n,
                                              i64 rows, i64 cols, i64 accumulate) {
    linear_rows<bf16>(w, bias, x, y, n, rows, cols, accumulate);
}

// The fused query/key/value rows qkv [N, (H + 2 Hkv) Dh]: rotary positions on the
// query and key heads in place (split halves, inv_freq [Dh / 2] rounded to float32 as
// the CPU's rotary kernel rounds it).
extern "C" __global__ void decode_rotary(float* qkv, const float* inv_freq, const i64* params, i64 n, i64 h_,
                                         i64 hkv, i64 dh) {
    i64 half = dh / 2, width = (h_ + 2 * hkv) * dh;
    {
        FOR_EACH(e, n * (h_ + hkv) * half) {
            i64 i = e / ((h_ + hkv) * half), hh = (e / half) % (h_ + hkv), c = e % half;
            float angle = (float)params[P_POSITIONS(n) + i] * inv_freq[c];
            float cs = (float)cos((double)angle), sn = (float)sin((double)angle);
            float* row = qkv + i * width + hh * dh;
            float x1 = row[c], x2 = row[c + half];
            row[c] = x1 * cs - x2 * sn;
            row[c + half] = x2 * cs + x1 * sn;
        }
    }
}

extern "C" __global__ void decode_write_cache(const float* qkv, float* kc, float* vc, const i64* params, i64 n,
                                              i64 h_, i64 hkv, i64 dh) {
    i64 width = (h_ + 2 * hkv) * dh, kvw = hkv * dh;
    FOR_EACH(e, n * kvw) {
        i64 i = e / kvw, c = e % kvw;
        i64 r = params[P_ROWS(n) + i];
        kc[r * kvw + c] = qkv[i * width + h_ * dh + c];
        vc[r * kvw + c] = qkv[i * width + h_ * dh + kvw + c];
    }
}

// Split-KV (flash-decoding) attention, pass 1: block (row, head, split) attends to
// the keys [split * chunk, (split + 1) * chunk) of the row's visible keys (a window
// w > 0 hides keys w or more positions back), writing the split's max, sum and
// unnormalized output part[(row * H + head) * splits + split] = (m, l, acc[Dh]).
// Keys come from a contiguous cache (first row in meta) or through the page table.
extern "C" __global__ void decode_attention_split(const float* qkv, const float* kc, const float* vc, float* part,
                                                  const i64* params, i64 n, i64 h_, i64 hkv, i64 dh,
                                                  float scale, i64 window, i64 splits, i64 chunk, i64 table_width,
                                                  i64 page_size) {
    __shared__ float qs[DECODE_MAX_HEAD_DIM];
    __shared__ float acc[DECODE_MAX_HEAD_DIM];
    __shared__ float ps[THREADS];
    __shared__ i64 krow[THREADS];
    __shared__ float fscratch[THREADS];
    __shared__ double dscratch[THREADS];
    i64 width = (h_ + 2 * hkv) * dh, group = h_ / hkv;
    for (i64 blk = blockIdx.x; blk < n * h_ * splits; blk += gridDim.x) {
        i64 split = blk % splits, head = (blk / splits) % h_, i = blk / (splits * h_);
        const i64* meta = params + P_META(n) + i * 3;
        i64 seq = meta[0], first = meta[1], len = meta[2];
        i64 lo = window > 0 && len > window ? len - window : 0;
        i64 s_begin = lo + split * chunk, s_end = s_begin + chunk < len ? s_begin + chunk : len;
        const i64* table = table_width > 0 ? params + P_TABLE(n) + seq * table_width : nullptr;
        i64 g = head / group;
        const float* q = qkv + i * width + head * dh;
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) { qs[d] = q[d]; acc[d] = 0.0f; }
        __syncthreads();
        float m = NEG_INF;
        double l = 0.0;
        for (i64 s0 = s_begin; s0 < s_end; s0 += blockDim.x) {
            i64 s = s0 + threadIdx.x;
            float score = NEG_INF;
            i64 r = -1;
            if (s < s_end) {
                r = table ? table[s / page_size] * page_size + s % page_size : first + s;
                const float* kr = kc + (r * hkv + g) * dh;
                float dot = 0.0f;
                for (i64 d = 0; d < dh; ++d) dot += qs[d] * kr[d];
                score = scale * dot;
            }
            krow[threadIdx.x] = r;
            float m_new = nan_max(m, block_max(score, fscratch));
            float p = score == NEG_INF ? 0.0f : expf(score - m_new);
            ps[threadIdx.x] = p;
            double tile_sum = block_sum((double)p, dscratch);
            float alpha = m == NEG_INF ? 0.0f : expf(m - m_new);
            l = l * (double)alpha + tile_sum;
            for (i64 d = threadIdx.x; d < dh; d += blockDim.x) {
                float a = acc[d] * alpha;
                for (i64 j = 0; j < (i64)blockDim.x && s0 + j < s_end; ++j) {
                    if (ps[j] != 0.0f) a += ps[j] * vc[(krow[j] * hkv + g) * dh + d];
                }
                acc[d] = a;
            }
            m = m_new;
            __syncthreads();
        }
        float* out = part + blk * (dh + 2);
        if (threadIdx.x == 0) { out[0] = m; out[1] = (float)l; }
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) out[2 + d] = acc[d];
        __syncthreads();
    }
}

// Pass 2: each (row, head) combines its splits in split order into out [N, H, Dh].
extern "C" __global__ void decode_attention_combine(const float* part, float* out, i64 rows_heads, i64 splits,
                                                    i64 dh) {
    for (i64 rh = blockIdx.x; rh < rows_heads; rh += gridDim.x) {
        const float* p = part + rh * splits * (dh + 2);
        float m = NEG_INF;
        for (i64 s = 0; s < splits; ++s) m = nan_max(m, p[s * (dh + 2)]);
        double l = 0.0;
        for (i64 s = 0; s < splits; ++s) {
            float ms = p[s * (dh + 2)];
            if (ms != NEG_INF) l += (double)p[s * (dh + 2) + 1] * (double)expf(ms - m);
        }
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) {
            double a = 0.0;
            for (i64 s = 0; s < splits; ++s) {
                float ms = p[s * (dh + 2)];
                if (ms != NEG_INF) a += (double)p[s * (dh + 2) + 2 + d] * (double)expf(ms - m);
            }
            out[rh * dh + d] = l > 0.0 ? (float)(a / l) : 0.0f;
        }
    }
}

__device__ __forceinline__ float decode_erf(float x) { return (float)erf((double)x); }

// The feed-forward activation in place: GELU (exact, or its tanh form as x sigmoid(2u)).
extern "C" __global__ void decode_gelu(float* u, i64 count, i64 tanh_form) {
    FOR_EACH(e, count) {
        float x = u[e];
        if (tanh_form) {
            float inner = 0.7978845608028654f * (0.044715f * x * x * x + x);
            u[e] = x / (1.0f + expf(-2.0f * inner));
        } else {
            u[e] = 0.5f * x * (1.0f + decode_erf(x * 0.70710678118654752f));
        }
    }
}

// g [N, hidden] = silu(gate) * up from the fused rows gu [N, 2 hidden] = (gate | up).
extern "C" __global__ void decode_swiglu(const float* gu, float* g, i64 n, i64 hidden) {
    FOR_EACH(e, n * hidden) {
        i64 i = e / hidden, c = e % hidden;
        float a = gu[i * 2 * hidden + c], b = gu[i * 2 * hidden + hidden + c];
        float s = a * (1.0f / (1.0f + expf(-a)));
        g[e] = s * b;
    }
}

// llama.cpp's block layouts (riftco-tensor's blockq): Q8_0 rows of 34-byte blocks (a
// little-endian half scale, 32 int8 codes), Q4_0 rows of 18-byte blocks (a half scale,
// 16 bytes: low nibbles elements 0..15, high nibbles 16..31, each minus 8). The input
// rows are quantized first as the CPU quantizes them (ggml's quantize_row_q8_0 on
// x86-64): a = max |x| per block of 32, codes rint(x * (127 / a)) (ties to even), the
// scale a / 127 rounded to a half (ties to even).

__device__ __forceinline__ float half_bits_to_f32(unsigned int h) {
    unsigned int sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24
        return sign ? -v : v;
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ unsigned int f32_to_half_bits(float f) {
    unsigned int u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to infinity
    if (a >= 0x38800000u) {                       // a normal half
        unsigned int r = a - 0x38000000u;
        r += 0x0fffu + ((r >> 13) & 1u);
        return sign | (r >> 13);
    }
    return sign | (unsigned int)rintf(__uint_as_float(a) * 16777216.0f);  // subnormal: x / 2^-24
}

// xq [n, cols] int8 codes and xs [n, cols / 32] scales of the input rows x [n, cols].
extern "C" __global__ void decode_quantize_q8(const float* x, signed char* xq, float* xs, i64 n, i64 cols) {
    i64 blocks = cols / 32;
    FOR_EACH(e, n * blocks) {
        const float* xb = x + e * 32;
        float a = 0.0f;
        for (int j = 0; j < 32; ++j) a = fmaxf(a, fabsf(xb[j]));
        float inv = a != 0.0f ? 127.0f / a : 0.0f;
        for (int j = 0; j < 32; ++j) xq[e * 32 + j] = (signed char)rintf(xb[j] * inv);
        xs[e] = half_bits_to_f32(f32_to_half_bits(a / 127.0f));
    }
}

// y[i, r] = (accumulate ? y : 0) + sum over blocks of (integer dot) * (d * s) + bias[r].
template <int Q4>
__device__ void linear_blocks(const unsigned char* w, const float* bias, const signed char* xq, const float* xs,
                              float* y, i64 n, i64 rows, i64 cols, i64 accumulate) {
    __shared__ double scratch[THREADS];
    const i64 bytes = Q4 ? 18 : 34, blocks = cols / 32;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const unsigned char* wr = w + r * blocks * bytes;
        for (i64 i = 0; i < n; ++i) {
            double s = 0.0;
            for (i64 b = threadIdx.x; b < blocks; b += blockDim.x) {
                const unsigned char* blk = wr + b * bytes;
                const signed char* q = xq + (i * blocks + b) * 32;
                int p = 0;
                for (int j = 0; j < 32; ++j) {
                    int v = Q4 ? (int)((j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4)) - 8
                               : (int)(signed char)blk[2 + j];
                    p += v * (int)q[j];
                }
                float d = half_bits_to_f32((unsigned int)blk[0] | ((unsigned int)blk[1] << 8)) * xs[i * blocks + b];
                s += (double)p * (double)d;
            }
            double total = block_sum(s, scratch);
            if (threadIdx.x == 0) {
                float v = (float)total + (bias ? bias[r] : 0.0f);
                y[i * rows + r] = accumulate ? y[i * rows + r] + v : v;
            }
        }
    }
}

extern "C" __global__ void decode_linear_q8_0(const unsigned char* w, const float* bias, const signed char* xq,
                                              const float* xs, float* y, i64 n, i64 rows, i64 cols,
                                              i64 accumulate) {
    linear_blocks<0>(w, bias, xq, xs, y, n, rows, cols, accumulate);
}

extern "C" __global__ void decode_linear_q4_0(const unsigned char* w, const float* bias, const signed char* xq,
                                              const float* xs, float* y, i64 n, i64 rows, i64 cols,
                                              i64 accumulate) {
    linear_blocks<1>(w, bias, xq, xs, y, n, rows, cols, accumulate);
}
