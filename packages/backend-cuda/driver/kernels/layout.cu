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
