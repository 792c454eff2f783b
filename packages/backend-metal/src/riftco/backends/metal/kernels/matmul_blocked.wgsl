// Batched C[z] = A[z] B[z] for adapters that run on the host (lavapipe,
// SwiftShader): no workgroup memory and no barriers, which a CPU device pays
// for dearly, but large register blocks. Each thread computes {{ROWS}} rows x
// {{COLS}} vec4 columns of C, reading A as vec4s along k and B as vec4s along
// n, so one load feeds 4 x {{COLS}} (A) or 4 x {{ROWS}} (B) multiply-adds.
// A is [.., M, K4] and B [.., K4 * 4, N4] vec4s, row-major (matmul_pack.wgsl
// pads them when needed); C is [.., M, N4]. Each output sums over k in order.
// Rows and columns past the end repeat the last one and are not stored.
// P: M, N4, K4, nbatch_dims, batch_shape[nd], a_batch[nd], b_batch[nd] (in vec4s)
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;

@compute @workgroup_size(8, 8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let M = P[0];
    let n4 = P[1];
    let k4 = P[2];
    let nd = P[3];
    var rest = wid.z;
    var a0 = 0u;
    var b0 = 0u;
    for (var d = nd; d > 0u; d = d - 1u) {
        let dim = P[3u + d];
        let k = rest % dim;
        rest = rest / dim;
        a0 = a0 + k * P[3u + nd + d];
        b0 = b0 + k * P[3u + 2u * nd + d];
    }
    let r0 = (wid.y * 8u + lid.y) * {{ROWS}}u;
    let j0 = (wid.x * 8u + lid.x) * {{COLS}}u;
    if (r0 >= M || j0 >= n4) { return; }
{{SETUP}}
    for (var q = 0u; q < k4; q = q + 1u) {
        let kb = 4u * q * n4;
{{STEP}}
    }
    let out0 = wid.z * M * n4;
{{STORE}}
}
