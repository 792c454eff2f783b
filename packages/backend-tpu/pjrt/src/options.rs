//! The serialized `xla.CompileOptionsProto` handed to `PJRT_Client_Compile`.
//!
//! Only the fields riftco sets are written, with a few lines of protobuf wire
//! format: `executable_build_options` (field 3) holding `num_replicas`
//! (field 4) and `num_partitions` (field 5). XLA's CPU plugin aborts the
//! process when these are missing (an empty proto means zero replicas), so
//! they are always written and checked to be at least one.

use crate::error::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    pub num_replicas: u32,
    pub num_partitions: u32,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            num_replicas: 1,
            num_partitions: 1,
        }
    }
}

const WIRE_VARINT: u32 = 0;
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

impl CompileOptions {
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
        key(&mut out, 3, WIRE_BYTES);
        varint(&mut out, build.len() as u64);
        out.extend_from_slice(&build);
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
            num_partitions: 1,
        }
        .to_bytes()
        .unwrap_err();
        assert!(err.to_string().contains("at least 1"));
    }

    #[test]
    fn varints_use_seven_bit_groups() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
    }
}
