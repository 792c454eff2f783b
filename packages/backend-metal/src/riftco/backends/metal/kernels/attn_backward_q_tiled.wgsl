// Attention backward, dq and delta, tiled like attn_forward_tiled.wgsl: a
// workgroup per 64 query rows of one (batch, head) shares tiles of {{KT}} keys
// and values through workgroup memory, in two passes over them (delta, then
// dq); each row does the arithmetic of attn_backward_q.wgsl in key order.
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

const KT: u32 = {{KT}}u;
var<workgroup> kt: array<f32, {{TD}}>;
var<workgroup> vt: array<f32, {{TD}}>;

// p of key j (its tile row at kto) for query q.
fn prob(q: Query, qo: u32, kto: u32, j: u32) -> f32 {
    let stat = stat_at(q);
    if (P[12] != 0u) { return probs[stat * P[3] + j]; }
    if (row_sum[stat] <= 0.0) { return 0.0; }
    var s = 0.0;
    for (var d = 0u; d < P[6]; d = d + 1u) { s = s + qs[qo + d] * kt[kto + d]; }
    return exp_safe(s * pf(7u) - row_max[stat]) / row_sum[stat];
}

fn load_tile(q: Query, j0: i32, n: u32, kvh: u32, lane: u32) {
    let D = P[6];
    for (var i = lane; i < n * D; i = i + 64u) {
        let ko = kv_at(dense_key(q, u32(j0) + i / D), kvh);
        kt[i] = ks[ko + i % D];
        vt[i] = vs[ko + i % D];
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let T = P[2];
    let H = P[4];
    let D = P[6];
    let bi = wid.y / H;
    let h = wid.y % H;
    let t0 = wid.x * 64u;
    let t = t0 + lid.x;
    let live = t < T;
    let q = dense_query((bi * T + min(t, T - 1u)) * H + h);
    let lo = dense_query((bi * T + t0) * H + h).first;
    let hi = dense_query((bi * T + min(t0 + 63u, T - 1u)) * H + h).last;
    let kvh = kv_head(h);
    let qo = q_at(q.row, h);
    var dl = 0.0;
    for (var j0 = lo; j0 <= hi; j0 = j0 + i32(KT)) {
        let n = min(KT, u32(hi - j0) + 1u);
        load_tile(q, j0, n, kvh, lid.x);
        workgroupBarrier();
        if (live) {
            for (var jj = 0u; jj < n; jj = jj + 1u) {
                let j = j0 + i32(jj);
                if (j < q.first || j > q.last) { continue; }
                var dp = 0.0;
                for (var d = 0u; d < D; d = d + 1u) { dp = dp + dout[qo + d] * vt[jj * D + d]; }
                dl = dl + prob(q, qo, jj * D, u32(j)) * dp;
            }
        }
        workgroupBarrier();
    }
    var acc: array<f32, MAXD>;
    for (var d = 0u; d < D; d = d + 1u) { acc[d] = 0.0; }
    for (var j0 = lo; j0 <= hi; j0 = j0 + i32(KT)) {
        let n = min(KT, u32(hi - j0) + 1u);
        load_tile(q, j0, n, kvh, lid.x);
        workgroupBarrier();
        if (live) {
            for (var jj = 0u; jj < n; jj = jj + 1u) {
                let j = j0 + i32(jj);
                if (j < q.first || j > q.last) { continue; }
                var dp = 0.0;
                for (var d = 0u; d < D; d = d + 1u) { dp = dp + dout[qo + d] * vt[jj * D + d]; }
                let ds = prob(q, qo, jj * D, u32(j)) * (dp - dl);
                for (var d = 0u; d < D; d = d + 1u) { acc[d] = acc[d] + ds * kt[jj * D + d]; }
            }
        }
        workgroupBarrier();
    }
    if (live) {
        let scale = pf(7u);
        for (var d = 0u; d < D; d = d + 1u) { dq[qo + d] = acc[d] * scale; }
        delta[stat_at(q)] = dl;
    }
}
