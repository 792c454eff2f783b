//! Reuse of storage buffers by size class.
//!
//! A request is rounded up to its class (powers of two split in four steps:
//! 1, 1.25, 1.5, 1.75 times a power of two, so at most 25 % is wasted) and
//! served from the free list of that class when it has a buffer. Returned
//! buffers are kept until `limit` bytes are free; beyond that they are
//! released. Reuse is safe without waiting: a returned buffer's last use was
//! recorded earlier in the same ordered stream of work than its next one.
//!
//! A class is capped at the device's largest buffer, and kernels bind only the
//! bytes asked for ([`binding_size`]), never the whole pooled buffer: a request
//! just under a binding limit (2^31 - 1 bytes on Vulkan) may sit in a class
//! above it, whose whole-buffer binding the device would refuse.

use std::collections::HashMap;

pub struct Pool {
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    pub free_bytes: u64,
    limit: u64,
    max_buffer: u64,
    pub allocations: u64,
    pub reuses: u64,
}

/// The size class of a request of `size` bytes (at least 256 bytes).
pub fn class_of(size: u64) -> u64 {
    let size = size.max(256);
    let top = 63 - size.leading_zeros(); // 2^top <= size
    let base = 1u64 << top;
    let step = base / 4;
    size.div_ceil(step) * step
}

/// The class of `size` capped at `max_buffer`, the largest buffer the device
/// creates (a request above it is refused before it gets here).
pub fn class_for(size: u64, max_buffer: u64) -> u64 {
    class_of(size).min(max_buffer).max(size)
}

/// Bytes bound for a request of `size` bytes: the request rounded up to whole
/// 32-bit words (storage bindings are a multiple of 4), at least `min` bytes.
pub fn binding_size(size: u64, min: u64) -> u64 {
    size.max(min).div_ceil(4) * 4
}

/// Why a request of `size` bytes cannot be bound on a device whose largest
/// storage binding is `max_binding` bytes and largest buffer `max_buffer`, or None.
pub fn refusal(size: u64, min: u64, max_binding: u64, max_buffer: u64) -> Option<String> {
    let bound = binding_size(size, min);
    if bound > max_binding || bound > max_buffer {
        return Some(format!(
            "a buffer of {size} bytes exceeds this device's largest storage binding \
             ({} bytes)",
            max_binding.min(max_buffer)
        ));
    }
    None
}

impl Pool {
    pub fn new(limit: u64, max_buffer: u64) -> Self {
        Pool {
            max_buffer,
            free: HashMap::new(),
            free_bytes: 0,
            limit,
            allocations: 0,
            reuses: 0,
        }
    }

    pub fn take(&mut self, device: &wgpu::Device, size: u64) -> wgpu::Buffer {
        let class = class_for(size, self.max_buffer);
        if let Some(buffer) = self.free.get_mut(&class).and_then(Vec::pop) {
            self.free_bytes -= class;
            self.reuses += 1;
            return buffer;
        }
        self.allocations += 1;
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("riftco storage"),
            size: class,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Keep `buffer` for reuse, or hand it back (to be dropped: wgpu frees it once
    /// the recorded work no longer needs it) when the pool is full.
    pub fn give_back(&mut self, buffer: wgpu::Buffer) -> Option<wgpu::Buffer> {
        let class = buffer.size();
        if self.free_bytes + class > self.limit {
            return Some(buffer);
        }
        self.free_bytes += class;
        self.free.entry(class).or_default().push(buffer);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{binding_size, class_for, class_of, refusal};

    const VULKAN_BINDING: u64 = (1 << 31) - 1;
    const GIB: u64 = 1 << 30;

    #[test]
    fn requests_near_the_binding_limit_bind_only_what_they_asked_for() {
        // Between 1.75 and 2 GiB the class is 2 GiB, above Vulkan's 2^31 - 1 binding.
        let max_buffer = 1u64 << 32;
        for size in [7 * GIB / 4 + 4, 15 * GIB / 8, 2 * GIB - 4] {
            assert_eq!(class_of(size), 2 * GIB, "{size}");
            assert!(class_for(size, max_buffer) >= size);
            assert!(binding_size(size, 16) <= VULKAN_BINDING, "{size}");
            assert_eq!(refusal(size, 16, VULKAN_BINDING, max_buffer), None);
        }
        // A device whose largest buffer is the binding limit: the class is capped.
        assert_eq!(class_for(2 * GIB - 4, VULKAN_BINDING), VULKAN_BINDING);
        assert!(class_for(GIB + 1, VULKAN_BINDING) <= VULKAN_BINDING);
        // Above the limit the request itself is refused, with both sizes named.
        let msg = refusal(2 * GIB, 16, VULKAN_BINDING, max_buffer).expect("refused");
        assert!(
            msg.contains("2147483648") && msg.contains("2147483647"),
            "{msg}"
        );
        assert!(refusal(VULKAN_BINDING, 16, VULKAN_BINDING, max_buffer).is_some());
    }

    #[test]
    fn bindings_are_whole_words_of_at_least_the_minimum() {
        assert_eq!(binding_size(0, 16), 16);
        assert_eq!(binding_size(5, 16), 16);
        assert_eq!(binding_size(17, 16), 20);
        assert_eq!(binding_size(1000, 16), 1000);
        for size in [1u64, 255, 256, 257, 4097, 123_456_789] {
            assert!(binding_size(size, 16) <= class_of(size.max(16)));
        }
    }

    #[test]
    fn classes_round_up_by_at_most_a_quarter() {
        assert_eq!(class_of(1), 256);
        assert_eq!(class_of(256), 256);
        assert_eq!(class_of(257), 320);
        assert_eq!(class_of(1000), 1024);
        assert_eq!(class_of(1025), 1280);
        for size in [300u64, 4097, 1 << 20, (1 << 20) + 1, 123_456_789] {
            let c = class_of(size);
            assert!(c >= size && c * 4 <= size * 5 + 1024, "{size} -> {c}");
            assert_eq!(class_of(c), c);
        }
    }
}
