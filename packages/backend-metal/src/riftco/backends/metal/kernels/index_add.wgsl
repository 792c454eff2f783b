// out (a copy of base) += src slices at indices, one thread per (o, i), in index order.
// P: lanes (outer * inner), n, inner, m, per_element (0: idx[j], 1: idx[o, j, i])
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> idx: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lane = flat(gid, nwg);
    if (lane >= P[0]) { return; }
    let n = P[1];
    let inner = P[2];
    let m = P[3];
    let i = lane % inner;
    let o = lane / inner;
    for (var j = 0u; j < m; j = j + 1u) {
        let s = (o * m + j) * inner + i;
        var r = u32(idx[j]);
        if (P[4] != 0u) { r = u32(idx[s]); }
        let d = (o * n + r) * inner + i;
        out[d] = out[d] + src[s];
    }
}
