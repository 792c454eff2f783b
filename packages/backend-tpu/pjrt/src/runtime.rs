//! A plugin, its client and a compile cache: what the backend talks to.

use std::path::Path;
use std::sync::Arc;

use crate::buffer::Buffer;
use crate::cache::{CacheStats, CompileCache};
use crate::client::Client;
use crate::error::Result;
use crate::executable::Executable;
use crate::hlo::Program;
use crate::options::CompileOptions;
use crate::plugin::Plugin;
use crate::types::TensorType;

/// How many compiled programs stay cached.
pub const CACHE_CAPACITY: usize = 4096;

pub struct Runtime {
    client: Arc<Client>,
    cache: CompileCache,
    options: CompileOptions,
}

impl Runtime {
    /// Open the plugin at `path` and create a client on it.
    pub fn open(path: &Path) -> Result<Runtime> {
        let plugin = Plugin::open(path)?;
        let client = Client::create(plugin)?;
        Ok(Runtime {
            client,
            cache: CompileCache::new(CACHE_CAPACITY),
            options: CompileOptions::default(),
        })
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    pub fn upload(&self, data: &[u8], ty: &TensorType) -> Result<Buffer> {
        Buffer::from_host(&self.client, data, ty)
    }

    /// The executable of `program`, compiled once.
    pub fn executable(&self, program: &Program) -> Result<Arc<Executable>> {
        self.cache.get_or_compile(&program.text, || {
            Executable::compile(
                &self.client,
                &program.text,
                program.params.clone(),
                program.results.clone(),
                &self.options,
            )
        })
    }

    /// Compile (once) and run `program` on `inputs`.
    pub fn run(&self, program: &Program, inputs: &[&Buffer]) -> Result<Vec<Buffer>> {
        self.executable(program)?.execute(inputs)
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    pub fn clear_cache(&self) {
        self.cache.clear()
    }
}
