// Layout kernels, by element size: strided copies (permute, slices,
// broadcast_to) and the placement of one operand of a concatenation.

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
