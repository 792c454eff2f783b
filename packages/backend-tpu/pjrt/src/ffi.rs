//! The part of the PJRT C API (`xla/pjrt/c/pjrt_c_api.h`, API 0.x) that this
//! crate calls, written out by hand as `#[repr(C)]` structs.
//!
//! Every argument struct starts with `struct_size` (the caller's idea of the
//! struct's size, up to and including its last field) and `extension_start`.
//! [`args_size!`] computes the size the way the header's `PJRT_STRUCT_SIZE`
//! does, so a plugin built against a newer header sees which fields we know.
//! The function table [`Api`] lists every entry in header order up to the last
//! one we use; entries we never call are kept as untyped pointers so that the
//! offsets of the ones we do call stay right.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_void};

/// `offsetof(T, field) + sizeof(field)`: the `struct_size` of an argument struct.
#[macro_export]
macro_rules! args_size {
    ($t:ty, $field:ident) => {{
        let probe = ::std::mem::MaybeUninit::<$t>::uninit();
        let base = probe.as_ptr();
        // SAFETY: only the address of the field is formed, never read.
        let field = unsafe { ::std::ptr::addr_of!((*base).$field) };
        fn size_of_pointee<F>(_: *const F) -> usize {
            ::std::mem::size_of::<F>()
        }
        ::std::mem::offset_of!($t, $field) + size_of_pointee(field)
    }};
}

/// The major version of the C API this crate was written against. A plugin
/// with another major version has an incompatible ABI.
pub const API_MAJOR: c_int = 0;
/// The oldest minor version whose function table and argument structs hold
/// every field this crate touches.
pub const API_MINOR_MIN: c_int = 40;
/// The minor version of the header these structs follow.
pub const API_MINOR_WRITTEN: c_int = 81;

// Opaque handles owned by the plugin.
#[repr(C)]
pub struct PJRT_Error {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_Event {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_Client {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_Device {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_DeviceDescription {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_Memory {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_LoadedExecutable {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_Executable {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_SerializedExecutable {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_Buffer {
    _private: [u8; 0],
}
#[repr(C)]
pub struct PJRT_ExecuteContext {
    _private: [u8; 0],
}

#[repr(C)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub kind: c_int,
    pub next: *mut PJRT_Extension_Base,
}

#[repr(C)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

// ---- errors ------------------------------------------------------------------

#[repr(C)]
pub struct PJRT_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *mut PJRT_Error,
}

#[repr(C)]
pub struct PJRT_Error_Message_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub message: *const c_char,
    pub message_size: usize,
}

#[repr(C)]
pub struct PJRT_Error_GetCode_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub code: c_int,
}

// ---- named values and plugin -------------------------------------------------

pub const NAMED_VALUE_STRING: c_int = 0;
pub const NAMED_VALUE_INT64: c_int = 1;
pub const NAMED_VALUE_INT64_LIST: c_int = 2;
pub const NAMED_VALUE_FLOAT: c_int = 3;
pub const NAMED_VALUE_BOOL: c_int = 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

#[repr(C)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const c_char,
    pub name_size: usize,
    pub kind: c_int,
    pub value: PJRT_NamedValue_Value,
    pub value_size: usize,
}

#[repr(C)]
pub struct PJRT_Plugin_Initialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
}

#[repr(C)]
pub struct PJRT_Plugin_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub attributes: *const PJRT_NamedValue,
    pub num_attributes: usize,
}

// ---- events ------------------------------------------------------------------

#[repr(C)]
pub struct PJRT_Event_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}

#[repr(C)]
pub struct PJRT_Event_Await_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}

// ---- client ------------------------------------------------------------------

#[repr(C)]
pub struct PJRT_Client_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub kv_get_callback: *const c_void,
    pub kv_get_user_arg: *mut c_void,
    pub kv_put_callback: *const c_void,
    pub kv_put_user_arg: *mut c_void,
    pub client: *mut PJRT_Client,
    pub kv_try_get_callback: *const c_void,
    pub kv_try_get_user_arg: *mut c_void,
}

#[repr(C)]
pub struct PJRT_Client_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
}

/// Shared shape of `PlatformName` and `PlatformVersion`: a client in, a string out.
#[repr(C)]
pub struct PJRT_Client_String_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub value: *const c_char,
    pub value_size: usize,
}

#[repr(C)]
pub struct PJRT_Client_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}

