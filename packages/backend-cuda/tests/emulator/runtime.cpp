// The launcher of the host emulation (see shim.h).
#include <pthread.h>
#include <thread>
#include <vector>

struct emu_dim3 { unsigned int x, y, z; };
thread_local emu_dim3 threadIdx, blockIdx;
emu_dim3 blockDim, gridDim;
pthread_barrier_t emu_barrier;
pthread_barrier_t emu_warp_barriers[32];
unsigned emu_warp_words[32][32][6];

typedef void (*emu_kernel)(void**);

extern "C" void emu_launch(emu_kernel kernel, void** args, unsigned gx, unsigned gy, unsigned gz, unsigned bx) {
    gridDim = {gx, gy, gz};
    blockDim = {bx, 1, 1};
    pthread_barrier_init(&emu_barrier, nullptr, bx);
    unsigned warps = (bx + 31) / 32;
    for (unsigned w = 0; w < warps; ++w) pthread_barrier_init(&emu_warp_barriers[w], nullptr, bx - 32 * w < 32 ? bx - 32 * w : 32);
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
                std::vector<std::thread> threads;
                threads.reserve(bx);
                for (unsigned t = 0; t < bx; ++t) {
                    threads.emplace_back([=] {
                        threadIdx = {t, 0, 0};
                        blockIdx = {x, y, z};
                        kernel(args);
                    });
                }
                for (auto& th : threads) th.join();
            }
    pthread_barrier_destroy(&emu_barrier);
    for (unsigned w = 0; w < warps; ++w) pthread_barrier_destroy(&emu_warp_barriers[w]);
}
