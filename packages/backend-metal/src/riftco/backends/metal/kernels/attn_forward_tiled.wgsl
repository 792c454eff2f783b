// Dense attention forward tiled through workgroup memory: a workgroup holds 64
// consecutive query rows of one (batch, head) and walks the keys any of them
// sees in tiles of {{KT}}, each tile's keys and values loaded once into
// workgroup memory and shared by the 64 rows. Each row keeps the online
// softmax of attn_forward.wgsl over its visible keys in order (the same
// arithmetic, so the same results), memory linear in the sequence length.
// Writes the output and the row max and sum.
#include attn_common
@group(0) @binding(1) var<storage, read> qs: array<f32>;
@group(0) @binding(2) var<storage, read> ks: array<f32>;
@group(0) @binding(3) var<storage, read> vs: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> row_max: array<f32>;
@group(0) @binding(6) var<storage, read_write> row_sum: array<f32>;

const KT: u32 = {{KT}}u;
var<workgroup> kt: array<f32, {{TD}}>;
var<workgroup> vt: array<f32, {{TD}}>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let T = P[2];
    let H = P[4];
    let D = P[6];
    let scale = pf(7u);
    let bi = wid.y / H;
    let h = wid.y % H;
    let t0 = wid.x * 64u;
    let t = t0 + lid.x;
    let live = t < T;
    let q = dense_query((bi * T + min(t, T - 1u)) * H + h);
    // The keys the workgroup needs: visible ranges only move forward with the row.
    let lo = dense_query((bi * T + t0) * H + h).first;
    let hi = dense_query((bi * T + min(t0 + 63u, T - 1u)) * H + h).last;
    let kvh = kv_head(h);
    let qo = q_at(q.row, h);
    var acc: array<f32, MAXD>;
    for (var d = 0u; d < D; d = d + 1u) { acc[d] = 0.0; }
    var m = -inf_f();
    var l = 0.0;
    for (var j0 = lo; j0 <= hi; j0 = j0 + i32(KT)) {
        let n = min(KT, u32(hi - j0) + 1u);
        for (var i = lid.x; i < n * D; i = i + 64u) {
            let ko = kv_at(dense_key(q, u32(j0) + i / D), kvh);
            kt[i] = ks[ko + i % D];
            vt[i] = vs[ko + i % D];
        }
        workgroupBarrier();
        if (live) {
            for (var jj = 0u; jj < n; jj = jj + 1u) {
                let j = j0 + i32(jj);
                if (j < q.first || j > q.last) { continue; }
                let ko = jj * D;
                var s = 0.0;
                for (var d = 0u; d < D; d = d + 1u) { s = s + qs[qo + d] * kt[ko + d]; }
                s = s * scale;
                if (s > m) {
                    let c = exp_safe(m - s);
                    l = l * c + 1.0;
                    for (var d = 0u; d < D; d = d + 1u) { acc[d] = acc[d] * c + vt[ko + d]; }
                    m = s;
                } else {
                    let p = exp_safe(s - m);
                    l = l + p;
                    for (var d = 0u; d < D; d = d + 1u) { acc[d] = acc[d] + p * vt[ko + d]; }
                }
            }
        }
        workgroupBarrier();
    }
    if (live) {
        var inv = 0.0;
        if (l > 0.0) { inv = 1.0 / l; }
        for (var d = 0u; d < D; d = d + 1u) { out[qo + d] = acc[d] * inv; }
        row_max[stat_at(q)] = m;
        row_sum[stat_at(q)] = l;
    }
}
