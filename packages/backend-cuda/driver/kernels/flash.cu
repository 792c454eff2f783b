// FlashAttention-2 on the tensor cores (sm_80 and later): bfloat16 operands,
// float32 sums, the scores and probabilities never leave the chip.
//
// A block is 4 warps; each warp owns 16 rows of its block's 64 (queries forward and
// for dq; keys for dk and dv) and walks the other side's tiles of 64, staged in
// shared memory as bfloat16. Every product is `mma.sync.m16n8k16` (bfloat16 A and B,
// float32 C and D) on fragments read from shared memory, or, for the probabilities and
// the scores' gradient, built in registers from the previous product's accumulators
// (a C fragment's pairs are an A fragment's). q, k and v are read through a row stride
// (so straight out of a stacked projection, float32 rounded to bfloat16 as they are
// staged -- the bits of converting first -- or bfloat16 as stored), outputs and
// gradients are float32, written through a row stride too.
//
// The statistics are riftco's flash statistics: row_max the row's largest scaled
// score, row_sum the sum of exp(scale s - row_max) over the keys it sees. Forward
// keeps them online (FA2's rescaling); the probabilities multiplying v are
// exp(scale s - m) at the running max, rounded to bfloat16, and the output divided by
// the row's sum at the end. Backward: flash_dq (which also writes delta = rowsum(dout
// * out) for its rows) and then flash_dkv, each output summed by one warp in key or
// query order: no atomics, the same bits run to run.
//
// Causal rows see the keys up to their position, pos = s - t + row (the last t of s
// positions). Fragment layout (PTX ISA, mma.m16n8k16 .bf16): lane = 4 g + c;
// A (16x16 row-major) registers {(g, 2c), (g, 2c+1)}, {(g+8, 2c), ..}, {(g, 2c+8), ..},
// {(g+8, 2c+8), ..}; B (16x8) {(2c, g), (2c+1, g)}, {(2c+8, g), (2c+9, g)}; C (16x8)
// (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1). The host emulation implements the
// instruction and the shuffles from the same table (tests/emulator/shim.h).

#define FLASH_TILE 64
#define FLASH_THREADS 128

