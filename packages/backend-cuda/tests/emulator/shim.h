// CUDA C on the host, for testing the kernels without a GPU: each block's
// threads are real threads (std::thread) meeting at a barrier for
// __syncthreads, blocks run one after another, so `__shared__` can be a
// function-level static. Only what riftco's kernels use is here.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#ifndef __global__
#define __global__
#endif
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __constant__

struct emu_dim3 { unsigned int x, y, z; };
extern thread_local emu_dim3 threadIdx, blockIdx;
extern emu_dim3 blockDim, gridDim;
extern pthread_barrier_t emu_barrier;

inline void __syncthreads() { pthread_barrier_wait(&emu_barrier); }

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
