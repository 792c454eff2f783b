// Elementwise kernels: unary ops, broadcasting binary ops and comparisons,
// where, and dtype conversions. bfloat16 operands are widened to float32
// (exactly), the float32 function computed as the float32 kernel computes it,
// and the result rounded once to bfloat16.
//
// An op travels as its code in the enums below, which name each op as riftco.tensor's
// vocabulary does (UNARY_GELU_TANH is `gelu_tanh`): the Python side reads the enums
// from this source (riftco.backends.cuda.ops.codes) and passes the code of an op's
// name, so no list order anywhere decides which kernel runs.

enum UnaryOp {
    UNARY_NEG = 0, UNARY_ABS = 1, UNARY_EXP = 2, UNARY_LOG = 3, UNARY_SQRT = 4, UNARY_RSQRT = 5,
    UNARY_TANH = 6, UNARY_SIGMOID = 7, UNARY_RELU = 8, UNARY_GELU = 9, UNARY_GELU_TANH = 10,
    UNARY_SILU = 11,
};

__device__ __forceinline__ float unary_op(i64 op, float x) {
    switch (op) {
        case UNARY_NEG: return -x;
        case UNARY_ABS: return fabsf(x);
        case UNARY_EXP: return (float)exp((double)x);
        case UNARY_LOG: return (float)log((double)x);
        case UNARY_SQRT: return (float)sqrt((double)x);
        case UNARY_RSQRT: return (float)(1.0 / sqrt((double)x));
        case UNARY_TANH: return (float)tanh((double)x);
        case UNARY_SIGMOID: return (float)(1.0 / (1.0 + exp(-(double)x)));
        case UNARY_RELU: return x > 0.0f ? x : (x != x ? x : 0.0f);
        case UNARY_GELU: { double d = x; return (float)(0.5 * d * (1.0 + erf(d * 0.70710678118654752440))); }
        case UNARY_GELU_TANH: {
            double d = x;
            return (float)(0.5 * d * (1.0 + tanh(0.79788456080286535588 * (d + 0.044715 * d * d * d))));
        }
        case UNARY_SILU: { double d = x; return (float)(d / (1.0 + exp(-d))); }
    }
    return x;
}

// Contiguous float32 operands aligned to 16 bytes go four elements an access
// (each element's value is the same expression as one at a time); the tail and
// unaligned operands one at a time.
extern "C" __global__ void unary_f32(const float* x, float* y, i64 n, i64 op) {
    i64 head = 0;
    if (aligned16(x) && aligned16(y)) {
        head = n / 4 * 4;
        const Quad* xq = (const Quad*)x;
        Quad* yq = (Quad*)y;
        FOR_EACH(q, n / 4) {
            Quad a = xq[q], r;
#pragma unroll
            for (int j = 0; j < 4; ++j) r.v[j] = unary_op(op, a.v[j]);
            yq[q] = r;
        }
    }
    FOR_EACH(t, n - head) y[head + t] = unary_op(op, x[head + t]);
}

extern "C" __global__ void unary_bf16(const bf16* x, bf16* y, i64 n, i64 op) {
    FOR_EACH(i, n) y[i] = f32_to_bf16(unary_op(op, bf16_to_f32(x[i])));
}

extern "C" __global__ void unary_i64(const i64* x, i64* y, i64 n, i64 op) {
    FOR_EACH(i, n) {
        i64 v = x[i];
        y[i] = op == UNARY_NEG ? -v : (v < 0 ? -v : v);
    }
}

extern "C" __global__ void logical_not_b(const unsigned char* x, unsigned char* y, i64 n) {
    FOR_EACH(i, n) y[i] = x[i] ? 0 : 1;
}

enum BinaryOp {
    BINARY_ADD = 0, BINARY_SUB = 1, BINARY_MUL = 2, BINARY_DIV = 3, BINARY_POW = 4,
    BINARY_MAXIMUM = 5, BINARY_MINIMUM = 6,
};

