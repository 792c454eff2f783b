//! The serialized `xla.CompileOptionsProto` handed to `PJRT_Client_Compile`.
//!
//! Only the fields riftco sets are written, with a few lines of protobuf wire
//! format: `executable_build_options` (field 3) holding `num_replicas`
//! (field 4) and `num_partitions` (field 5). XLA's CPU plugin aborts the
//! process when these are missing (an empty proto means zero replicas), so
//! they are always written and checked to be at least one.
//!
//! Debug options go in `env_option_overrides` (field 7, a map from a
//! `DebugOptions` field name to an `OptionOverrideProto`), not in
//! `executable_build_options.debug_options`: XLA applies overrides on top of
//! its default debug options, while a `debug_options` message replaces them
//! all (every other flag would read as zero: no optimization, no autotuning).

use crate::error::Result;

/// The value of one `env_option_overrides` entry (`OptionOverrideProto`).
#[derive(Debug, Clone, PartialEq)]
pub enum Override {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
}

/// The debug option that makes XLA:GPU's scatter (index adds), reductions and
/// autotuning deterministic.
pub const GPU_DETERMINISTIC_OPS: &str = "xla_gpu_deterministic_ops";

#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    pub num_replicas: u32,
    pub num_partitions: u32,
    /// `DebugOptions` field name and value, in the order written.
    pub overrides: Vec<(String, Override)>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            num_replicas: 1,
            num_partitions: 1,
            overrides: Vec::new(),
        }
    }
}

const WIRE_VARINT: u32 = 0;
const WIRE_FIXED64: u32 = 1;
const WIRE_BYTES: u32 = 2;

fn varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let low = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(out, field, WIRE_BYTES);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

