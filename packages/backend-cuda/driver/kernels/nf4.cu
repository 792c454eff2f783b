// NF4 quantized weights: w [rows, cols] packed as codes (two per byte, element
// 2j in the low nibble) with one scale per block of block_size elements, the
// scales themselves either float32 or uint8 double-quantized against
// group_range (256 blocks a group). The weight is never materialized by the
// linear kernels: each thread decodes the elements it multiplies.

__constant__ float NF4_CODE[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

struct Nf4 {
    const unsigned char* codes;
    const void* absmax;  // float32, or uint8 with group_range
    const float* group_range;
    float offset;
    i64 block_size;
};

__device__ __forceinline__ float nf4_scale(const Nf4& w, i64 block) {
    if (!w.group_range) return ((const float*)w.absmax)[block];
    float a = (float)((const unsigned char*)w.absmax)[block];
    float s = w.offset + (w.group_range[block / 256] * (a - 128.0f)) / 127.0f;
    return s < 0.0f ? 0.0f : (s > 3.402823466e38f ? 3.402823466e38f : s);
}

__device__ __forceinline__ float nf4_at(const Nf4& w, i64 i) {
    unsigned char byte = w.codes[i >> 1];
    unsigned int code = (i & 1) ? (byte >> 4) : (byte & 15u);
    return NF4_CODE[code] * nf4_scale(w, i / w.block_size);
}

extern "C" __global__ void nf4_dequantize_f32(const unsigned char* codes, const void* absmax, const float* group_range,
                                              float offset, i64 block_size, float* out, i64 n) {
    Nf4 w = {codes, absmax, group_range, offset, block_size};
    FOR_EACH(i, n) out[i] = nf4_at(w, i);
}

// y [m, rows] = x [m, cols] @ w^T (+ bias [rows]): one thread per output.
extern "C" __global__ void nf4_linear_f32(const float* x, const unsigned char* codes, const void* absmax,
                                          const float* group_range, float offset, i64 block_size, const float* bias,
                                          float* y, i64 m, i64 rows, i64 cols) {
    Nf4 w = {codes, absmax, group_range, offset, block_size};
    FOR_EACH(i, m * rows) {
        i64 r = i % rows, b = i / rows;
        const float* xr = x + b * cols;
        double acc = 0.0;
        for (i64 c = 0; c < cols; ++c) acc += (double)xr[c] * (double)nf4_at(w, r * cols + c);
        y[i] = (float)acc + (bias ? bias[r] : 0.0f);
    }
}

// dx [m, cols] = dy [m, rows] @ w: one thread per output.
extern "C" __global__ void nf4_linear_backward_f32(const float* dy, const unsigned char* codes, const void* absmax,
                                                   const float* group_range, float offset, i64 block_size, float* dx,
                                                   i64 m, i64 rows, i64 cols) {
    Nf4 w = {codes, absmax, group_range, offset, block_size};
    FOR_EACH(i, m * cols) {
        i64 c = i % cols, b = i / cols;
        const float* dr = dy + b * rows;
        double acc = 0.0;
        for (i64 r = 0; r < rows; ++r) acc += (double)dr[r] * (double)nf4_at(w, r * cols + c);
        dx[i] = (float)acc;
    }
}