// D = A B + C on one warp's fragments.
__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, const unsigned* b) {
#ifdef RIFTCO_EMULATION
    emu_mma_m16n8k16_bf16(c, a, b);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ float lanes4_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float lanes4_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Two bfloat16 of a row-major tile: (row, col) low, (row, col + 1) high.
__device__ __forceinline__ unsigned pair_along(const bf16* tile, int ld, int row, int col) {
    const bf16* p = tile + row * ld + col;
#ifdef RIFTCO_EMULATION
    emu_require_aligned(p, 4);  // the device faults on a misaligned 32-bit load
    return (unsigned)p[0] | ((unsigned)p[1] << 16);
#else
    return *reinterpret_cast<const unsigned*>(p);
#endif
}

// Two bfloat16 of a column: (row, col) low, (row + 1, col) high.
__device__ __forceinline__ unsigned pair_down(const bf16* tile, int ld, int row, int col) {
    return (unsigned)tile[row * ld + col] | ((unsigned)tile[(row + 1) * ld + col] << 16);
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    return (unsigned)f32_to_bf16(lo) | ((unsigned)f32_to_bf16(hi) << 16);
}

// The A fragment of the 16x16 block at (row, col) of a row-major tile.
__device__ __forceinline__ void load_a(unsigned* a, const bf16* tile, int ld, int row, int col) {
    int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
    a[0] = pair_along(tile, ld, row + g, col + 2 * c);
    a[1] = pair_along(tile, ld, row + g + 8, col + 2 * c);
    a[2] = pair_along(tile, ld, row + g, col + 2 * c + 8);
    a[3] = pair_along(tile, ld, row + g + 8, col + 2 * c + 8);
}

// The B fragment (k 16 x n 8) of B = T^T: B[k][n] = tile[n0 + n][k0 + k].
__device__ __forceinline__ void load_bt(unsigned* b, const bf16* tile, int ld, int n0, int k0) {
    int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
    b[0] = pair_along(tile, ld, n0 + g, k0 + 2 * c);
    b[1] = pair_along(tile, ld, n0 + g, k0 + 2 * c + 8);
}

// The B fragment of B = T: B[k][n] = tile[k0 + k][n0 + n].
__device__ __forceinline__ void load_b(unsigned* b, const bf16* tile, int ld, int k0, int n0) {
    int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
    b[0] = pair_down(tile, ld, k0 + 2 * c, n0 + g);
    b[1] = pair_down(tile, ld, k0 + 2 * c + 8, n0 + g);
}

// The A fragment of columns 16 kk .. 16 kk + 15 of a 16 x 64 accumulator (eight C
// fragments), rounded to bfloat16.
__device__ __forceinline__ void accum_to_a(unsigned* a, const float (*acc)[4], int kk) {
    a[0] = pack_bf16(acc[2 * kk][0], acc[2 * kk][1]);
    a[1] = pack_bf16(acc[2 * kk][2], acc[2 * kk][3]);
    a[2] = pack_bf16(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[3] = pack_bf16(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// Rows [row0, row0 + 64) of a [B, n, H, HD] tensor (row stride `row`, from element
// `off`), head `hh` of batch row `bb`, staged as bfloat16; rows past n are zeros.
template <typename T, int HD>
__device__ __forceinline__ void stage(bf16* tile, const T* src, i64 off, i64 row, i64 bb, i64 n, i64 hh, i64 row0) {
    constexpr int LD = HD + 8;
    for (int i = threadIdx.x; i < FLASH_TILE * HD; i += FLASH_THREADS) {
        int r = i / HD, d = i % HD;
        i64 pos = row0 + r;
        float x = pos < n ? ld(src, off + (bb * n + pos) * row + hh * HD + d) : 0.0f;
        tile[r * LD + d] = f32_to_bf16(x);
    }
}

// Both tiles of one tile of keys (or of queries): k and v (q and dout) rows from row0.
template <typename A, typename B, int HD>
__device__ __forceinline__ void stage_two(bf16* first, const A* a, i64 a_off, i64 a_row, bf16* second, const B* b,
                                          i64 b_off, i64 b_row, i64 bb, i64 n, i64 hh, i64 row0) {
    stage<A, HD>(first, a, a_off, a_row, bb, n, hh, row0);
    stage<B, HD>(second, b, b_off, b_row, bb, n, hh, row0);
}

template <int N>
__device__ __forceinline__ void zero(float (*acc)[4]) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

// The keys the query rows [row0, row0 + 64) see between them: [first_key, keys_end)
// (the first a tile's start).
__device__ __forceinline__ i64 keys_end(i64 row0, i64 t_, i64 s_, i64 causal) {
    i64 last = row0 + FLASH_TILE - 1 < t_ - 1 ? row0 + FLASH_TILE - 1 : t_ - 1;
    return causal ? s_ - t_ + last + 1 : s_;
}

__device__ __forceinline__ i64 first_key(i64 row0, i64 t_, i64 s_, i64 causal, i64 window) {
    if (!causal || window <= 0) return 0;
    i64 first = s_ - t_ + row0 - window + 1;
    return first < 0 ? 0 : first / FLASH_TILE * FLASH_TILE;
}

// Whether a (query row, key) pair is seen: the key exists, the row exists, and (causal)
// the key is at or before the row's position and (a window w > 0) less than w back.
__device__ __forceinline__ bool seen(i64 row, i64 key, i64 t_, i64 s_, i64 causal, i64 window) {
    i64 pos = s_ - t_ + row;
    return row < t_ && key < s_ && (!causal || (key <= pos && (window <= 0 || pos - key < window)));
}

// The scaled scores of one warp's 16 rows against a tile of 64 (A fragments `qa`,
// B = tile^T): acc[nb] the C fragment of columns 8 nb .. 8 nb + 7.
template <int HD>
__device__ __forceinline__ void scores(float (*acc)[4], const unsigned (*qa)[4], const bf16* tile) {
    constexpr int LD = HD + 8;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            unsigned b[2];
            load_bt(b, tile, LD, nb * 8, kk * 16);
            mma_bf16(acc[nb], qa[kk], b);
        }
    }
}

// acc[db] += P V for P a 16 x 64 accumulator (rounded to bfloat16) and V a row-major
// 64 x HD tile.
template <int HD>
__device__ __forceinline__ void accumulate(float (*acc)[4], const float (*p)[4], const bf16* tile) {
    constexpr int LD = HD + 8;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        unsigned a[4];
        accum_to_a(a, p, kk);
#pragma unroll
        for (int db = 0; db < HD / 8; ++db) {
            unsigned b[2];
            load_b(b, tile, LD, kk * 16, db * 8);
            mma_bf16(acc[db], a, b);
        }
    }
}

// acc rows (this warp's 16 of the tile from row0) written as float32 to a [B, n, H, HD]
// tensor (row stride `row`, from element `off`), each multiplied by its row's `mul`.
template <int HD>
__device__ __forceinline__ void store_rows(float* dst, i64 off, i64 row, i64 bb, i64 n, i64 hh, i64 row0,
                                           const float (*acc)[4], float mul0, float mul1) {
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    i64 r0 = row0 + (threadIdx.x >> 5) * 16 + g;
#pragma unroll
    for (int db = 0; db < HD / 8; ++db) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            i64 r = r0 + (i >= 2 ? 8 : 0);
            if (r < n) dst[off + (bb * n + r) * row + hh * HD + db * 8 + 2 * c + (i & 1)] = acc[db][i] * (i >= 2 ? mul1 : mul0);
        }
    }
}

