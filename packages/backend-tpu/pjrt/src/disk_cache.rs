//! Compiled programs kept on disk between processes.
//!
//! An entry is the plugin's own serialization of an executable
//! (`PJRT_Executable_Serialize`), loaded back with
//! `PJRT_Executable_DeserializeAndLoad`. Its key is the SHA-256 of the
//! program text, the serialized compile options and the plugin's identity
//! (library path, size and modification time, C API version, attributes,
//! platform and device kind, client options), so another plugin build or
//! device never sees it. One file per key, `<key>.pjrt`:
//!
//! ```text
//! b"RFTPJRT1" | key (32 bytes) | payload length (u64 LE) | SHA-256 of payload | payload
//! ```
//!
//! A file that is short, foreign (another key or magic), truncated or
//! altered is ignored (the program is compiled and the file rewritten);
//! writes go to a temporary file renamed into place; after each write the
//! least recently used entries (by modification time, touched on every hit)
//! are removed until the folder holds at most `max_bytes`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::sha256::{self, Sha256};

const MAGIC: &[u8; 8] = b"RFTPJRT1";
const HEADER: usize = 8 + 32 + 8 + 32;
const SUFFIX: &str = "pjrt";
/// A temporary file older than this was left by a process that died mid-write.
const STALE_TMP: Duration = Duration::from_secs(600);

/// What the disk cache did, for tests and `describe()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Programs loaded from disk instead of compiled.
    pub hits: u64,
    /// Programs looked for and not found (then compiled).
    pub misses: u64,
    /// Entries written.
    pub stores: u64,
    /// Entries found but unusable (corrupt, foreign, or refused by the plugin).
    pub rejected: u64,
    /// Programs that could not be kept: the plugin cannot serialize them, or
    /// the folder cannot be written.
    pub failed: u64,
}

pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    stats: Mutex<DiskStats>,
}

/// The key of `program` compiled with `options` by the plugin `identity`.
pub fn key(program: &str, options: &[u8], identity: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.field(b"riftco-pjrt disk cache 1");
    h.field(program.as_bytes());
    h.field(options);
    h.field(identity.as_bytes());
    h.finish()
}

/// The identity of a plugin library file: its canonical path, size and
/// modification time (a rebuilt or upgraded plugin is another plugin).
pub fn library_identity(path: &Path) -> String {
    let shown = path.display();
    match fs::metadata(path) {
        Ok(meta) => {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("{shown}\n{} bytes\nmtime {modified}", meta.len())
        }
        Err(_) => format!("{shown}\nunreadable"),
    }
}

fn tmp_counter() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl DiskCache {
    /// A cache in `dir` (created on first write) of at most `max_bytes`.
    pub fn new(dir: PathBuf, max_bytes: u64) -> DiskCache {
        DiskCache {
            dir,
            max_bytes,
            stats: Mutex::new(DiskStats::default()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub fn stats(&self) -> DiskStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut DiskStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn path(&self, key: &[u8; 32]) -> PathBuf {
        self.dir.join(format!("{}.{SUFFIX}", sha256::hex(key)))
    }

    /// The payload stored under `key`, if a sound entry is there.
    pub fn load(&self, key: &[u8; 32]) -> Option<Vec<u8>> {
        let path = self.path(key);
        let Ok(meta) = fs::metadata(&path) else {
            self.count(|s| s.misses += 1);
            return None;
        };
        let sound = meta.is_file()
            && meta.len() >= HEADER as u64
            && meta.len() <= self.max_bytes.saturating_add(HEADER as u64);
        let payload = if sound {
            fs::read(&path).ok().and_then(|bytes| decode(&bytes, key))
        } else {
            None
        };
        match payload {
            Some(payload) => {
                // Least recently used goes first: a hit makes the entry young.
                if let Ok(f) = fs::File::options().append(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                self.count(|s| s.hits += 1);
                Some(payload)
            }
            None => {
                self.count(|s| {
                    s.rejected += 1;
                    s.misses += 1
                });
                None
            }
        }
    }

    /// Count an entry the plugin refused to load (another build's bytes);
    /// it is rewritten by the next [`DiskCache::store`].
    pub fn reject(&self) {
        self.count(|s| {
            s.hits = s.hits.saturating_sub(1);
            s.rejected += 1;
            s.misses += 1
        });
    }

    /// Count a program that could not be kept (e.g. the plugin cannot serialize it).
    pub fn fail(&self) {
        self.count(|s| s.failed += 1);
    }

    /// Store `payload` under `key` atomically, then bound the folder's size.
    /// A cache that cannot be written is no error: the program is compiled again
    /// next time.
    pub fn store(&self, key: &[u8; 32], payload: &[u8]) -> bool {
        if payload.len() as u64 > self.max_bytes {
            return false;
        }
        let path = self.path(key);
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            sha256::hex(key),
            std::process::id(),
            tmp_counter()
        ));
        let write = || -> std::io::Result<()> {
            fs::create_dir_all(&self.dir)?;
            let mut f = fs::File::create(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(key)?;
            f.write_all(&(payload.len() as u64).to_le_bytes())?;
            f.write_all(&sha256::digest(payload))?;
            f.write_all(payload)?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &path)
        };
        let written = write().is_ok();
        if !written {
            let _ = fs::remove_file(&tmp);
            self.fail();
            return false;
        }
        self.count(|s| s.stores += 1);
        self.evict(&path);
        true
    }

    /// Remove the oldest entries until the folder holds at most `max_bytes`
    /// (never `keep`, the entry just written), and dead temporary files.
    fn evict(&self, keep: &Path) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".tmp") {
                if now.duration_since(modified).unwrap_or_default() > STALE_TMP {
                    let _ = fs::remove_file(&path);
                }
            } else if meta.is_file() && name.ends_with(&format!(".{SUFFIX}")) {
                files.push((modified, meta.len(), path));
            }
        }
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, size, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if fs::remove_file(&path).is_ok() {
                total -= size;
            }
        }
    }
}

