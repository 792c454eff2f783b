//! Reuse of storage buffers by size class.
//!
//! A request is rounded up to its class (powers of two split in four steps:
//! 1, 1.25, 1.5, 1.75 times a power of two, so at most 25 % is wasted) and
//! served from the free list of that class when it has a buffer. Returned
//! buffers are kept until `limit` bytes are free; beyond that they are
//! released. Reuse is safe without waiting: a returned buffer's last use was
//! recorded earlier in the same ordered stream of work than its next one.

use std::collections::HashMap;

pub struct Pool {
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    pub free_bytes: u64,
    limit: u64,
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

impl Pool {
    pub fn new(limit: u64) -> Self {
        Pool {
            free: HashMap::new(),
            free_bytes: 0,
            limit,
            allocations: 0,
            reuses: 0,
        }
    }

    pub fn take(&mut self, device: &wgpu::Device, size: u64) -> wgpu::Buffer {
        let class = class_of(size);
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

    pub fn give_back(&mut self, buffer: wgpu::Buffer) {
        let class = buffer.size();
        if self.free_bytes + class > self.limit {
            return; // dropped: wgpu frees it once the recorded work no longer needs it
        }
        self.free_bytes += class;
        self.free.entry(class).or_default().push(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::class_of;

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
