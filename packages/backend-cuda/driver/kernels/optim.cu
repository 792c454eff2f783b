// The fused, all-or-nothing Adam / AdamW update. The host lays the work out as
// segments (one per moment page): seg [count, 6] = (param address, grad address,
// m address, v address, elements, parameter index), and per parameter the
// float32 coefficients coef [params, 10] (riftco.backends.cuda.ops.optim),
// followed by two floats: the gradient scale every coefficient's grad_scale is
// multiplied by, and the gate (1: update; 0: leave everything as it is).
// Pass 1 flags parameters with a non-finite candidate; pass 2 finds the first
// flagged one (every block, from the flags) and writes every candidate only when
// there is none. Nothing combines with atomics: the flags are only ever set to 1.
//
// The clipped step (clipped_adam_update) runs two passes before those: the sums
// of squares of every gradient in fixed chunks (ss_partial), then one block that
// sums each gradient's chunks in order, checks the loss-like values, sums the
// per-gradient float32 sums exactly (math.fsum's value), and sets the scale and
// the gate (clip_gate). The host reads the sums, the values and the outcome in one
// read, after the update.

struct Coef {
    float grad_scale, l2, decay, decoupled, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps;
};

__device__ __forceinline__ void candidate(const Coef& k, float scale, float p, float g, float m, float v, float* np,
                                          float* nm, float* nv) {
    // One of k.grad_scale and scale is 1 (the host's clip scale, or the device's), so
    // the product is the other one exactly.
    g = g * (k.grad_scale * scale);
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

#define ADAM_NONE 0x7fffffffffffffffll

extern "C" __global__ void adam_check(const i64* seg, const float* coef, unsigned int* flags, i64 segments,
                                      i64 params) {
    const float* tail = coef + params * 10;
    if (tail[1] == 0.0f) return;
    float scale = tail[0];
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
            candidate(k, scale, p[i], g[i], m[i], v[i], &np, &nm, &nv);
            if (!(finite(np) && finite(nm) && finite(nv))) flags[param] = 1u;
        }
    }
}

// The first flagged parameter (ADAM_NONE: none), found by the whole block in a fixed tree.
__device__ i64 first_flagged(const unsigned int* flags, i64 params, i64* scratch) {
    unsigned int t = threadIdx.x;
    i64 first = ADAM_NONE;
    for (i64 i = t; i < params; i += blockDim.x) {
        if (flags[i]) { first = i; break; }
    }
    scratch[t] = first;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s && scratch[t + s] < scratch[t]) scratch[t] = scratch[t + s];
        __syncthreads();
    }
    i64 r = scratch[0];
    __syncthreads();
    return r;
}

// Writes every candidate unless a parameter is flagged (or the gate is shut). The
// first block also reports: bad[0] = the first flagged parameter or ADAM_NONE (when
// bad is not null), and status[0] = -(1 + that parameter) when one is (when status
// is not null; the clipped step's outcome, which clip_gate set to 1 or 0).
extern "C" __global__ void adam_commit(const i64* seg, const float* coef, const unsigned int* flags, i64 segments,
                                       i64 params, i64* bad, float* status) {
    __shared__ i64 scratch[THREADS];
    const float* tail = coef + params * 10;
    if (tail[1] == 0.0f) return;
    float scale = tail[0];
    bool reports = blockIdx.x == 0 && blockIdx.y == 0;
    bool work = reports;  // a block with no element to write skips the search (block-uniform)
    for (i64 sg = blockIdx.y; sg < segments && !work; sg += gridDim.y) {
        work = (i64)blockIdx.x * blockDim.x < seg[sg * 6 + 4];
    }
    if (!work) return;
    i64 first = first_flagged(flags, params, scratch);
    if (reports && threadIdx.x == 0) {
        if (bad) bad[0] = first;
        if (status && first != ADAM_NONE) status[0] = -(float)(first + 1);
    }
    if (first != ADAM_NONE) return;
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
            candidate(k, scale, p[i], g[i], m[i], v[i], &np, &nm, &nv);
            p[i] = np;
            m[i] = nm;
            v[i] = nv;
        }
    }
}

// -- the clipped step's gradient norm ------------------------------------------------

// tab [n, 4] = (gradient address, elements, first chunk, chunk elements): gradient i's
// chunk j covers elements [j * size, (j + 1) * size); chunks number every gradient's
// in order (an empty gradient has one, of nothing). partial[c] = chunk c's float64
// sum of squares, its threads' strided sums combined in a fixed tree.
extern "C" __global__ void ss_partial(const i64* tab, i64 n, i64 chunks, double* partial) {
    __shared__ double scratch[THREADS];
    for (i64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        i64 lo = 0, hi = n - 1;  // the last gradient whose first chunk is <= c
        while (lo < hi) {
            i64 mid = (lo + hi + 1) / 2;
            if (tab[mid * 4 + 2] <= c) lo = mid; else hi = mid - 1;
        }
        const float* x = (const float*)tab[lo * 4];
        i64 size = tab[lo * 4 + 3];
        i64 start = (c - tab[lo * 4 + 2]) * size;
        i64 end = start + size < tab[lo * 4 + 1] ? start + size : tab[lo * 4 + 1];
        double acc = 0.0;
        for (i64 k = start + threadIdx.x; k < end; k += blockDim.x) {
            double v = (double)x[k];
            acc += v * v;
        }
        double total = block_sum(acc, scratch);
        if (threadIdx.x == 0) partial[c] = total;
    }
}

