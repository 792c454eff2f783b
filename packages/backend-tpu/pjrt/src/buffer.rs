//! Device buffers: made from host memory, read back into host memory, freed on drop.

use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::args_size;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::ffi::{self, PJRT_Buffer};
use crate::types::{check_dims, TensorType};

/// An immutable array on the device. Values never change after creation:
/// "in-place" updates elsewhere swap one buffer for another.
pub struct Buffer {
    client: Arc<Client>,
    raw: *mut PJRT_Buffer,
    ty: TensorType,
}

// SAFETY: PJRT buffers may be used from any thread.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Wrap a buffer the plugin returned; `ty` is what the program declared.
    pub(crate) fn from_raw(client: Arc<Client>, raw: *mut PJRT_Buffer, ty: TensorType) -> Buffer {
        Buffer { client, raw, ty }
    }

    /// Copy `data` (row-major, `ty.bytes()` long) to the client's device.
    pub fn from_host(client: &Arc<Client>, data: &[u8], ty: &TensorType) -> Result<Buffer> {
        check_dims("buffer from host", &ty.dims)?;
        if data.len() != ty.bytes() {
            return crate::invalid!(
                "buffer from host: {} bytes given for {ty} ({} bytes)",
                data.len(),
                ty.bytes()
            );
        }
        let plugin = client.plugin();
        let api = plugin.api();
        let f = plugin.entry(
            api.client_buffer_from_host_buffer,
            "PJRT_Client_BufferFromHostBuffer",
        )?;
        // An empty slice may have a dangling pointer; give the plugin a real one.
        let keep = [0u8; 8];
        let ptr = if data.is_empty() {
            keep.as_ptr()
        } else {
            data.as_ptr()
        };
        let mut args = ffi::PJRT_Client_BufferFromHostBuffer_Args {
            struct_size: args_size!(ffi::PJRT_Client_BufferFromHostBuffer_Args, buffer),
            extension_start: ptr::null_mut(),
            client: client.raw(),
            data: ptr as *const c_void,
            kind: ty.elem.pjrt(),
            dims: ty.dims.as_ptr(),
            num_dims: ty.dims.len(),
            byte_strides: ptr::null(),
            num_byte_strides: 0,
            host_buffer_semantics: ffi::HOST_BUFFER_IMMUTABLE_UNTIL_TRANSFER_COMPLETES,
            device: client.device(),
            memory: ptr::null_mut(),
            device_layout: ptr::null_mut(),
            done_with_host_buffer: ptr::null_mut(),
            buffer: ptr::null_mut(),
        };
        plugin.check("PJRT_Client_BufferFromHostBuffer", unsafe { f(&mut args) })?;
        let buffer = Buffer {
            client: client.clone(),
            raw: args.buffer,
            ty: ty.clone(),
        };
        if buffer.raw.is_null() {
            return Err(Error::Invalid(
                "PJRT_Client_BufferFromHostBuffer returned no buffer".into(),
            ));
        }
        // `data` is borrowed only for this call: wait until the plugin is done with it.
        client.await_event(args.done_with_host_buffer, "host to device transfer")?;
        Ok(buffer)
    }

    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    pub(crate) fn raw(&self) -> *mut PJRT_Buffer {
        self.raw
    }

    /// Copy the values into `dst` (row-major, exactly `ty().bytes()` long).
    /// Waits for the computation that makes this buffer, so errors of an
    /// asynchronous execution surface here.
    pub fn to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.ty.bytes() {
            return crate::invalid!(
                "buffer to host: {} bytes of room for {} ({} bytes)",
                dst.len(),
                self.ty,
                self.ty.bytes()
            );
        }
        let plugin = self.client.plugin();
        let api = plugin.api();
        let f = plugin.entry(api.buffer_to_host_buffer, "PJRT_Buffer_ToHostBuffer")?;
        // Ask for dense row-major data whatever the device layout is.
        let rank = self.ty.rank() as i64;
        let minor_to_major: Vec<i64> = (0..rank).rev().collect();
        let mut layout = ffi::PJRT_Buffer_MemoryLayout {
            struct_size: args_size!(ffi::PJRT_Buffer_MemoryLayout, kind),
            extension_start: ptr::null_mut(),
            layout: ffi::PJRT_Buffer_MemoryLayout_Union {
                tiled: ffi::PJRT_Buffer_MemoryLayout_Tiled {
                    struct_size: args_size!(ffi::PJRT_Buffer_MemoryLayout_Tiled, num_tiles),
                    extension_start: ptr::null_mut(),
                    minor_to_major: minor_to_major.as_ptr(),
                    minor_to_major_size: minor_to_major.len(),
                    tile_dims: ptr::null(),
                    tile_dim_sizes: ptr::null(),
                    num_tiles: 0,
                },
            },
            kind: ffi::MEMORY_LAYOUT_TILED,
        };
        let mut scratch = [0u8; 8];
        let dst_ptr = if dst.is_empty() {
            NonNull::from(&mut scratch).as_ptr() as *mut c_void
        } else {
            dst.as_mut_ptr() as *mut c_void
        };
        let mut args = ffi::PJRT_Buffer_ToHostBuffer_Args {
            struct_size: args_size!(ffi::PJRT_Buffer_ToHostBuffer_Args, event),
            extension_start: ptr::null_mut(),
            src: self.raw,
            host_layout: &mut layout,
            dst: dst_ptr,
            dst_size: dst.len(),
            event: ptr::null_mut(),
        };
        plugin.check("PJRT_Buffer_ToHostBuffer", unsafe { f(&mut args) })?;
        self.client
            .await_event(args.event, "device to host transfer")
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let plugin = self.client.plugin();
        if let Some(f) = plugin.api().buffer_destroy {
            let mut args = ffi::PJRT_Buffer_Destroy_Args {
                struct_size: args_size!(ffi::PJRT_Buffer_Destroy_Args, buffer),
                extension_start: ptr::null_mut(),
                buffer: self.raw,
            };
            let _ = plugin.check("PJRT_Buffer_Destroy", unsafe { f(&mut args) });
        }
    }
}
