//! Compiling StableHLO text into a loaded executable, and running it.

use std::ffi::c_char;
use std::ptr;
use std::sync::Arc;

use crate::args_size;
use crate::buffer::Buffer;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::ffi::{self, PJRT_Buffer, PJRT_LoadedExecutable};
use crate::options::CompileOptions;
use crate::types::TensorType;

/// A compiled program on the client's first device, with the parameter and
/// result types its text declares (checked on every call).
pub struct Executable {
    client: Arc<Client>,
    raw: *mut PJRT_LoadedExecutable,
    params: Vec<TensorType>,
    results: Vec<TensorType>,
}

// SAFETY: loaded executables may be executed from any thread.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

impl Executable {
    /// `PJRT_Client_Compile` of an MLIR module (StableHLO text).
    pub fn compile(
        client: &Arc<Client>,
        mlir: &str,
        params: Vec<TensorType>,
        results: Vec<TensorType>,
        options: &CompileOptions,
    ) -> Result<Executable> {
        let plugin = client.plugin();
        let api = plugin.api();
        let f = plugin.entry(api.client_compile, "PJRT_Client_Compile")?;
        let format = "mlir";
        let program = ffi::PJRT_Program {
            struct_size: args_size!(ffi::PJRT_Program, format_size),
            extension_start: ptr::null_mut(),
            code: mlir.as_ptr() as *mut c_char,
            code_size: mlir.len(),
            format: format.as_ptr() as *const c_char,
            format_size: format.len(),
        };
        let options = options.to_bytes()?;
        let mut args = ffi::PJRT_Client_Compile_Args {
            struct_size: args_size!(ffi::PJRT_Client_Compile_Args, executable),
            extension_start: ptr::null_mut(),
            client: client.raw(),
            program: &program,
            compile_options: options.as_ptr() as *const c_char,
            compile_options_size: options.len(),
            executable: ptr::null_mut(),
        };
        plugin.check("PJRT_Client_Compile", unsafe { f(&mut args) })?;
        if args.executable.is_null() {
            return Err(Error::Invalid(
                "PJRT_Client_Compile returned no executable".into(),
            ));
        }
        Ok(Executable {
            client: client.clone(),
            raw: args.executable,
            params,
            results,
        })
    }

    /// `PJRT_Executable_DeserializeAndLoad` of bytes from [`Executable::serialize`]
    /// (by the same plugin build; another one may refuse them).
    pub fn deserialize(
        client: &Arc<Client>,
        bytes: &[u8],
        params: Vec<TensorType>,
        results: Vec<TensorType>,
    ) -> Result<Executable> {
        let plugin = client.plugin();
        let api = plugin.api();
        let f = plugin.entry(
            api.executable_deserialize_and_load,
            "PJRT_Executable_DeserializeAndLoad",
        )?;
        let mut args = ffi::PJRT_Executable_DeserializeAndLoad_Args {
            struct_size: args_size!(
                ffi::PJRT_Executable_DeserializeAndLoad_Args,
                overridden_serialized_compile_options_size
            ),
            extension_start: ptr::null_mut(),
            client: client.raw(),
            serialized_executable: bytes.as_ptr() as *const c_char,
            serialized_executable_size: bytes.len(),
            loaded_executable: ptr::null_mut(),
            overridden_serialized_compile_options: ptr::null(),
            overridden_serialized_compile_options_size: 0,
        };
        plugin.check("PJRT_Executable_DeserializeAndLoad", unsafe {
            f(&mut args)
        })?;
        if args.loaded_executable.is_null() {
            return Err(Error::Invalid(
                "PJRT_Executable_DeserializeAndLoad returned no executable".into(),
            ));
        }
        Ok(Executable {
            client: client.clone(),
            raw: args.loaded_executable,
            params,
            results,
        })
    }

