// Pack a matmul operand row-major with its columns padded to a multiple of 4
// (zeros), so that matmul_blocked.wgsl reads it as vec4s:
// out[z][r][c] = c < C ? x[z * zstep + r * rstep + c * cstep] : 0.
// P: count, R, C, Cp, rstep, cstep, zstep
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    let cp = P[3];
    let c = i % cp;
    let rz = i / cp;
    let r = rz % P[1];
    let z = rz / P[1];
    var v = 0.0;
    if (c < P[2]) { v = x[z * P[6] + r * P[4] + c * P[5]]; }
    out[i] = v;
}
