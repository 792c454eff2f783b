// Reductions over one axis of x viewed as [outer, n, inner], and softmax.
// Float sums accumulate in double; every combination order is fixed.

// An op travels as its code, named as riftco.tensor's vocabulary names it (the
// Python side reads this enum from the source: riftco.backends.cuda.ops.codes).
enum ReduceOp { REDUCE_SUM = 0, REDUCE_MEAN = 1, REDUCE_MAX = 2, REDUCE_MIN = 3, REDUCE_SUM_SQUARES = 4 };

__device__ __forceinline__ double reduce_start(i64 op) {
    return op == REDUCE_MAX ? (double)NEG_INF : (op == REDUCE_MIN ? (double)POS_INF : 0.0);
}

__device__ __forceinline__ double reduce_step(i64 op, double acc, double x) {
    switch (op) {
        case REDUCE_MAX: return (acc != acc || acc > x) ? acc : x;  // NaN wins
        case REDUCE_MIN: return (acc != acc || acc < x) ? acc : x;
        case REDUCE_SUM_SQUARES: return acc + x * x;
    }
    return acc + x;
}

__device__ __forceinline__ double reduce_combine(i64 op, double a, double b) {
    if (op == REDUCE_MAX || op == REDUCE_MIN) return reduce_step(op, a, b);
    return a + b;
}

// One thread per output, the axis read in order (used when inner > 1).
extern "C" __global__ void reduce_cols_f32(const float* x, float* out, i64 outer, i64 n, i64 inner, i64 op) {
    FOR_EACH(j, outer * inner) {
        i64 o = j / inner, c = j % inner;
        double acc = reduce_start(op);
        for (i64 k = 0; k < n; ++k) acc = reduce_step(op, acc, (double)x[(o * n + k) * inner + c]);
        out[j] = (float)(op == REDUCE_MEAN ? acc / (double)n : acc);
    }
}

// Few outputs over a long axis (a bias gradient: [tokens, width] summed over tokens):
// a block takes COLS_TILE adjacent outputs of one outer index, its threads COLS_TILE
// columns by blockDim.x / COLS_TILE row lanes; lane l reads rows l, l + lanes, ... in
// order, then the lanes combine in a fixed tree. Blocks: outer * ceil(inner / COLS_TILE).
#define COLS_TILE 8
extern "C" __global__ void reduce_cols_tiled_f32(const float* x, float* out, i64 outer, i64 n, i64 inner, i64 op) {
    __shared__ double scratch[THREADS];
    unsigned int t = threadIdx.x, lanes = blockDim.x / COLS_TILE;
    unsigned int col = t % COLS_TILE, lane = t / COLS_TILE;
    i64 tiles = (inner + COLS_TILE - 1) / COLS_TILE;
    for (i64 b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
        i64 o = b / tiles, c = (b % tiles) * COLS_TILE + col;
        double acc = reduce_start(op);
        if (c < inner) {
            const float* base = x + o * n * inner + c;
            for (i64 k = lane; k < n; k += lanes) acc = reduce_step(op, acc, (double)base[k * inner]);
        }
        scratch[t] = acc;
        __syncthreads();
        for (unsigned int s = lanes / 2; s > 0; s >>= 1) {
            if (lane < s) scratch[t] = reduce_combine(op, scratch[t], scratch[t + s * COLS_TILE]);
            __syncthreads();
        }
        if (lane == 0 && c < inner) out[o * inner + c] = (float)(op == REDUCE_MEAN ? scratch[t] / (double)n : scratch[t]);
        __syncthreads();
    }
}

// The lanes' sums of a column tile combined in reduce_cols_tiled_f32's tree (every
// thread of the block calls it; lane 0's scratch[t] then holds its column's sum).
__device__ __forceinline__ void lanes_sum(double* scratch, unsigned int t, unsigned int lane,
                                          unsigned int lanes, double acc) {
    scratch[t] = acc;
    __syncthreads();
    for (unsigned int s = lanes / 2; s > 0; s >>= 1) {
        if (lane < s) scratch[t] = scratch[t] + scratch[t + s * COLS_TILE];
        __syncthreads();
    }
}

// Column sums of x [n, inner] into three outputs in one launch: columns
// [0, first1) to out0, [first1, first2) to out1, [first2, inner) to out2 (the stacked
// query/key/value projection's bias gradients). Each column is summed in
// reduce_cols_tiled_f32's order and tree (the same bits as that kernel over the part
// alone). Blocks: ceil(inner / COLS_TILE).
extern "C" __global__ void reduce_cols_parts_f32(const float* x, float* out0, float* out1, float* out2,
                                                 i64 n, i64 inner, i64 first1, i64 first2) {
    __shared__ double scratch[THREADS];
    unsigned int t = threadIdx.x, lanes = blockDim.x / COLS_TILE;
    unsigned int col = t % COLS_TILE, lane = t / COLS_TILE;
    i64 tiles = (inner + COLS_TILE - 1) / COLS_TILE;
    for (i64 b = blockIdx.x; b < tiles; b += gridDim.x) {
        i64 c = b * COLS_TILE + col;
        double acc = 0.0;
        if (c < inner) {
            for (i64 k = lane; k < n; k += lanes) acc += (double)x[k * inner + c];
        }
        lanes_sum(scratch, t, lane, lanes, acc);
        if (lane == 0 && c < inner) {
            float v = (float)scratch[t];
            if (c < first1) out0[c] = v;
            else if (c < first2) out1[c - first1] = v;
            else out2[c - first2] = v;
        }
        __syncthreads();
    }
}

