// dst[rows[r], :] = src[r, :] (rows checked first). P: count (n * row), row
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> rows: array<i32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if (e >= P[0]) { return; }
    let r = e / P[1];
    dst[u32(rows[r]) * P[1] + e % P[1]] = src[e];
}
