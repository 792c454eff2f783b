// Batched C[z] = A[z] B[z] on cooperative matrices (wgpu's
// EXPERIMENTAL_COOPERATIVE_MATRIX: VK_KHR_cooperative_matrix on Vulkan,
// simdgroup matrices on Metal), in {{T}} x {{T}} tiles with {{AB}} inputs
// and an f32 accumulator. A workgroup of {{WG}} invocations (the adapter's
// largest subgroup, a whole number of subgroups whatever size the driver
// runs) computes a 2 x 2 block of tiles, a {{T2}} x {{T2}} block of C: each
// k step loads two tiles of A and two of B and makes four multiply-adds.
// Where the driver runs more than one subgroup in the workgroup, each
// computes the same block with the same operations (the same bits).
// Each output sums its k tiles in order; inside a tile the device's
// multiply-add fixes the order, so a device always gives the same bits.
// Operands are packed first (matmul_pack_coop.wgsl): A as [.., Mp, Kp] and
// B as [.., Kp, Np] row-major {{AB}} with zeros past the ends, C as
// [.., Mp, Np] f32, Mp and Np multiples of {{T2}} and Kp of {{T}}: every
// tile lies inside its buffer and starts on a 16-byte boundary (the
// alignment cooperative loads and stores ask for), so no load is clamped.
// Cooperative operations need uniform control flow: the workgroup id and
// the parameters alone decide it. Every index is bound with `let` before a
// cooperative load or store takes its address: naga 30.0.2's SPIR-V writer
// fails ("Expression [..] is not cached") on one computed inside `&a[...]`.
// P: Mp, Np, Kp, nbatch_dims, batch_shape[nd], a_batch[nd], b_batch[nd] (in elements)
{{ENABLE}}
enable wgpu_cooperative_matrix;
@group(0) @binding(1) var<storage, read> a: array<{{AB}}>;
@group(0) @binding(2) var<storage, read> b: array<{{AB}}>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>) {
    let mp = P[0];
    let np = P[1];
    let kp = P[2];
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
    let r0 = wid.y * {{T2}}u;
    let c0 = wid.x * {{T2}}u;
    var acc00 = coop_mat{{T}}x{{T}}<f32, C>();
    var acc01 = coop_mat{{T}}x{{T}}<f32, C>();
    var acc10 = coop_mat{{T}}x{{T}}<f32, C>();
    var acc11 = coop_mat{{T}}x{{T}}<f32, C>();
    let ra0 = a0 + r0 * kp;
    let ra1 = ra0 + {{T}}u * kp;
    for (var k = 0u; k < kp; k = k + {{T}}u) {
        let ia0 = ra0 + k;
        let ia1 = ra1 + k;
        let ib0 = b0 + k * np + c0;
        let ib1 = ib0 + {{T}}u;
        let x0 = coopLoadT<coop_mat{{T}}x{{T}}<{{AB}}, A>>(&a[ia0], kp);
        let x1 = coopLoadT<coop_mat{{T}}x{{T}}<{{AB}}, A>>(&a[ia1], kp);
        let y0 = coopLoadT<coop_mat{{T}}x{{T}}<{{AB}}, B>>(&b[ib0], np);
        let y1 = coopLoadT<coop_mat{{T}}x{{T}}<{{AB}}, B>>(&b[ib1], np);
        acc00 = coopMultiplyAdd(x0, y0, acc00);
        acc01 = coopMultiplyAdd(x0, y1, acc01);
        acc10 = coopMultiplyAdd(x1, y0, acc10);
        acc11 = coopMultiplyAdd(x1, y1, acc11);
    }
    let out00 = wid.z * mp * np + r0 * np + c0;
    let out01 = out00 + {{T}}u;
    let out10 = out00 + {{T}}u * np;
    let out11 = out10 + {{T}}u;
    coopStoreT(acc00, &c[out00], np);
    coopStoreT(acc01, &c[out01], np);
    coopStoreT(acc10, &c[out10], np);
    coopStoreT(acc11, &c[out11], np);
}
