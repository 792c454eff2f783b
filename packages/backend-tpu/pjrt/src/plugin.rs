//! Opening a PJRT plugin: dlopen, `GetPjrtApi`, the version handshake, and
//! `PJRT_Plugin_Initialize`, once per library per process.

use std::collections::HashMap;
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock};

use libloading::Library;

use crate::args_size;
use crate::error::{Error, Result};
use crate::ffi::{self, Api, PJRT_Error};

/// A loaded plugin and its function table. The library stays mapped for the
/// life of the process: PJRT plugins start threads and register global state
/// that does not survive being unloaded.
pub struct Plugin {
    path: PathBuf,
    api: &'static Api,
    version: (i32, i32),
    attributes: Vec<(String, String)>,
}

// SAFETY: the PJRT C API is thread-safe; the table itself is immutable.
unsafe impl Send for Plugin {}
unsafe impl Sync for Plugin {}

fn loaded() -> &'static Mutex<HashMap<PathBuf, Arc<Plugin>>> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Plugin>>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Plugin {
    /// Open the plugin at `path` (or return the one already open).
    pub fn open(path: &Path) -> Result<Arc<Plugin>> {
        let key = path.canonicalize().map_err(|e| {
            Error::Load(format!(
                "PJRT plugin {} cannot be opened: {e}",
                path.display()
            ))
        })?;
        let mut map = loaded().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(plugin) = map.get(&key) {
            return Ok(plugin.clone());
        }
        let plugin = Arc::new(Self::load(&key)?);
        map.insert(key, plugin.clone());
        Ok(plugin)
    }

    fn load(path: &Path) -> Result<Plugin> {
        let shown = path.display();
        // SAFETY: loading a shared library runs its initializers; a PJRT plugin
        // is a library built to be loaded this way.
        let library = unsafe { Library::new(path) }
            .map_err(|e| Error::Load(format!("dlopen({shown}) failed: {e}")))?;
        let api: *const Api = unsafe {
            let get_api = library
                .get::<unsafe extern "C" fn() -> *const Api>(b"GetPjrtApi\0")
                .map_err(|e| Error::Load(format!("{shown} is not a PJRT plugin: {e}")))?;
            get_api()
        };
        // Never unmapped: see the type's comment.
        std::mem::forget(library);
        if api.is_null() {
            return Err(Error::Load(format!(
                "{shown}: GetPjrtApi returned no table"
            )));
        }
        // SAFETY: a non-null table from GetPjrtApi lives as long as the library.
        let api: &'static Api = unsafe { &*api };
        let version = (
            api.pjrt_api_version.major_version,
            api.pjrt_api_version.minor_version,
        );
        check_version(version, api.struct_size)
            .map_err(|why| Error::Load(format!("{shown}: {why}")))?;
        let mut plugin = Plugin {
            path: path.to_path_buf(),
            api,
            version,
            attributes: Vec::new(),
        };
        let mut init = ffi::PJRT_Plugin_Initialize_Args {
            struct_size: args_size!(ffi::PJRT_Plugin_Initialize_Args, extension_start),
            extension_start: ptr::null_mut(),
        };
        let initialize = plugin.entry(api.plugin_initialize, "PJRT_Plugin_Initialize")?;
        plugin.check("PJRT_Plugin_Initialize", unsafe { initialize(&mut init) })?;
        plugin.attributes = plugin.read_attributes();
        Ok(plugin)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The (major, minor) C API version the plugin was built with.
    pub fn api_version(&self) -> (i32, i32) {
        self.version
    }

    /// The plugin's self-description (`xla_version`, `stablehlo_current_version`, ...).
    pub fn attributes(&self) -> &[(String, String)] {
        &self.attributes
    }

    pub(crate) fn api(&self) -> &'static Api {
        self.api
    }

    /// A function-table entry, or an error naming it when the plugin left it empty.
    pub(crate) fn entry<F>(&self, f: Option<F>, name: &str) -> Result<F> {
        f.ok_or_else(|| {
            Error::Load(format!(
                "{}: the plugin does not implement {name}",
                self.path.display()
            ))
        })
    }

    /// Turn a returned `PJRT_Error*` into a `Result`, freeing the error.
    pub(crate) fn check(&self, step: &'static str, error: *mut PJRT_Error) -> Result<()> {
        if error.is_null() {
            return Ok(());
        }
        let mut message = ffi::PJRT_Error_Message_Args {
            struct_size: args_size!(ffi::PJRT_Error_Message_Args, message_size),
            extension_start: ptr::null_mut(),
            error,
            message: ptr::null(),
            message_size: 0,
        };
        let mut text = String::from("(no message)");
        if let Some(f) = self.api.error_message {
            unsafe { f(&mut message) };
            if !message.message.is_null() {
                // SAFETY: the plugin hands out `message_size` bytes living as long as `error`.
                let bytes = unsafe {
                    std::slice::from_raw_parts(message.message as *const u8, message.message_size)
                };
                text = String::from_utf8_lossy(bytes).into_owned();
            }
        }
        let mut code = ffi::PJRT_Error_GetCode_Args {
            struct_size: args_size!(ffi::PJRT_Error_GetCode_Args, code),
            extension_start: ptr::null_mut(),
            error,
            code: 2,
        };
        if let Some(f) = self.api.error_get_code {
            let nested = unsafe { f(&mut code) };
            if !nested.is_null() {
                self.destroy_error(nested);
            }
        }
        self.destroy_error(error);
        Err(Error::Plugin {
            step,
            code: code.code,
            message: text,
        })
    }

    fn destroy_error(&self, error: *mut PJRT_Error) {
        if let Some(f) = self.api.error_destroy {
            let mut args = ffi::PJRT_Error_Destroy_Args {
                struct_size: args_size!(ffi::PJRT_Error_Destroy_Args, error),
                extension_start: ptr::null_mut(),
                error,
            };
            unsafe { f(&mut args) };
        }
    }

    fn read_attributes(&self) -> Vec<(String, String)> {
        let Some(f) = self.api.plugin_attributes else {
            return Vec::new();
        };
        let mut args = ffi::PJRT_Plugin_Attributes_Args {
            struct_size: args_size!(ffi::PJRT_Plugin_Attributes_Args, num_attributes),
            extension_start: ptr::null_mut(),
            attributes: ptr::null(),
            num_attributes: 0,
        };
        if self
            .check("PJRT_Plugin_Attributes", unsafe { f(&mut args) })
            .is_err()
            || args.attributes.is_null()
        {
            return Vec::new();
        }
        // SAFETY: the plugin returns `num_attributes` values living as long as the process.
        let values = unsafe { std::slice::from_raw_parts(args.attributes, args.num_attributes) };
        values.iter().map(|v| unsafe { named_value(v) }).collect()
    }
}

