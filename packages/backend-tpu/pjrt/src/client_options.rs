//! Named options of `PJRT_Client_Create` (a `PJRT_NamedValue` list).
//!
//! Each plugin takes its own names and refuses the others: XLA's GPU plugin
//! knows `platform_name`, `allocator`, `memory_fraction`, `preallocate`,
//! `collective_memory_size`, `visible_devices`, `node_id`, `num_nodes`, ...;
//! XLA's CPU plugin `cpu_device_count`, `asynchronous`,
//! `max_inflight_computations`. The names riftco knows are checked here for
//! their type and range before anything reaches the plugin; other names go
//! through untouched and the plugin says whether it takes them.

use std::ffi::c_char;
use std::fmt;
use std::ptr;

use crate::args_size;
use crate::error::Result;
use crate::ffi;

/// The value of one option, in the five types the C API has.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    Str(String),
    Int(i64),
    IntList(Vec<i64>),
    Float(f32),
    Bool(bool),
}

impl OptionValue {
    fn kind_name(&self) -> &'static str {
        match self {
            OptionValue::Str(_) => "a string",
            OptionValue::Int(_) => "an integer",
            OptionValue::IntList(_) => "a list of integers",
            OptionValue::Float(_) => "a number",
            OptionValue::Bool(_) => "a boolean",
        }
    }
}

impl fmt::Display for OptionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::Str(s) => write!(f, "{s:?}"),
            OptionValue::Int(i) => write!(f, "{i}"),
            OptionValue::IntList(l) => write!(f, "{l:?}"),
            OptionValue::Float(x) => write!(f, "{x}"),
            OptionValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClientOption {
    pub name: String,
    pub value: OptionValue,
}

impl ClientOption {
    pub fn new(name: &str, value: OptionValue) -> Self {
        ClientOption {
            name: name.to_string(),
            value,
        }
    }
}

impl fmt::Display for ClientOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.value)
    }
}

#[derive(Clone, Copy)]
enum Expect {
    Str(&'static [&'static str]),
    Int { min: i64 },
    Devices,
    Fraction,
    Bool,
}

/// The options riftco knows (XLA's GPU and CPU plugins), with what each takes.
fn expected(name: &str) -> Option<Expect> {
    Some(match name {
        "platform_name" | "mock_gpu_topology" => Expect::Str(&[]),
        "allocator" => Expect::Str(&["default", "platform", "bfc", "cuda_async"]),
        "memory_fraction" => Expect::Fraction,
        "preallocate"
        | "enable_mock_nccl"
        | "should_stage_host_to_device_transfers"
        | "abort_collectives_on_failure"
        | "use_tfrt_gpu_client"
        | "asynchronous" => Expect::Bool,
        "collective_memory_size" | "node_id" | "partition_index" => Expect::Int { min: 0 },
        "num_nodes" | "cpu_device_count" | "max_inflight_computations" => Expect::Int { min: 1 },
        "visible_devices" => Expect::Devices,
        _ => return None,
    })
}

/// Refuse a malformed option (bad name, a known name with the wrong type or
/// out of range, a repeated name), saying what was expected and what was found.
pub fn check(options: &[ClientOption]) -> Result<()> {
    for (i, option) in options.iter().enumerate() {
        let name = option.name.as_str();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return crate::invalid!(
                "PJRT client option {name:?}: a name is lower-case letters, digits and '_'"
            );
        }
        if options[..i].iter().any(|o| o.name == option.name) {
            return crate::invalid!("PJRT client option {name} is given twice");
        }
        let value = &option.value;
        let wrong = |want: &str| {
            crate::invalid!(
                "PJRT client option {name}: expected {want}, found {} ({value})",
                value.kind_name()
            )
        };
        match (expected(name), value) {
            (None, OptionValue::Float(x)) if !x.is_finite() => {
                return wrong("a finite number");
            }
            (None, _) => {}
            (Some(Expect::Str(allowed)), OptionValue::Str(s)) => {
                if !allowed.is_empty() && !allowed.contains(&s.as_str()) {
                    return crate::invalid!(
                        "PJRT client option {name}: expected one of {}, found {s:?}",
                        allowed.join(", ")
                    );
                }
            }
            (Some(Expect::Str(_)), _) => return wrong("a string"),
            (Some(Expect::Int { min }), OptionValue::Int(v)) => {
                if *v < min {
                    return crate::invalid!(
                        "PJRT client option {name}: expected an integer of at least {min}, found {v}"
                    );
                }
            }
            (Some(Expect::Int { .. }), _) => return wrong("an integer"),
            (Some(Expect::Devices), OptionValue::IntList(ids)) => {
                if ids.is_empty() {
                    return crate::invalid!(
                        "PJRT client option {name}: expected at least one device id, found []"
                    );
                }
                for (j, id) in ids.iter().enumerate() {
                    if *id < 0 || ids[..j].contains(id) {
                        return crate::invalid!(
                            "PJRT client option {name}: expected distinct device ids of at least 0, found {ids:?}"
                        );
                    }
                }
            }
            (Some(Expect::Devices), _) => return wrong("a list of integers"),
            (Some(Expect::Fraction), OptionValue::Float(x)) => {
                if !(x.is_finite() && *x > 0.0 && *x <= 1.0) {
                    return crate::invalid!(
                        "PJRT client option {name}: expected a number in (0, 1], found {x}"
                    );
                }
            }
            (Some(Expect::Fraction), _) => return wrong("a number in (0, 1]"),
            (Some(Expect::Bool), OptionValue::Bool(_)) => {}
            (Some(Expect::Bool), _) => return wrong("a boolean"),
        }
    }
    Ok(())
}