__device__ __forceinline__ unsigned int limb_bit(const unsigned int* limb, int pos) {
    return (limb[pos >> 5] >> (pos & 31)) & 1u;
}

#define EXACT_LIMBS 10

// The exact sum of n finite, non-negative float32 values rounded once to double
// (to nearest, ties to even): math.fsum's result. A fixed-point accumulator in units
// of 2^-149 (the smallest subnormal) of 320 bits holds any sum of up to 2^16 floats.
__device__ double exact_sum(const float* x, i64 n) {
    unsigned int limb[EXACT_LIMBS];
    for (int j = 0; j < EXACT_LIMBS; ++j) limb[j] = 0u;
    for (i64 i = 0; i < n; ++i) {
        unsigned int u = __float_as_uint(x[i]);
        unsigned int e = (u >> 23) & 0xffu;
        u64 m = u & 0x7fffffu;
        int shift = 0;
        if (e) {
            m |= 0x800000u;
            shift = (int)e - 1;
        }
        int w = shift >> 5;
        u64 part = m << (shift & 31);
        u64 carry = 0;
        for (int j = w; j < EXACT_LIMBS; ++j) {
            u64 add = j == w ? (part & 0xffffffffull) : (j == w + 1 ? (part >> 32) : 0ull);
            u64 s = (u64)limb[j] + add + carry;
            limb[j] = (unsigned int)s;
            carry = s >> 32;
            if (j > w && carry == 0) break;
        }
    }
    int top = -1;
    for (int pos = EXACT_LIMBS * 32 - 1; pos >= 0; --pos) {
        if (limb_bit(limb, pos)) { top = pos; break; }
    }
    if (top < 0) return 0.0;
    if (top < 53) {
        u64 exact = (u64)limb[0] | ((u64)limb[1] << 32);
        return ldexp((double)exact, -149);
    }
    u64 mant = 0;
    for (int pos = top; pos >= top - 52; --pos) mant = (mant << 1) | limb_bit(limb, pos);
    unsigned int guard = limb_bit(limb, top - 53), sticky = 0u;
    for (int pos = top - 54; pos >= 0 && !sticky; --pos) sticky = limb_bit(limb, pos);
    if (guard && (sticky || (mant & 1ull))) mant += 1;
    if (mant >> 53) {
        mant >>= 1;
        top += 1;
    }
    return ldexp((double)mant, top - 52 - 149);
}

// One block. out[i] = gradient i's float32 sum of squares (its chunks' partials summed
// in order, in float64), out[n + j] = value j (each a one-element float32 tensor,
// vals[j] its address), out[n + k] = 1 when the update goes ahead, else 0. It goes
// ahead when every value is finite and every gradient's sum is exactly 0 or a
// normal float32 (otherwise the host decides, as the unclipped path does); then
// tail[0] = the clip scale min(1, max_norm / norm) of norm = sqrt(fsum(out[:n])), in
// float64 and rounded once (max_norm_bits: max_norm's float64 bits; infinity: no
// clipping) and tail[1] = 1; otherwise tail[1] = 0.
extern "C" __global__ void clip_gate(const i64* tab, i64 n, i64 chunks, const double* partial, const i64* vals,
                                     i64 k, i64 max_norm_bits, float* out, float* tail) {
    __shared__ i64 good[THREADS];
    unsigned int t = threadIdx.x;
    i64 ok = 1;
    for (i64 i = t; i < n; i += blockDim.x) {
        i64 first = tab[i * 4 + 2];
        i64 last = i + 1 < n ? tab[(i + 1) * 4 + 2] : chunks;
        double total = 0.0;
        for (i64 c = first; c < last; ++c) total += partial[c];
        float f = (float)total;
        out[i] = f;
        if (!(total == 0.0 || (f >= 1.17549435e-38f && f < POS_INF))) ok = 0;
    }
    good[t] = ok;
    __syncthreads();
    if (t == 0) {
        for (unsigned int s = 1; s < blockDim.x; ++s) ok = ok && good[s];
        for (i64 j = 0; j < k; ++j) {
            float v = *(const float*)vals[j];
            out[n + j] = v;
            if (!finite(v)) ok = 0;
        }
        union {
            i64 bits;
            double value;
        } max_norm;
        max_norm.bits = max_norm_bits;
        double scale = 1.0;
        if (ok) {
            double norm = sqrt(exact_sum(out, n));
            if (norm > max_norm.value) scale = max_norm.value / norm;
        }
        tail[0] = (float)scale;
        tail[1] = ok ? 1.0f : 0.0f;
        out[n + k] = ok ? 1.0f : 0.0f;
    }
}