#[repr(C)]
pub struct PJRT_Program {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub code: *mut c_char,
    pub code_size: usize,
    pub format: *const c_char,
    pub format_size: usize,
}

#[repr(C)]
pub struct PJRT_Client_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub program: *const PJRT_Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub executable: *mut PJRT_LoadedExecutable,
}

/// `PJRT_Buffer_Type` values of the element types riftco uses.
pub const BUFFER_TYPE_PRED: c_int = 1;
pub const BUFFER_TYPE_S32: c_int = 4;
pub const BUFFER_TYPE_S64: c_int = 5;
pub const BUFFER_TYPE_U8: c_int = 6;
pub const BUFFER_TYPE_F32: c_int = 11;
pub const BUFFER_TYPE_F64: c_int = 12;

/// `PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes`.
pub const HOST_BUFFER_IMMUTABLE_UNTIL_TRANSFER_COMPLETES: c_int = 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PJRT_Buffer_MemoryLayout_Tiled {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub minor_to_major: *const i64,
    pub minor_to_major_size: usize,
    pub tile_dims: *const i64,
    pub tile_dim_sizes: *const usize,
    pub num_tiles: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PJRT_Buffer_MemoryLayout_Strides {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_Buffer_MemoryLayout_Union {
    pub tiled: PJRT_Buffer_MemoryLayout_Tiled,
    pub strides: PJRT_Buffer_MemoryLayout_Strides,
}

pub const MEMORY_LAYOUT_TILED: c_int = 0;

#[repr(C)]
pub struct PJRT_Buffer_MemoryLayout {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub layout: PJRT_Buffer_MemoryLayout_Union,
    pub kind: c_int,
}

#[repr(C)]
pub struct PJRT_Client_BufferFromHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *const c_void,
    pub kind: c_int,
    pub dims: *const i64,
    pub num_dims: usize,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
    pub host_buffer_semantics: c_int,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
    pub device_layout: *mut PJRT_Buffer_MemoryLayout,
    pub done_with_host_buffer: *mut PJRT_Event,
    pub buffer: *mut PJRT_Buffer,
}

// ---- devices -----------------------------------------------------------------

#[repr(C)]
pub struct PJRT_Device_GetDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub device_description: *mut PJRT_DeviceDescription,
}

/// Shared shape of `DeviceDescription_Kind` and `_ToString`: a string out.
#[repr(C)]
pub struct PJRT_DeviceDescription_String_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub value: *const c_char,
    pub value_size: usize,
}

// ---- executables -------------------------------------------------------------

#[repr(C)]
pub struct PJRT_LoadedExecutable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
}

#[repr(C)]
pub struct PJRT_ExecuteOptions {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub send_callbacks: *mut *mut c_void,
    pub recv_callbacks: *mut *mut c_void,
    pub num_send_ops: usize,
    pub num_recv_ops: usize,
    pub launch_id: c_int,
    pub non_donatable_input_indices: *const i64,
    pub num_non_donatable_input_indices: usize,
    pub context: *mut PJRT_ExecuteContext,
    pub call_location: *const c_char,
    pub num_tasks: usize,
    pub task_ids: *mut c_int,
    pub incarnation_ids: *mut i64,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_Execute_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub options: *mut PJRT_ExecuteOptions,
    pub argument_lists: *const *const *mut PJRT_Buffer,
    pub num_devices: usize,
    pub num_args: usize,
    pub output_lists: *const *mut *mut PJRT_Buffer,
    pub device_complete_events: *mut *mut PJRT_Event,
    pub execute_device: *mut PJRT_Device,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_GetExecutable_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub executable: *mut PJRT_Executable,
}

#[repr(C)]
pub struct PJRT_Executable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
}

#[repr(C)]
pub struct PJRT_Executable_Serialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *const PJRT_Executable,
    pub serialized_bytes: *const c_char,
    pub serialized_bytes_size: usize,
    pub serialized_executable: *mut PJRT_SerializedExecutable,
    pub serialized_executable_deleter: Option<unsafe extern "C" fn(*mut PJRT_SerializedExecutable)>,
}

/// Plugins of API 0.81 refuse a `struct_size` without the overridden
/// compile options (null: the serialized executable's own are used).
#[repr(C)]
pub struct PJRT_Executable_DeserializeAndLoad_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub serialized_executable: *const c_char,
    pub serialized_executable_size: usize,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub overridden_serialized_compile_options: *const c_char,
    pub overridden_serialized_compile_options_size: usize,
}

