// dx = dy * op'(x), elementwise. P: count
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;

fn derivative(v: f32) -> f32 { {{BODY}} }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    dx[i] = dy[i] * derivative(x[i]);
}
