// Attention backward for one (batch, key row, key/value head) per thread: over
// the query heads of its group and the queries that see it, in order,
// dv = sum p dout and dk = scale * sum p (dp - delta) q.
#include attn_common
@group(0) @binding(1) var<storage, read> qs: array<f32>;
@group(0) @binding(2) var<storage, read> ks: array<f32>;
@group(0) @binding(3) var<storage, read> vs: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> probs: array<f32>;
@group(0) @binding(6) var<storage, read> row_max: array<f32>;
@group(0) @binding(7) var<storage, read> row_sum: array<f32>;
@group(0) @binding(8) var<storage, read> delta: array<f32>;
@group(0) @binding(9) var<storage, read_write> dk: array<f32>;
@group(0) @binding(10) var<storage, read_write> dv: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 64u;
    let Hkv = P[5];
    let S = P[3];
    let T = P[2];
    let H = P[4];
    let D = P[6];
    if (e >= P[1] * S * Hkv) { return; }
    let kvh = e % Hkv;
    let key = e / Hkv;           // b * S + j
    let j = key % S;
    let b = key / S;
    let ko = kv_at(key, kvh);
    let group = H / Hkv;
    let scale = pf(7u);
    var ak: array<f32, MAXD>;
    var av: array<f32, MAXD>;
    for (var d = 0u; d < D; d = d + 1u) { ak[d] = 0.0; av[d] = 0.0; }
    for (var r = 0u; r < group; r = r + 1u) {
        let h = kvh * group + r;
        for (var t = 0u; t < T; t = t + 1u) {
            let q = dense_query((b * T + t) * H + h);
            if (i32(j) < q.first || i32(j) > q.last) { continue; }
            let stat = stat_at(q);
            let qo = q_at(q.row, h);
            var p = 0.0;
            if (P[12] != 0u) {
                p = probs[stat * S + j];
            } else if (row_sum[stat] > 0.0) {
                var s = 0.0;
                for (var d = 0u; d < D; d = d + 1u) { s = s + qs[qo + d] * ks[ko + d]; }
                p = exp_safe(s * scale - row_max[stat]) / row_sum[stat];
            }
            var dp = 0.0;
            for (var d = 0u; d < D; d = d + 1u) { dp = dp + dout[qo + d] * vs[ko + d]; }
            let ds = p * (dp - delta[stat]) * scale;
            for (var d = 0u; d < D; d = d + 1u) {
                av[d] = av[d] + p * dout[qo + d];
                ak[d] = ak[d] + ds * qs[qo + d];
            }
        }
    }
    for (var d = 0u; d < D; d = d + 1u) { dk[ko + d] = ak[d]; dv[ko + d] = av[d]; }
}
