//! A PJRT client over one plugin, and the device riftco runs on.

use std::ffi::c_char;
use std::ptr;
use std::sync::Arc;

use crate::args_size;
use crate::client_options::{ClientOption, NamedValues};
use crate::error::{Error, Result};
use crate::ffi::{self, PJRT_Client, PJRT_Device, PJRT_Event};
use crate::plugin::{text, Plugin};

/// Owns a `PJRT_Client`; buffers and executables keep it alive through an `Arc`.
pub struct Client {
    plugin: Arc<Plugin>,
    raw: *mut PJRT_Client,
    device: *mut PJRT_Device,
    device_count: usize,
    platform: String,
    platform_version: String,
    device_kind: String,
    device_text: String,
}

// SAFETY: PJRT clients are thread-safe; the pointers are only handed to the plugin.
unsafe impl Send for Client {}
unsafe impl Sync for Client {}

impl Client {
    /// `PJRT_Client_Create` with `options` (checked first, see
    /// [`client_options`](crate::client_options)), then look at the first
    /// addressable device.
    pub fn create(plugin: Arc<Plugin>, options: &[ClientOption]) -> Result<Arc<Client>> {
        let named = NamedValues::new(options.to_vec())?;
        let api = plugin.api();
        let create = plugin.entry(api.client_create, "PJRT_Client_Create")?;
        let mut args = ffi::PJRT_Client_Create_Args {
            struct_size: args_size!(ffi::PJRT_Client_Create_Args, kv_try_get_user_arg),
            extension_start: ptr::null_mut(),
            create_options: named.as_ptr(),
            num_options: named.len(),
            kv_get_callback: ptr::null(),
            kv_get_user_arg: ptr::null_mut(),
            kv_put_callback: ptr::null(),
            kv_put_user_arg: ptr::null_mut(),
            client: ptr::null_mut(),
            kv_try_get_callback: ptr::null(),
            kv_try_get_user_arg: ptr::null_mut(),
        };
        plugin.check("PJRT_Client_Create", unsafe { create(&mut args) })?;
        if args.client.is_null() {
            return Err(Error::Load("PJRT_Client_Create returned no client".into()));
        }
        let mut client = Client {
            plugin,
            raw: args.client,
            device: ptr::null_mut(),
            device_count: 0,
            platform: String::new(),
            platform_version: String::new(),
            device_kind: String::new(),
            device_text: String::new(),
        };
        // From here on `client` destroys the raw client if anything fails.
        client.platform =
            client.client_string(api.client_platform_name, "PJRT_Client_PlatformName")?;
        client.platform_version = client
            .client_string(api.client_platform_version, "PJRT_Client_PlatformVersion")
            .unwrap_or_default();
        let devices = client.addressable_devices()?;
        if devices.is_empty() {
            return Err(Error::Load(format!(
                "the PJRT plugin's {} client has no addressable device",
                client.platform
            )));
        }
        client.device = devices[0];
        client.device_count = devices.len();
        client.device_kind = client
            .description(api.device_description_kind, "Kind")
            .unwrap_or_default();
        client.device_text = client
            .description(api.device_description_to_string, "ToString")
            .unwrap_or_default();
        Ok(Arc::new(client))
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    pub(crate) fn raw(&self) -> *mut PJRT_Client {
        self.raw
    }

    pub(crate) fn device(&self) -> *mut PJRT_Device {
        self.device
    }

    /// `cpu`, `cuda`, `tpu`, ... as the plugin names its platform.
    pub fn platform(&self) -> &str {
        &self.platform
    }

    pub fn platform_version(&self) -> &str {
        &self.platform_version
    }

    pub fn device_kind(&self) -> &str {
        &self.device_kind
    }

    /// The plugin's short name of the device in use, e.g. `CpuDevice(id=0)`.
    pub fn device_text(&self) -> &str {
        &self.device_text
    }

    pub fn device_count(&self) -> usize {
        self.device_count
    }

    /// True when the devices are the host's own CPU cores.
    pub fn is_host(&self) -> bool {
        self.platform.eq_ignore_ascii_case("cpu") || self.platform.eq_ignore_ascii_case("host")
    }

    fn client_string(
        &self,
        f: ffi::Fn<ffi::PJRT_Client_String_Args>,
        step: &'static str,
    ) -> Result<String> {
        let f = self.plugin.entry(f, step)?;
        let mut args = ffi::PJRT_Client_String_Args {
            struct_size: args_size!(ffi::PJRT_Client_String_Args, value_size),
            extension_start: ptr::null_mut(),
            client: self.raw,
            value: ptr::null(),
            value_size: 0,
        };
        self.plugin.check(step, unsafe { f(&mut args) })?;
        Ok(unsafe { text(args.value, args.value_size) })
    }

    fn addressable_devices(&self) -> Result<Vec<*mut PJRT_Device>> {
        let api = self.plugin.api();
        let f = self.plugin.entry(
            api.client_addressable_devices,
            "PJRT_Client_AddressableDevices",
        )?;
        let mut args = ffi::PJRT_Client_AddressableDevices_Args {
            struct_size: args_size!(
                ffi::PJRT_Client_AddressableDevices_Args,
                num_addressable_devices
            ),
            extension_start: ptr::null_mut(),
            client: self.raw,
            addressable_devices: ptr::null(),
            num_addressable_devices: 0,
        };
        self.plugin
            .check("PJRT_Client_AddressableDevices", unsafe { f(&mut args) })?;
        if args.addressable_devices.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returns an array of `num_addressable_devices` pointers.
        let list = unsafe {
            std::slice::from_raw_parts(args.addressable_devices, args.num_addressable_devices)
        };
        Ok(list.to_vec())
    }

    fn description(
        &self,
        f: ffi::Fn<ffi::PJRT_DeviceDescription_String_Args>,
        what: &'static str,
    ) -> Result<String> {
        let api = self.plugin.api();
        let get = self
            .plugin
            .entry(api.device_get_description, "PJRT_Device_GetDescription")?;
        let mut desc = ffi::PJRT_Device_GetDescription_Args {
            struct_size: args_size!(ffi::PJRT_Device_GetDescription_Args, device_description),
            extension_start: ptr::null_mut(),
            device: self.device,
            device_description: ptr::null_mut(),
        };
        self.plugin
            .check("PJRT_Device_GetDescription", unsafe { get(&mut desc) })?;
        let f = self.plugin.entry(f, what)?;
        let mut args = ffi::PJRT_DeviceDescription_String_Args {
            struct_size: args_size!(ffi::PJRT_DeviceDescription_String_Args, value_size),
            extension_start: ptr::null_mut(),
            device_description: desc.device_description,
            value: ptr::null::<c_char>(),
            value_size: 0,
        };
        self.plugin
            .check("PJRT_DeviceDescription", unsafe { f(&mut args) })?;
        Ok(unsafe { text(args.value, args.value_size) })
    }

    /// Block until `event` is ready, then free it; its error becomes ours.
    pub(crate) fn await_event(&self, event: *mut PJRT_Event, step: &'static str) -> Result<()> {
        if event.is_null() {
            return Ok(());
        }
        let api = self.plugin.api();
        let waited = match self.plugin.entry(api.event_await, "PJRT_Event_Await") {
            Ok(f) => {
                let mut args = ffi::PJRT_Event_Await_Args {
                    struct_size: args_size!(ffi::PJRT_Event_Await_Args, event),
                    extension_start: ptr::null_mut(),
                    event,
                };
                self.plugin.check(step, unsafe { f(&mut args) })
            }
            Err(e) => Err(e),
        };
        if let Some(f) = api.event_destroy {
            let mut args = ffi::PJRT_Event_Destroy_Args {
                struct_size: args_size!(ffi::PJRT_Event_Destroy_Args, event),
                extension_start: ptr::null_mut(),
                event,
            };
            let _ = self
                .plugin
                .check("PJRT_Event_Destroy", unsafe { f(&mut args) });
        }
        waited
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(f) = self.plugin.api().client_destroy {
            let mut args = ffi::PJRT_Client_Destroy_Args {
                struct_size: args_size!(ffi::PJRT_Client_Destroy_Args, client),
                extension_start: ptr::null_mut(),
                client: self.raw,
            };
            let _ = self
                .plugin
                .check("PJRT_Client_Destroy", unsafe { f(&mut args) });
        }
    }
}
