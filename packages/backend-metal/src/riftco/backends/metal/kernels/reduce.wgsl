// One workgroup per output of x viewed as [outer, n, inner]: each of 64 threads
// folds the elements t, t + 64, ... of its row in order, then a fixed tree
// combines the 64 partials. Deterministic whatever the device.
// P: outputs, n, inner, op (0 sum, 1 mean, 2 max, 3 min, 4 sum_squares, 5 argmax)
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{TO}}>;

var<workgroup> part: array<vec2<f32>, 64>;
var<workgroup> ipart: array<i32, 64>;
var<workgroup> where_: array<u32, 64>;

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    // argmax: NaN wins, then the larger value, then the smaller index.
    if (is_nan(bv)) { return is_nan(v) && i < bi; }
    if (is_nan(v)) { return true; }
    return v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = wid.x + wid.y * nwg.x;
    let n = P[1];
    let inner = P[2];
    let op = P[3];
    let live = row < P[0];
    let o = row / inner;
    let k = row % inner;
    let base = o * n * inner + k;
    {{BODY}}
}
