// out[i] = x[offset + sum(i_d * strides_d)] (any 32-bit element).
// P: count, ndim, offset, out_shape[ndim], strides[ndim]
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    let nd = P[1];
    var rest = i;
    var at = P[2];
    for (var d = nd; d > 0u; d = d - 1u) {
        let dim = P[2u + d];
        at = at + (rest % dim) * P[2u + nd + d];
        rest = rest / dim;
    }
    out[i] = x[at];
}
