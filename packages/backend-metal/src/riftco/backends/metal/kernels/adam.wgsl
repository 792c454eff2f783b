// Adam / AdamW candidates of one parameter (torch.optim.Adam's order, float32
// coefficients as the CPU kernel's). Nothing is written over the parameter:
// the candidates go to p2/m2/v2 and a non-finite one records the parameter's
// index in flag (atomicMin), so the commit can be all-or-nothing.
// P: count, index, grad_scale, l2, decay, decoupled, one_minus_beta1, beta2,
//    one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps
@group(0) @binding(1) var<storage, read> p: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> m2: array<f32>;
@group(0) @binding(4) var<storage, read_write> v2: array<f32>;
@group(0) @binding(5) var<storage, read_write> p2: array<f32>;
@group(0) @binding(6) var<storage, read_write> flag: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    var grad = g[i] * pf(2u);
    var value = p[i];
    if (pf(3u) != 0.0) { grad = grad + pf(3u) * value; }
    if (P[5] != 0u) { value = value * pf(4u); }
    let m = m2[i] + pf(6u) * (grad - m2[i]);
    let v = v2[i] * pf(7u) + pf(8u) * grad * grad;
    let denom = sqrt(v) / pf(10u) + pf(11u);
    let np = value + pf(9u) * m / denom;
    m2[i] = m;
    v2[i] = v;
    p2[i] = np;
    if (!is_finite(np) || !is_finite(m) || !is_finite(v)) { atomicMin(&flag[0], P[1]); }
}
