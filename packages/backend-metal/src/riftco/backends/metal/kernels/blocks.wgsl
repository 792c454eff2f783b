// Copy rows of a block: out[o * out_row + at + j] = x[o * in_row + j], j < in_row.
// P: count (outer * in_row), in_row, out_row, at
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    let o = i / P[1];
    let j = i % P[1];
    out[o * P[2] + P[3] + j] = x[i];
}