/// What kind of plugin a library is, told from its file name before any
/// client exists (a client of a GPU plugin takes the GPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    Cpu,
    Gpu,
    Tpu,
    Unknown,
}

impl PluginKind {
    /// `xla_cpu_pjrt.so`, `pjrt_c_api_cpu_plugin.so` -> Cpu; `xla_cuda_plugin.so`,
    /// `pjrt_c_api_gpu_plugin.so`, `xla_rocm_plugin.so` -> Gpu; `libtpu.so` -> Tpu.
    pub fn from_file_name(name: &str) -> PluginKind {
        let name = name.to_ascii_lowercase();
        let has = |word: &str| name.contains(word);
        if has("cuda") || has("gpu") || has("rocm") {
            PluginKind::Gpu
        } else if has("tpu") {
            PluginKind::Tpu
        } else if has("cpu") {
            PluginKind::Cpu
        } else {
            PluginKind::Unknown
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PluginKind::Cpu => "cpu",
            PluginKind::Gpu => "gpu",
            PluginKind::Tpu => "tpu",
            PluginKind::Unknown => "unknown",
        }
    }
}

/// The options a client of a `kind` plugin is created with: the user's,
/// plus, on a GPU plugin, `preallocate=false` unless the user chose an
/// allocator or preallocation (XLA would otherwise take 75% of every visible
/// GPU when the client is made).
pub fn with_defaults(kind: PluginKind, user: &[ClientOption]) -> Vec<ClientOption> {
    let mut out = user.to_vec();
    if kind == PluginKind::Gpu {
        let chosen = user
            .iter()
            .any(|o| o.name == "preallocate" || o.name == "allocator");
        if !chosen {
            out.push(ClientOption::new("preallocate", OptionValue::Bool(false)));
        }
    }
    out
}

/// The `PJRT_NamedValue` array of some options, with the memory it points into.
pub struct NamedValues {
    // The values point into these strings and lists (their heap buffers do not
    // move when the vector does).
    _options: Vec<ClientOption>,
    values: Vec<ffi::PJRT_NamedValue>,
}

impl NamedValues {
    pub fn new(options: Vec<ClientOption>) -> Result<NamedValues> {
        check(&options)?;
        let values = options
            .iter()
            .map(|o| {
                let (kind, value, size) = match &o.value {
                    OptionValue::Str(s) => (
                        ffi::NAMED_VALUE_STRING,
                        ffi::PJRT_NamedValue_Value {
                            string_value: s.as_ptr() as *const c_char,
                        },
                        s.len(),
                    ),
                    OptionValue::Int(i) => (
                        ffi::NAMED_VALUE_INT64,
                        ffi::PJRT_NamedValue_Value { int64_value: *i },
                        1,
                    ),
                    OptionValue::IntList(l) => (
                        ffi::NAMED_VALUE_INT64_LIST,
                        ffi::PJRT_NamedValue_Value {
                            int64_array_value: l.as_ptr(),
                        },
                        l.len(),
                    ),
                    OptionValue::Float(x) => (
                        ffi::NAMED_VALUE_FLOAT,
                        ffi::PJRT_NamedValue_Value { float_value: *x },
                        1,
                    ),
                    OptionValue::Bool(b) => (
                        ffi::NAMED_VALUE_BOOL,
                        ffi::PJRT_NamedValue_Value { bool_value: *b },
                        1,
                    ),
                };
                ffi::PJRT_NamedValue {
                    struct_size: args_size!(ffi::PJRT_NamedValue, value_size),
                    extension_start: ptr::null_mut(),
                    name: o.name.as_ptr() as *const c_char,
                    name_size: o.name.len(),
                    kind,
                    value,
                    value_size: size,
                }
            })
            .collect();
        Ok(NamedValues {
            _options: options,
            values,
        })
    }

