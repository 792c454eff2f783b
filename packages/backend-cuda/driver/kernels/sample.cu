// Sampling on the device (riftco.backends.cuda.ops.decode.Sampling): one block per
// row of logits [M, vocab] writes the row's token id, so a decode step reads back
// only the ids. Per row, at params[at + r * (7 + hist)]: temperature, top_k, top_p,
// penalty (float bits), seed, counter, history length, then the history ids.
//
// Every step has a fixed order: the repetition penalty once per distinct history
// token; greedy (temperature <= 0) is the first largest logit; top-k and top-p keep
// the values at or above a threshold found by a bit-by-bit search over the float's
// ordered bits (32 counting passes, no sort, ties at the threshold kept); the draw
// walks the vocabulary in index order against u * total with u from a counter-based
// generator (splitmix64 of seed, counter and row), so a draw repeats bit for bit.

__device__ __forceinline__ unsigned int order_key(float x) {
    unsigned int u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The count (or probability mass, `mass`) of the row's values whose key is >= key.
__device__ double at_least(const float* x, i64 vocab, unsigned int key, const float* mass_of, float top,
                           double* scratch) {
    double s = 0.0;
    for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) {
        if (order_key(x[c]) >= key) s += mass_of ? (double)expf(x[c] - top) : 1.0;
    }
    return block_sum(s, scratch);
}

// The largest key with at_least(key) >= want.
__device__ unsigned int threshold(const float* x, i64 vocab, double want, const float* mass_of, float top,
                                  double* scratch) {
    unsigned int result = 0;
    for (int bit = 31; bit >= 0; --bit) {
        unsigned int cand = result | (1u << bit);
        if (at_least(x, vocab, cand, mass_of, top, scratch) >= want) result = cand;
    }
    return result;
}

extern "C" __global__ void sample_rows(const float* logits, float* scratch_rows, i64* ids, const i64* params, i64 at,
                                       i64 m, i64 vocab, i64 hist) {
    __shared__ double dscratch[THREADS];
    __shared__ float fscratch[THREADS];
    __shared__ i64 iscratch[THREADS];
    for (i64 r = blockIdx.x; r < m; r += gridDim.x) {
        const i64* p = params + at + r * (7 + hist);
        float temperature = __int_as_float((int)p[0]);
        i64 top_k = p[1];
        float top_p = __int_as_float((int)p[2]);
        float penalty = __int_as_float((int)p[3]);
        u64 seed = (u64)p[4], counter = (u64)p[5];
        i64 seen = p[6];
        const i64* history = p + 7;
        const float* in = logits + r * vocab;
        float* x = scratch_rows + r * vocab;
        float inv_t = temperature > 0.0f ? 1.0f / temperature : 1.0f;
        for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) x[c] = in[c];
        __syncthreads();
        if (penalty != 1.0f) {
            for (i64 j = threadIdx.x; j < seen; j += blockDim.x) {
                i64 t = history[j];
                bool first = t >= 0 && t < vocab;
                for (i64 e = 0; e < j && first; ++e) first = history[e] != t;
                if (first) x[t] = x[t] > 0.0f ? x[t] / penalty : x[t] * penalty;
            }
            __syncthreads();
        }
        if (temperature > 0.0f) {
            for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) x[c] = x[c] * inv_t;
            __syncthreads();
        }
        // The first largest value (greedy, and the softmax's shift).
        float best = NEG_INF;
        i64 best_at = vocab;
        for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) {
            if (best_at == vocab || x[c] > best) { best = x[c]; best_at = c; }
        }
        fscratch[threadIdx.x] = best;
        iscratch[threadIdx.x] = best_at;
        __syncthreads();
        for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                float o = fscratch[threadIdx.x + s];
                i64 oi = iscratch[threadIdx.x + s];
                if (oi < vocab && (iscratch[threadIdx.x] == vocab || o > fscratch[threadIdx.x] ||
                                   (o == fscratch[threadIdx.x] && oi < iscratch[threadIdx.x]))) {
                    fscratch[threadIdx.x] = o;
                    iscratch[threadIdx.x] = oi;
                }
            }
            __syncthreads();
        }
        float top = fscratch[0];
        i64 argmax = iscratch[0];
        __syncthreads();
        if (temperature <= 0.0f) {
            if (threadIdx.x == 0) ids[r] = argmax;
            __syncthreads();
            continue;
        }
        unsigned int keep = 0;
        if (top_k > 0 && top_k < vocab) keep = threshold(x, vocab, (double)top_k, nullptr, top, dscratch);
        // Values under the top-k threshold drop out before top-p is measured.
        for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) if (order_key(x[c]) < keep) x[c] = NEG_INF;
        __syncthreads();
        double total = at_least(x, vocab, 0u, x, top, dscratch);
        if (top_p < 1.0f) {
            unsigned int cut = threshold(x, vocab, (double)top_p * total, x, top, dscratch);
            for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) if (order_key(x[c]) < cut) x[c] = NEG_INF;
            __syncthreads();
            total = at_least(x, vocab, 0u, x, top, dscratch);
        }
        // The draw: chunk sums per thread (contiguous chunks), then thread 0 walks them.
        i64 per = (vocab + blockDim.x - 1) / blockDim.x;
        i64 c0 = threadIdx.x * per, c1 = c0 + per < vocab ? c0 + per : vocab;
        double s = 0.0;
        for (i64 c = c0; c < c1; ++c) if (x[c] != NEG_INF) s += (double)expf(x[c] - top);
        dscratch[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 h = splitmix64(seed ^ splitmix64(counter ^ splitmix64((u64)r)));
            double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
            double target = u * total, run = 0.0;
            i64 chosen = argmax;
            unsigned int t = 0;
            for (; t + 1 < blockDim.x && run + dscratch[t] <= target; ++t) run += dscratch[t];
            i64 b0 = t * per, b1 = b0 + per < vocab ? b0 + per : vocab;
            for (i64 c = b0; c < b1; ++c) {
                if (x[c] == NEG_INF) continue;
                chosen = c;
                run += (double)expf(x[c] - top);
                if (run > target) break;
            }
            ids[r] = chosen;
        }
        __syncthreads();
    }
}
