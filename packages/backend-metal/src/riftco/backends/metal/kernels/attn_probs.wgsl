// Materialized probabilities [B, H, T, S] from the forward statistics; hidden
// keys get exactly 0. One thread per element.
#include attn_common
@group(0) @binding(1) var<storage, read> qs: array<f32>;
@group(0) @binding(2) var<storage, read> ks: array<f32>;
@group(0) @binding(3) var<storage, read> row_max: array<f32>;
@group(0) @binding(4) var<storage, read> row_sum: array<f32>;
@group(0) @binding(5) var<storage, read_write> probs: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    let S = P[3];
    let T = P[2];
    let H = P[4];
    if (e >= P[0] * S) { return; }
    let j = e % S;
    let stat = e / S;            // (b * H + h) * T + t
    let t = stat % T;
    let h = (stat / T) % H;
    let b = stat / (T * H);
    let q = dense_query((b * T + t) * H + h);
    if (i32(j) < q.first || i32(j) > q.last || row_sum[stat] <= 0.0) { probs[e] = 0.0; return; }
    let qo = q_at(q.row, h);
    let ko = kv_at(dense_key(q, j), kv_head(h));
    var s = 0.0;
    for (var d = 0u; d < P[6]; d = d + 1u) { s = s + qs[qo + d] * ks[ko + d]; }
    probs[e] = exp_safe(s * pf(7u) - row_max[stat]) / row_sum[stat];
}
