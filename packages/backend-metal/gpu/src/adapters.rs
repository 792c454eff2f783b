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
    AdapterDescription {
        index,
        name: info.name,
        device_type: device_type.to_string(),
        driver: info.driver,
        driver_info: info.driver_info,
        vendor: info.vendor,
        device: info.device,
        shader_f16: adapter.features().contains(wgpu::Features::SHADER_F16),
        subgroup: adapter.features().contains(wgpu::Features::SUBGROUP),
        subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
        cooperative_matrix: adapter
            .features()
            .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
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

/// Open a device on adapter `index` of `api`, keeping at most `pool_bytes` of
/// free buffers for reuse.
pub fn open(api: Api, index: usize, pool_bytes: u64) -> Result<Context> {
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
    let features = adapter.features() & (wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP);
    let desc = wgpu::DeviceDescriptor {
        label: Some("riftco"),
        required_features: features,
        required_limits: limits,
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc))
        .map_err(|e| crate::Error(format!("opening {:?} failed: {e}", description.name)))?;
    let mut ctx = Context::new(device, queue, description.clone(), pool_bytes);
    ctx.shader_f16 = features.contains(wgpu::Features::SHADER_F16);
    if features.contains(wgpu::Features::SUBGROUP) {
        ctx.subgroup_sizes = description.subgroup_sizes;
    }
    Ok(ctx)
}