    /// The plugin's serialization of this executable (`PJRT_Executable_Serialize`).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let plugin = self.client.plugin();
        let api = plugin.api();
        let get = plugin.entry(
            api.loaded_executable_get_executable,
            "PJRT_LoadedExecutable_GetExecutable",
        )?;
        let serialize = plugin.entry(api.executable_serialize, "PJRT_Executable_Serialize")?;
        let mut got = ffi::PJRT_LoadedExecutable_GetExecutable_Args {
            struct_size: args_size!(ffi::PJRT_LoadedExecutable_GetExecutable_Args, executable),
            extension_start: ptr::null_mut(),
            loaded_executable: self.raw,
            executable: ptr::null_mut(),
        };
        plugin.check("PJRT_LoadedExecutable_GetExecutable", unsafe {
            get(&mut got)
        })?;
        if got.executable.is_null() {
            return Err(Error::Invalid(
                "PJRT_LoadedExecutable_GetExecutable returned no executable".into(),
            ));
        }
        let mut args = ffi::PJRT_Executable_Serialize_Args {
            struct_size: args_size!(
                ffi::PJRT_Executable_Serialize_Args,
                serialized_executable_deleter
            ),
            extension_start: ptr::null_mut(),
            executable: got.executable,
            serialized_bytes: ptr::null(),
            serialized_bytes_size: 0,
            serialized_executable: ptr::null_mut(),
            serialized_executable_deleter: None,
        };
        let done = plugin.check("PJRT_Executable_Serialize", unsafe { serialize(&mut args) });
        let bytes = if done.is_ok() && !args.serialized_bytes.is_null() {
            // SAFETY: the plugin hands out `serialized_bytes_size` bytes that live
            // until the deleter is called on `serialized_executable`.
            unsafe {
                std::slice::from_raw_parts(
                    args.serialized_bytes as *const u8,
                    args.serialized_bytes_size,
                )
            }
            .to_vec()
        } else {
            Vec::new()
        };
        if let (Some(deleter), false) = (
            args.serialized_executable_deleter,
            args.serialized_executable.is_null(),
        ) {
            unsafe { deleter(args.serialized_executable) };
        }
        if let Some(destroy) = api.executable_destroy {
            let mut d = ffi::PJRT_Executable_Destroy_Args {
                struct_size: args_size!(ffi::PJRT_Executable_Destroy_Args, executable),
                extension_start: ptr::null_mut(),
                executable: got.executable,
            };
            let _ = plugin.check("PJRT_Executable_Destroy", unsafe { destroy(&mut d) });
        }
        done?;
        if bytes.is_empty() {
            return Err(Error::Invalid(
                "PJRT_Executable_Serialize returned no bytes".into(),
            ));
        }
        Ok(bytes)
    }

    pub fn params(&self) -> &[TensorType] {
        &self.params
    }

    pub fn results(&self) -> &[TensorType] {
        &self.results
    }

    /// Run on the device with `inputs` (one per parameter); the results are new
    /// buffers that may still be being computed when this returns.
    pub fn execute(&self, inputs: &[&Buffer]) -> Result<Vec<Buffer>> {
        if inputs.len() != self.params.len() {
            return crate::invalid!(
                "execute: {} inputs for a program of {} parameters",
                inputs.len(),
                self.params.len()
            );
        }
        for (i, (buffer, want)) in inputs.iter().zip(&self.params).enumerate() {
            if buffer.ty() != want {
                return crate::invalid!(
                    "execute: input {i} is {}, the program takes {want}",
                    buffer.ty()
                );
            }
            if !Arc::ptr_eq(buffer.client(), &self.client) {
                return crate::invalid!("execute: input {i} belongs to another PJRT client");
            }
        }
        let plugin = self.client.plugin();
        let api = plugin.api();
        let f = plugin.entry(
            api.loaded_executable_execute,
            "PJRT_LoadedExecutable_Execute",
        )?;
        let mut options = ffi::PJRT_ExecuteOptions {
            struct_size: args_size!(ffi::PJRT_ExecuteOptions, incarnation_ids),
            extension_start: ptr::null_mut(),
            send_callbacks: ptr::null_mut(),
            recv_callbacks: ptr::null_mut(),
            num_send_ops: 0,
            num_recv_ops: 0,
            launch_id: 0,
            // Inputs are shared storage: none may be donated to an output.
            non_donatable_input_indices: ptr::null(),
            num_non_donatable_input_indices: 0,
            context: ptr::null_mut(),
            call_location: ptr::null(),
            num_tasks: 0,
            task_ids: ptr::null_mut(),
            incarnation_ids: ptr::null_mut(),
        };
        let keep: Vec<i64> = (0..inputs.len() as i64).collect();
        options.non_donatable_input_indices = keep.as_ptr();
        options.num_non_donatable_input_indices = keep.len();
        let arguments: Vec<*mut PJRT_Buffer> = inputs.iter().map(|b| b.raw()).collect();
        let argument_lists = [arguments.as_ptr()];
        let mut outputs: Vec<*mut PJRT_Buffer> = vec![ptr::null_mut(); self.results.len()];
        let output_lists = [outputs.as_mut_ptr()];
        let mut args = ffi::PJRT_LoadedExecutable_Execute_Args {
            struct_size: args_size!(ffi::PJRT_LoadedExecutable_Execute_Args, execute_device),
            extension_start: ptr::null_mut(),
            executable: self.raw,
            options: &mut options,
            argument_lists: argument_lists.as_ptr(),
            num_devices: 1,
            num_args: arguments.len(),
            output_lists: output_lists.as_ptr(),
            device_complete_events: ptr::null_mut(),
            execute_device: ptr::null_mut(),
        };
        plugin.check("PJRT_LoadedExecutable_Execute", unsafe { f(&mut args) })?;
        let buffers: Vec<Buffer> = outputs
            .iter()
            .zip(&self.results)
            .map(|(&raw, ty)| Buffer::from_raw(self.client.clone(), raw, ty.clone()))
            .collect();
        if buffers.iter().any(|b| b.raw().is_null()) {
            return Err(Error::Invalid(
                "PJRT_LoadedExecutable_Execute left an output empty".into(),
            ));
        }
        Ok(buffers)
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let plugin = self.client.plugin();
        if let Some(f) = plugin.api().loaded_executable_destroy {
            let mut args = ffi::PJRT_LoadedExecutable_Destroy_Args {
                struct_size: args_size!(ffi::PJRT_LoadedExecutable_Destroy_Args, executable),
                extension_start: ptr::null_mut(),
                executable: self.raw,
            };
            let _ = plugin.check("PJRT_LoadedExecutable_Destroy", unsafe { f(&mut args) });
        }
    }
}
