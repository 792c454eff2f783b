// Whole-step decode: the feed-forward activation in place. P: count, kind
// (0 gelu, 1 gelu_tanh, 2 swiglu: g = silu(g) * u)
@group(0) @binding(1) var<storage, read> u: array<f32>;
@group(0) @binding(2) var<storage, read_write> g: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if (e >= P[0]) { return; }
    let a = g[e];
    if (P[1] == 0u) { g[e] = gelu_f(a); }
    else if (P[1] == 1u) { g[e] = gelu_tanh_f(a); }
    else { g[e] = (a * sigmoid_f(a)) * u[e]; }
}