impl CompileOptions {
    /// The options riftco compiles with on `platform` (as the client names it):
    /// on a GPU (`cuda`, `rocm`, `gpu`) with `deterministic`, XLA's
    /// deterministic ops (index adds and scatters give the same bits every run).
    pub fn for_platform(platform: &str, deterministic: bool) -> CompileOptions {
        let mut options = CompileOptions::default();
        let gpu = ["cuda", "rocm", "gpu"]
            .iter()
            .any(|p| platform.eq_ignore_ascii_case(p));
        if gpu && deterministic {
            options
                .overrides
                .push((GPU_DETERMINISTIC_OPS.to_string(), Override::Bool(true)));
        }
        options
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.num_replicas == 0 || self.num_partitions == 0 {
            return crate::invalid!(
                "compile options: {} replicas and {} partitions (each must be at least 1)",
                self.num_replicas,
                self.num_partitions
            );
        }
        if self.num_replicas != 1 || self.num_partitions != 1 {
            return crate::invalid!("compile options: riftco runs each program on one device");
        }
        let mut build = Vec::new();
        key(&mut build, 4, WIRE_VARINT);
        varint(&mut build, u64::from(self.num_replicas));
        key(&mut build, 5, WIRE_VARINT);
        varint(&mut build, u64::from(self.num_partitions));
        let mut out = Vec::new();
        bytes_field(&mut out, 3, &build);
        for (i, (name, value)) in self.overrides.iter().enumerate() {
            if name.is_empty() || self.overrides[..i].iter().any(|(n, _)| n == name) {
                return crate::invalid!(
                    "compile options: override names must be distinct and non-empty, found {name:?}"
                );
            }
            let mut value_bytes = Vec::new();
            match value {
                Override::Str(s) => bytes_field(&mut value_bytes, 1, s.as_bytes()),
                Override::Bool(b) => {
                    key(&mut value_bytes, 2, WIRE_VARINT);
                    varint(&mut value_bytes, u64::from(*b));
                }
                Override::Int(i) => {
                    key(&mut value_bytes, 3, WIRE_VARINT);
                    varint(&mut value_bytes, *i as u64);
                }
                Override::Double(x) => {
                    key(&mut value_bytes, 4, WIRE_FIXED64);
                    value_bytes.extend_from_slice(&x.to_le_bytes());
                }
            }
            let mut entry = Vec::new();
            bytes_field(&mut entry, 1, name.as_bytes());
            bytes_field(&mut entry, 2, &value_bytes);
            bytes_field(&mut out, 7, &entry);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_replica_one_partition_is_six_bytes() {
        let bytes = CompileOptions::default().to_bytes().unwrap();
        assert_eq!(bytes, [0x1a, 0x04, 0x20, 0x01, 0x28, 0x01]);
    }

    #[test]
    fn zero_replicas_never_reach_the_plugin() {
        let err = CompileOptions {
            num_replicas: 0,
            ..CompileOptions::default()
        }
        .to_bytes()
        .unwrap_err();
        assert!(err.to_string().contains("at least 1"));
    }

    /// A protobuf reader for the tests: (field, wire type, payload) of each
    /// top-level field, the payload of a varint field as its value's bytes.
    fn fields(mut bytes: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        fn read_varint(bytes: &mut &[u8]) -> u64 {
            let mut value = 0u64;
            let mut shift = 0;
            loop {
                let b = bytes[0];
                *bytes = &bytes[1..];
                value |= u64::from(b & 0x7f) << shift;
                if b & 0x80 == 0 {
                    return value;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let k = read_varint(&mut bytes);
            let (field, wire) = ((k >> 3) as u32, (k & 7) as u32);
            let payload = match wire {
                0 => read_varint(&mut bytes).to_le_bytes().to_vec(),
                1 => {
                    let (head, rest) = bytes.split_at(8);
                    bytes = rest;
                    head.to_vec()
                }
                2 => {
                    let n = read_varint(&mut bytes) as usize;
                    let (head, rest) = bytes.split_at(n);
                    bytes = rest;
                    head.to_vec()
                }
                _ => panic!("wire type {wire}"),
            };
            out.push((field, wire, payload));
        }
        out
    }

    #[test]
    fn gpu_compiles_carry_the_deterministic_ops_override() {
        let bytes = CompileOptions::for_platform("cuda", true)
            .to_bytes()
            .unwrap();
        let top = fields(&bytes);
        assert_eq!(top.len(), 2);
        assert_eq!((top[0].0, top[0].1), (3, 2));
        assert_eq!(top[0].2, [0x20, 0x01, 0x28, 0x01]);
        // env_option_overrides: map<string, OptionOverrideProto> = 7.
        assert_eq!((top[1].0, top[1].1), (7, 2));
        let entry = fields(&top[1].2);
        assert_eq!(entry[0], (1, 2, b"xla_gpu_deterministic_ops".to_vec()));
        assert_eq!((entry[1].0, entry[1].1), (2, 2));
        // OptionOverrideProto.bool_field = 2, true.
        let value = fields(&entry[1].2);
        assert_eq!(value, [(2, 0, 1u64.to_le_bytes().to_vec())]);
        // No debug_options message inside executable_build_options (field 3 there).
        assert!(fields(&top[0].2).iter().all(|f| f.0 != 3));
    }

    #[test]
    fn only_gpus_get_it_and_it_can_be_turned_off() {
        let plain = CompileOptions::default().to_bytes().unwrap();
        for platform in ["cpu", "tpu", "host"] {
            assert_eq!(
                CompileOptions::for_platform(platform, true)
                    .to_bytes()
                    .unwrap(),
                plain
            );
        }
        assert_eq!(
            CompileOptions::for_platform("cuda", false)
                .to_bytes()
                .unwrap(),
            plain
        );
        assert_ne!(
            CompileOptions::for_platform("ROCM", true)
                .to_bytes()
                .unwrap(),
            plain
        );
    }

    #[test]
    fn override_values_use_their_oneof_fields() {
        let mut options = CompileOptions {
            overrides: vec![
                ("a".into(), Override::Str("x".into())),
                ("b".into(), Override::Int(-1)),
                ("c".into(), Override::Double(0.5)),
            ],
            ..CompileOptions::default()
        };
        let top = fields(&options.to_bytes().unwrap());
        let value = |i: usize| fields(&fields(&top[i].2)[1].2);
        assert_eq!(value(1), [(1, 2, b"x".to_vec())]);
        assert_eq!(value(2), [(3, 0, u64::MAX.to_le_bytes().to_vec())]);
        assert_eq!(value(3), [(4, 1, 0.5f64.to_le_bytes().to_vec())]);
        options.overrides.push(("a".into(), Override::Bool(true)));
        assert!(options.to_bytes().is_err());
    }

    #[test]
    fn varints_use_seven_bit_groups() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
    }
}
