// Element type conversion. P: count
@group(0) @binding(1) var<storage, read> x: array<{{TI}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{TO}}>;

fn convert(v: {{TI}}) -> {{TO}} { {{BODY}} }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    out[i] = convert(x[i]);
}