__device__ __forceinline__ float binary_f32_op(i64 op, float a, float b) {
    switch (op) {
        case BINARY_ADD: return a + b;
        case BINARY_SUB: return a - b;
        case BINARY_MUL: return a * b;
        case BINARY_DIV: return a / b;
        case BINARY_POW: return (float)pow((double)a, (double)b);
        case BINARY_MAXIMUM: return nan_max(a, b);
        case BINARY_MINIMUM: return nan_min(a, b);
    }
    return 0.0f;
}

__device__ __forceinline__ i64 binary_i64_op(i64 op, i64 a, i64 b) {
    switch (op) {
        case BINARY_ADD: return a + b;
        case BINARY_SUB: return a - b;
        case BINARY_MUL: return a * b;
        case BINARY_MAXIMUM: return a > b ? a : b;
        case BINARY_MINIMUM: return a < b ? a : b;
    }
    return 0;
}

// Same-shape contiguous operands (one coalesced axis of stride 1) aligned to 16
// bytes go four elements an access, as unary_f32.
extern "C" __global__ void binary_f32(const float* a, const float* b, float* out, i64 n, i64 op,
                                      Dims shape, Dims sa, Dims sb, i64 ndim) {
    if (ndim == 1 && sa.v[0] == 1 && sb.v[0] == 1 && aligned16(a) && aligned16(b) && aligned16(out)) {
        i64 head = n / 4 * 4;
        const Quad* aq = (const Quad*)a;
        const Quad* bq = (const Quad*)b;
        Quad* oq = (Quad*)out;
        FOR_EACH(q, n / 4) {
            Quad x = aq[q], y = bq[q], r;
#pragma unroll
            for (int j = 0; j < 4; ++j) r.v[j] = binary_f32_op(op, x.v[j], y.v[j]);
            oq[q] = r;
        }
        FOR_EACH(t, n - head) out[head + t] = binary_f32_op(op, a[head + t], b[head + t]);
        return;
    }
    FOR_EACH(i, n) {
        out[i] = binary_f32_op(op, a[strided_offset(i, shape, sa, ndim)], b[strided_offset(i, shape, sb, ndim)]);
    }
}

extern "C" __global__ void binary_bf16(const bf16* a, const bf16* b, bf16* out, i64 n, i64 op,
                                       Dims shape, Dims sa, Dims sb, i64 ndim) {
    FOR_EACH(i, n) {
        float x = ld(a, strided_offset(i, shape, sa, ndim)), y = ld(b, strided_offset(i, shape, sb, ndim));
        out[i] = f32_to_bf16(binary_f32_op(op, x, y));
    }
}

extern "C" __global__ void binary_i64(const i64* a, const i64* b, i64* out, i64 n, i64 op,
                                      Dims shape, Dims sa, Dims sb, i64 ndim) {
    FOR_EACH(i, n) {
        out[i] = binary_i64_op(op, a[strided_offset(i, shape, sa, ndim)], b[strided_offset(i, shape, sb, ndim)]);
    }
}

enum CompareOp {
    COMPARE_EQ = 0, COMPARE_NE = 1, COMPARE_LT = 2, COMPARE_LE = 3, COMPARE_GT = 4, COMPARE_GE = 5,
    COMPARE_LOGICAL_AND = 6, COMPARE_LOGICAL_OR = 7,
};

template <typename T>
__device__ __forceinline__ unsigned char compare_op(i64 op, T a, T b) {
    switch (op) {
        case COMPARE_EQ: return a == b;
        case COMPARE_NE: return a != b;
        case COMPARE_LT: return a < b;
        case COMPARE_LE: return a <= b;
        case COMPARE_GT: return a > b;
        case COMPARE_GE: return a >= b;
        case COMPARE_LOGICAL_AND: return (a != (T)0) && (b != (T)0);
        case COMPARE_LOGICAL_OR: return (a != (T)0) || (b != (T)0);
    }
    return 0;
}

