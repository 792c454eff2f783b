//! The storage bindings of a WGSL entry point, from naga's reflection: the
//! explicit bind group layout that lets the parameter block (binding 0) take a
//! dynamic offset, so that bind groups are cached per kernel and buffers.

use wgpu::naga;

/// `(binding, read_only)` of every group-0 storage buffer `entry` uses, in
/// binding order; binding 0 (the parameters) is always included.
pub fn storage_bindings(source: &str, entry: &str) -> Result<Vec<(u32, bool)>, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(source))?;
    let index = module
        .entry_points
        .iter()
        .position(|ep| ep.name == entry)
        .ok_or_else(|| format!("no entry point {entry:?}"))?;
    let used = info.get_entry_point(index);
    let mut found = Vec::new();
    for (handle, var) in module.global_variables.iter() {
        let (Some(binding), naga::AddressSpace::Storage { access }) = (&var.binding, var.space)
        else {
            continue;
        };
        if binding.group != 0 {
            return Err(format!(
                "binding group {} (kernels use group 0 only)",
                binding.group
            ));
        }
        if binding.binding == 0 || !used[handle].is_empty() {
            found.push((
                binding.binding,
                !access.contains(naga::StorageAccess::STORE),
            ));
        }
    }
    found.sort_unstable();
    if found.first().map(|b| b.0) != Some(0) {
        return Err("no parameter block at binding 0".to_string());
    }
    for (i, (binding, _)) in found.iter().enumerate().skip(1) {
        if *binding as usize != i {
            return Err(format!(
                "entry point {entry:?} uses bindings {:?}: they must be 0, 1, 2, ... with none skipped",
                found.iter().map(|b| b.0).collect::<Vec<_>>()
            ));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::storage_bindings;

    const SRC: &str = "
@group(0) @binding(0) var<storage, read> P: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn copy() { y[0] = x[P[0]]; }
@compute @workgroup_size(1) fn zero() { y[0] = 0.0; }
";

    #[test]
    fn bindings_are_those_the_entry_point_uses() {
        assert_eq!(
            storage_bindings(SRC, "copy").unwrap(),
            [(0, true), (1, true), (2, false)]
        );
        let err = storage_bindings(SRC, "zero").unwrap_err();
        assert!(err.contains("none skipped"), "{err}");
        assert!(storage_bindings(SRC, "other")
            .unwrap_err()
            .contains("no entry point"));
        assert!(storage_bindings("fn main( {", "main").is_err());
    }
}
