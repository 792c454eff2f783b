// The float32 weight of a packed NF4 weight. P: count, block_size, double_quant, offset
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> absmax: array<{{TS}}>;
@group(0) @binding(3) var<storage, read> group_range: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

#include nf4

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    out[i] = weight_at(i, P[1], P[2], pf(3u));
}
