//! The build id of a riftco native module, for its `build.rs`.
//!
//! A native module embeds the marker `RIFTCO_BUILD_ID:<module>:<id>`, where
//! `<module>` is its Python import path and `<id>` sixteen hex digits hashed
//! from its sources and the build time. The Python side reports the id
//! (`native_build_id()`), and the wheelhouse tools read the marker out of each
//! wheel's library to prove that the library is that package's own and was
//! built in this run.
//!
//! ```ignore
//! // build.rs
//! fn main() {
//!     riftco_build_id::emit("riftco.tensor._native", &["src", "../kernels/src"]);
//! }
//! // lib.rs
//! pub const BUILD_ID_MARKER: &str = env!("RIFTCO_BUILD_MARKER");
//! pub const BUILD_ID: &str = env!("RIFTCO_BUILD_ID");
//! ```

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The text every marker starts with.
pub const MARKER_PREFIX: &str = "RIFTCO_BUILD_ID:";

fn hash_dir(dir: &Path, h: &mut DefaultHasher) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            hash_dir(&p, h);
        } else if let Ok(bytes) = std::fs::read(&p) {
            p.file_name().hash(h);
            bytes.hash(h);
        }
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

/// The marker for `module` with build id `id`.
pub fn marker(module: &str, id: &str) -> String {
    format!("{MARKER_PREFIX}{module}:{id}")
}

/// Hash `source_dirs` (relative to the crate) and the build time into a
/// build id, and hand it to the crate as the compile-time environment
/// variables `RIFTCO_BUILD_ID` and `RIFTCO_BUILD_MARKER`.
pub fn emit(module: &str, source_dirs: &[&str]) {
    assert!(
        !module.is_empty()
            && module
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'),
        "riftco-build-id: {module:?} is not a Python module path"
    );
    let mut h = DefaultHasher::new();
    module.hash(&mut h);
    for dir in source_dirs {
        hash_dir(Path::new(dir), &mut h);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    now.hash(&mut h);
    let id = format!("{:016x}", h.finish());
    println!("cargo:rustc-env=RIFTCO_BUILD_ID={id}");
    println!(
        "cargo:rustc-env=RIFTCO_BUILD_MARKER={}",
        marker(module, &id)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_names_the_module_and_the_id() {
        assert_eq!(
            marker("riftco.tensor._native", "0123456789abcdef"),
            "RIFTCO_BUILD_ID:riftco.tensor._native:0123456789abcdef"
        );
    }
}
