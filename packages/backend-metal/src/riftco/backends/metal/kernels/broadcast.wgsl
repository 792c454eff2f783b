// Elementwise over broadcast operands: out[i] = OP(a[.], b[.]) (and where's select).
// INDEX computes ia, ib, ic: i itself for an operand of the output's shape, 0 for
// a single element, else from the strides.
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
{{INDEX}}
    {{STORE}}
}
