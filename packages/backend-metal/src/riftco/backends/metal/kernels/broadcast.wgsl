// Elementwise over broadcast operands: out[i] = OP(a[.], b[.]) (and where's select).
// P: count, ndim, out_shape[ndim], a_strides[ndim], b_strides[ndim], c_strides[ndim]
@group(0) @binding(1) var<storage, read> a: array<{{TA}}>;
@group(0) @binding(2) var<storage, read> b: array<{{TA}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{TO}}>;
{{EXTRA}}

fn op(x: {{TA}}, y: {{TA}}) -> {{TO}} { {{BODY}} }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    let nd = P[1];
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    var ic = 0u;
    for (var d = nd; d > 0u; d = d - 1u) {
        let dim = P[1u + d];
        let k = rest % dim;
        rest = rest / dim;
        ia = ia + k * P[1u + nd + d];
        ib = ib + k * P[1u + 2u * nd + d];
        ic = ic + k * P[1u + 3u * nd + d];
    }
    {{STORE}}
}