/// Refuse a plugin whose ABI differs from the one `ffi` describes.
pub fn check_version(version: (i32, i32), table_size: usize) -> std::result::Result<(), String> {
    let (major, minor) = version;
    if major != ffi::API_MAJOR {
        return Err(format!(
            "PJRT C API {major}.{minor} has another major version than the {}.x this build speaks",
            ffi::API_MAJOR
        ));
    }
    if minor < ffi::API_MINOR_MIN {
        return Err(format!(
            "PJRT C API {major}.{minor} is older than {}.{}, the oldest this build supports",
            ffi::API_MAJOR,
            ffi::API_MINOR_MIN
        ));
    }
    let needed = ffi::api_size_needed();
    if table_size < needed {
        return Err(format!(
            "the PJRT function table has {table_size} bytes, {needed} are needed (API {major}.{minor})"
        ));
    }
    Ok(())
}

pub(crate) unsafe fn text(ptr: *const c_char, len: usize) -> String {
    if ptr.is_null() {
        return String::new();
    }
    String::from_utf8_lossy(std::slice::from_raw_parts(ptr as *const u8, len)).into_owned()
}

pub(crate) unsafe fn named_value(v: &ffi::PJRT_NamedValue) -> (String, String) {
    let name = text(v.name, v.name_size);
    let value = match v.kind {
        ffi::NAMED_VALUE_STRING => text(v.value.string_value, v.value_size),
        ffi::NAMED_VALUE_INT64 => v.value.int64_value.to_string(),
        ffi::NAMED_VALUE_INT64_LIST => {
            let items = if v.value.int64_array_value.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(v.value.int64_array_value, v.value_size)
            };
            let parts: Vec<String> = items.iter().map(|i| i.to_string()).collect();
            format!("[{}]", parts.join(", "))
        }
        ffi::NAMED_VALUE_FLOAT => v.value.float_value.to_string(),
        ffi::NAMED_VALUE_BOOL => v.value.bool_value.to_string(),
        _ => String::from("?"),
    };
    (name, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_before_use() {
        let size = ffi::api_size_needed();
        assert!(check_version((0, 81), size).is_ok());
        assert!(check_version((1, 0), size)
            .unwrap_err()
            .contains("another major version"));
        assert!(check_version((0, 3), size)
            .unwrap_err()
            .contains("older than"));
        assert!(check_version((0, 81), size - 8)
            .unwrap_err()
            .contains("function table"));
    }

    #[test]
    fn a_missing_library_is_a_load_error() {
        let err = Plugin::open(Path::new("/nonexistent/libnothing.so"))
            .err()
            .unwrap();
        assert!(matches!(err, Error::Load(_)), "{err}");
        assert!(err.to_string().contains("/nonexistent/libnothing.so"));
    }

    #[test]
    fn a_library_without_the_entry_point_is_refused() {
        // The C library is always mapped and certainly has no GetPjrtApi.
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
            "/usr/lib/libc.so.6",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists());
        if let Some(libc) = libc {
            let err = Plugin::open(libc).err().unwrap();
            assert!(err.to_string().contains("is not a PJRT plugin"), "{err}");
        }
    }
}