#define COMPARE_KERNEL(NAME, T)                                                                  \
    extern "C" __global__ void NAME(const T* a, const T* b, unsigned char* out, i64 n, i64 op,   \
                                    Dims shape, Dims sa, Dims sb, i64 ndim) {                    \
        FOR_EACH(i, n) {                                                                         \
            out[i] = compare_op<T>(op, a[strided_offset(i, shape, sa, ndim)],                    \
                                   b[strided_offset(i, shape, sb, ndim)]);                       \
        }                                                                                        \
    }
COMPARE_KERNEL(compare_f32, float)
COMPARE_KERNEL(compare_i64, i64)
COMPARE_KERNEL(compare_u8, unsigned char)

// bfloat16 operands compare as their float32 values (a NaN is unequal to all).
extern "C" __global__ void compare_bf16(const bf16* a, const bf16* b, unsigned char* out, i64 n, i64 op,
                                        Dims shape, Dims sa, Dims sb, i64 ndim) {
    FOR_EACH(i, n) {
        out[i] = compare_op<float>(op, ld(a, strided_offset(i, shape, sa, ndim)),
                                   ld(b, strided_offset(i, shape, sb, ndim)));
    }
}

// where, by element size (the values are copied, never interpreted).
#define WHERE_KERNEL(NAME, T)                                                                    \
    extern "C" __global__ void NAME(const unsigned char* c, const T* a, const T* b, T* out, i64 n, \
                                    Dims shape, Dims sc, Dims sa, Dims sb, i64 ndim) {           \
        FOR_EACH(i, n) {                                                                         \
            out[i] = c[strided_offset(i, shape, sc, ndim)] ? a[strided_offset(i, shape, sa, ndim)] \
                                                           : b[strided_offset(i, shape, sb, ndim)]; \
        }                                                                                        \
    }
WHERE_KERNEL(where_1, unsigned char)
WHERE_KERNEL(where_2, unsigned short)
WHERE_KERNEL(where_4, unsigned int)
WHERE_KERNEL(where_8, u64)

// Conversions. Reading any dtype as a double is exact; writing truncates float
// to integers toward zero, maps nonzero to true for bool, rounds to nearest
// even for float32 and bfloat16.
__device__ __forceinline__ double load_as_double(const void* x, i64 kind, i64 i) {
    switch (kind) {
        case 0: return (double)((const float*)x)[i];
        case 1: return (double)((const i64*)x)[i];
        case 2: return ((const unsigned char*)x)[i] ? 1.0 : 0.0;
        case 3: return (double)((const unsigned char*)x)[i];
        case 4: return (double)bf16_to_f32(((const bf16*)x)[i]);
    }
    return 0.0;
}

// kinds: 0 float32, 1 int64, 2 bool, 3 uint8, 4 bfloat16
// Float to integer, one rule on every device (the CPU backend's, x86's): toward
// zero, and NaN, infinities and values outside [-2^63, 2^63) give INT64_MIN (the
// GPU's own conversion would saturate). uint8 takes that integer's low byte.
__device__ __forceinline__ i64 float_to_i64(double v) {
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return (i64)0x8000000000000000ull;
    return (i64)v;
}

extern "C" __global__ void convert(const void* x, void* y, i64 n, i64 src, i64 dst) {
    FOR_EACH(i, n) {
        if (src == 1 && dst == 1) { ((i64*)y)[i] = ((const i64*)x)[i]; continue; }
        if (src == 1 && (dst == 2 || dst == 3)) {
            i64 v = ((const i64*)x)[i];
            ((unsigned char*)y)[i] = dst == 2 ? (v != 0) : (unsigned char)v;
            continue;
        }
        double v = load_as_double(x, src, i);
        switch (dst) {
            case 0: ((float*)y)[i] = src == 1 ? (float)((const i64*)x)[i] : (float)v; break;
            case 1: ((i64*)y)[i] = float_to_i64(v); break;
            case 2: ((unsigned char*)y)[i] = v != 0.0; break;
            case 3: ((unsigned char*)y)[i] = (unsigned char)float_to_i64(v); break;
            case 4: ((bf16*)y)[i] = f32_to_bf16(src == 1 ? (float)((const i64*)x)[i] : (float)v); break;
        }
    }
}
