// Attention backward, dk and dv, tiled: a workgroup per 64 key rows of one
// (batch, key/value head) walks the query heads of its group and, for each,
// the query rows in tiles of {{KT}} (their q and dout rows in workgroup memory,
// with their row statistics), skipping tiles no query of which sees the
// workgroup's keys. Each key row does the arithmetic of attn_backward_kv.wgsl,
// heads then queries in order.
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

const KT: u32 = {{KT}}u;
var<workgroup> qt: array<f32, {{TD}}>;
var<workgroup> ot: array<f32, {{TD}}>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let Hkv = P[5];
    let S = P[3];
    let T = P[2];
    let H = P[4];
    let D = P[6];
    let b = wid.y / Hkv;
    let kvh = wid.y % Hkv;
    let j0 = wid.x * 64u;
    let j = j0 + lid.x;
    let live = j < S;
    let key = b * S + min(j, S - 1u);
    let ko = kv_at(key, kvh);
    let jhi = i32(min(j0 + 63u, S - 1u));
    let group = H / Hkv;
    let scale = pf(7u);
    var ak: array<f32, MAXD>;
    var av: array<f32, MAXD>;
    for (var d = 0u; d < D; d = d + 1u) { ak[d] = 0.0; av[d] = 0.0; }
    for (var r = 0u; r < group; r = r + 1u) {
        let h = kvh * group + r;
        for (var ta = 0u; ta < T; ta = ta + KT) {
            let n = min(KT, T - ta);
            // Skip a tile none of whose queries sees a key of this workgroup.
            let first = dense_query((b * T + ta) * H + h).first;
            let last = dense_query((b * T + ta + n - 1u) * H + h).last;
            if (last < i32(j0) || first > jhi) { continue; }
            for (var i = lid.x; i < n * D; i = i + 64u) {
                let qo = q_at(b * T + ta + i / D, h);
                qt[i] = qs[qo + i % D];
                ot[i] = dout[qo + i % D];
            }
            workgroupBarrier();
            if (live) {
                for (var tt = 0u; tt < n; tt = tt + 1u) {
                    let q = dense_query((b * T + ta + tt) * H + h);
                    if (i32(j) < q.first || i32(j) > q.last) { continue; }
                    let stat = stat_at(q);
                    let to = tt * D;
                    var p = 0.0;
                    if (P[12] != 0u) {
                        p = probs[stat * S + j];
                    } else if (row_sum[stat] > 0.0) {
                        var s = 0.0;
                        for (var d = 0u; d < D; d = d + 1u) { s = s + qt[to + d] * ks[ko + d]; }
                        p = exp_safe(s * scale - row_max[stat]) / row_sum[stat];
                    }
                    var dp = 0.0;
                    for (var d = 0u; d < D; d = d + 1u) { dp = dp + ot[to + d] * vs[ko + d]; }
                    let ds = p * (dp - delta[stat]) * scale;
                    for (var d = 0u; d < D; d = d + 1u) {
                        av[d] = av[d] + p * ot[to + d];
                        ak[d] = ak[d] + ds * qt[to + d];
                    }
                }
            }
            workgroupBarrier();
        }
    }
    if (live) {
        for (var d = 0u; d < D; d = d + 1u) { dk[ko + d] = ak[d]; dv[ko + d] = av[d]; }
    }
}
