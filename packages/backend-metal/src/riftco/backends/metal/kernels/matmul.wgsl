// Batched C[z] = A[z] B[z] in 32x32 tiles, 2x2 outputs per thread; each output
// sums over k in order (one fixed order, whatever the device).
// P: M, N, K, a_m, a_k, b_k, b_n, nbatch_dims, batch_shape[nd], a_batch[nd], b_batch[nd]
// (NF4 weights as B: no batch axes, then block_size, double_quant, offset).
@group(0) @binding(1) var<storage, read> a: array<f32>;
{{BDECL}}
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
{{EXTRA}}

var<workgroup> ta: array<array<f32, 33>, 32>;
var<workgroup> tb: array<array<f32, 33>, 32>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let M = P[0];
    let N = P[1];
    let K = P[2];
    let nd = P[7];
    var rest = wid.z;
    var a0 = 0u;
    var b0 = 0u;
    for (var d = nd; d > 0u; d = d - 1u) {
        let dim = P[7u + d];
        let k = rest % dim;
        rest = rest / dim;
        a0 = a0 + k * P[7u + nd + d];
        b0 = b0 + k * P[7u + 2u * nd + d];
    }
    let row0 = wid.y * 32u;
    let col0 = wid.x * 32u;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    let tiles = (K + 31u) / 32u;
    for (var tile = 0u; tile < tiles; tile = tile + 1u) {
        let k0 = tile * 32u;
        for (var q = 0u; q < 4u; q = q + 1u) {
            let r = lid.y + 16u * (q / 2u);
            let s = lid.x + 16u * (q % 2u);
            var va = 0.0;
            if (row0 + r < M && k0 + s < K) { va = a[a0 + (row0 + r) * P[3] + (k0 + s) * P[4]]; }
            ta[r][s] = va;
            var vb = 0.0;
            if (k0 + r < K && col0 + s < N) { vb = {{LOADB}}; }
            tb[r][s] = vb;
        }
        workgroupBarrier();
        let kk = min(32u, K - k0);
        for (var k = 0u; k < kk; k = k + 1u) {
            let x0 = ta[lid.y][k];
            let x1 = ta[lid.y + 16u][k];
            let y0 = tb[k][lid.x];
            let y1 = tb[k][lid.x + 16u];
            acc[0] = acc[0] + x0 * y0;
            acc[1] = acc[1] + x0 * y1;
            acc[2] = acc[2] + x1 * y0;
            acc[3] = acc[3] + x1 * y1;
        }
        workgroupBarrier();
    }
    let out0 = wid.z * M * N;
    for (var q = 0u; q < 4u; q = q + 1u) {
        let r = row0 + lid.y + 16u * (q / 2u);
        let s = col0 + lid.x + 16u * (q % 2u);
        if (r < M && s < N) { c[out0 + r * N + s] = acc[q]; }
    }
}
