// Batched C[z] = A[z] B[z], register-blocked: a workgroup of 16 x 16 threads
// computes a 64 x 64 block of C, each thread a 4 x 4 block of it held in four
// vec4 accumulators. A and B pass through workgroup memory in 16-deep slices
// of k, stored as vec4 (four rows of A, four columns of B), so each k step is
// two vector loads for sixteen multiply-adds. Each output sums over k in
// order (one fixed order, whatever the device). {{TILE_T}} is the element type of the workgroup tiles: f32,
// or f16 on the f16 path (inputs rounded to f16, products summed in f32).
// P: M, N, K, a_m, a_k, b_k, b_n, nbatch_dims, batch_shape[nd], a_batch[nd], b_batch[nd]
// (NF4 weights as B: no batch axes, then block_size, double_quant, offset).
{{ENABLE}}
@group(0) @binding(1) var<storage, read> a: array<f32>;
{{BDECL}}
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
{{EXTRA}}

const BK = 16u;
// ta[k * 16 + i]: rows 4i..4i+3 of the A block at depth k; tb[k * 16 + j]:
// columns 4j..4j+3 of the B block.
var<workgroup> ta: array<vec4<{{TILE_T}}>, 256>;
var<workgroup> tb: array<vec4<{{TILE_T}}>, 256>;

fn mad4(x: vec4<f32>, y: vec4<f32>, acc: vec4<f32>) -> vec4<f32> { return x * y + acc; }

fn load_a(a0: u32, row: u32, k: u32, M: u32, K: u32) -> f32 {
    if (row < M && k < K) { return a[a0 + row * P[3] + k * P[4]]; }
    return 0.0;
}

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
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    let t = lid.y * 16u + lid.x;
    // Loading: thread t fills slot t of each tile: depth t / 16, four rows (A)
    // or four columns (B) starting at 4 (t % 16).
    let lk = t / 16u;
    let l4 = 4u * (t % 16u);
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    let tiles = (K + BK - 1u) / BK;
    for (var tile = 0u; tile < tiles; tile = tile + 1u) {
        let k0 = tile * BK;
        let ka = k0 + lk;
        ta[t] = vec4<{{TILE_T}}>(vec4<f32>(
            load_a(a0, row0 + l4, ka, M, K),
            load_a(a0, row0 + l4 + 1u, ka, M, K),
            load_a(a0, row0 + l4 + 2u, ka, M, K),
            load_a(a0, row0 + l4 + 3u, ka, M, K)));
        var vb = vec4<f32>(0.0);
        let r = lk;
        if (k0 + r < K) {
            for (var q = 0u; q < 4u; q = q + 1u) {
                let s = l4 + q;
                if (col0 + s < N) { vb[q] = {{LOADB}}; }
            }
        }
        tb[t] = vec4<{{TILE_T}}>(vb);
        workgroupBarrier();
        let kk = min(BK, K - k0);
        for (var k = 0u; k < kk; k = k + 1u) {
            let x = vec4<f32>(ta[k * 16u + lid.y]);
            let y = vec4<f32>(tb[k * 16u + lid.x]);
            acc0 = mad4(vec4<f32>(x.x), y, acc0);
            acc1 = mad4(vec4<f32>(x.y), y, acc1);
            acc2 = mad4(vec4<f32>(x.z), y, acc2);
            acc3 = mad4(vec4<f32>(x.w), y, acc3);
        }
        workgroupBarrier();
    }
    let out0 = wid.z * M * N;
    let r0 = row0 + 4u * lid.y;
    let s0 = col0 + 4u * lid.x;
    store_row(out0, r0, s0, M, N, acc0);
    store_row(out0, r0 + 1u, s0, M, N, acc1);
    store_row(out0, r0 + 2u, s0, M, N, acc2);
    store_row(out0, r0 + 3u, s0, M, N, acc3);
}

fn store_row(out0: u32, r: u32, s0: u32, M: u32, N: u32, v: vec4<f32>) {
    if (r >= M) { return; }
    let at = out0 + r * N + s0;
    if (s0 < N) { c[at] = v.x; }
    if (s0 + 1u < N) { c[at + 1u] = v.y; }
    if (s0 + 2u < N) { c[at + 2u] = v.z; }
    if (s0 + 3u < N) { c[at + 3u] = v.w; }
}
