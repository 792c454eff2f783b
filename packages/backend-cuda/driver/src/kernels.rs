//! The kernel sources (CUDA C, one module per file under `kernels/`), how a
//! compiled module is keyed, and the on-disk CUBIN cache.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Every kernel module: its name and its CUDA C source.
pub const SOURCES: &[(&str, &str)] = &[
    ("common", include_str!("../kernels/common.cuh")),
    ("elementwise", include_str!("../kernels/elementwise.cu")),
    ("layout", include_str!("../kernels/layout.cu")),
    ("reduce", include_str!("../kernels/reduce.cu")),
    ("norm", include_str!("../kernels/norm.cu")),
    ("loss", include_str!("../kernels/loss.cu")),
    ("index", include_str!("../kernels/index.cu")),
    ("attention", include_str!("../kernels/attention.cu")),
    ("flash", include_str!("../kernels/flash.cu")),
    ("optim", include_str!("../kernels/optim.cu")),
    ("nf4", include_str!("../kernels/nf4.cu")),
    ("decode", include_str!("../kernels/decode.cu")),
    ("sample", include_str!("../kernels/sample.cu")),
];

/// The header every module starts with (NVRTC compiles each module alone, so it
/// is pasted in rather than `#include`d).
pub const COMMON: &str = "common";

/// The modules that hold kernels (every source but the shared header).
pub fn modules() -> impl Iterator<Item = &'static str> {
    SOURCES.iter().map(|(n, _)| *n).filter(|n| *n != COMMON)
}

/// The full text NVRTC compiles for `module`: the shared header, then its source.
pub fn program_text(module: &str) -> crate::Result<String> {
    let source = |name: &str| {
        SOURCES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .ok_or_else(|| crate::error(format!("no kernel module named {name:?}")))
    };
    if module == COMMON {
        return Err(crate::error("`common` is the shared header, not a module"));
    }
    Ok(format!(
        "{}\n#line 1 \"{module}.cu\"\n{}",
        source(COMMON)?,
        source(module)?
    ))
}

/// FNV-1a, 64 bits: stable across Rust versions and platforms (unlike std's hasher).
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The cache key of `text` compiled for `arch` (`sm_90`) by NVRTC `nvrtc`
/// (`"13.0"`) with `options`: 16 hex digits.
pub fn cache_key(text: &str, arch: &str, nvrtc: &str, options: &[&str]) -> String {
    let joined = options.join("\u{1}");
    format!(
        "{:016x}",
        fnv1a(&[
            text.as_bytes(),
            arch.as_bytes(),
            nvrtc.as_bytes(),
            joined.as_bytes()
        ])
    )
}

/// The cache folder: `RIFTCO_CUDA_CACHE`, else `$XDG_CACHE_HOME/riftco/cuda`,
/// else `~/.cache/riftco/cuda`; None when none can be named.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("RIFTCO_CUDA_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("riftco").join("cuda"))
}

/// An on-disk store of CUBIN images, one file per key.
#[derive(Debug, Clone)]
pub struct CubinCache {
    dir: Option<PathBuf>,
}

impl CubinCache {
    /// A cache in `dir`; None keeps nothing on disk.
    pub fn new(dir: Option<PathBuf>) -> Self {
        CubinCache { dir }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn path(&self, module: &str, arch: &str, key: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{module}-{arch}-{key}.cubin")))
    }

    /// The stored image, if there is one.
    pub fn load(&self, module: &str, arch: &str, key: &str) -> Option<Vec<u8>> {
        let bytes = fs::read(self.path(module, arch, key)?).ok()?;
        (!bytes.is_empty()).then_some(bytes)
    }

    /// Store an image atomically (temporary file, fsync, rename). A cache that
    /// cannot be written is not an error: the module is compiled again next time.
    pub fn store(&self, module: &str, arch: &str, key: &str, image: &[u8]) -> bool {
        let Some(path) = self.path(module, arch, key) else {
            return false;
        };
        let write = || -> std::io::Result<()> {
            let dir = path.parent().expect("a cache file has a folder");
            fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(
                ".{}.{}.tmp",
                path.file_name().unwrap().to_string_lossy(),
                std::process::id()
            ));
            let mut f = fs::File::create(&tmp)?;
            f.write_all(image)?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &path)
        };
        write().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_is_the_header_and_a_source_with_kernels() {
        let header = SOURCES[0].1;
        assert!(
            !header.contains("__global__"),
            "the header defines no kernel"
        );
        for module in modules() {
            let text = program_text(module).unwrap();
            assert!(text.starts_with(header));
            assert!(
                text.contains("extern \"C\" __global__"),
                "{module} defines no kernel"
            );
        }
        assert_eq!(modules().count(), SOURCES.len() - 1);
        assert!(program_text("common").is_err());
        assert!(program_text("nothing").is_err());
    }

    #[test]
    fn the_key_follows_source_arch_compiler_and_options() {
        let k = cache_key("a", "sm_90", "13.0", &["-x"]);
        assert_eq!(k.len(), 16);
        assert_eq!(k, cache_key("a", "sm_90", "13.0", &["-x"]));
        assert_ne!(k, cache_key("b", "sm_90", "13.0", &["-x"]));
        assert_ne!(k, cache_key("a", "sm_80", "13.0", &["-x"]));
        assert_ne!(k, cache_key("a", "sm_90", "13.1", &["-x"]));
        assert_ne!(k, cache_key("a", "sm_90", "13.0", &[]));
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        // Pinned: a change of the hash would silently orphan every cached file.
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn the_cache_stores_atomically_and_loads_back() {
        let dir = std::env::temp_dir().join(format!("riftco-cuda-cache-{}", std::process::id()));
        let cache = CubinCache::new(Some(dir.clone()));
        assert!(cache.load("m", "sm_90", "00").is_none());
        assert!(cache.store("m", "sm_90", "00", b"image"));
        assert_eq!(
            cache.load("m", "sm_90", "00").as_deref(),
            Some(&b"image"[..])
        );
        assert!(cache.load("m", "sm_80", "00").is_none());
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .collect();
        assert!(leftovers.is_empty());
        fs::remove_dir_all(&dir).unwrap();
        assert!(!CubinCache::new(None).store("m", "sm_90", "00", b"x"));
    }
}