template <typename T, int HD>
__device__ void flash_forward(const T* q, const T* k, const T* v, float* out, float* row_max, float* row_sum,
                              i64 b_, i64 t_, i64 s_, i64 h_, i64 hkv, i64 window, i64 q_off, i64 k_off, i64 v_off,
                              i64 q_row, i64 kv_row, float scale, i64 causal) {
    constexpr int LD = HD + 8;
    __shared__ __align__(16) bf16 ks[FLASH_TILE * LD];
    __shared__ __align__(16) bf16 vs[FLASH_TILE * LD];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    i64 tiles = (t_ + FLASH_TILE - 1) / FLASH_TILE;
    for (i64 bh = blockIdx.y; bh < b_ * h_; bh += gridDim.y) {
        i64 bb = bh / h_, hh = bh % h_, hk = hh / (h_ / hkv);  // hk: its key/value head
        for (i64 ti = blockIdx.x; ti < tiles; ti += gridDim.x) {
            i64 row0 = (tiles - 1 - ti) * FLASH_TILE;  // the longest causal rows first
            __syncthreads();
            stage<T, HD>(ks, q, q_off, q_row, bb, t_, hh, row0);
            __syncthreads();
            unsigned qa[HD / 16][4];
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) load_a(qa[kk], ks, LD, warp * 16, kk * 16);
            i64 r0 = row0 + warp * 16 + g, r1 = r0 + 8;
            float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;
            float o[HD / 8][4];
            zero<HD / 8>(o);
            i64 keys = keys_end(row0, t_, s_, causal);
            for (i64 key0 = first_key(row0, t_, s_, causal, window); key0 < keys; key0 += FLASH_TILE) {
                __syncthreads();
                stage_two<T, T, HD>(ks, k, k_off, kv_row, vs, v, v_off, kv_row, bb, s_, hk, key0);
                __syncthreads();
                float sc[8][4];
                scores<HD>(sc, qa, ks);
                float x0 = NEG_INF, x1 = NEG_INF;
#pragma unroll
                for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        i64 key = key0 + nb * 8 + 2 * c + (i & 1);
                        bool top = i < 2;
                        float x = seen(top ? r0 : r1, key, t_, s_, causal, window) ? scale * sc[nb][i] : NEG_INF;
                        sc[nb][i] = x;
                        if (top) x0 = fmaxf(x0, x);
                        else x1 = fmaxf(x1, x);
                    }
                }
                float n0 = fmaxf(m0, lanes4_max(x0)), n1 = fmaxf(m1, lanes4_max(x1));
                float base0 = n0 == NEG_INF ? 0.0f : n0, base1 = n1 == NEG_INF ? 0.0f : n1;
                float alpha0 = expf(m0 - base0), alpha1 = expf(m1 - base1);
                m0 = n0;
                m1 = n1;
                float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
                for (int nb = 0; nb < 8; ++nb) {
                    sc[nb][0] = expf(sc[nb][0] - base0);
                    sc[nb][1] = expf(sc[nb][1] - base0);
                    sc[nb][2] = expf(sc[nb][2] - base1);
                    sc[nb][3] = expf(sc[nb][3] - base1);
                    p0 += sc[nb][0] + sc[nb][1];
                    p1 += sc[nb][2] + sc[nb][3];
                }
                l0 = l0 * alpha0 + p0;
                l1 = l1 * alpha1 + p1;
#pragma unroll
                for (int db = 0; db < HD / 8; ++db) {
                    o[db][0] *= alpha0;
                    o[db][1] *= alpha0;
                    o[db][2] *= alpha1;
                    o[db][3] *= alpha1;
                }
                accumulate<HD>(o, sc, vs);
            }
            l0 = lanes4_sum(l0);
            l1 = lanes4_sum(l1);
            store_rows<HD>(out, 0, h_ * HD, bb, t_, hh, row0, o, 1.0f / l0, 1.0f / l1);
            if (c == 0) {
                if (r0 < t_) { row_max[bh * t_ + r0] = m0; row_sum[bh * t_ + r0] = l0; }
                if (r1 < t_) { row_max[bh * t_ + r1] = m1; row_sum[bh * t_ + r1] = l1; }
            }
        }
    }
}

