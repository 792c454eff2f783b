//! One GPU: its primary context, its one stream, its memory pool, its compiled
//! kernel modules and its cuBLAS handle. Everything is enqueued on the stream;
//! the host waits only in [`Device::download`] and [`Device::synchronize`].

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};

use crate::kernels::{self, CubinCache};
use crate::libs::{self, Library};
use crate::pool::{Pool, PoolStats};
use crate::{error, nvrtc, Error, Result};

/// A kernel argument: a device address, a 64-bit integer, a float, or a small
/// struct of 64-bit integers passed by value (shapes and strides).
#[derive(Debug, Clone)]
pub enum Arg {
    Ptr(u64),
    I64(i64),
    F32(f32),
    I64s(Vec<i64>),
}

struct Module {
    // Modules live as long as the device, so their functions stay valid.
    handle: sys::CUmodule,
    functions: HashMap<String, sys::CUfunction>,
}

/// Counters of the kernel cache: `(modules loaded, compiled by NVRTC, read from disk)`.
pub type CacheStats = (usize, u64, u64);

pub struct Device {
    ordinal: i32,
    name: String,
    arch: String,
    total_memory: usize,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    pool: Pool,
    cache: CubinCache,
    modules: Mutex<HashMap<String, Module>>,
    blas: Mutex<Option<usize>>,
    compiles: AtomicU64,
    disk_hits: AtomicU64,
}

// SAFETY: the context, stream, modules and cuBLAS handle are driver objects usable
// from any thread once the context is made current there (every method does).
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

/// The device count (0 without a driver or a GPU is an error saying why).
pub fn device_count() -> Result<usize> {
    libs::require_driver()?;
    result::init()?;
    Ok(result::device::get_count()? as usize)
}

