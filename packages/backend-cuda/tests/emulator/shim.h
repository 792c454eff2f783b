// CUDA C on the host, for testing the kernels without a GPU: each block's
// threads are real threads (std::thread) meeting at a barrier for
// __syncthreads, blocks run one after another, so `__shared__` can be a
// function-level static. Only what riftco's kernels use is here.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#ifndef __global__
#define __global__
#endif
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __constant__

struct emu_dim3 { unsigned int x, y, z; };
extern thread_local emu_dim3 threadIdx, blockIdx;
extern emu_dim3 blockDim, gridDim;
extern pthread_barrier_t emu_barrier;

inline void __syncthreads() { pthread_barrier_wait(&emu_barrier); }

// Warps: lanes 32 w .. 32 w + 31 of a block (the last warp may be short), meeting at
// a barrier of their own and exchanging registers through a table of words per lane.
// Warp collectives must be reached by every lane of the warp, as on the device.
#define RIFTCO_EMULATION 1
#define EMU_WARPS 32
extern pthread_barrier_t emu_warp_barriers[EMU_WARPS];
extern unsigned emu_warp_words[EMU_WARPS][32][6];

// A misaligned access faults on the device (CUDA_ERROR_MISALIGNED_ADDRESS): here it
// stops the process with the kernel's line rather than reading across the boundary.
#define emu_require_aligned(p, n)                                                                  \
    do {                                                                                           \
        if (((uintptr_t)(p)) % (n)) {                                                              \
            fprintf(stderr, "misaligned %d-byte access at %p (%s:%d)\n", (int)(n), (const void*)(p), \
                    __FILE__, __LINE__);                                                           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

inline void emu_warp_wait() { pthread_barrier_wait(&emu_warp_barriers[threadIdx.x >> 5]); }

inline float __shfl_xor_sync(unsigned, float x, int mask) {
    unsigned w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    memcpy(&emu_warp_words[w][lane][0], &x, 4);
    emu_warp_wait();
    float r;
    memcpy(&r, &emu_warp_words[w][lane ^ (unsigned)mask][0], 4);
    emu_warp_wait();
    return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c = a b + c, from the PTX ISA's
// fragment table (lane = 4 g + c): A's register j of lane holds (row g + 8 (j & 1),
// columns 2 c + 8 (j >> 1) + {0, 1}); B's register j holds (rows 2 c + 8 j + {0, 1},
// column g); C's element i is (row g + 8 (i >> 1), column 2 c + (i & 1)). The
// products are exact and summed in double, rounded once with c.
inline float emu_bf16(unsigned word, int half) {
    unsigned bits = (half ? word >> 16 : word & 0xffffu) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

inline void emu_mma_m16n8k16_bf16(float* c, const unsigned* a, const unsigned* b) {
    unsigned w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int j = 0; j < 4; ++j) emu_warp_words[w][lane][j] = a[j];
    for (int j = 0; j < 2; ++j) emu_warp_words[w][lane][4 + j] = b[j];
    emu_warp_wait();
    unsigned g = lane >> 2, q = lane & 3;
    float d[4];
    for (int i = 0; i < 4; ++i) {
        unsigned row = g + 8 * (i >> 1), col = 2 * q + (i & 1);
        double sum = c[i];
        for (unsigned k = 0; k < 16; ++k) {
            unsigned a_lane = (row & 7) * 4 + ((k & 7) >> 1);
            unsigned a_reg = (row >> 3) + 2 * (k >> 3);
            unsigned b_lane = col * 4 + ((k & 7) >> 1);
            unsigned b_reg = k >> 3;
            sum += (double)emu_bf16(emu_warp_words[w][a_lane][a_reg], k & 1) *
                   (double)emu_bf16(emu_warp_words[w][b_lane][4 + b_reg], k & 1);
        }
        d[i] = (float)sum;
    }
    emu_warp_wait();
    for (int i = 0; i < 4; ++i) c[i] = d[i];
}

inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int i; memcpy(&i, &f, 4); return i; }

inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    unsigned long long old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}

// Blocks run one after another here: a fence orders nothing that is not already ordered.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline unsigned int atomicInc(unsigned int* p, unsigned int limit) {
    unsigned int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
    }
    return old;
}
