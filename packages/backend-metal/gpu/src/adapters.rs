//! Finding adapters and opening a device on one.

use crate::{error, Context, Result};

/// The native API an adapter is driven through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Vulkan,
    Metal,
}

impl Api {
    pub fn parse(name: &str) -> Result<Api> {
        match name {
            "vulkan" => Ok(Api::Vulkan),
            "metal" => Ok(Api::Metal),
            other => error(format!(
                "unknown GPU API {other:?}; expected vulkan or metal"
            )),
        }
    }

    fn backends(self) -> wgpu::Backends {
        match self {
            Api::Vulkan => wgpu::Backends::VULKAN,
            Api::Metal => wgpu::Backends::METAL,
        }
    }

    /// Whether this build of wgpu can drive the API on this platform at all.
    pub fn compiled_in(self) -> bool {
        wgpu::Instance::enabled_backend_features().contains(self.backends())
    }
}

/// One adapter as the Python side lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterDescription {
    pub index: usize,
    pub name: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub vendor: u32,
    pub device: u32,
    pub shader_f16: bool,
    /// wgpu's `SUBGROUP` feature, with the subgroup sizes the adapter reports.
    pub subgroup: bool,
    pub subgroup_sizes: (u32, u32),
    /// wgpu's `EXPERIMENTAL_COOPERATIVE_MATRIX` feature.
    pub cooperative_matrix: bool,
    /// Every cooperative-matrix configuration wgpu reports (`16x16x16 f16->f32`).
    pub cooperative_matrices: Vec<String>,
    /// The configuration the `coop` matmul path would use, if any (see [`choose_cooperative`]).
    pub cooperative_config: Option<CoopConfig>,
}

/// A cooperative-matrix configuration of the `coop` matmul path: square
/// `size` x `size` tiles (M = N = K, as naga's `coop_mat8x8` / `coop_mat16x16`),
/// f16 or f32 inputs, always an f32 accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopConfig {
    pub size: u32,
    /// f16 inputs (else f32).
    pub half: bool,
}

impl CoopConfig {
    /// The element type of the A and B tiles in WGSL.
    pub fn input_type(self) -> &'static str {
        if self.half {
            "f16"
        } else {
            "f32"
        }
    }
}

impl std::fmt::Display for CoopConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.size;
        write!(f, "{n}x{n}x{n} {}->f32", self.input_type())
    }
}

fn scalar_name(t: wgpu::CooperativeScalarType) -> &'static str {
    match t {
        wgpu::CooperativeScalarType::F32 => "f32",
        wgpu::CooperativeScalarType::F16 => "f16",
        wgpu::CooperativeScalarType::I32 => "i32",
        wgpu::CooperativeScalarType::U32 => "u32",
    }
}

/// One configuration as text: `MxNxK ab->cr`.
pub fn configuration_name(p: &wgpu::CooperativeMatrixProperties) -> String {
    format!(
        "{}x{}x{} {}->{}",
        p.m_size,
        p.n_size,
        p.k_size,
        scalar_name(p.ab_type),
        scalar_name(p.cr_type)
    )
}

/// The configuration the `coop` matmul path uses among those an adapter reports:
/// square tiles of 8 or 16 (the sizes naga's WGSL has) with an f32 accumulator;
/// f16 inputs (where the device also has `SHADER_F16`) before f32 ones, then
/// 16 x 16 before 8 x 8. None when no configuration fits.
pub fn choose_cooperative(
    offered: &[wgpu::CooperativeMatrixProperties],
    shader_f16: bool,
) -> Option<CoopConfig> {
    let usable = |p: &&wgpu::CooperativeMatrixProperties| {
        p.m_size == p.n_size
            && p.n_size == p.k_size
            && matches!(p.m_size, 8 | 16)
            && p.cr_type == wgpu::CooperativeScalarType::F32
            && match p.ab_type {
                wgpu::CooperativeScalarType::F16 => shader_f16,
                wgpu::CooperativeScalarType::F32 => true,
                _ => false,
            }
    };
    offered
        .iter()
        .filter(usable)
        .map(|p| CoopConfig {
            size: p.m_size,
            half: p.ab_type == wgpu::CooperativeScalarType::F16,
        })
        .max_by_key(|c| (c.half, c.size))
}

fn instance(api: Api) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = api.backends();
    desc.flags = wgpu::InstanceFlags::empty();
    wgpu::Instance::new(desc)
}

fn describe(index: usize, adapter: &wgpu::Adapter) -> AdapterDescription {
    let info = adapter.get_info();
    let device_type = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => "discrete",
        wgpu::DeviceType::IntegratedGpu => "integrated",
        wgpu::DeviceType::VirtualGpu => "virtual",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    };
    let shader_f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
    let cooperative_matrix = adapter
        .features()
        .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
    // Listed even where wgpu withholds the feature (on Vulkan it also needs the
    // memory model's device scope), so that `riftco backends` can say so.
    let offered = adapter.cooperative_matrix_properties();
    AdapterDescription {
        index,
        name: info.name,
        device_type: device_type.to_string(),
        driver: info.driver,
        driver_info: info.driver_info,
        vendor: info.vendor,
        device: info.device,
        shader_f16,
        subgroup: adapter.features().contains(wgpu::Features::SUBGROUP),
        subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
        cooperative_matrix,
        cooperative_matrices: offered.iter().map(configuration_name).collect(),
        cooperative_config: choose_cooperative(&offered, shader_f16).filter(|_| cooperative_matrix),
    }
}

