//! Compiled programs, keyed by their text, least recently used dropped first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::executable::Executable;

struct Entry {
    executable: Arc<Executable>,
    last_use: u64,
}

struct State {
    entries: HashMap<String, Entry>,
    clock: u64,
    compiles: u64,
    hits: u64,
}

/// A bounded map from program text to executable. Compiling happens under
/// the lock, so two threads asking for one program compile it once.
pub struct CompileCache {
    capacity: usize,
    state: Mutex<State>,
}

/// Counters for tests and `describe()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub compiles: u64,
    pub hits: u64,
}

impl CompileCache {
    pub fn new(capacity: usize) -> Self {
        CompileCache {
            capacity: capacity.max(1),
            state: Mutex::new(State {
                entries: HashMap::new(),
                clock: 0,
                compiles: 0,
                hits: 0,
            }),
        }
    }

    /// The executable for `key`, compiled with `compile` the first time.
    pub fn get_or_compile(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<Executable>,
    ) -> Result<Arc<Executable>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.clock += 1;
        let now = state.clock;
        if let Some(entry) = state.entries.get_mut(key) {
            entry.last_use = now;
            let found = entry.executable.clone();
            state.hits += 1;
            return Ok(found);
        }
        let executable = Arc::new(compile()?);
        state.compiles += 1;
        if state.entries.len() >= self.capacity {
            let oldest = state
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_use)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                state.entries.remove(&oldest);
            }
        }
        state.entries.insert(
            key.to_string(),
            Entry {
                executable: executable.clone(),
                last_use: now,
            },
        );
        Ok(executable)
    }

    pub fn stats(&self) -> CacheStats {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        CacheStats {
            entries: state.entries.len(),
            compiles: state.compiles,
            hits: state.hits,
        }
    }

    pub fn clear(&self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .clear();
    }
}
