// Attention forward, one thread per (query row, head): an online softmax over
// the visible keys in order, so memory is linear in the sequence length.
// MODE 0 dense (writes row max and sum), 1 varlen, 2 paged.
#include attn_common
@group(0) @binding(1) var<storage, read> qs: array<f32>;
@group(0) @binding(2) var<storage, read> ks: array<f32>;
@group(0) @binding(3) var<storage, read> vs: array<f32>;
@group(0) @binding(4) var<storage, read> segs: array<i32>;
@group(0) @binding(5) var<storage, read> table: array<i32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> row_max: array<f32>;
@group(0) @binding(8) var<storage, read_write> row_sum: array<f32>;

const MODE: u32 = {{MODE}}u;

fn query(e: u32) -> Query {
    if (MODE == 0u) { return dense_query(e); }
    var q: Query;
    q.head = e % P[4];
    q.row = e / P[4];
    q.pos = segs[3u * q.row + 2u];
    q.last = min(q.pos, segs[3u * q.row + 1u] - 1);
    q.first = 0;
    if (P[9] > 0u) { q.first = max(0, q.pos - i32(P[9]) + 1); }
    return q;
}

fn key_row(q: Query, j: u32) -> u32 {
    if (MODE == 0u) { return dense_key(q, j); }
    if (MODE == 1u) { return u32(segs[3u * q.row]) + j; }
    let ps = P[10];
    let page = table[u32(segs[3u * q.row]) * P[11] + j / ps];
    return u32(page) * ps + j % ps;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 64u;
    if (e >= P[0]) { return; }
    let q = query(e);
    let D = P[6];
    let scale = pf(7u);
    let kvh = kv_head(q.head);
    let qo = q_at(q.row, q.head);
    var acc: array<f32, MAXD>;
    for (var d = 0u; d < D; d = d + 1u) { acc[d] = 0.0; }
    var m = -inf_f();
    var l = 0.0;
    for (var j = q.first; j <= q.last; j = j + 1) {
        let ko = kv_at(key_row(q, u32(j)), kvh);
        var s = 0.0;
        for (var d = 0u; d < D; d = d + 1u) { s = s + qs[qo + d] * ks[ko + d]; }
        s = s * scale;
        if (s > m) {
            let c = exp_safe(m - s);
            l = l * c + 1.0;
            for (var d = 0u; d < D; d = d + 1u) { acc[d] = acc[d] * c + vs[ko + d]; }
            m = s;
        } else {
            let p = exp_safe(s - m);
            l = l + p;
            for (var d = 0u; d < D; d = d + 1u) { acc[d] = acc[d] + p * vs[ko + d]; }
        }
    }
    var inv = 0.0;
    if (l > 0.0) { inv = 1.0 / l; }
    for (var d = 0u; d < D; d = d + 1u) { out[qo + d] = acc[d] * inv; }
    if (MODE == 0u) {
        row_max[stat_at(q)] = m;
        row_sum[stat_at(q)] = l;
    }
}
