// Attention: q [B, T, H, Dh], k and v [B, S, Hkv, Dh]; query head h reads
// key/value head h / (H / Hkv). With `causal`, query t sits at position
// S - T + t and sees keys up to it; a `window` w > 0 also hides keys w or more
// positions back. One block (of at most TILE threads) per query row (or key row in the
// key/value gradient), keys in tiles of blockDim.x with an online softmax, so memory
// is linear in the sequence length; every sum has a fixed order.
//
// The dense kernels come in two input types: q, k and v all float32 (`_f32`) or all
// bfloat16 (`_bf16`, mixed precision). Each element is widened to float32 as it is
// read and everything after is the float32 kernel's arithmetic, so the bfloat16
// kernel gives the float32 kernel's bits on the widened inputs. Scores, statistics,
// outputs and gradients (and `dout`) are float32.

#define TILE 128
#define MAX_HEAD_DIM 256

__device__ __forceinline__ bool sees(i64 pos, i64 s, i64 causal, i64 window) {
    if (!causal) return true;
    return s <= pos && (window <= 0 || pos - s < window);
}

template <typename A, typename B>
__device__ __forceinline__ float dot(const A* a, const B* b, i64 n) {
    float acc = 0.0f;
    for (i64 d = 0; d < n; ++d) acc += ld(a, d) * ld(b, d);
    return acc;
}

// The key (and value) row of position p of one query row: contiguous rows
// (base + p) or a paged pool (page table row `table`, pages of page_size rows).
struct KeyRows {
    i64 base;
    const i64* table;
    i64 page_size;
    i64 pages;
};

__device__ __forceinline__ i64 key_row(const KeyRows& r, i64 p, i64* bad, i64 bad_at) {
    if (!r.table) return r.base + p;
    i64 page = r.table[p / r.page_size];
    if (page < 0 || page >= r.pages) {
        report_bad(bad, bad_at + p / r.page_size);
        return -1;
    }
    return page * r.page_size + p % r.page_size;
}

// One query row over keys 0..len of `rows` (key row stride hkv * dh): writes
// out[dh] and returns (max, sum) in stats. Shared: qs, acc (MAX_HEAD_DIM), ps, scratch.
template <typename T>
__device__ void attend_row(const T* qrow, const T* k, const T* v, float* orow, const KeyRows& rows,
                           i64 len, i64 pos, i64 causal, i64 window, i64 hkv, i64 g, i64 dh, float scale,
                           float* stats, i64* bad, i64 bad_at) {
    __shared__ float qs[MAX_HEAD_DIM];
    __shared__ float acc[MAX_HEAD_DIM];
    __shared__ float ps[TILE];
    __shared__ i64 krow[TILE];
    __shared__ float fscratch[TILE];
    __shared__ double dscratch[TILE];
    for (i64 d = threadIdx.x; d < dh; d += blockDim.x) { qs[d] = ld(qrow, d); acc[d] = 0.0f; }
    __syncthreads();
    float m = NEG_INF;
    double l = 0.0;
    for (i64 s0 = 0; s0 < len; s0 += blockDim.x) {
        i64 s = s0 + threadIdx.x;
        float score = NEG_INF;
        i64 r = -1;
        if (s < len && sees(pos, s, causal, window)) {
            r = key_row(rows, s, bad, bad_at);
            if (r >= 0) score = scale * dot(qs, k + (r * hkv + g) * dh, dh);
        }
        krow[threadIdx.x] = r;
        float m_new = nan_max(m, block_max(score, fscratch));
        if (m_new == NEG_INF) continue;  // nothing visible yet (uniform across the block)
        float p = score == NEG_INF ? 0.0f : expf(score - m_new);
        ps[threadIdx.x] = p;
        double tile_sum = block_sum((double)p, dscratch);
        float alpha = m == NEG_INF ? 0.0f : expf(m - m_new);
        l = l * (double)alpha + tile_sum;
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) {
            float a = acc[d] * alpha;
            for (i64 j = 0; j < (i64)blockDim.x && s0 + j < len; ++j) {
                if (ps[j] != 0.0f) a += ps[j] * ld(v, (krow[j] * hkv + g) * dh + d);
            }
            acc[d] = a;
        }
        m = m_new;
        __syncthreads();
    }
    for (i64 d = threadIdx.x; d < dh; d += blockDim.x) orow[d] = l > 0.0 ? (float)((double)acc[d] / l) : 0.0f;
    stats[0] = m;
    stats[1] = (float)l;
    __syncthreads();
}

