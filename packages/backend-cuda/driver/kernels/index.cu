// Indexing: index_select, index_add, gather, scatter_add, write_rows. Views are
// [outer, axis, inner]. Accumulations read their indices in order, one thread
// per destination column, so repeated indices add in index order (no atomics).
// A bad index is reported in bad[0] (its first position) and the host raises.

#define INDEX_SELECT(NAME, T)                                                                   \
    extern "C" __global__ void NAME(const T* x, const i64* idx, T* out, i64 outer, i64 n,      \
                                    i64 count, i64 inner, i64* bad) {                          \
        FOR_EACH(i, outer * count * inner) {                                                   \
            i64 o = i / (count * inner), j = (i / inner) % count, c = i % inner;               \
            i64 k = idx[j];                                                                    \
            if (k < 0 || k >= n) { report_bad(bad, j); out[i] = (T)0; continue; }              \
            out[i] = x[(o * n + k) * inner + c];                                               \
        }                                                                                      \
    }
INDEX_SELECT(index_select_1, unsigned char)
INDEX_SELECT(index_select_2, unsigned short)
INDEX_SELECT(index_select_4, unsigned int)
INDEX_SELECT(index_select_8, u64)

extern "C" __global__ void check_indices(const i64* idx, i64 count, i64 n, i64* bad) {
    FOR_EACH(j, count) {
        if (idx[j] < 0 || idx[j] >= n) report_bad(bad, j);
    }
}

// out (a copy of base [outer, n, inner]) += src [outer, count, inner] at idx.
extern "C" __global__ void index_add_f32(const i64* idx, const float* src, float* out, i64 outer, i64 n,
                                         i64 count, i64 inner, const i64* bad) {
    if (bad[0] != 0x7fffffffffffffffll) return;
    FOR_EACH(i, outer * inner) {
        i64 o = i / inner, c = i % inner;
        for (i64 j = 0; j < count; ++j) {
            out[(o * n + idx[j]) * inner + c] += src[(o * count + j) * inner + c];
        }
    }
}

// gather: out[o, j, c] = x[o, idx[o, j, c], c]; x [outer, n, inner], idx [outer, m, inner].
#define GATHER(NAME, T)                                                                         \
    extern "C" __global__ void NAME(const T* x, const i64* idx, T* out, i64 outer, i64 n, i64 m, \
                                    i64 inner, i64* bad) {                                     \
        FOR_EACH(i, outer * m * inner) {                                                       \
            i64 o = i / (m * inner), c = i % inner;                                            \
            i64 k = idx[i];                                                                    \
            if (k < 0 || k >= n) { report_bad(bad, i); out[i] = (T)0; continue; }              \
            out[i] = x[(o * n + k) * inner + c];                                               \
        }                                                                                      \
    }
GATHER(gather_1, unsigned char)
GATHER(gather_2, unsigned short)
GATHER(gather_4, unsigned int)
GATHER(gather_8, u64)

// scatter_add: out (a copy of base [outer, n, inner]) += src at idx [outer, m, inner].
extern "C" __global__ void scatter_add_f32(const i64* idx, const float* src, float* out, i64 outer, i64 n,
                                           i64 m, i64 inner, const i64* bad) {
    if (bad[0] != 0x7fffffffffffffffll) return;
    FOR_EACH(i, outer * inner) {
        i64 o = i / inner, c = i % inner;
        for (i64 j = 0; j < m; ++j) {
            i64 at = (o * m + j) * inner + c;
            out[(o * n + idx[at]) * inner + c] += src[at];
        }
    }
}

// write_rows: dst rows idx[j] = src row j (row = `width` elements), only when
// check_indices found nothing wrong.
#define WRITE_ROWS(NAME, T)                                                                      \
    extern "C" __global__ void NAME(T* dst, const i64* idx, const T* src, i64 count, i64 width,  \
                                    const i64* bad) {                                           \
        if (bad[0] != 0x7fffffffffffffffll) return;                                             \
        FOR_EACH(i, count * width) dst[idx[i / width] * width + i % width] = src[i];            \
    }
WRITE_ROWS(write_rows_1, unsigned char)
WRITE_ROWS(write_rows_2, unsigned short)
WRITE_ROWS(write_rows_4, unsigned int)
WRITE_ROWS(write_rows_8, u64)
