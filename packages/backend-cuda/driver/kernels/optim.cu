// The fused, all-or-nothing Adam / AdamW update. The host lays the work out as
// segments (one per moment page): seg [count, 6] = (param address, grad address,
// m address, v address, elements, parameter index), and per parameter the
// float32 coefficients coef [params, 10] (riftco.backends.cuda.ops.optim).
// Pass 1 flags parameters with a non-finite candidate, pass 2 finds the first,
// pass 3 writes every candidate only when there is none. The host reads the
// one flag (the only wait of a step).

struct Coef {
    float grad_scale, l2, decay, decoupled, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps;
};

__device__ __forceinline__ void candidate(const Coef& k, float p, float g, float m, float v, float* np, float* nm,
                                          float* nv) {
    g = g * k.grad_scale;
    if (k.l2 != 0.0f) g += k.l2 * p;
    if (k.decoupled != 0.0f) p = p * k.decay;
    m = m + k.one_minus_beta1 * (g - m);
    v = v * k.beta2 + k.one_minus_beta2 * g * g;
    float denom = sqrtf(v) / k.bc2_sqrt + k.eps;
    *np = p + k.neg_step_size * m / denom;
    *nm = m;
    *nv = v;
}

__device__ __forceinline__ bool finite(float x) { return x - x == 0.0f; }

extern "C" __global__ void adam_check(const i64* seg, const float* coef, unsigned int* flags, i64 segments) {
    for (i64 sg = blockIdx.y; sg < segments; sg += gridDim.y) {
        const i64* e = seg + sg * 6;
        const float* p = (const float*)e[0];
        const float* g = (const float*)e[1];
        const float* m = (const float*)e[2];
        const float* v = (const float*)e[3];
        i64 count = e[4], param = e[5];
        Coef k = *(const Coef*)(coef + param * 10);
        FOR_EACH(i, count) {
            float np, nm, nv;
            candidate(k, p[i], g[i], m[i], v[i], &np, &nm, &nv);
            if (!(finite(np) && finite(nm) && finite(nv))) flags[param] = 1u;
        }
    }
}

// bad[0] = the first flagged parameter, or INT64_MAX when none is.
extern "C" __global__ void adam_first_bad(const unsigned int* flags, i64 params, i64* bad) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    i64 first = 0x7fffffffffffffffll;
    for (i64 i = 0; i < params; ++i) {
        if (flags[i]) { first = i; break; }
    }
    bad[0] = first;
}

extern "C" __global__ void adam_commit(const i64* seg, const float* coef, const i64* bad, i64 segments) {
    if (bad[0] != 0x7fffffffffffffffll) return;
    for (i64 sg = blockIdx.y; sg < segments; sg += gridDim.y) {
        const i64* e = seg + sg * 6;
        float* p = (float*)e[0];
        const float* g = (const float*)e[1];
        float* m = (float*)e[2];
        float* v = (float*)e[3];
        i64 count = e[4], param = e[5];
        Coef k = *(const Coef*)(coef + param * 10);
        FOR_EACH(i, count) {
            float np, nm, nv;
            candidate(k, p[i], g[i], m[i], v[i], &np, &nm, &nv);
            p[i] = np;
            m[i] = nm;
            v[i] = nv;
        }
    }
}