// Forward, materialized (probs [B, H, T, S] not null) or flash (row_max and
// row_sum [B, H, T] not null).
template <typename T>
__device__ void attention_forward(const T* q, const T* k, const T* v, float* out, float* probs, float* row_max,
                                  float* row_sum, i64 b_, i64 t_, i64 s_, i64 h_, i64 hkv, i64 dh, float scale,
                                  i64 causal, i64 window) {
    i64 group = h_ / hkv;
    for (i64 row = blockIdx.x; row < b_ * h_ * t_; row += gridDim.x) {
        i64 t = row % t_, h = (row / t_) % h_, b = row / (t_ * h_);
        i64 g = h / group, pos = s_ - t_ + t;
        const T* qrow = q + ((b * t_ + t) * h_ + h) * dh;
        float* orow = out + ((b * t_ + t) * h_ + h) * dh;
        KeyRows rows = {b * s_, nullptr, 1, 0};
        float stats[2];
        attend_row(qrow, k, v, orow, rows, s_, pos, causal, window, hkv, g, dh, scale, stats, nullptr, 0);
        if (row_max && threadIdx.x == 0) { row_max[row] = stats[0]; row_sum[row] = stats[1]; }
        if (probs) {
            float* pr = probs + row * s_;
            for (i64 s = threadIdx.x; s < s_; s += blockDim.x) {
                float p = 0.0f;
                if (sees(pos, s, causal, window) && stats[1] > 0.0f) {
                    float score = scale * dot(qrow, k + ((b * s_ + s) * hkv + g) * dh, dh);
                    p = (float)((double)expf(score - stats[0]) / (double)stats[1]);
                }
                pr[s] = p;
            }
        }
        __syncthreads();
    }
}

// The probability of (query row, key s): saved (probs) or recomputed (flash).
template <typename A, typename B>
__device__ __forceinline__ float prob(const float* probs, const float* row_max, const float* row_sum, i64 row,
                                      i64 s_, i64 s, const A* qrow, const B* krow, i64 dh, float scale) {
    if (probs) return probs[row * s_ + s];
    if (row_sum[row] <= 0.0f) return 0.0f;
    return (float)((double)expf(scale * dot(qrow, krow, dh) - row_max[row]) / (double)row_sum[row]);
}

// Backward, stage 1 (one block per query row): delta = sum_s P dP and
// dq = scale * sum_s P (dP - delta) k_s, dP = dout . v_s.
template <typename T>
__device__ void attention_dq(const float* dout, const T* q, const T* k, const T* v, const float* probs,
                             const float* row_max, const float* row_sum, float* dq, float* delta, i64 b_, i64 t_,
                             i64 s_, i64 h_, i64 hkv, i64 dh, float scale, i64 causal, i64 window) {
    __shared__ float qs[MAX_HEAD_DIM];
    __shared__ float dos[MAX_HEAD_DIM];
    __shared__ float acc[MAX_HEAD_DIM];
    __shared__ float dss[TILE];
    __shared__ double dscratch[TILE];
    i64 group = h_ / hkv;
    for (i64 row = blockIdx.x; row < b_ * h_ * t_; row += gridDim.x) {
        i64 t = row % t_, h = (row / t_) % h_, b = row / (t_ * h_);
        i64 g = h / group, pos = s_ - t_ + t;
        i64 at = ((b * t_ + t) * h_ + h) * dh;
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) { qs[d] = ld(q, at + d); dos[d] = dout[at + d]; acc[d] = 0.0f; }
        __syncthreads();
        double part = 0.0;
        for (i64 s = threadIdx.x; s < s_; s += blockDim.x) {
            if (!sees(pos, s, causal, window)) continue;
            const T* kr = k + ((b * s_ + s) * hkv + g) * dh;
            float p = prob(probs, row_max, row_sum, row, s_, s, qs, kr, dh, scale);
            part += (double)p * (double)dot(dos, v + ((b * s_ + s) * hkv + g) * dh, dh);
        }
        float dl = (float)block_sum(part, dscratch);
        for (i64 s0 = 0; s0 < s_; s0 += blockDim.x) {
            i64 s = s0 + threadIdx.x;
            float ds = 0.0f;
            if (s < s_ && sees(pos, s, causal, window)) {
                const T* kr = k + ((b * s_ + s) * hkv + g) * dh;
                float p = prob(probs, row_max, row_sum, row, s_, s, qs, kr, dh, scale);
                ds = p * (dot(dos, v + ((b * s_ + s) * hkv + g) * dh, dh) - dl);
            }
            dss[threadIdx.x] = ds;
            __syncthreads();
            for (i64 d = threadIdx.x; d < dh; d += blockDim.x) {
                float a = acc[d];
                for (i64 j = 0; j < (i64)blockDim.x && s0 + j < s_; ++j) {
                    if (dss[j] != 0.0f) a += dss[j] * ld(k, ((b * s_ + s0 + j) * hkv + g) * dh + d);
                }
                acc[d] = a;
            }
            __syncthreads();
        }
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) dq[at + d] = scale * acc[d];
        if (threadIdx.x == 0) delta[row] = dl;
        __syncthreads();
    }
}