// A bias gradient and the bfloat16 copy of the gradient in one pass over x [n, inner]:
// sums[c] = sum_k x[k, c], in reduce_cols_tiled_f32's order and tree (the same bits
// as that kernel's sum), while each element read is written to low as bfloat16 (the
// operand of the products that follow). Blocks: ceil(inner / COLS_TILE).
extern "C" __global__ void colsum_to_bf16(const float* x, float* sums, bf16* low, i64 n, i64 inner) {
    __shared__ double scratch[THREADS];
    unsigned int t = threadIdx.x, lanes = blockDim.x / COLS_TILE;
    unsigned int col = t % COLS_TILE, lane = t / COLS_TILE;
    i64 tiles = (inner + COLS_TILE - 1) / COLS_TILE;
    for (i64 b = blockIdx.x; b < tiles; b += gridDim.x) {
        i64 c = b * COLS_TILE + col;
        double acc = 0.0;
        if (c < inner) {
            for (i64 k = lane; k < n; k += lanes) {
                float v = x[k * inner + c];
                low[k * inner + c] = f32_to_bf16(v);
                acc += (double)v;
            }
        }
        lanes_sum(scratch, t, lane, lanes, acc);
        if (lane == 0 && c < inner) sums[c] = (float)scratch[t];
        __syncthreads();
    }
}

// One block per output row (inner == 1): each thread a strided slice, then a tree.
extern "C" __global__ void reduce_rows_f32(const float* x, float* out, i64 outer, i64 n, i64 op) {
    __shared__ double scratch[THREADS];
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        double acc = reduce_start(op);
        for (i64 k = threadIdx.x; k < n; k += blockDim.x) acc = reduce_step(op, acc, (double)x[row * n + k]);
        scratch[threadIdx.x] = acc;
        __syncthreads();
        for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) scratch[threadIdx.x] = reduce_combine(op, scratch[threadIdx.x], scratch[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) out[row] = (float)(op == REDUCE_MEAN ? scratch[0] / (double)n : scratch[0]);
        __syncthreads();
    }
}

// int64: sum, max, min (sequential per output; exact whatever the order).
extern "C" __global__ void reduce_i64(const i64* x, i64* out, i64 outer, i64 n, i64 inner, i64 op) {
    FOR_EACH(j, outer * inner) {
        i64 o = j / inner, c = j % inner;
        i64 acc = op == REDUCE_MAX ? (i64)0x8000000000000000ull : (op == REDUCE_MIN ? (i64)0x7fffffffffffffffll : 0);
        for (i64 k = 0; k < n; ++k) {
            i64 v = x[(o * n + k) * inner + c];
            acc = op == REDUCE_MAX ? (v > acc ? v : acc) : (op == REDUCE_MIN ? (v < acc ? v : acc) : acc + v);
        }
        out[j] = acc;
    }
}

// The index of the first largest element (a NaN counts as largest, as numpy).
template <typename T>
__device__ __forceinline__ bool beats(T v, T best) {
    return (v != v && best == best) || v > best;
}

#define ARGMAX(NAME, T)                                                                    \
    extern "C" __global__ void NAME(const T* x, i64* out, i64 outer, i64 n, i64 inner) {   \
        FOR_EACH(j, outer * inner) {                                                       \
            i64 o = j / inner, c = j % inner;                                              \
            i64 best = 0;                                                                  \
            T bv = x[o * n * inner + c];                                                   \
            for (i64 k = 1; k < n; ++k) {                                                  \
                T v = x[(o * n + k) * inner + c];                                          \
                if (beats<T>(v, bv)) { bv = v; best = k; }                                 \
            }                                                                              \
            out[j] = best;                                                                 \
        }                                                                                  \
    }
ARGMAX(argmax_f32, float)
ARGMAX(argmax_i64, i64)

// (Log-)softmax over rows of s; with `causal` the rows are [.., t, s] scores and
// row q (mod t) sees columns 0..=q + s - t; the rest get 0 (log: -inf).
extern "C" __global__ void softmax_f32(const float* x, float* y, i64 rows, i64 s, i64 t, i64 causal, i64 log_) {
    __shared__ double dscratch[THREADS];
    __shared__ float fscratch[THREADS];
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * s;
        float* yr = y + row * s;
        i64 visible = causal ? (row % t) + s - t + 1 : s;
        if (visible > s) visible = s;
        if (visible < 0) visible = 0;
        float m = NEG_INF;
        for (i64 k = threadIdx.x; k < visible; k += blockDim.x) m = nan_max(m, xr[k]);
        m = block_max(m, fscratch);
        double acc = 0.0;
        for (i64 k = threadIdx.x; k < visible; k += blockDim.x) acc += exp((double)xr[k] - (double)m);
        double total = block_sum(acc, dscratch);
        double lse = log(total);
        for (i64 k = threadIdx.x; k < s; k += blockDim.x) {
            if (k < visible) {
                double z = (double)xr[k] - (double)m;
                yr[k] = (float)(log_ ? z - lse : exp(z) / total);
            } else {
                yr[k] = log_ ? NEG_INF : 0.0f;
            }
        }
        __syncthreads();
    }
}