// The probabilities from the statistics and the scores' gradient of one 16 x 64 block:
// p = exp(scale s - m) / l where the pair is seen (else 0), ds = scale p (dp - delta).
// `rows` say whether the accumulator's rows are queries (dq) or keys (dk, dv).
__device__ __forceinline__ void probs_and_grads(float (*p)[4], float (*dp)[4], const float* m, const float* l,
                                                const float* delta, i64 a0, i64 b0, bool rows_are_queries, i64 t_,
                                                i64 s_, i64 causal, i64 window, float scale) {
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    i64 w0 = (threadIdx.x >> 5) * 16;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            int local_row = (int)w0 + g + (i >= 2 ? 8 : 0);  // of this block's 64
            int local_col = nb * 8 + 2 * c + (i & 1);         // of the tile's 64
            i64 query = rows_are_queries ? a0 + local_row : b0 + local_col;
            i64 key = rows_are_queries ? b0 + local_col : a0 + local_row;
            int qi = rows_are_queries ? local_row : local_col;  // the query's slot in m, l, delta
            float pr = 0.0f;
            if (seen(query, key, t_, s_, causal, window)) pr = expf(scale * p[nb][i] - m[qi]) / l[qi];
            p[nb][i] = pr;
            dp[nb][i] = pr == 0.0f ? 0.0f : scale * pr * (dp[nb][i] - delta[qi]);
        }
    }
}