// Backward, stage 2 (one block per key row of one key/value head): over every
// query head of its group and every query that sees it, in order,
// dv = sum P dout_t, dk = scale * sum P (dP - delta_t) q_t.
template <typename T>
__device__ void attention_dkv(const float* dout, const T* q, const T* k, const T* v, const float* probs,
                              const float* row_max, const float* row_sum, const float* delta, float* dk, float* dv,
                              i64 b_, i64 t_, i64 s_, i64 h_, i64 hkv, i64 dh, float scale, i64 causal,
                              i64 window) {
    __shared__ float ks[MAX_HEAD_DIM];
    __shared__ float vs[MAX_HEAD_DIM];
    __shared__ float dka[MAX_HEAD_DIM];
    __shared__ float dva[MAX_HEAD_DIM];
    __shared__ float pss[TILE];
    __shared__ float dss[TILE];
    i64 group = h_ / hkv;
    for (i64 key = blockIdx.x; key < b_ * hkv * s_; key += gridDim.x) {
        i64 s = key % s_, g = (key / s_) % hkv, b = key / (s_ * hkv);
        i64 at = ((b * s_ + s) * hkv + g) * dh;
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) { ks[d] = ld(k, at + d); vs[d] = ld(v, at + d); dka[d] = 0.0f; dva[d] = 0.0f; }
        __syncthreads();
        for (i64 h = g * group; h < (g + 1) * group; ++h) {
            for (i64 t0 = 0; t0 < t_; t0 += blockDim.x) {
                i64 t = t0 + threadIdx.x;
                float p = 0.0f, ds = 0.0f;
                if (t < t_ && sees(s_ - t_ + t, s, causal, window)) {
                    i64 row = (b * h_ + h) * t_ + t;
                    i64 qa = ((b * t_ + t) * h_ + h) * dh;
                    p = prob(probs, row_max, row_sum, row, s_, s, q + qa, ks, dh, scale);
                    ds = p * (dot(dout + qa, vs, dh) - delta[row]);
                }
                pss[threadIdx.x] = p;
                dss[threadIdx.x] = ds;
                __syncthreads();
                for (i64 d = threadIdx.x; d < dh; d += blockDim.x) {
                    float a = dva[d], c = dka[d];
                    for (i64 j = 0; j < (i64)blockDim.x && t0 + j < t_; ++j) {
                        i64 qa = ((b * t_ + t0 + j) * h_ + h) * dh + d;
                        if (pss[j] != 0.0f) a += pss[j] * dout[qa];
                        if (dss[j] != 0.0f) c += dss[j] * ld(q, qa);
                    }
                    dva[d] = a;
                    dka[d] = c;
                }
                __syncthreads();
            }
        }
        for (i64 d = threadIdx.x; d < dh; d += blockDim.x) { dk[at + d] = scale * dka[d]; dv[at + d] = dva[d]; }
        __syncthreads();
    }
}

