//! End to end through a real plugin: set RIFTCO_PJRT_PLUGIN to the path of
//! its library (e.g. `xla_cpu_pjrt.so` from the `xla-cpu-pjrt` wheel).
//! Skipped when the variable does not name a file.

use std::path::PathBuf;

use riftco_pjrt::hlo::Builder;
use riftco_pjrt::{ElementType, Runtime, TensorType};

fn runtime() -> Option<Runtime> {
    let path = PathBuf::from(std::env::var_os("RIFTCO_PJRT_PLUGIN")?);
    if !path.is_file() {
        return None;
    }
    Some(Runtime::open(&path).expect("the plugin named by RIFTCO_PJRT_PLUGIN opens"))
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn add_runs_end_to_end() {
    let Some(rt) = runtime() else { return };
    let ty = TensorType::new(&[2, 3], ElementType::F32);
    let mut b = Builder::new();
    let x = b.param(ty.clone()).unwrap();
    let y = b.param(ty.clone()).unwrap();
    let s = b.add(&x, &y).unwrap();
    let program = b.finish(&[s]);
    let a = rt
        .upload(&f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), &ty)
        .unwrap();
    let c = rt
        .upload(&f32_bytes(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]), &ty)
        .unwrap();
    let out = rt.run(&program, &[&a, &c]).unwrap();
    let mut host = vec![0u8; ty.bytes()];
    out[0].to_host(&mut host).unwrap();
    assert_eq!(f32_values(&host), [11.0, 22.0, 33.0, 44.0, 55.0, 66.0]);
    // The second run hits the cache.
    rt.run(&program, &[&a, &c]).unwrap();
    let stats = rt.cache_stats();
    assert_eq!((stats.compiles, stats.hits), (1, 1));
    println!(
        "{} {} {}",
        rt.client().platform(),
        rt.client().platform_version(),
        rt.client().device_text()
    );
}