fn decode(bytes: &[u8], key: &[u8; 32]) -> Option<Vec<u8>> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC || &bytes[8..40] != key {
        return None;
    }
    let len = u64::from_le_bytes(bytes[40..48].try_into().ok()?);
    let payload = &bytes[HEADER..];
    if payload.len() as u64 != len || sha256::digest(payload)[..] != bytes[48..80] {
        return None;
    }
    Some(payload.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "riftco-pjrt-disk-{name}-{}-{}",
            std::process::id(),
            tmp_counter()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn keys_follow_program_options_and_plugin() {
        let k = key("module", b"\x1a\x04", "plugin 1");
        assert_eq!(k, key("module", b"\x1a\x04", "plugin 1"));
        assert_ne!(k, key("module2", b"\x1a\x04", "plugin 1"));
        assert_ne!(k, key("module", b"\x1a\x05", "plugin 1"));
        assert_ne!(k, key("module", b"\x1a\x04", "plugin 2"));
    }

    #[test]
    fn the_library_identity_follows_its_size_and_time() {
        let dir = scratch("identity");
        fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("plugin.so");
        fs::write(&lib, b"one").unwrap();
        let first = library_identity(&lib);
        fs::write(&lib, b"four").unwrap();
        let longer = library_identity(&lib);
        assert_ne!(first, longer);
        let f = fs::File::options().append(true).open(&lib).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
            .unwrap();
        assert_ne!(library_identity(&lib), longer);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stores_load_back_and_damage_is_ignored() {
        let dir = scratch("roundtrip");
        let cache = DiskCache::new(dir.clone(), 1 << 20);
        let k = key("m", b"", "p");
        assert_eq!(cache.load(&k), None);
        assert!(cache.store(&k, b"executable bytes"));
        assert_eq!(cache.load(&k).as_deref(), Some(&b"executable bytes"[..]));
        // A flipped payload byte, a truncation, another key's file: all ignored.
        let path = cache.path(&k);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(cache.load(&k), None);
        fs::write(&path, &bytes[..HEADER - 1]).unwrap();
        assert_eq!(cache.load(&k), None);
        let other = key("other", b"", "p");
        assert!(cache.store(&other, b"executable bytes"));
        fs::copy(cache.path(&other), &path).unwrap();
        assert_eq!(cache.load(&k), None);
        // Rewritten, it is good again.
        assert!(cache.store(&k, b"new bytes"));
        assert_eq!(cache.load(&k).as_deref(), Some(&b"new bytes"[..]));
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.stores, s.rejected), (2, 4, 3, 3));
        let leftovers = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .count();
        assert_eq!(leftovers, 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_folder_stays_under_its_bound_least_recent_first() {
        let dir = scratch("bound");
        // Three entries of 100 + 80 bytes fit in 600; a fourth evicts the oldest.
        let cache = DiskCache::new(dir.clone(), 600);
        let keys: Vec<_> = (0..4).map(|i| key(&format!("m{i}"), b"", "p")).collect();
        let payload = [7u8; 100];
        for (i, k) in keys.iter().take(3).enumerate() {
            assert!(cache.store(k, &payload));
            let f = fs::File::options()
                .append(true)
                .open(cache.path(k))
                .unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i as u64))
                .unwrap();
        }
        // Using entry 0 makes entry 1 the least recently used.
        assert!(cache.load(&keys[0]).is_some());
        assert!(cache.store(&keys[3], &payload));
        let present: Vec<bool> = keys.iter().map(|k| cache.path(k).exists()).collect();
        assert_eq!(present, [true, false, true, true]);
        // A payload larger than the whole cache is not kept.
        assert!(!cache.store(&keys[1], &[0u8; 700]));
        fs::remove_dir_all(&dir).unwrap();
    }
}
