//! `riftco-wgpu`: the GPU runtime of riftco-backend-metal, with no Python in it.
//!
//! A [`Context`] is one wgpu device (Metal on macOS, Vulkan elsewhere) with:
//!
//! - a pool of storage buffers in size classes, so that the buffers of
//!   short-lived tensors are reused instead of allocated per op;
//! - a cache of compute pipelines, one per WGSL source and entry point;
//! - one pending command encoder: every dispatch, upload and device-side copy
//!   is recorded into it, in call order, and nothing waits on the device until
//!   the host reads a buffer ([`Context::read`]), which submits the batch and
//!   maps a staging copy of the bytes asked for.
//!
//! Kernel arguments are a list of storage buffers (bindings 1..) and a small
//! block of 32-bit parameters (binding 0, `var<storage, read>`), gathered for a
//! whole batch into one arena buffer bound with a dynamic offset, so a bind
//! group depends only on the kernel and its buffers and is cached. Uploads of
//! a batch are gathered into one staging ring written once at submit; the
//! arena and the ring are reused by every batch (queue writes are ordered
//! after the work submitted before them).

mod adapters;
mod layout;
mod pool;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

pub use adapters::{
    adapters, choose_cooperative, configuration_name, coop_workgroup, open, AdapterDescription,
    Api, CoopConfig,
};
use pool::Pool;

/// What went wrong, as text for the Python side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

pub fn error<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error(msg.into()))
}

/// Dispatches recorded before a batch is submitted without waiting.
const BATCH_DISPATCHES: usize = 256;
/// Bytes of kernel parameters gathered for one batch.
const ARENA_BYTES: u64 = 1 << 16;
/// Bytes of parameters one kernel may take (the window binding 0 shows it).
const PARAM_WINDOW: u64 = 1 << 12;
/// Bytes of uploads gathered into the staging ring of one batch; a larger
/// upload gets a staging buffer of its own.
const RING_BYTES: u64 = 1 << 23;
/// Bind groups kept for reuse (the cache is emptied when it reaches this).
const BIND_GROUPS: usize = 1024;
/// Smallest buffer allocated: wgpu refuses empty bindings.
const MIN_BUFFER: u64 = 16;

/// Counters for tests and `describe()`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub dispatches: u64,
    pub submits: u64,
    pub waits: u64,
    /// Host-to-device writes (uploads and partial writes).
    pub uploads: u64,
    /// Device-to-host reads (each a wait).
    pub reads: u64,
    /// Bind groups created, and dispatches that reused a cached one.
    pub bind_groups: u64,
    pub bind_group_hits: u64,
    pub allocations: u64,
    pub reuses: u64,
    pub pipelines: u64,
    pub pooled_bytes: u64,
}

struct Batch {
    encoder: wgpu::CommandEncoder,
    params: Vec<u8>,
    uploads: Vec<u8>,
    dispatches: usize,
}

/// A cached bind group: the kernel and each buffer bound with its size.
type GroupKey = (u64, Vec<(wgpu::Buffer, u64)>);

struct State {
    batch: Option<Batch>,
    pipelines: HashMap<u64, Arc<Kernel>>,
    stats: Stats,
    /// Parameters of every batch, bound at a dynamic offset (reused by each batch).
    arena: wgpu::Buffer,
    /// Uploads of every batch up to RING_BYTES (reused by each batch).
    ring: wgpu::Buffer,
}

pub(crate) struct Shared {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub pool: Mutex<Pool>,
    /// The first error wgpu reported outside an error scope (validation, device loss).
    pub failure: Arc<Mutex<Option<String>>>,
    /// Bind groups by kernel and buffers; a buffer the pool releases is purged.
    pub groups: Mutex<HashMap<GroupKey, wgpu::BindGroup>>,
}

