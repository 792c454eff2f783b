// Layout kernels, by element size: strided copies (permute, slices,
// broadcast_to), the placement of one operand of a concatenation (or all of them),
// and attention's head-axis swaps.

#define COPY_STRIDED(NAME, T)                                                             \
    extern "C" __global__ void NAME(const T* x, T* out, i64 n, Dims shape, Dims strides, \
                                    i64 ndim, i64 offset) {                               \
        FOR_EACH(i, n) out[i] = x[offset + strided_offset(i, shape, strides, ndim)];      \
    }
COPY_STRIDED(copy_strided_1, unsigned char)
COPY_STRIDED(copy_strided_2, unsigned short)
COPY_STRIDED(copy_strided_4, unsigned int)
COPY_STRIDED(copy_strided_8, u64)

// out [outer, total, inner] gets x [outer, rows, inner] at rows first..first+rows.
#define PLACE(NAME, T)                                                                      \
    extern "C" __global__ void NAME(const T* x, T* out, i64 outer, i64 rows, i64 inner,     \
                                    i64 total, i64 first) {                                 \
        i64 n = outer * rows * inner;                                                       \
        FOR_EACH(i, n) {                                                                    \
            i64 o = i / (rows * inner), r = (i / inner) % rows, c = i % inner;              \
            out[(o * total + first + r) * inner + c] = x[i];                                \
        }                                                                                   \
    }
PLACE(place_1, unsigned char)
PLACE(place_2, unsigned short)
PLACE(place_4, unsigned int)
PLACE(place_8, u64)

// out [outer, total, inner] from every operand of a concatenation at once. table holds
// the operands' addresses (parts of them), then their first rows and total
// (parts + 1, ascending); each output element finds its operand by binary search.
#define PLACE_MANY(NAME, T)                                                                 \
    extern "C" __global__ void NAME(const i64* table, i64 parts, T* out, i64 outer,         \
                                    i64 total, i64 inner) {                                 \
        i64 n = outer * total * inner;                                                      \
        FOR_EACH(i, n) {                                                                    \
            i64 o = i / (total * inner), r = (i / inner) % total, c = i % inner;            \
            i64 lo = 0, hi = parts - 1;                                                     \
            while (lo < hi) {                                                               \
                i64 mid = (lo + hi + 1) / 2;                                                \
                if (table[parts + mid] <= r) lo = mid; else hi = mid - 1;                   \
            }                                                                               \
            i64 first = table[parts + lo], rows = table[parts + lo + 1] - first;            \
            const T* x = (const T*)(u64)table[lo];                                          \
            out[i] = x[(o * rows + (r - first)) * inner + c];                               \
        }                                                                                   \
    }
PLACE_MANY(place_many_1, unsigned char)
PLACE_MANY(place_many_2, unsigned short)
PLACE_MANY(place_many_4, unsigned int)
PLACE_MANY(place_many_8, u64)

// Up to six tensors [B, X, Y, D] copied to [B, Y, X, D] in one launch (attention's
// [B, T, H, Dh] to the heads-first [B, H, T, Dh] its strided-batched products read,
// and back). Part p reads xs_p (shape [b, xn.v[p], yn.v[p], d], element kind from.v[p])
// and writes ys_p (kind to.v[p]); kinds are the convert kernel's codes, 0 float32 and
// 4 bfloat16: a part of one kind copies the bits, float32 to bfloat16 rounds to
// nearest even. Either side may be a column slice of a wider matrix (the stacked
// query/key/value projection): source element (b, x, y, c) is at
// xo.v[p] + (b xn + x) xr.v[p] + y d + c, destination (b, y, x, c) at
// yo.v[p] + (b yn + y) yr.v[p] + x d + c (a dense part: offsets 0, xr = yn d,
// yr = xn d). Parts from `parts` on are null.
__device__ __forceinline__ void swap_part(const void* x, void* y, i64 from, i64 to, i64 src, i64 dst) {
    if (from == to) {
        if (from == 0) ((unsigned int*)y)[dst] = ((const unsigned int*)x)[src];
        else ((bf16*)y)[dst] = ((const bf16*)x)[src];
        return;
    }
    float v = from == 0 ? ((const float*)x)[src] : bf16_to_f32(((const bf16*)x)[src]);
    if (to == 0) ((float*)y)[dst] = v;
    else ((bf16*)y)[dst] = f32_to_bf16(v);
}

// Axis `p` of a Dims, chosen by compares rather than an index (see strided_offset).
__device__ __forceinline__ i64 pick(const Dims& dims, int p) {
    i64 r = dims.v[0];
#pragma unroll
    for (int q = 1; q < MAX_DIMS; ++q) if (p == q) r = dims.v[q];
    return r;
}

extern "C" __global__ void swap_heads(const void* x0, void* y0, const void* x1, void* y1,
                                      const void* x2, void* y2, const void* x3, void* y3,
                                      const void* x4, void* y4, const void* x5, void* y5,
                                      i64 parts, i64 b, i64 d, Dims xn, Dims yn, Dims from,
                                      Dims to, Dims xo, Dims xr, Dims yo, Dims yr) {
    i64 total = 0;
#pragma unroll
    for (int p = 0; p < 6; ++p) if (p < parts) total += b * xn.v[p] * yn.v[p] * d;
    FOR_EACH(i, total) {
        // The part holding element i, and i's place in it (parts lie one after another).
        i64 j = i;
        int p = 0;
#pragma unroll
        for (int q = 0; q < 5; ++q) {
            i64 size = b * xn.v[q] * yn.v[q] * d;
            if (p == q && q + 1 < parts && j >= size) {
                j -= size;
                p = q + 1;
            }
        }
        const void* x = x0;
        void* y = y0;
        switch (p) {
            case 1: x = x1; y = y1; break;
            case 2: x = x2; y = y2; break;
            case 3: x = x3; y = y3; break;
            case 4: x = x4; y = y4; break;
            case 5: x = x5; y = y5; break;
        }
        i64 nx = pick(xn, p), ny = pick(yn, p);
        // j enumerates the output [b, ny, nx, d] densely.
        i64 c = j % d, r = j / d;
        i64 xx = r % nx;
        r /= nx;
        i64 yy = r % ny, bb = r / ny;
        i64 src = pick(xo, p) + (bb * nx + xx) * pick(xr, p) + yy * d + c;
        i64 dst = pick(yo, p) + (bb * ny + yy) * pick(yr, p) + xx * d + c;
        swap_part(x, y, pick(from, p), pick(to, p), src, dst);
    }
}
