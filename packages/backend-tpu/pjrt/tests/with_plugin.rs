//! End to end through a real plugin: set RIFTCO_PJRT_PLUGIN to the path of
//! its library (e.g. `xla_cpu_pjrt.so` from the `xla-cpu-pjrt` wheel).
//! Skipped when the variable does not name a file.

use std::path::PathBuf;

use riftco_pjrt::hlo::Builder;
use riftco_pjrt::options::Override;
use riftco_pjrt::{
    ClientOption, CompileOptions, ElementType, Error, Executable, OptionValue, PluginKind, Runtime,
    RuntimeConfig, TensorType,
};

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
    let client = rt.client().unwrap();
    println!(
        "{} {} {}",
        client.platform(),
        client.platform_version(),
        client.device_text()
    );
}

fn plugin_path() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("RIFTCO_PJRT_PLUGIN")?);
    path.is_file().then_some(path)
}

fn add_program() -> riftco_pjrt::Program {
    let ty = TensorType::new(&[3], ElementType::F32);
    let mut b = Builder::new();
    let x = b.param(ty.clone()).unwrap();
    let y = b.param(ty).unwrap();
    let s = b.add(&x, &y).unwrap();
    b.finish(&[s])
}

fn run_add(rt: &Runtime) -> Vec<f32> {
    let ty = TensorType::new(&[3], ElementType::F32);
    let a = rt.upload(&f32_bytes(&[1.0, 2.0, 3.0]), &ty).unwrap();
    let out = rt.run(&add_program(), &[&a, &a]).unwrap();
    let mut host = vec![0u8; ty.bytes()];
    out[0].to_host(&mut host).unwrap();
    f32_values(&host)
}

#[test]
fn the_client_waits_for_first_use_and_gets_the_options() {
    let Some(path) = plugin_path() else { return };
    let config = RuntimeConfig {
        client_options: vec![ClientOption::new("cpu_device_count", OptionValue::Int(3))],
        ..RuntimeConfig::default()
    };
    let rt = Runtime::open_with(&path, config).unwrap();
    if rt.kind() != PluginKind::Cpu {
        return; // the option is XLA's CPU plugin's
    }
    assert!(!rt.client_created());
    assert!(rt.is_host());
    assert_eq!(rt.client().unwrap().device_count(), 3);
    assert!(rt.client_created());
    assert_eq!(run_add(&rt), [2.0, 4.0, 6.0]);
}

#[test]
fn a_bad_option_value_is_refused_before_any_client() {
    let Some(path) = plugin_path() else { return };
    let config = RuntimeConfig {
        client_options: vec![ClientOption::new(
            "memory_fraction",
            OptionValue::Str("most".into()),
        )],
        ..RuntimeConfig::default()
    };
    let err = Runtime::open_with(&path, config).err().unwrap();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    assert!(
        err.to_string().contains("expected a number in (0, 1]"),
        "{err}"
    );
}

#[test]
fn xla_cpu_ignores_option_names_it_does_not_know() {
    // Pinned, as the README says it: names riftco does not check go to the
    // plugin, and XLA's CPU plugin creates its client regardless.
    let Some(path) = plugin_path() else { return };
    let unknown = RuntimeConfig {
        client_options: vec![ClientOption::new("no_such_option", OptionValue::Bool(true))],
        ..RuntimeConfig::default()
    };
    let rt = Runtime::open_with(&path, unknown).unwrap();
    if rt.kind() != PluginKind::Cpu {
        return;
    }
    assert_eq!(rt.client().unwrap().platform(), "cpu");
}

#[test]
fn xla_reads_the_compile_option_overrides() {
    let Some(path) = plugin_path() else { return };
    let rt = Runtime::open(&path).unwrap();
    let client = rt.client().unwrap();
    let program = add_program();
    // The GPU options (deterministic ops) are a DebugOptions field every XLA knows.
    let gpu = CompileOptions::for_platform("cuda", true);
    assert!(!gpu.overrides.is_empty());
    Executable::compile(client, &program.text, vec![], vec![], &gpu).unwrap();
    // A name XLA does not know is refused, so the overrides are read.
    let mut bogus = CompileOptions::default();
    bogus
        .overrides
        .push(("xla_no_such_flag".into(), Override::Bool(true)));
    let err = Executable::compile(client, &program.text, vec![], vec![], &bogus)
        .err()
        .unwrap();
    assert!(err.to_string().contains("xla_no_such_flag"), "{err}");
}

#[test]
fn a_second_runtime_loads_the_program_from_disk() {
    let Some(path) = plugin_path() else { return };
    let dir = std::env::temp_dir().join(format!("riftco-pjrt-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RuntimeConfig {
        disk_cache: Some((dir.clone(), 1 << 30)),
        ..RuntimeConfig::default()
    };
    let first = Runtime::open_with(&path, config.clone()).unwrap();
    assert_eq!(run_add(&first), [2.0, 4.0, 6.0]);
    let (_, s) = first.disk_cache().unwrap();
    if s.failed > 0 {
        println!("the plugin cannot serialize executables: nothing on disk");
        return;
    }
    assert_eq!((s.hits, s.misses, s.stores), (0, 1, 1));
    let second = Runtime::open_with(&path, config.clone()).unwrap();
    assert_eq!(run_add(&second), [2.0, 4.0, 6.0]);
    let (_, s) = second.disk_cache().unwrap();
    assert_eq!((s.hits, s.misses, s.stores), (1, 0, 0));
    // Damaged bytes are recompiled and rewritten.
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".pjrt"))
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let third = Runtime::open_with(&path, config).unwrap();
    assert_eq!(run_add(&third), [2.0, 4.0, 6.0]);
    let (_, s) = third.disk_cache().unwrap();
    assert_eq!((s.hits, s.rejected, s.stores), (0, 1, 1));
    std::fs::remove_dir_all(&dir).unwrap();
}