// ---- buffers -----------------------------------------------------------------

#[repr(C)]
pub struct PJRT_Buffer_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}

#[repr(C)]
pub struct PJRT_Buffer_Dimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dims: *const i64,
    pub num_dims: usize,
}

#[repr(C)]
pub struct PJRT_Buffer_ToHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub src: *mut PJRT_Buffer,
    pub host_layout: *mut PJRT_Buffer_MemoryLayout,
    pub dst: *mut c_void,
    pub dst_size: usize,
    pub event: *mut PJRT_Event,
}

// ---- the function table --------------------------------------------------------

pub type Fn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut PJRT_Error>;
/// An entry we never call.
pub type Unused = *const c_void;

#[repr(C)]
pub struct Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,

    pub error_destroy: Option<unsafe extern "C" fn(*mut PJRT_Error_Destroy_Args)>,
    pub error_message: Option<unsafe extern "C" fn(*mut PJRT_Error_Message_Args)>,
    pub error_get_code: Fn<PJRT_Error_GetCode_Args>,

    pub plugin_initialize: Fn<PJRT_Plugin_Initialize_Args>,
    pub plugin_attributes: Fn<PJRT_Plugin_Attributes_Args>,

    pub event_destroy: Fn<PJRT_Event_Destroy_Args>,
    pub event_is_ready: Unused,
    pub event_error: Unused,
    pub event_await: Fn<PJRT_Event_Await_Args>,
    pub event_on_ready: Unused,

    pub client_create: Fn<PJRT_Client_Create_Args>,
    pub client_destroy: Fn<PJRT_Client_Destroy_Args>,
    pub client_platform_name: Fn<PJRT_Client_String_Args>,
    pub client_process_index: Unused,
    pub client_platform_version: Fn<PJRT_Client_String_Args>,
    pub client_devices: Unused,
    pub client_addressable_devices: Fn<PJRT_Client_AddressableDevices_Args>,
    pub client_lookup_device: Unused,
    pub client_lookup_addressable_device: Unused,
    pub client_addressable_memories: Unused,
    pub client_compile: Fn<PJRT_Client_Compile_Args>,
    pub client_default_device_assignment: Unused,
    pub client_buffer_from_host_buffer: Fn<PJRT_Client_BufferFromHostBuffer_Args>,

    pub device_description_id: Unused,
    pub device_description_process_index: Unused,
    pub device_description_attributes: Unused,
    pub device_description_kind: Fn<PJRT_DeviceDescription_String_Args>,
    pub device_description_debug_string: Unused,
    pub device_description_to_string: Fn<PJRT_DeviceDescription_String_Args>,

    pub device_get_description: Fn<PJRT_Device_GetDescription_Args>,
    pub device_is_addressable: Unused,
    pub device_local_hardware_id: Unused,
    pub device_addressable_memories: Unused,
    pub device_default_memory: Unused,
    pub device_memory_stats: Unused,

    pub memory_id: Unused,
    pub memory_kind: Unused,
    pub memory_debug_string: Unused,
    pub memory_to_string: Unused,
    pub memory_addressable_by_devices: Unused,

    pub executable_destroy: Fn<PJRT_Executable_Destroy_Args>,
    pub executable_name: Unused,
    pub executable_num_replicas: Unused,
    pub executable_num_partitions: Unused,
    pub executable_num_outputs: Unused,
    pub executable_size_of_generated_code_in_bytes: Unused,
    pub executable_get_cost_analysis: Unused,
    pub executable_output_memory_kinds: Unused,
    pub executable_optimized_program: Unused,
    pub executable_serialize: Fn<PJRT_Executable_Serialize_Args>,

    pub loaded_executable_destroy: Fn<PJRT_LoadedExecutable_Destroy_Args>,
    pub loaded_executable_get_executable: Fn<PJRT_LoadedExecutable_GetExecutable_Args>,
    pub loaded_executable_addressable_devices: Unused,
    pub loaded_executable_delete: Unused,
    pub loaded_executable_is_deleted: Unused,
    pub loaded_executable_execute: Fn<PJRT_LoadedExecutable_Execute_Args>,
    pub executable_deserialize_and_load: Fn<PJRT_Executable_DeserializeAndLoad_Args>,
    pub loaded_executable_fingerprint: Unused,

    pub buffer_destroy: Fn<PJRT_Buffer_Destroy_Args>,
    pub buffer_element_type: Unused,
    pub buffer_dimensions: Fn<PJRT_Buffer_Dimensions_Args>,
    pub buffer_unpadded_dimensions: Unused,
    pub buffer_dynamic_dimension_indices: Unused,
    pub buffer_get_memory_layout: Unused,
    pub buffer_on_device_size_in_bytes: Unused,
    pub buffer_device: Unused,
    pub buffer_memory: Unused,
    pub buffer_delete: Unused,
    pub buffer_is_deleted: Unused,
    pub buffer_copy_to_device: Unused,
    pub buffer_to_host_buffer: Fn<PJRT_Buffer_ToHostBuffer_Args>,
}

