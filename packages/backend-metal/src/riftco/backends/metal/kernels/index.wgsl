// Indexing along an axis of x viewed as [outer, n, inner] (indices checked first).
// select:  out[o, j, i] = x[o, idx[j], i]                 P: count, n, inner, m
// gather:  out[o, j, i] = x[o, idx[o, j, i], i]           P: count, n, inner, m
// add:     one thread per (o, i) adds src[o, j, i] at idx[j] (index_add) or
//          idx[o, j, i] (scatter_add) for j in order      P: count, n, inner, m
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> idx: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<{{T}}>;

@compute @workgroup_size(256)
fn select_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if (e >= P[0]) { return; }
    let inner = P[2];
    let m = P[3];
    let i = e % inner;
    let j = (e / inner) % m;
    let o = e / (inner * m);
    out[e] = x[(o * P[1] + u32(idx[j])) * inner + i];
}

@compute @workgroup_size(256)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if (e >= P[0]) { return; }
    let inner = P[2];
    let m = P[3];
    let i = e % inner;
    let o = e / (inner * m);
    out[e] = x[(o * P[1] + u32(idx[e])) * inner + i];
}
