// Pack a matmul operand for matmul_coop.wgsl: row-major [Z, Rp, Cp] with
// zeros past R rows and C columns, as f16 pairs (`half`: two elements of one
// row a word, Cp being even, rounded by pack2x16float, which needs no
// SHADER_F16) or as f32 words (`single`, which also unpacks the result):
// out[z][r][c] = r < R && c < C ? x[z * zstep + r * rstep + c * cstep] : 0.
// P: words, R, C, Rp, Cp, rstep, cstep, zstep
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn element(e: u32) -> f32 {
    let cp = P[4];
    let c = e % cp;
    let rz = e / cp;
    let r = rz % P[3];
    let z = rz / P[3];
    if (r < P[1] && c < P[2]) { return x[z * P[7] + r * P[5] + c * P[6]]; }
    return 0.0;
}

@compute @workgroup_size(256)
fn half(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    out[i] = pack2x16float(vec2<f32>(element(2u * i), element(2u * i + 1u)));
}

@compute @workgroup_size(256)
fn single(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    out[i] = bitcast<u32>(element(i));
}