// dq for a block's 64 query rows, and delta (rowsum(dout * out), float64 sums rounded
// once) for them.
template <typename T, int HD>
__device__ void flash_dq(const float* dout, const float* out, const T* q, const T* k, const T* v,
                         const float* row_max, const float* row_sum, float* delta, float* dq, i64 b_, i64 t_, i64 s_,
                         i64 h_, i64 hkv, i64 window, i64 q_off, i64 k_off, i64 v_off, i64 q_row, i64 kv_row,
                         i64 dq_off, i64 dq_row, float scale, i64 causal) {
    constexpr int LD = HD + 8;
    __shared__ __align__(16) bf16 ks[FLASH_TILE * LD];
    __shared__ __align__(16) bf16 vs[FLASH_TILE * LD];
    __shared__ float ms[FLASH_TILE], ls[FLASH_TILE], ds_[FLASH_TILE];
    int warp = threadIdx.x >> 5;
    i64 tiles = (t_ + FLASH_TILE - 1) / FLASH_TILE;
    for (i64 bh = blockIdx.y; bh < b_ * h_; bh += gridDim.y) {
        i64 bb = bh / h_, hh = bh % h_, hk = hh / (h_ / hkv);
        for (i64 ti = blockIdx.x; ti < tiles; ti += gridDim.x) {
            i64 row0 = (tiles - 1 - ti) * FLASH_TILE;
            __syncthreads();
            stage_two<T, float, HD>(ks, q, q_off, q_row, vs, dout, 0, h_ * HD, bb, t_, hh, row0);
            for (int r = threadIdx.x; r < FLASH_TILE; r += FLASH_THREADS) {
                i64 pos = row0 + r;
                float dl = 0.0f, m = 0.0f, l = 1.0f;
                if (pos < t_) {
                    const float* dr = dout + ((bb * t_ + pos) * h_ + hh) * HD;
                    const float* orow = out + ((bb * t_ + pos) * h_ + hh) * HD;
                    double part = 0.0;
                    for (int d = 0; d < HD; ++d) part += (double)dr[d] * (double)orow[d];
                    dl = (float)part;
                    delta[bh * t_ + pos] = dl;
                    m = row_max[bh * t_ + pos];
                    l = row_sum[bh * t_ + pos];
                }
                ds_[r] = dl;
                ms[r] = m;
                ls[r] = l;
            }
            __syncthreads();
            unsigned qa[HD / 16][4], da[HD / 16][4];
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                load_a(qa[kk], ks, LD, warp * 16, kk * 16);
                load_a(da[kk], vs, LD, warp * 16, kk * 16);
            }
            float acc[HD / 8][4];
            zero<HD / 8>(acc);
            i64 keys = keys_end(row0, t_, s_, causal);
            for (i64 key0 = first_key(row0, t_, s_, causal, window); key0 < keys; key0 += FLASH_TILE) {
                __syncthreads();
                stage_two<T, T, HD>(ks, k, k_off, kv_row, vs, v, v_off, kv_row, bb, s_, hk, key0);
                __syncthreads();
                float p[8][4], dp[8][4];
                scores<HD>(p, qa, ks);
                scores<HD>(dp, da, vs);  // dout v^T
                probs_and_grads(p, dp, ms, ls, ds_, row0, key0, true, t_, s_, causal, window, scale);
                accumulate<HD>(acc, dp, ks);  // ds k
            }
            store_rows<HD>(dq, dq_off, dq_row, bb, t_, hh, row0, acc, 1.0f, 1.0f);
        }
    }
}

// dk and dv for a block's 64 keys of one key/value head, walking the query tiles of
// each query head of its group that see them (heads in order, then tiles).
template <typename T, int HD>
__device__ void flash_dkv(const float* dout, const T* q, const T* k, const T* v, const float* row_max,
                          const float* row_sum, const float* delta, float* dk, float* dv, i64 b_, i64 t_, i64 s_,
                          i64 h_, i64 hkv, i64 window, i64 q_off, i64 k_off, i64 v_off, i64 q_row, i64 kv_row,
                          i64 dk_off, i64 dv_off, i64 dkv_row, float scale, i64 causal) {
    constexpr int LD = HD + 8;
    __shared__ __align__(16) bf16 qs[FLASH_TILE * LD];
    __shared__ __align__(16) bf16 os[FLASH_TILE * LD];
    __shared__ float ms[FLASH_TILE], ls[FLASH_TILE], ds_[FLASH_TILE];
    int warp = threadIdx.x >> 5;
    i64 tiles = (s_ + FLASH_TILE - 1) / FLASH_TILE, group = h_ / hkv;
    for (i64 bk = blockIdx.y; bk < b_ * hkv; bk += gridDim.y) {
        i64 bb = bk / hkv, hk = bk % hkv;
        for (i64 ti = blockIdx.x; ti < tiles; ti += gridDim.x) {
            i64 key0 = ti * FLASH_TILE;  // the first keys are seen by the most rows
            __syncthreads();
            stage_two<T, T, HD>(qs, k, k_off, kv_row, os, v, v_off, kv_row, bb, s_, hk, key0);
            __syncthreads();
            unsigned ka[HD / 16][4], va[HD / 16][4];
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                load_a(ka[kk], qs, LD, warp * 16, kk * 16);
                load_a(va[kk], os, LD, warp * 16, kk * 16);
            }
            float gk[HD / 8][4], gv[HD / 8][4];
            zero<HD / 8>(gk);
            zero<HD / 8>(gv);
            // Causal: the first row seeing key0 is at key0 - (s - t); with a window w the
            // last seeing key0 + 63 is w - 1 rows after it.
            i64 first = causal ? key0 - (s_ - t_) : 0;
            first = first < 0 ? 0 : first / FLASH_TILE * FLASH_TILE;
            i64 end = causal && window > 0 ? key0 + FLASH_TILE - 1 + window - (s_ - t_) : t_;
            end = end < t_ ? end : t_;
            for (i64 hq = hk * group; hq < (hk + 1) * group; ++hq) {
                i64 bh = bb * h_ + hq;
                for (i64 row0 = first; row0 < end; row0 += FLASH_TILE) {
                    __syncthreads();
                    stage_two<T, float, HD>(qs, q, q_off, q_row, os, dout, 0, h_ * HD, bb, t_, hq, row0);
                    for (int r = threadIdx.x; r < FLASH_TILE; r += FLASH_THREADS) {
                        i64 pos = row0 + r;
                        bool in = pos < t_;
                        ms[r] = in ? row_max[bh * t_ + pos] : 0.0f;
                        ls[r] = in ? row_sum[bh * t_ + pos] : 1.0f;
                        ds_[r] = in ? delta[bh * t_ + pos] : 0.0f;
                    }
                    __syncthreads();
                    float p[8][4], dp[8][4];
                    scores<HD>(p, ka, qs);   // k q^T: the scores transposed
                    scores<HD>(dp, va, os);  // v dout^T
                    probs_and_grads(p, dp, ms, ls, ds_, key0, row0, false, t_, s_, causal, window, scale);
                    accumulate<HD>(gv, p, os);   // p^T dout
                    accumulate<HD>(gk, dp, qs);  // ds^T q
                }
            }
            store_rows<HD>(dk, dk_off, dkv_row, bb, s_, hk, key0, gk, 1.0f, 1.0f);
            store_rows<HD>(dv, dv_off, dkv_row, bb, s_, hk, key0, gv, 1.0f, 1.0f);
        }
    }
}

