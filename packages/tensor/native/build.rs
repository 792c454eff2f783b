//! Embed a build id: a hash of this crate's and the kernel crate's sources
//! plus the build time, which the Python side and the wheelhouse check.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn hash_dir(dir: &Path, h: &mut DefaultHasher) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
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

fn main() {
    let mut h = DefaultHasher::new();
    hash_dir(Path::new("src"), &mut h);
    hash_dir(Path::new("../kernels/src"), &mut h);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    now.hash(&mut h);
    println!("cargo:rustc-env=RIFTCO_BUILD_ID={:016x}", h.finish());
}