fn enumerate(api: Api) -> Vec<wgpu::Adapter> {
    if !api.compiled_in() {
        return Vec::new();
    }
    pollster::block_on(instance(api).enumerate_adapters(api.backends()))
}

/// Every adapter of `api`, in the order wgpu enumerates them (no device is opened).
pub fn adapters(api: Api) -> Vec<AdapterDescription> {
    enumerate(api)
        .iter()
        .enumerate()
        .map(|(i, a)| describe(i, a))
        .collect()
}

/// Invocations of a workgroup of matmul_coop.wgsl on this adapter: the largest
/// subgroup it reports (a whole number of subgroups whatever size the driver
/// picks); 32 on Metal, whose reported range (4-64) is wider than the SIMD
/// groups of Apple GPUs (32 lanes).
pub fn coop_workgroup(api: Api, subgroup_max: u32) -> u32 {
    match api {
        Api::Metal => 32,
        Api::Vulkan if subgroup_max > 0 => subgroup_max,
        Api::Vulkan => 64,
    }
}

/// Open a device on adapter `index` of `api`, keeping at most `pool_bytes` of
/// free buffers for reuse; with `cooperative_matrix`, with wgpu's
/// `EXPERIMENTAL_COOPERATIVE_MATRIX` too (the `coop` matmul path), refused where
/// the adapter offers no configuration that path can use.
pub fn open(api: Api, index: usize, pool_bytes: u64, cooperative_matrix: bool) -> Result<Context> {
    let mut found = enumerate(api);
    if index >= found.len() {
        return error(format!(
            "no adapter {index}: {} adapter(s) found for {api:?}",
            found.len()
        ));
    }
    let adapter = found.swap_remove(index);
    let description = describe(index, &adapter);
    let mut limits = wgpu::Limits::downlevel_defaults();
    let offered = adapter.limits();
    limits.max_storage_buffers_per_shader_stage = offered.max_storage_buffers_per_shader_stage;
    limits.max_storage_buffer_binding_size = offered.max_storage_buffer_binding_size;
    limits.max_buffer_size = offered.max_buffer_size;
    limits.max_compute_workgroups_per_dimension = offered.max_compute_workgroups_per_dimension;
    limits.max_compute_workgroup_storage_size = offered.max_compute_workgroup_storage_size;
    limits.max_compute_invocations_per_workgroup = offered.max_compute_invocations_per_workgroup;
    limits.max_compute_workgroup_size_x = offered.max_compute_workgroup_size_x;
    limits.max_compute_workgroup_size_y = offered.max_compute_workgroup_size_y;
    limits.min_storage_buffer_offset_alignment = offered.min_storage_buffer_offset_alignment;
    limits.max_bind_groups = offered.max_bind_groups.min(4);
    // f16 tiles on the f16 matmul path, subgroup shuffles on the subgroup one;
    // nothing else the kernels use is optional.
    let mut features = adapter.features() & (wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP);
    let mut experimental = wgpu::ExperimentalFeatures::disabled();
    let coop = if cooperative_matrix {
        let Some(config) = description.cooperative_config else {
            let offered = if description.cooperative_matrices.is_empty() {
                "none".to_string()
            } else {
                description.cooperative_matrices.join(", ")
            };
            return error(format!(
                "{} offers no cooperative-matrix configuration the coop matmul path can use \
                 (8x8x8 or 16x16x16, f16 or f32 inputs, f32 accumulation; offered: {offered})",
                description.name
            ));
        };
        features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        // SAFETY: wgpu marks cooperative matrices experimental (its own bugs may be
        // undefined behaviour). Only the coop matmul kernel uses them, and only when
        // the user asked for that path (RIFTCO_WGPU_MATMUL=coop).
        experimental = unsafe { wgpu::ExperimentalFeatures::enabled() };
        Some((config, coop_workgroup(api, description.subgroup_sizes.1)))
    } else {
        None
    };
    let desc = wgpu::DeviceDescriptor {
        label: Some("riftco"),
        required_features: features,
        required_limits: limits,
        experimental_features: experimental,
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc))
        .map_err(|e| crate::Error(format!("opening {:?} failed: {e}", description.name)))?;
    let mut ctx = Context::new(device, queue, description.clone(), pool_bytes);
    ctx.shader_f16 = features.contains(wgpu::Features::SHADER_F16);
    if features.contains(wgpu::Features::SUBGROUP) {
        ctx.subgroup_sizes = description.subgroup_sizes;
    }
    ctx.cooperative = coop;
    Ok(ctx)
}
