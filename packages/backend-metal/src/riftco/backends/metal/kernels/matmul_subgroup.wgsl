// matmul_blocked.wgsl with A shared through subgroup shuffles: the 16 threads
// of a workgroup compute the same {{ROWS}} rows of C (each its own {{COLS}}
// vec4 columns), so lane r of each subgroup loads row r's vec4 of A and the
// others take it with subgroupShuffle: one load of A per k step instead of
// {{ROWS}}. Needs subgroups of at least {{ROWS}} lanes. No thread leaves
// early (a shuffle needs every lane); rows and columns past the end repeat the
// last one and are not stored. Each output sums over k in order.
// P: M, N4, K4, nbatch_dims, batch_shape[nd], a_batch[nd], b_batch[nd] (in vec4s)
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;

@compute @workgroup_size(16, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
) {
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
    let r0 = wid.y * {{ROWS}}u;
    let j0 = (wid.x * 16u + lid.x) * {{COLS}}u;
    let mine = a0 + min(r0 + lane % {{ROWS}}u, M - 1u) * k4;
{{SETUP}}
    for (var q = 0u; q < k4; q = q + 1u) {
        let kb = 4u * q * n4;
        let xa = a[mine + q];
{{STEP}}
    }
    let out0 = wid.z * M * n4;
{{STORE}}
}
