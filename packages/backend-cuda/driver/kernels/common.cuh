// Shared by every kernel module (pasted in front of each by the driver crate,
// since NVRTC compiles one module at a time and no CUDA header is needed).
//
// Conventions: every integer argument is a 64-bit `long long`, every scalar a
// `float`, shapes and strides travel by value as `Dims` (up to 8 axes, unused
// ones 1 / 0). Reductions combine partial results in a fixed tree, never with
// atomics, so the same inputs give the same bits on every run (an atomic counter may
// pick which block combines them, never their order).

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned short bf16;  // bfloat16 storage: the high half of a float32

#define MAX_DIMS 8
#define THREADS 256
#define NEG_INF (__int_as_float(0xff800000))
#define POS_INF (__int_as_float(0x7f800000))

struct Dims {
    i64 v[MAX_DIMS];
};

__device__ __forceinline__ float bf16_to_f32(bf16 x) {
    return __uint_as_float(((unsigned int)x) << 16);
}

// Round to nearest, ties to even (past the largest finite value: infinity); a NaN
// becomes the quiet NaN of its sign, 0x7fc0 or 0xffc0: the bits ml_dtypes gives.
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (bf16)(((u >> 16) & 0x8000u) | 0x7fc0u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}

// An element read as float32: the value itself, or a bfloat16 widened (exact).
// Kernels templated on their input type read every operand through these.
__device__ __forceinline__ float ld(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16* p, i64 i) { return bf16_to_f32(p[i]); }

// The flat offset of element `linear` of a tensor of shape `shape` (ndim axes)
// read through `strides` (0 on broadcast axes). The loop is unrolled over every
// axis a Dims holds, so each `v[d]` is a constant index and the Dims are read in
// place from the parameter bank: indexed by a run-time axis they would be copied
// to a stack frame in local memory first (`tests/test_kernels_compile.py` checks
// every kernel's frame). One axis -- what the ops' coalescing makes of contiguous
// and scalar operands -- takes no division.
__device__ __forceinline__ i64 strided_offset(i64 linear, const Dims& shape, const Dims& strides, i64 ndim) {
    if (ndim == 1) return linear * strides.v[0];
    i64 off = 0;
#pragma unroll
    for (int d = MAX_DIMS - 1; d >= 0; --d) {
        if (d < ndim) {
            i64 n = shape.v[d];
            i64 i = linear % n;
            linear /= n;
            off += i * strides.v[d];
        }
    }
    return off;
}

// Four floats moved as one 16-byte access (ld/st.global.v4 on the device).
struct alignas(16) Quad {
    float v[4];
};

__device__ __forceinline__ bool aligned16(const void* p) { return ((u64)p & 15u) == 0; }

// A grid-stride loop over n elements.
#define FOR_EACH(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// Block-wide sum of one double per thread, in a fixed order (a tree over
// threads, blockDim.x a power of two <= 1024). `scratch` holds blockDim.x doubles.
__device__ double block_sum(double x, double* scratch) {
    unsigned int t = threadIdx.x;
    scratch[t] = x;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) scratch[t] += scratch[t + s];
        __syncthreads();
    }
    double r = scratch[0];
    __syncthreads();
    return r;
}

// NaN wins, as numpy's max and min.
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float nan_min(float a, float b) { return (a != a || a < b) ? a : b; }

// Block-wide max of one float per thread (NaN wins). `scratch` holds blockDim.x floats.
__device__ float block_max(float x, float* scratch) {
    unsigned int t = threadIdx.x;
    scratch[t] = x;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) scratch[t] = nan_max(scratch[t], scratch[t + s]);
        __syncthreads();
    }
    float r = scratch[0];
    __syncthreads();
    return r;
}

// Whether this block is the last of the grid to get here (every thread of every block
// calls it): `done` is a counter atomicInc wraps back to zero for the next launch. What
// each block wrote before is visible to the last one (read it through volatile).
__device__ bool last_block_to_finish(unsigned int* done) {
    __shared__ unsigned int ticket;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicInc(done, gridDim.x - 1);
    __syncthreads();
    bool last = ticket == gridDim.x - 1;
    if (last) __threadfence();
    return last;
}

// Record the first bad position (the smallest) in flag[0]; the host reads it.
__device__ __forceinline__ void report_bad(i64* flag, i64 position) {
    atomicMin((u64*)flag, (u64)position);
}