// The entry points, one per input type.
#define DENSE_ATTENTION(SUFFIX, T)                                                                               \
    extern "C" __global__ void attention_##SUFFIX(const T* q, const T* k, const T* v, float* out, float* probs, \
                                                  float* row_max, float* row_sum, i64 b_, i64 t_, i64 s_,       \
                                                  i64 h_, i64 hkv, i64 dh, float scale, i64 causal,             \
                                                  i64 window) {                                                 \
        attention_forward<T>(q, k, v, out, probs, row_max, row_sum, b_, t_, s_, h_, hkv, dh, scale, causal,    \
                             window);                                                                           \
    }                                                                                                           \
    extern "C" __global__ void attention_dq_##SUFFIX(const float* dout, const T* q, const T* k, const T* v,     \
                                                     const float* probs, const float* row_max,                  \
                                                     const float* row_sum, float* dq, float* delta, i64 b_,     \
                                                     i64 t_, i64 s_, i64 h_, i64 hkv, i64 dh, float scale,      \
                                                     i64 causal, i64 window) {                                  \
        attention_dq<T>(dout, q, k, v, probs, row_max, row_sum, dq, delta, b_, t_, s_, h_, hkv, dh, scale,     \
                        causal, window);                                                                        \
    }                                                                                                           \
    extern "C" __global__ void attention_dkv_##SUFFIX(const float* dout, const T* q, const T* k, const T* v,    \
                                                      const float* probs, const float* row_max,                 \
                                                      const float* row_sum, const float* delta, float* dk,      \
                                                      float* dv, i64 b_, i64 t_, i64 s_, i64 h_, i64 hkv,       \
                                                      i64 dh, float scale, i64 causal, i64 window) {            \
        attention_dkv<T>(dout, q, k, v, probs, row_max, row_sum, delta, dk, dv, b_, t_, s_, h_, hkv, dh,       \
                         scale, causal, window);                                                                \
    }
DENSE_ATTENTION(f32, float)
DENSE_ATTENTION(bf16, bf16)

// Ragged (packed) sequences, contiguous (varlen) or paged keys and values:
// q and out [N, H, Dh]; meta [N, 4] per query row = (sequence, first key row,
// key count, position); a page table row per sequence when `table` is set.
extern "C" __global__ void attention_ragged_f32(const float* q, const float* k, const float* v, float* out,
                                                const i64* meta, const i64* table, i64 table_cols,
                                                i64 page_size, i64 pages, i64 n, i64 h_, i64 hkv, i64 dh,
                                                float scale, i64 window, i64* bad) {
    i64 group = h_ / hkv;
    for (i64 row = blockIdx.x; row < n * h_; row += gridDim.x) {
        i64 i = row / h_, h = row % h_;
        i64 seq = meta[i * 4], first = meta[i * 4 + 1], len = meta[i * 4 + 2], pos = meta[i * 4 + 3];
        KeyRows rows = {first, table ? table + seq * table_cols : nullptr, page_size, pages};
        float stats[2];
        attend_row(q + row * dh, k, v, out + row * dh, rows, len, pos, 1, window, hkv, h / group, dh, scale,
                   stats, bad, seq * table_cols);
    }
}

// The cuBLAS route (causal or full attention, one key/value head per query head, no
// window): scores [B, H, T, S] come from a strided-batched product; these kernels
// turn them into probabilities in place and back into score gradients. One block per
// score row, every sum in a fixed order.
//
// A row's probability of key s: exp(scale * score - m) / l where the row sees the key
// (and l > 0), else 0. One function, so a kernel that evaluates it twice gets one value.
__device__ __forceinline__ float row_prob(float score, i64 s, i64 visible, float scale, float m, double l) {
    return (s < visible && l > 0.0) ? (float)((double)expf(scale * score - m) / l) : 0.0f;
}

