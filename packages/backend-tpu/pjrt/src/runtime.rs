//! A plugin, its client and the compile caches: what the backend talks to.
//!
//! The client is created on first use, not when the runtime is opened: a GPU
//! plugin's client takes the GPUs (and, unless told otherwise, most of their
//! memory), which merely listing backends must not do. Only a plugin whose
//! kind its file name does not tell gets its client at once, to learn its
//! platform.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::buffer::Buffer;
use crate::cache::{CacheStats, CompileCache};
use crate::client::Client;
use crate::client_options::{self, ClientOption, PluginKind};
use crate::disk_cache::{self, DiskCache, DiskStats};
use crate::error::{Error, Result};
use crate::executable::Executable;
use crate::hlo::Program;
use crate::options::CompileOptions;
use crate::plugin::Plugin;
use crate::programs::Target;
use crate::types::TensorType;

/// How many compiled programs stay cached in memory.
pub const CACHE_CAPACITY: usize = 4096;

/// How a runtime creates its client and compiles.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Options of `PJRT_Client_Create` chosen by the user; a GPU plugin also
    /// gets `preallocate=false` unless these choose (see
    /// [`client_options::with_defaults`]).
    pub client_options: Vec<ClientOption>,
    /// XLA's deterministic ops on GPUs (`xla_gpu_deterministic_ops`).
    pub deterministic: bool,
    /// A folder for compiled programs and its size bound in bytes; None keeps
    /// nothing on disk.
    pub disk_cache: Option<(PathBuf, u64)>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            client_options: Vec::new(),
            deterministic: true,
            disk_cache: None,
        }
    }
}

struct Ready {
    client: Arc<Client>,
    options: CompileOptions,
    options_bytes: Vec<u8>,
    identity: String,
}

pub struct Runtime {
    plugin: Arc<Plugin>,
    kind: PluginKind,
    client_options: Vec<ClientOption>,
    deterministic: bool,
    ready: OnceLock<Result<Ready>>,
    cache: CompileCache,
    disk: Option<DiskCache>,
}

impl Runtime {
    /// Open the plugin at `path` with the default configuration.
    pub fn open(path: &Path) -> Result<Runtime> {
        Self::open_with(path, RuntimeConfig::default())
    }

    /// Open the plugin at `path` (dlopen and `PJRT_Plugin_Initialize`, no
    /// client yet); the options are checked here.
    pub fn open_with(path: &Path, config: RuntimeConfig) -> Result<Runtime> {
        let plugin = Plugin::open(path)?;
        let kind = PluginKind::from_file_name(
            &plugin
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let client_options = client_options::with_defaults(kind, &config.client_options);
        client_options::check(&client_options)?;
        let runtime = Runtime {
            plugin,
            kind,
            client_options,
            deterministic: config.deterministic,
            ready: OnceLock::new(),
            cache: CompileCache::new(CACHE_CAPACITY),
            disk: config
                .disk_cache
                .map(|(dir, max_bytes)| DiskCache::new(dir, max_bytes)),
        };
        if kind == PluginKind::Unknown {
            runtime.client()?;
        }
        Ok(runtime)
    }

    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// What the plugin's file name says it is.
    pub fn kind(&self) -> PluginKind {
        self.kind
    }

    /// The options the client is (or will be) created with.
    pub fn client_options(&self) -> &[ClientOption] {
        &self.client_options
    }

    /// True once the client exists.
    pub fn client_created(&self) -> bool {
        matches!(self.ready.get(), Some(Ok(_)))
    }

    /// True when the plugin computes on the host: from the client's platform
    /// once it exists, from the file name before.
    pub fn is_host(&self) -> bool {
        match self.ready.get() {
            Some(Ok(ready)) => ready.client.is_host(),
            _ => self.kind == PluginKind::Cpu,
        }
    }

    fn ready(&self) -> Result<&Ready> {
        self.ready
            .get_or_init(|| self.create())
            .as_ref()
            .map_err(Error::clone)
    }

    fn create(&self) -> Result<Ready> {
        let client = Client::create(self.plugin.clone(), &self.client_options)?;
        let options = CompileOptions::for_platform(client.platform(), self.deterministic);
        let options_bytes = options.to_bytes()?;
        let plugin = client.plugin();
        let (major, minor) = plugin.api_version();
        let mut identity = disk_cache::library_identity(plugin.path());
        identity.push_str(&format!(
            "\nC API {major}.{minor}\nplatform {} {}\ndevice {} x{}\n",
            client.platform(),
            client.platform_version(),
            client.device_kind(),
            client.device_count()
        ));
        for (name, value) in plugin.attributes() {
            identity.push_str(&format!("attribute {name}={value}\n"));
        }
        for option in &self.client_options {
            identity.push_str(&format!("option {option}\n"));
        }
        Ok(Ready {
            client,
            options,
            options_bytes,
            identity,
        })
    }

    /// The client, created on the first call.
    pub fn client(&self) -> Result<&Arc<Client>> {
        Ok(&self.ready()?.client)
    }

    /// The compile options every program gets on this client.
    pub fn compile_options(&self) -> Result<&CompileOptions> {
        Ok(&self.ready()?.options)
    }

    /// The shapes of sums and other platform choices of the program writers.
    pub fn target(&self) -> Result<Target> {
        Ok(Target::for_platform(self.client()?.platform()))
    }

    pub fn upload(&self, data: &[u8], ty: &TensorType) -> Result<Buffer> {
        Buffer::from_host(self.client()?, data, ty)
    }

    /// The executable of `program`: from memory, else from the disk cache,
    /// else compiled (and then kept on disk).
    pub fn executable(&self, program: &Program) -> Result<Arc<Executable>> {
        let ready = self.ready()?;
        self.cache
            .get_or_compile(&program.text, || self.build(ready, program))
    }

    fn build(&self, ready: &Ready, program: &Program) -> Result<Executable> {
        let key = self
            .disk
            .as_ref()
            .map(|_| disk_cache::key(&program.text, &ready.options_bytes, &ready.identity));
        if let (Some(disk), Some(key)) = (&self.disk, &key) {
            if let Some(bytes) = disk.load(key) {
                match Executable::deserialize(
                    &ready.client,
                    &bytes,
                    program.params.clone(),
                    program.results.clone(),
                ) {
                    Ok(executable) => return Ok(executable),
                    Err(_) => disk.reject(),
                }
            }
        }
        let executable = Executable::compile(
            &ready.client,
            &program.text,
            program.params.clone(),
            program.results.clone(),
            &ready.options,
        )?;
        if let (Some(disk), Some(key)) = (&self.disk, &key) {
            match executable.serialize() {
                Ok(bytes) => {
                    disk.store(key, &bytes);
                }
                Err(_) => disk.fail(),
            }
        }
        Ok(executable)
    }

    /// Compile (once) and run `program` on `inputs`.
    pub fn run(&self, program: &Program, inputs: &[&Buffer]) -> Result<Vec<Buffer>> {
        self.executable(program)?.execute(inputs)
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The disk cache's folder and counters, when there is one.
    pub fn disk_cache(&self) -> Option<(&Path, DiskStats)> {
        self.disk.as_ref().map(|d| (d.dir(), d.stats()))
    }

    /// Forget the programs compiled in memory (the disk cache stays).
    pub fn clear_cache(&self) {
        self.cache.clear()
    }
}