/// One opened device.
pub struct Context {
    shared: Arc<Shared>,
    state: Mutex<State>,
    pub description: AdapterDescription,
    pub max_binding: u64,
    pub max_buffer: u64,
    pub max_groups: u32,
    /// Whether the device was opened with SHADER_F16 (the f16 matmul path).
    pub shader_f16: bool,
    /// The subgroup sizes (min, max) where the device was opened with SUBGROUP, else (0, 0).
    pub subgroup_sizes: (u32, u32),
    /// The cooperative-matrix configuration and workgroup width of the coop matmul
    /// path where the device was opened with EXPERIMENTAL_COOPERATIVE_MATRIX.
    pub cooperative: Option<(CoopConfig, u32)>,
    /// Kernels compiled without wgpu's bounds and loop checks (`RIFTCO_WGPU_UNCHECKED=1`,
    /// through `create_shader_module_trusted`): only for kernels audited to stay in bounds.
    pub unchecked: bool,
    param_align: u64,
}

/// A compiled compute pipeline.
pub struct Kernel {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    key: u64,
    /// The storage bindings after the parameters (1..) the entry point uses.
    pub bindings: usize,
    pub entry: String,
}

/// A device buffer of at least `size` bytes; dropped, it returns to the pool.
pub struct Buffer {
    raw: Option<wgpu::Buffer>,
    pub size: u64,
    shared: Arc<Shared>,
}

impl Buffer {
    pub fn raw(&self) -> &wgpu::Buffer {
        self.raw.as_ref().expect("a live buffer")
    }

    /// Bytes a kernel binds: the request in whole words, never the pooled class.
    pub fn binding_size(&self) -> u64 {
        pool::binding_size(self.size, MIN_BUFFER)
    }