/// The table must reach at least this far for every entry we call to exist.
pub fn api_size_needed() -> usize {
    args_size!(Api, buffer_to_host_buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Sizes on a 64-bit target, worked out by hand from the header's field lists.
    #[test]
    fn argument_structs_have_the_header_layout() {
        assert_eq!(args_size!(PJRT_Error_Message_Args, message_size), 40);
        assert_eq!(args_size!(PJRT_Error_GetCode_Args, code), 28);
        assert_eq!(args_size!(PJRT_Plugin_Initialize_Args, extension_start), 16);
        assert_eq!(args_size!(PJRT_Client_Create_Args, kv_try_get_user_arg), 88);
        assert_eq!(args_size!(PJRT_Client_Compile_Args, executable), 56);
        assert_eq!(args_size!(PJRT_Program, format_size), 48);
        assert_eq!(
            args_size!(PJRT_Client_BufferFromHostBuffer_Args, buffer),
            120
        );
        assert_eq!(args_size!(PJRT_Buffer_MemoryLayout_Tiled, num_tiles), 56);
        assert_eq!(args_size!(PJRT_Buffer_MemoryLayout, kind), 76);
        assert_eq!(args_size!(PJRT_ExecuteOptions, incarnation_ids), 112);
        assert_eq!(
            args_size!(PJRT_LoadedExecutable_Execute_Args, execute_device),
            80
        );
        assert_eq!(args_size!(PJRT_Buffer_ToHostBuffer_Args, event), 56);
        assert_eq!(std::mem::size_of::<PJRT_NamedValue>(), 56);
        assert_eq!(args_size!(PJRT_NamedValue, value_size), 56);
        assert_eq!(
            args_size!(PJRT_LoadedExecutable_GetExecutable_Args, executable),
            32
        );
        assert_eq!(args_size!(PJRT_Executable_Destroy_Args, executable), 24);
        assert_eq!(
            args_size!(
                PJRT_Executable_Serialize_Args,
                serialized_executable_deleter
            ),
            56
        );
        assert_eq!(
            args_size!(
                PJRT_Executable_DeserializeAndLoad_Args,
                overridden_serialized_compile_options_size
            ),
            64
        );
    }

    #[test]
    fn function_table_entries_sit_at_their_header_positions() {
        // 3 header words (size, extension, 24-byte version) then one pointer per entry.
        let entry = |i: usize| 40 + 8 * i;
        assert_eq!(std::mem::offset_of!(Api, error_destroy), entry(0));
        assert_eq!(std::mem::offset_of!(Api, plugin_initialize), entry(3));
        assert_eq!(std::mem::offset_of!(Api, client_create), entry(10));
        assert_eq!(std::mem::offset_of!(Api, client_compile), entry(20));
        assert_eq!(
            std::mem::offset_of!(Api, client_buffer_from_host_buffer),
            entry(22)
        );
        assert_eq!(std::mem::offset_of!(Api, device_get_description), entry(29));
        assert_eq!(
            std::mem::offset_of!(Api, loaded_executable_destroy),
            entry(50)
        );
        assert_eq!(
            std::mem::offset_of!(Api, loaded_executable_execute),
            entry(55)
        );
        assert_eq!(std::mem::offset_of!(Api, executable_destroy), entry(40));
        assert_eq!(std::mem::offset_of!(Api, executable_serialize), entry(49));
        assert_eq!(
            std::mem::offset_of!(Api, loaded_executable_get_executable),
            entry(51)
        );
        assert_eq!(
            std::mem::offset_of!(Api, executable_deserialize_and_load),
            entry(56)
        );
        assert_eq!(std::mem::offset_of!(Api, buffer_destroy), entry(58));
        assert_eq!(std::mem::offset_of!(Api, buffer_to_host_buffer), entry(70));
    }
}