// attention_softmax_f32: p = exp(scale * s - m) / l over the keys the row sees (0
// elsewhere), the flash kernels' statistics: m the row's largest scaled score, l the
// sum of exp(scale * s - m) (in double). `given` 1: m and l are read from row_max and
// row_sum (a backward recomputing the forward's probabilities); 0: they are found,
// and written there when row_max is not null. p replaces the scores, or, when p16 is
// not null, goes there rounded to bfloat16 (what a bfloat16 product reads).
extern "C" __global__ void attention_softmax_f32(float* scores, float* row_max, float* row_sum, bf16* p16,
                                                 i64 rows, i64 t_, i64 s_, float scale, i64 causal, i64 given) {
    __shared__ float fscratch[THREADS];
    __shared__ double dscratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        float* sr = scores + row * s_;
        i64 pos = s_ - t_ + row % t_;
        i64 visible = causal ? (pos + 1 < s_ ? pos + 1 : s_) : s_;
        float m;
        double l;
        if (given) {
            m = row_max[row];
            l = (double)row_sum[row];
        } else {
            float mx = NEG_INF;
            for (i64 s = threadIdx.x; s < visible; s += blockDim.x) mx = nan_max(mx, scale * sr[s]);
            m = block_max(mx, fscratch);
            double part = 0.0;
            if (m != NEG_INF) {
                for (i64 s = threadIdx.x; s < visible; s += blockDim.x) part += (double)expf(scale * sr[s] - m);
            }
            l = block_sum(part, dscratch);
            if (row_max && threadIdx.x == 0) { row_max[row] = m; row_sum[row] = (float)l; }
        }
        for (i64 s = threadIdx.x; s < s_; s += blockDim.x) {
            float p = row_prob(sr[s], s, visible, scale, m, l);
            if (p16) p16[row * s_ + s] = f32_to_bf16(p);
            else sr[s] = p;
        }
        __syncthreads();
    }
}

// attention_dscores_f32: dp [B, H, T, S] (dout v^T) becomes the scores' gradient,
// scaled: scale * p * (dp - sum over the row of p * dp), in place.
extern "C" __global__ void attention_dscores_f32(const float* probs, float* dp, i64 rows, i64 s_, float scale) {
    __shared__ double dscratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* pr = probs + row * s_;
        float* dr = dp + row * s_;
        double part = 0.0;
        for (i64 s = threadIdx.x; s < s_; s += blockDim.x) {
            if (pr[s] != 0.0f) part += (double)pr[s] * (double)dr[s];
        }
        float delta = (float)block_sum(part, dscratch);
        for (i64 s = threadIdx.x; s < s_; s += blockDim.x) {
            dr[s] = pr[s] == 0.0f ? 0.0f : scale * pr[s] * (dr[s] - delta);
        }
        __syncthreads();
    }
}

// attention_softmax_dscores_f32: a backward's two row passes in one. scores [B, H, T, S]
// (q k^T, unscaled) become the probabilities from the forward's statistics row_max and
// row_sum, as attention_softmax_f32 with `given` writes them, and dp (dout v^T) becomes
// the scores' gradient as attention_dscores_f32 writes it, both in place: the same
// arithmetic in the same order, so the same bits as the two kernels one after the other.
// With p16 and ds16 (not null) the two go there instead, rounded to bfloat16, and the
// probabilities are evaluated again for the gradient rather than read back.
extern "C" __global__ void attention_softmax_dscores_f32(float* scores, float* dp, const float* row_max,
                                                         const float* row_sum, bf16* p16, bf16* ds16, i64 rows,
                                                         i64 t_, i64 s_, float scale, i64 causal) {
    __shared__ double dscratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        float* sr = scores + row * s_;
        float* dr = dp + row * s_;
        i64 pos = s_ - t_ + row % t_;
        i64 visible = causal ? (pos + 1 < s_ ? pos + 1 : s_) : s_;
        float m = row_max[row];
        double l = (double)row_sum[row];
        double part = 0.0;
        for (i64 s = threadIdx.x; s < s_; s += blockDim.x) {
            float p = row_prob(sr[s], s, visible, scale, m, l);
            if (p16) p16[row * s_ + s] = f32_to_bf16(p);
            else sr[s] = p;
            if (p != 0.0f) part += (double)p * (double)dr[s];
        }
        float delta = (float)block_sum(part, dscratch);
        for (i64 s = threadIdx.x; s < s_; s += blockDim.x) {
            float p = p16 ? row_prob(sr[s], s, visible, scale, m, l) : sr[s];
            float g = p == 0.0f ? 0.0f : scale * p * (dr[s] - delta);
            if (ds16) ds16[row * s_ + s] = f32_to_bf16(g);
            else dr[s] = g;
        }
        __syncthreads();
    }
}