impl Device {
    /// Open GPU `ordinal`. Every library is checked first, so a missing one is an
    /// error naming it rather than a panic inside cudarc.
    pub fn open(ordinal: i32, cache: CubinCache) -> Result<Arc<Device>> {
        for lib in Library::ALL {
            lib.require()?;
        }
        result::init()?;
        let count = result::device::get_count()?;
        if count == 0 {
            return Err(error("the CUDA driver reports no GPU"));
        }
        if ordinal < 0 || ordinal >= count {
            return Err(error(format!(
                "expected a GPU ordinal below {count}, found {ordinal}"
            )));
        }
        let dev = result::device::get(ordinal)?;
        // SAFETY: `dev` is a valid device; the primary context is retained for
        // the life of the process (devices are opened once).
        unsafe {
            let ctx = result::primary_ctx::retain(dev)?;
            result::ctx::set_current(ctx)?;
            let stream = result::stream::create(result::stream::StreamKind::NonBlocking)?;
            use sys::CUdevice_attribute::*;
            let major =
                result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
            let minor =
                result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
            Ok(Arc::new(Device {
                ordinal,
                name: result::device::get_name(dev)?,
                arch: format!("sm_{major}{minor}"),
                total_memory: result::device::total_mem(dev)?,
                ctx,
                stream,
                pool: Pool::default(),
                cache,
                modules: Mutex::new(HashMap::new()),
                blas: Mutex::new(None),
                compiles: AtomicU64::new(0),
                disk_hits: AtomicU64::new(0),
            }))
        }
    }

    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The architecture kernels are compiled for (`sm_90` on an H100 or H200).
    pub fn arch(&self) -> &str {
        &self.arch
    }
    pub fn total_memory(&self) -> usize {
        self.total_memory
    }
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }
    pub fn cache(&self) -> &CubinCache {
        &self.cache
    }

    /// The device's one stream (graph capture records it).
    pub(crate) fn raw_stream(&self) -> sys::CUstream {
        self.stream
    }

    pub(crate) fn bind(&self) -> Result<()> {
        // SAFETY: the context was retained in `open` and is never released.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(Error::from)
    }

    /// Device memory for `bytes` bytes (uninitialized), from the pool.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<Buffer> {
        self.bind()?;
        let (ptr, size) = self.pool.alloc(bytes)?;
        Ok(Buffer {
            device: self.clone(),
            ptr,
            size,
            bytes,
        })
    }

    /// Device memory holding `data` (the copy is enqueued; `data` is staged by
    /// the driver before this returns).
    pub fn upload(self: &Arc<Self>, data: &[u8]) -> Result<Buffer> {
        let buf = self.alloc(data.len())?;
        if !data.is_empty() {
            // SAFETY: `buf` holds at least `data.len()` bytes.
            unsafe { result::memcpy_htod_async(buf.ptr, data, self.stream) }?;
        }
        Ok(buf)
    }

    /// The first `bytes` bytes at `src + offset`: waits for the stream.
    pub fn download(&self, src: &Buffer, offset: usize, bytes: usize) -> Result<Vec<u8>> {
        if offset + bytes > src.bytes {
            return Err(error(format!(
                "reading {bytes} bytes at {offset} of a {}-byte buffer",
                src.bytes
            )));
        }
        self.bind()?;
        let mut out = vec![0u8; bytes];
        if bytes > 0 {
            // SAFETY: the range is inside `src`; the sync below completes the copy
            // before `out` is read or moved.
            unsafe {
                result::memcpy_dtoh_async(&mut out, src.ptr + offset as u64, self.stream)?;
                result::stream::synchronize(self.stream)?;
            }
        }
        Ok(out)
    }

    /// Enqueue a copy of `bytes` bytes between two buffers (offsets in bytes).
    pub fn copy(
        &self,
        dst: &Buffer,
        dst_offset: usize,
        src: &Buffer,
        src_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        if dst_offset + bytes > dst.bytes || src_offset + bytes > src.bytes {
            return Err(error(format!(
                "copying {bytes} bytes from {src_offset} of a {}-byte buffer to {dst_offset} of a {}-byte one",
                src.bytes, dst.bytes
            )));
        }
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: both ranges are inside their buffers.
        unsafe {
            result::memcpy_dtod_async(
                dst.ptr + dst_offset as u64,
                src.ptr + src_offset as u64,
                bytes,
                self.stream,
            )
        }
        .map_err(Error::from)
    }

    /// Enqueue zeroing the whole buffer.
    pub fn zero(&self, dst: &Buffer) -> Result<()> {
        if dst.bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the range is the buffer.
        unsafe { result::memset_d8_async(dst.ptr, 0, dst.bytes, self.stream) }.map_err(Error::from)
    }

    /// Wait until everything enqueued so far has run.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the stream lives as long as the device.
        unsafe { result::stream::synchronize(self.stream) }.map_err(Error::from)
    }

    /// Wait for the stream, then give the pool's cached blocks back to the driver.
    pub fn trim(&self) -> Result<()> {
        self.synchronize()?;
        self.pool.trim()
    }

    /// The function `kernel` of module `module`, compiled (or read from the disk
    /// cache) on first use.
    fn function(&self, module: &str, kernel: &str) -> Result<sys::CUfunction> {
        let mut modules = self.modules.lock().unwrap();
        if !modules.contains_key(module) {
            let loaded = self.load_module(module)?;
            modules.insert(module.to_string(), loaded);
        }
        let m = modules.get_mut(module).expect("loaded above");
        if let Some(f) = m.functions.get(kernel) {
            return Ok(*f);
        }
        let cname = CString::new(kernel)
            .map_err(|_| error(format!("a kernel name holds a NUL byte: {kernel:?}")))?;
        // SAFETY: a loaded module and a NUL-terminated name.
        let f = unsafe { result::module::get_function(m.handle, cname) }.map_err(|e| {
            error(format!(
                "kernel module {module} has no kernel named {kernel}: {}",
                Error::from(e)
            ))
        })?;
        m.functions.insert(kernel.to_string(), f);
        Ok(f)
    }

    fn load_module(&self, module: &str) -> Result<Module> {
        let text = kernels::program_text(module)?;
        let version = nvrtc::version()?;
        let key = kernels::cache_key(&text, &self.arch, &version, nvrtc::OPTIONS);
        self.bind()?;
        let load = |image: &[u8]| -> Result<sys::CUmodule> {
            // SAFETY: a CUBIN image, read by the driver before this returns.
            unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
                .map_err(Error::from)
        };
        let cached = self
            .cache
            .load(module, &self.arch, &key)
            .and_then(|img| load(&img).ok());
        let handle = match cached {
            Some(h) => {
                self.disk_hits.fetch_add(1, Ordering::Relaxed);
                h
            }
            None => {
                let compiled = nvrtc::compile(&text, module, &self.arch)?;
                self.compiles.fetch_add(1, Ordering::Relaxed);
                let h = load(&compiled.cubin)?;
                self.cache.store(module, &self.arch, &key, &compiled.cubin);
                h
            }
        };
        Ok(Module {
            handle,
            functions: HashMap::new(),
        })
    }

    /// Compile and load every module now (instead of on first use).
    pub fn load_all(&self) -> Result<()> {
        for module in kernels::modules() {
            let mut modules = self.modules.lock().unwrap();
            if !modules.contains_key(module) {
                let loaded = self.load_module(module)?;
                modules.insert(module.to_string(), loaded);
            }
        }
        Ok(())
    }

    pub fn cache_stats(&self) -> CacheStats {
        (
            self.modules.lock().unwrap().len(),
            self.compiles.load(Ordering::Relaxed),
            self.disk_hits.load(Ordering::Relaxed),
        )
    }

    /// Enqueue `module::kernel` on the stream. A grid with a zero extent runs nothing.
    pub fn launch(
        &self,
        module: &str,
        kernel: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<()> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let f = self.function(module, kernel)?;
        self.bind()?;
        let mut values: Vec<Vec<u8>> = args
            .iter()
            .map(|a| match a {
                Arg::Ptr(p) => p.to_ne_bytes().to_vec(),
                Arg::I64(v) => v.to_ne_bytes().to_vec(),
                Arg::F32(v) => v.to_ne_bytes().to_vec(),
                Arg::I64s(vs) => vs.iter().flat_map(|v| v.to_ne_bytes()).collect(),
            })
            .collect();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v.as_mut_ptr() as *mut c_void)
            .collect();
        if shared_bytes > 48 * 1024 {
            // SAFETY: a valid function; the attribute allows the larger launch below.
            unsafe {
                result::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            }?;
        }
        // SAFETY: the parameter bytes live until cuLaunchKernel returns (the driver
        // copies them); pointers are device addresses of live buffers, whose memory
        // is reused only by work enqueued later on this same stream.
        unsafe { result::launch_kernel(f, grid, block, shared_bytes, self.stream, &mut params) }
            .map_err(|e| error(format!("launching {module}::{kernel}: {}", Error::from(e))))
    }

    /// Run `f` with the cuBLAS handle (created on first use, bound to the stream).
    pub(crate) fn with_blas<T>(
        &self,
        f: impl FnOnce(cudarc::cublas::sys::cublasHandle_t) -> Result<T>,
    ) -> Result<T> {
        use cudarc::cublas::sys as blas;
        self.bind()?;
        let mut slot = self.blas.lock().unwrap();
        if slot.is_none() {
            let mut handle: blas::cublasHandle_t = std::ptr::null_mut();
            // SAFETY: an out-pointer; the handle is bound to this device's stream.
            unsafe {
                crate::blas::status(blas::cublasCreate_v2(&mut handle), "cublasCreate")?;
                crate::blas::status(
                    blas::cublasSetStream_v2(handle, self.stream as blas::cudaStream_t),
                    "cublasSetStream",
                )?;
            }
            *slot = Some(handle as usize);
        }
        f(slot.unwrap() as blas::cublasHandle_t)
    }
}

/// Device memory from the pool of its device, returned to the pool on drop.
pub struct Buffer {
    device: Arc<Device>,
    ptr: sys::CUdeviceptr,
    size: usize,
    bytes: usize,
}

impl Buffer {
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.device.pool.free(self.ptr, self.size);
    }
}
