// Packed attention (the whole-step decode's, and varlen and paged attention on the
// tiled path) over a key/value cache: a workgroup of 64 threads per (query row, head). The query sits in workgroup memory; the visible keys are walked
// in tiles of 64 (a thread scores one key), the tile's maximum and sum folded by a
// fixed tree, and the online softmax rescales the output, each thread holding four
// of the head's dimensions and adding the tile's values in key order: deterministic,
// no per-thread arrays, memory linear in the sequence.
// P: N, H, Hkv, Dh, scale, window, paged, page_size, width, stride (of a query
// row), segs_at, table_at. segs[segs_at + 3 n] = (key start or sequence, key count,
// query position); the page table at table_at (the decode step binds its one step
// block as both).
@group(0) @binding(1) var<storage, read> step: array<i32>;
@group(0) @binding(2) var<storage, read> table: array<i32>;
@group(0) @binding(3) var<storage, read> qkv: array<f32>;
@group(0) @binding(4) var<storage, read> keys: array<f32>;
@group(0) @binding(5) var<storage, read> values: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

var<workgroup> qv: array<f32, 256>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> kr: array<u32, 64>;
var<workgroup> red: array<f32, 64>;

fn key_row(seg: i32, j: u32) -> u32 {
    if (P[6] == 0u) { return u32(seg) + j; }
    let ps = P[7];
    let page = table[P[11] + u32(seg) * P[8] + j / ps];
    return u32(page) * ps + j % ps;
}

fn tree_max(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) { red[t] = max(red[t], red[t + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn tree_sum(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) { red[t] = red[t] + red[t + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let H = P[1];
    let e = wid.x + wid.y * nwg.x;
    if (e >= P[0] * H) { return; }
    let n = e / H;
    let h = e % H;
    let D = P[3];
    let kvh = h / (H / P[2]);
    let scale = pf(4u);
    let seg = step[P[10] + 3u * n];
    let count = step[P[10] + 3u * n + 1u];
    let pos = step[P[10] + 3u * n + 2u];
    let last = min(pos, count - 1);
    var first = 0;
    if (P[5] > 0u) { first = max(0, pos - i32(P[5]) + 1); }
    for (var d = t; d < D; d = d + 64u) { qv[d] = qkv[n * P[9] + h * D + d]; }
    workgroupBarrier();
    var m = -inf_f();
    var l = 0.0;
    var acc = vec4<f32>(0.0, 0.0, 0.0, 0.0);
    for (var j0 = first; j0 <= last; j0 = j0 + 64) {
        let j = j0 + i32(t);
        var s = -inf_f();
        if (j <= last) {
            let row = key_row(seg, u32(j));
            kr[t] = row;
            let ko = (row * P[2] + kvh) * D;
            var dot = 0.0;
            for (var d = 0u; d < D; d = d + 1u) { dot = dot + qv[d] * keys[ko + d]; }
            s = dot * scale;
        }
        let mt = tree_max(t, s);
        let mn = max(m, mt);
        var p = 0.0;
        if (j <= last) { p = exp_safe(s - mn); }
        sc[t] = p;
        let lt = tree_sum(t, p);
        let c = exp_safe(m - mn);
        l = l * c + lt;
        acc = acc * c;
        let tile = min(64, last - j0 + 1);
        for (var i = 0; i < tile; i = i + 1) {
            let pi_ = sc[i];
            let vo = (kr[i] * P[2] + kvh) * D;
            if (t < D) { acc.x = acc.x + pi_ * values[vo + t]; }
            if (t + 64u < D) { acc.y = acc.y + pi_ * values[vo + t + 64u]; }
            if (t + 128u < D) { acc.z = acc.z + pi_ * values[vo + t + 128u]; }
            if (t + 192u < D) { acc.w = acc.w + pi_ * values[vo + t + 192u]; }
        }
        m = mn;
        workgroupBarrier();
    }
    var inv = 0.0;
    if (l > 0.0) { inv = 1.0 / l; }
    let o = n * H * D + h * D;
    if (t < D) { out[o + t] = acc.x * inv; }
    if (t + 64u < D) { out[o + t + 64u] = acc.y * inv; }
    if (t + 128u < D) { out[o + t + 128u] = acc.z * inv; }
    if (t + 192u < D) { out[o + t + 192u] = acc.w * inv; }
}
