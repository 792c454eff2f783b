// The first position of an index outside [0, size) (except an allowed value).
// P: count, size, has_allowed, allowed
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> first: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if (i >= P[0]) { return; }
    let v = idx[i];
    if (P[2] != 0u && v == pi(3u)) { return; }
    if (v < 0 || v >= pi(1u)) { atomicMin(&first[0], i); }
}
