// dlogits = (exp(logits - lse) - onehot(target)) * grad[row]; 0 on ignored rows.
// P: count, classes, ignore_index
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> grad: array<f32>;
@group(0) @binding(5) var<storage, read_write> dlogits: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    let row = i / P[1];
    let col = i % P[1];
    let tg = targets[row];
    if (tg == pi(2u)) { dlogits[i] = 0.0; return; }
    var p = exp_safe(logits[i] - lse[row]);
    if (u32(tg) == col) { p = p - 1.0; }
    dlogits[i] = p * grad[row];
}
