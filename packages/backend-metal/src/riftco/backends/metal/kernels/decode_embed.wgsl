// Whole-step decode: the residual stream x [N, d] of the step's tokens, each
// token's embedding plus (learned positions) its position's.
// P: N, d, tokens_at, positions_at, learned
@group(0) @binding(1) var<storage, read> step: array<i32>;
@group(0) @binding(2) var<storage, read> emb: array<f32>;
@group(0) @binding(3) var<storage, read> pos_emb: array<f32>;
@group(0) @binding(4) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    let d = P[1];
    if (e >= P[0] * d) { return; }
    let n = e / d;
    let j = e % d;
    var v = emb[u32(step[P[2] + n]) * d + j];
    if (P[4] != 0u) { v = v + pos_emb[u32(step[P[3] + n]) * d + j]; }
    x[e] = v;
}
