//! End-to-end checks on the first Vulkan (or Metal) adapter; they pass
//! vacuously, saying so, where the machine has none.

use crate::{adapters, open, Api, Context};

fn any_context() -> Option<Context> {
    for api in [Api::Vulkan, Api::Metal] {
        if !adapters(api).is_empty() {
            return Some(open(api, 0, 1 << 24, false).expect("the first adapter opens"));
        }
    }
    eprintln!("no Vulkan or Metal adapter here: nothing to run");
    None
}

const ADD: &str = "
@group(0) @binding(0) var<storage, read> P: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < P[0] { out[id.x] = a[id.x] + bitcast<f32>(P[1]); }
}";

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn a_chain_of_dispatches_waits_only_on_read() {
    let Some(ctx) = any_context() else { return };
    let kernel = ctx.kernel(ADD, "main").unwrap();
    let n = 1000u32;
    let input: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut x = ctx.upload(&bytes(&input)).unwrap();
    for _ in 0..300 {
        let y = ctx.alloc(u64::from(n) * 4).unwrap();
        ctx.dispatch(
            &kernel,
            &[&x, &y],
            &[n, 0.5f32.to_bits()],
            [n.div_ceil(64), 1, 1],
        )
        .unwrap();
        x = y;
    }
    let before = ctx.stats();
    assert_eq!(before.waits, 0);
    assert!(before.reuses > 0, "buffers are reused: {before:?}");
    let out = floats(&ctx.read(&x, u64::from(n) * 4).unwrap());
    assert_eq!(out[0], 150.0);
    assert_eq!(out[999], 1149.0);
    assert_eq!(ctx.stats().waits, 1);
}

#[test]
fn bad_wgsl_is_an_error_not_a_panic() {
    let Some(ctx) = any_context() else { return };
    let err = ctx.kernel("fn main( {", "main").err().expect("refused");
    assert!(err.0.contains("failed to compile"), "{err}");
}

#[test]
fn writes_and_copies_keep_their_order() {
    let Some(ctx) = any_context() else { return };
    let a = ctx.upload(&bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
    let b = ctx.alloc(16).unwrap();
    ctx.copy(&a, 0, &b, 0, 16).unwrap();
    ctx.write(&a, 4, &bytes(&[9.0])).unwrap();
    ctx.copy(&a, 4, &b, 8, 4).unwrap();
    assert_eq!(floats(&ctx.read(&b, 16).unwrap()), [1.0, 2.0, 9.0, 4.0]);
    assert!(ctx.copy(&a, 0, &b, 4, 16).is_err());
}

#[test]
fn kernels_bind_the_requested_bytes_not_the_pooled_class() {
    let Some(ctx) = any_context() else { return };
    let kernel = ctx.kernel(ADD, "main").unwrap();
    // 1000 floats ask for 4000 bytes; the pooled class is 4096.
    let x = ctx.upload(&bytes(&vec![1.0; 1000])).unwrap();
    let y = ctx.alloc(4000).unwrap();
    assert_eq!((x.binding_size(), x.allocated()), (4000, 4096));
    ctx.dispatch(&kernel, &[&x, &y], &[1000, 2.0f32.to_bits()], [16, 1, 1])
        .unwrap();
    let out = floats(&ctx.read(&y, 4000).unwrap());
    assert!(out.iter().all(|&v| v == 3.0));
    let err = ctx.alloc(ctx.max_binding + 1).err().expect("refused");
    assert!(err.0.contains("largest storage binding"), "{err}");
}

#[test]
fn bind_groups_are_cached_and_uploads_share_one_staging_ring() {
    let Some(ctx) = any_context() else { return };
    let kernel = ctx.kernel(ADD, "main").unwrap();
    ctx.synchronize().unwrap();
    let before = ctx.stats();
    let x = ctx.upload(&bytes(&[1.0; 64])).unwrap();
    let y = ctx.alloc(256).unwrap();
    for step in 0..10u32 {
        // Parameters differ each time: they move through the arena, not the bind group.
        ctx.dispatch(
            &kernel,
            &[&x, &y],
            &[64, (step as f32).to_bits()],
            [1, 1, 1],
        )
        .unwrap();
    }
    let small: Vec<_> = (0..20)
        .map(|i| ctx.upload(&bytes(&[i as f32; 3])).unwrap())
        .collect();
    let after = ctx.stats();
    assert_eq!(after.bind_groups - before.bind_groups, 1, "{after:?}");
    assert_eq!(after.bind_group_hits - before.bind_group_hits, 9);
    assert_eq!(after.uploads - before.uploads, 21);
    assert_eq!(
        after.submits, before.submits,
        "uploads did not submit: {after:?}"
    );
    assert_eq!(floats(&ctx.read(&y, 256).unwrap())[63], 10.0);
    assert_eq!(floats(&ctx.read(&small[17], 12).unwrap()), [17.0; 3]);
    let end = ctx.stats();
    assert_eq!((end.reads - after.reads, end.waits - after.waits), (2, 2));
    let err = ctx
        .dispatch(&kernel, &[&x], &[1, 0], [1, 1, 1])
        .expect_err("refused");
    assert!(err.0.contains("binds 2 buffers"), "{err}");
}