#define FLASH_KERNELS(T, TN, HD)                                                                                     \
    extern "C" __global__ void flash_forward_##TN##_d##HD(                                                           \
        const T* q, const T* k, const T* v, float* out, float* row_max, float* row_sum, i64 b_, i64 t_, i64 s_,     \
        i64 h_, i64 hkv, i64 window, i64 q_off, i64 k_off, i64 v_off, i64 q_row, i64 kv_row, float scale,           \
        i64 causal) {                                                                                                \
        flash_forward<T, HD>(q, k, v, out, row_max, row_sum, b_, t_, s_, h_, hkv, window, q_off, k_off, v_off,     \
                             q_row, kv_row, scale, causal);                                                         \
    }                                                                                                                \
    extern "C" __global__ void flash_dq_##TN##_d##HD(                                                                \
        const float* dout, const float* out, const T* q, const T* k, const T* v, const float* row_max,              \
        const float* row_sum, float* delta, float* dq, i64 b_, i64 t_, i64 s_, i64 h_, i64 hkv, i64 window,         \
        i64 q_off, i64 k_off, i64 v_off, i64 q_row, i64 kv_row, i64 dq_off, i64 dq_row, float scale, i64 causal) {  \
        flash_dq<T, HD>(dout, out, q, k, v, row_max, row_sum, delta, dq, b_, t_, s_, h_, hkv, window, q_off, k_off, \
                        v_off, q_row, kv_row, dq_off, dq_row, scale, causal);                                       \
    }                                                                                                                \
    extern "C" __global__ void flash_dkv_##TN##_d##HD(                                                               \
        const float* dout, const T* q, const T* k, const T* v, const float* row_max, const float* row_sum,          \
        const float* delta, float* dk, float* dv, i64 b_, i64 t_, i64 s_, i64 h_, i64 hkv, i64 window, i64 q_off,  \
        i64 k_off, i64 v_off, i64 q_row, i64 kv_row, i64 dk_off, i64 dv_off, i64 dkv_row, float scale,              \
        i64 causal) {                                                                                                \
        flash_dkv<T, HD>(dout, q, k, v, row_max, row_sum, delta, dk, dv, b_, t_, s_, h_, hkv, window, q_off, k_off, \
                         v_off, q_row, kv_row, dk_off, dv_off, dkv_row, scale, causal);                             \
    }

FLASH_KERNELS(float, f32, 16)
FLASH_KERNELS(float, f32, 32)
FLASH_KERNELS(float, f32, 64)
FLASH_KERNELS(bf16, bf16, 16)
FLASH_KERNELS(bf16, bf16, 32)
FLASH_KERNELS(bf16, bf16, 64)
