// Attention backward for one (query row, head) per thread: delta = sum_j p dp,
// dq = scale * sum_j p (dp - delta) k_j, with dp = dout . v_j and p read from
// the saved probabilities (from_probs) or recomputed from the row statistics.
#include attn_common
@group(0) @binding(1) var<storage, read> qs: array<f32>;
@group(0) @binding(2) var<storage, read> ks: array<f32>;
@group(0) @binding(3) var<storage, read> vs: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> probs: array<f32>;
@group(0) @binding(6) var<storage, read> row_max: array<f32>;
@group(0) @binding(7) var<storage, read> row_sum: array<f32>;
@group(0) @binding(8) var<storage, read_write> dq: array<f32>;
@group(0) @binding(9) var<storage, read_write> delta: array<f32>;

fn prob(q: Query, qo: u32, ko: u32, j: u32) -> f32 {
    let stat = stat_at(q);
    if (P[12] != 0u) { return probs[stat * P[3] + j]; }
    if (row_sum[stat] <= 0.0) { return 0.0; }
    var s = 0.0;
    for (var d = 0u; d < P[6]; d = d + 1u) { s = s + qs[qo + d] * ks[ko + d]; }
    return exp_safe(s * pf(7u) - row_max[stat]) / row_sum[stat];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 64u;
    if (e >= P[0]) { return; }
    let q = dense_query(e);
    let D = P[6];
    let kvh = kv_head(q.head);
    let qo = q_at(q.row, q.head);
    var dl = 0.0;
    for (var j = q.first; j <= q.last; j = j + 1) {
        let ko = kv_at(dense_key(q, u32(j)), kvh);
        var dp = 0.0;
        for (var d = 0u; d < D; d = d + 1u) { dp = dp + dout[qo + d] * vs[ko + d]; }
        dl = dl + prob(q, qo, ko, u32(j)) * dp;
    }
    var acc: array<f32, MAXD>;
    for (var d = 0u; d < D; d = d + 1u) { acc[d] = 0.0; }
    for (var j = q.first; j <= q.last; j = j + 1) {
        let ko = kv_at(dense_key(q, u32(j)), kvh);
        var dp = 0.0;
        for (var d = 0u; d < D; d = d + 1u) { dp = dp + dout[qo + d] * vs[ko + d]; }
        let ds = prob(q, qo, ko, u32(j)) * (dp - dl);
        for (var d = 0u; d < D; d = d + 1u) { acc[d] = acc[d] + ds * ks[ko + d]; }
    }
    let scale = pf(7u);
    for (var d = 0u; d < D; d = d + 1u) { dq[qo + d] = acc[d] * scale; }
    delta[stat_at(q)] = dl;
}