    /// Bytes of the pooled allocation behind it (its size class).
    pub fn allocated(&self) -> u64 {
        self.raw().size()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            let released = match self.shared.pool.lock() {
                Ok(mut pool) => pool.give_back(raw),
                Err(_) => None,
            };
            if let Some(raw) = released {
                // Cached bind groups would keep a released buffer alive.
                lock(&self.shared.groups)
                    .retain(|(_, bound), _| !bound.iter().any(|(b, _)| *b == raw));
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Context {
    pub(crate) fn new(
        device: wgpu::Device,
        queue: wgpu::Queue,
        description: AdapterDescription,
        pool_bytes: u64,
    ) -> Self {
        let failure = Arc::new(Mutex::new(None));
        let sink = failure.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = lock(&sink);
            if slot.is_none() {
                *slot = Some(e.to_string());
            }
        }));
        let limits = device.limits();
        let arena = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("riftco parameters"),
            size: ARENA_BYTES + PARAM_WINDOW,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let ring = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("riftco uploads"),
            size: RING_BYTES,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let shared = Arc::new(Shared {
            device,
            queue,
            pool: Mutex::new(Pool::new(pool_bytes, limits.max_buffer_size)),
            failure,
            groups: Mutex::new(HashMap::new()),
        });
        Context {
            shared,
            state: Mutex::new(State {
                batch: None,
                pipelines: HashMap::new(),
                stats: Stats::default(),
                arena,
                ring,
            }),
            description,
            max_binding: limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size),
            max_buffer: limits.max_buffer_size,
            max_groups: limits.max_compute_workgroups_per_dimension,
            shader_f16: false,
            subgroup_sizes: (0, 0),
            cooperative: None,
            unchecked: std::env::var("RIFTCO_WGPU_UNCHECKED").is_ok_and(|v| v.trim() == "1"),
            param_align: u64::from(limits.min_storage_buffer_offset_alignment).max(4),
        }
    }

    fn check_failure(&self) -> Result<()> {
        // Reported once: the work after it may well be valid.
        match lock(&self.shared.failure).take() {
            Some(msg) => error(format!("the GPU device reported an error: {msg}")),
            None => Ok(()),
        }
    }

    pub fn stats(&self) -> Stats {
        let mut stats = lock(&self.state).stats;
        let pool = lock(&self.shared.pool);
        stats.allocations = pool.allocations;
        stats.reuses = pool.reuses;
        stats.pooled_bytes = pool.free_bytes;
        stats
    }

    /// A buffer of at least `size` bytes, from the pool when one fits. Its
    /// contents are whatever it held before: kernels write every output element.
    pub fn alloc(&self, size: u64) -> Result<Buffer> {
        if let Some(msg) = pool::refusal(size, MIN_BUFFER, self.max_binding, self.max_buffer) {
            return error(msg);
        }
        let raw = lock(&self.shared.pool).take(&self.shared.device, size.max(MIN_BUFFER));
        Ok(Buffer {
            size,
            raw: Some(raw),
            shared: self.shared.clone(),
        })
    }

    fn batch<'a>(&self, state: &'a mut State) -> &'a mut Batch {
        let device = &self.shared.device;
        state.batch.get_or_insert_with(|| Batch {
            encoder: device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default()),
            params: Vec::new(),
            uploads: Vec::new(),
            dispatches: 0,
        })
    }

    /// A buffer holding `bytes` (copied in order with the recorded work).
    pub fn upload(&self, bytes: &[u8]) -> Result<Buffer> {
        let buffer = self.alloc(bytes.len() as u64)?;
        self.write(&buffer, 0, bytes)?;
        Ok(buffer)
    }

    /// Overwrite `bytes.len()` bytes of `dst` at `offset` once the work recorded so
    /// far has run (a staging copy in the pending batch).
    pub fn write(&self, dst: &Buffer, offset: u64, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let padded = (bytes.len() as u64).div_ceil(4) * 4;
        if !offset.is_multiple_of(4) || offset + padded > dst.size.div_ceil(4) * 4 {
            return error(format!(
                "a write of {} bytes at offset {offset} does not fit a buffer of {} bytes",
                bytes.len(),
                dst.size
            ));
        }
        let mut state = lock(&self.state);
        state.stats.uploads += 1;
        if padded <= RING_BYTES {
            let used = state.batch.as_ref().map_or(0, |b| b.uploads.len() as u64);
            if used + padded > RING_BYTES {
                self.submit_locked(&mut state)?;
            }
            let batch = self.batch(&mut state);
            let at = batch.uploads.len() as u64;
            batch.uploads.extend_from_slice(bytes);
            batch.uploads.resize((at + padded) as usize, 0);
            let st = &mut *state;
            let (ring, batch) = (&st.ring, st.batch.as_mut().expect("a batch"));
            batch
                .encoder
                .copy_buffer_to_buffer(ring, at, dst.raw(), offset, padded);
            return Ok(());
        }
        let staging = self.shared.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("riftco upload"),
            size: padded,
            usage: wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        {
            let mut view = staging
                .slice(..)
                .get_mapped_range_mut()
                .expect("a buffer mapped at creation");
            if bytes.len() as u64 == padded {
                view.copy_from_slice(bytes);
            } else {
                let mut whole = bytes.to_vec();
                whole.resize(padded as usize, 0);
                view.copy_from_slice(&whole);
            }
        }
        staging.unmap();
        let batch = self.batch(&mut state);
        batch
            .encoder
            .copy_buffer_to_buffer(&staging, 0, dst.raw(), offset, padded);
        Ok(())
    }

    /// Copy `size` bytes between buffers, in order with the recorded work.
    pub fn copy(
        &self,
        src: &Buffer,
        src_offset: u64,
        dst: &Buffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        if !(src_offset | dst_offset | size).is_multiple_of(4)
            || src_offset + size > src.size.div_ceil(4) * 4
            || dst_offset + size > dst.size.div_ceil(4) * 4
        {
            return error(format!(
                "a copy of {size} bytes from offset {src_offset} (of {}) to offset \
                 {dst_offset} (of {}) is out of bounds or unaligned",
                src.size, dst.size
            ));
        }
        let mut state = lock(&self.state);
        let batch = self.batch(&mut state);
        batch
            .encoder
            .copy_buffer_to_buffer(src.raw(), src_offset, dst.raw(), dst_offset, size);
        Ok(())
    }

    /// The pipeline of `entry` in `source`, compiled once per (source, entry).
    pub fn kernel(&self, source: &str, entry: &str) -> Result<Arc<Kernel>> {
        let mut h = DefaultHasher::new();
        source.hash(&mut h);
        entry.hash(&mut h);
        let key = h.finish();
        if let Some(k) = lock(&self.state).pipelines.get(&key) {
            return Ok(k.clone());
        }
        let fail = |e: String| error(format!("WGSL kernel {entry:?} failed to compile: {e}"));
        let bindings = match layout::storage_bindings(source, entry) {
            Ok(b) => b,
            Err(e) => return fail(e),
        };
        let device = &self.shared.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let entries: Vec<wgpu::BindGroupLayoutEntry> = bindings
            .iter()
            .map(|&(binding, read_only)| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only },
                    // The parameter block moves through the arena with each dispatch.
                    has_dynamic_offset: binding == 0,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(entry),
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(entry),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let descriptor = wgpu::ShaderModuleDescriptor {
            label: Some(entry),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        let module = if self.unchecked {
            // SAFETY: opted into by the user for kernels that index within their
            // bindings (every kernel guards its indices against its parameters).
            unsafe {
                device.create_shader_module_trusted(
                    descriptor,
                    wgpu::ShaderRuntimeChecks::unchecked(),
                )
            }
        } else {
            device.create_shader_module(descriptor)
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return fail(e.to_string());
        }
        let kernel = Arc::new(Kernel {
            pipeline,
            layout,
            key,
            bindings: bindings.iter().filter(|(b, _)| *b != 0).count(),
            entry: entry.to_string(),
        });
        let mut state = lock(&self.state);
        state.stats.pipelines += 1;
        state.pipelines.insert(key, kernel.clone());
        Ok(kernel)
    }

    /// Record one dispatch of `kernel` over `groups` workgroups with `params` at
    /// binding 0 and `buffers` at bindings 1.. (in the kernel's declaration order).
    pub fn dispatch(
        &self,
        kernel: &Kernel,
        buffers: &[&Buffer],
        params: &[u32],
        groups: [u32; 3],
    ) -> Result<()> {
        if groups.contains(&0) {
            return Ok(());
        }
        if groups.iter().any(|&g| g > self.max_groups) {
            return error(format!(
                "kernel {:?}: {groups:?} workgroups exceed this device's limit of {} per axis",
                kernel.entry, self.max_groups
            ));
        }
        if buffers.len() != kernel.bindings {
            return error(format!(
                "kernel {:?} binds {} buffers after its parameters, {} were given",
                kernel.entry,
                kernel.bindings,
                buffers.len()
            ));
        }
        let mut words: Vec<u8> = params.iter().flat_map(|w| w.to_le_bytes()).collect();
        if words.is_empty() {
            words.extend_from_slice(&[0; 4]);
        }
        let size = words.len() as u64;
        if size > PARAM_WINDOW {
            return error(format!(
                "kernel {:?}: {size} bytes of parameters (at most {PARAM_WINDOW})",
                kernel.entry
            ));
        }
        let mut state = lock(&self.state);
        let start = self
            .batch(&mut state)
            .params
            .len()
            .next_multiple_of(self.param_align as usize) as u64;
        if start + size > ARENA_BYTES {
            self.submit_locked(&mut state)?;
        }
        let batch = self.batch(&mut state);
        let offset = batch
            .params
            .len()
            .next_multiple_of(self.param_align as usize);
        batch.params.resize(offset, 0);
        batch.params.extend_from_slice(&words);
        // The bytes asked for, not the whole pooled buffer (whose class may exceed
        // the device's largest binding).
        let bound: Vec<(wgpu::Buffer, u64)> = buffers
            .iter()
            .map(|b| (b.raw().clone(), b.binding_size()))
            .collect();
        let group_key = (kernel.key, bound);
        let cached = lock(&self.shared.groups).get(&group_key).cloned();
        let bind_group = match cached {
            Some(g) => {
                state.stats.bind_group_hits += 1;
                g
            }
            None => {
                let st = &mut *state;
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &st.arena,
                        offset: 0,
                        size: wgpu::BufferSize::new(PARAM_WINDOW),
                    }),
                }];
                for (i, (raw, size)) in group_key.1.iter().enumerate() {
                    entries.push(wgpu::BindGroupEntry {
                        binding: i as u32 + 1,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: raw,
                            offset: 0,
                            size: wgpu::BufferSize::new(*size),
                        }),
                    });
                }
                let g = self
                    .shared
                    .device
                    .create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &kernel.layout,
                        entries: &entries,
                    });
                st.stats.bind_groups += 1;
                let mut groups = lock(&self.shared.groups);
                if groups.len() >= BIND_GROUPS {
                    groups.clear();
                }
                groups.insert(group_key, g.clone());
                g
            }
        };
        let batch = state.batch.as_mut().expect("a batch");
        {
            let mut pass = batch
                .encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&kernel.pipeline);
            pass.set_bind_group(0, &bind_group, &[offset as u32]);
            pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        }
        batch.dispatches += 1;
        let full = batch.dispatches >= BATCH_DISPATCHES;
        state.stats.dispatches += 1;
        if full {
            self.submit_locked(&mut state)?;
        }
        Ok(())
    }

    fn submit_locked(&self, state: &mut State) -> Result<Option<wgpu::SubmissionIndex>> {
        let Some(batch) = state.batch.take() else {
            return Ok(None);
        };
        if !batch.params.is_empty() {
            self.shared
                .queue
                .write_buffer(&state.arena, 0, &batch.params);
        }
        if !batch.uploads.is_empty() {
            self.shared
                .queue
                .write_buffer(&state.ring, 0, &batch.uploads);
        }
        let index = self.shared.queue.submit([batch.encoder.finish()]);
        state.stats.submits += 1;
        self.check_failure()?;
        Ok(Some(index))
    }

    /// Submit the recorded work without waiting for it.
    pub fn flush(&self) -> Result<()> {
        self.submit_locked(&mut lock(&self.state)).map(|_| ())
    }

    /// Submit the recorded work and wait until the device has run it.
    pub fn synchronize(&self) -> Result<()> {
        let index = self.submit_locked(&mut lock(&self.state))?;
        self.wait(index)
    }

    fn wait(&self, index: Option<wgpu::SubmissionIndex>) -> Result<()> {
        lock(&self.state).stats.waits += 1;
        self.shared
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: None,
            })
            .map_err(|e| Error(format!("waiting for the GPU failed: {e}")))?;
        self.check_failure()
    }

    /// The first `size` bytes of `src`, after every recorded op has run: the one
    /// place the host waits for the device.
    pub fn read(&self, src: &Buffer, size: u64) -> Result<Vec<u8>> {
        if size > src.size {
            return error(format!(
                "a read of {size} bytes from a buffer of {} bytes",
                src.size
            ));
        }
        if size == 0 {
            return Ok(Vec::new());
        }
        let padded = size.div_ceil(4) * 4;
        lock(&self.state).stats.reads += 1;
        let staging = self.shared.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("riftco readback"),
            size: padded,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let index = {
            let mut state = lock(&self.state);
            let batch = self.batch(&mut state);
            batch
                .encoder
                .copy_buffer_to_buffer(src.raw(), 0, &staging, 0, padded);
            self.submit_locked(&mut state)?
        };
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait(index)?;
        match rx.try_recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return error(format!("mapping a readback buffer failed: {e}")),
            Err(_) => return error("the GPU never finished mapping a readback buffer"),
        }
        let bytes = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| Error(format!("reading a mapped buffer failed: {e}")))?[..size as usize]
            .to_vec();
        staging.unmap();
        Ok(bytes)
    }
}

#[cfg(test)]
mod coop_tests;
#[cfg(test)]
mod tests;