    pub fn as_ptr(&self) -> *const ffi::PJRT_NamedValue {
        if self.values.is_empty() {
            ptr::null()
        } else {
            self.values.as_ptr()
        }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn values(&self) -> &[ffi::PJRT_NamedValue] {
        &self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::named_value;

    fn opt(name: &str, value: OptionValue) -> ClientOption {
        ClientOption::new(name, value)
    }

    #[test]
    fn named_values_carry_name_type_and_value() {
        let list = NamedValues::new(vec![
            opt("preallocate", OptionValue::Bool(false)),
            opt("memory_fraction", OptionValue::Float(0.5)),
            opt("visible_devices", OptionValue::IntList(vec![0, 2])),
            opt("allocator", OptionValue::Str("platform".into())),
            opt("node_id", OptionValue::Int(3)),
        ])
        .unwrap();
        assert_eq!(list.len(), 5);
        let v = list.values();
        assert!(v.iter().all(|nv| nv.struct_size == 56));
        assert_eq!(
            [v[0].kind, v[1].kind, v[2].kind, v[3].kind, v[4].kind],
            [
                ffi::NAMED_VALUE_BOOL,
                ffi::NAMED_VALUE_FLOAT,
                ffi::NAMED_VALUE_INT64_LIST,
                ffi::NAMED_VALUE_STRING,
                ffi::NAMED_VALUE_INT64
            ]
        );
        // Read back the way a plugin reads them.
        let read: Vec<(String, String)> = v.iter().map(|nv| unsafe { named_value(nv) }).collect();
        assert_eq!(
            read,
            [
                ("preallocate".to_string(), "false".to_string()),
                ("memory_fraction".into(), "0.5".into()),
                ("visible_devices".into(), "[0, 2]".into()),
                ("allocator".into(), "platform".into()),
                ("node_id".into(), "3".into()),
            ]
        );
        assert_eq!(v[2].value_size, 2);
        assert_eq!(v[3].value_size, "platform".len());
        assert!(NamedValues::new(vec![]).unwrap().as_ptr().is_null());
    }

    #[test]
    fn bad_values_are_refused_with_what_was_expected() {
        let cases = [
            (
                opt("memory_fraction", OptionValue::Float(1.5)),
                "in (0, 1], found 1.5",
            ),
            (
                opt("memory_fraction", OptionValue::Str("lots".into())),
                "expected a number in (0, 1], found a string",
            ),
            (
                opt("preallocate", OptionValue::Int(0)),
                "expected a boolean, found an integer",
            ),
            (
                opt("visible_devices", OptionValue::IntList(vec![0, 0])),
                "distinct device ids",
            ),
            (
                opt("visible_devices", OptionValue::IntList(vec![-1])),
                "distinct device ids",
            ),
            (
                opt("visible_devices", OptionValue::IntList(vec![])),
                "at least one device id",
            ),
            (
                opt("visible_devices", OptionValue::Int(1)),
                "expected a list of integers",
            ),
            (
                opt("allocator", OptionValue::Str("fast".into())),
                "one of default, platform, bfc, cuda_async",
            ),
            (
                opt("cpu_device_count", OptionValue::Int(0)),
                "at least 1, found 0",
            ),
            (
                opt("Bad-Name", OptionValue::Bool(true)),
                "lower-case letters",
            ),
            (
                opt("something", OptionValue::Float(f32::NAN)),
                "a finite number",
            ),
        ];
        for (option, message) in cases {
            let err = NamedValues::new(vec![option.clone()]).err().unwrap();
            assert!(
                matches!(err, crate::Error::Invalid(_)) && err.to_string().contains(message),
                "{option}: {err}"
            );
        }
        let twice = vec![
            opt("preallocate", OptionValue::Bool(true)),
            opt("preallocate", OptionValue::Bool(false)),
        ];
        assert!(check(&twice).unwrap_err().to_string().contains("twice"));
        // Unknown names pass: the plugin decides.
        assert!(check(&[opt("xla_future_option", OptionValue::Int(1))]).is_ok());
    }

    #[test]
    fn gpu_plugins_never_preallocate_by_default() {
        let gpu = with_defaults(PluginKind::Gpu, &[]);
        assert_eq!(gpu, [opt("preallocate", OptionValue::Bool(false))]);
        let user = [opt("allocator", OptionValue::Str("platform".into()))];
        assert_eq!(with_defaults(PluginKind::Gpu, &user), user);
        let user = [opt("preallocate", OptionValue::Bool(true))];
        assert_eq!(with_defaults(PluginKind::Gpu, &user), user);
        let fraction = [opt("memory_fraction", OptionValue::Float(0.3))];
        assert_eq!(with_defaults(PluginKind::Gpu, &fraction).len(), 2);
        assert!(with_defaults(PluginKind::Cpu, &[]).is_empty());
        assert!(with_defaults(PluginKind::Tpu, &[]).is_empty());
    }

    #[test]
    fn plugin_kinds_from_file_names() {
        assert_eq!(
            PluginKind::from_file_name("xla_cpu_pjrt.so"),
            PluginKind::Cpu
        );
        assert_eq!(
            PluginKind::from_file_name("pjrt_c_api_cpu_plugin.so"),
            PluginKind::Cpu
        );
        assert_eq!(
            PluginKind::from_file_name("xla_cuda_plugin.so"),
            PluginKind::Gpu
        );
        assert_eq!(
            PluginKind::from_file_name("pjrt_c_api_gpu_plugin.so"),
            PluginKind::Gpu
        );
        assert_eq!(PluginKind::from_file_name("libtpu.so"), PluginKind::Tpu);
        assert_eq!(PluginKind::from_file_name("plugin.so"), PluginKind::Unknown);
    }
}
