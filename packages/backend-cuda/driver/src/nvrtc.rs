//! NVRTC: CUDA C to a CUBIN for one GPU architecture. Needs libnvrtc, no GPU.

use std::ffi::{c_char, c_int, CString};

use cudarc::nvrtc::sys;

use crate::libs::Library;
use crate::{error, Result};

/// Options every module is compiled with (besides the architecture).
pub const OPTIONS: &[&str] = &["--std=c++17", "--fmad=false"];

/// A compiled module: the CUBIN and NVRTC's log (warnings; empty when clean).
#[derive(Debug, Clone)]
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub log: String,
}

fn check(what: &str, r: sys::nvrtcResult) -> Result<()> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(error(format!("NVRTC {what} failed: {r:?}")))
    }
}

/// NVRTC's version, `"major.minor"`.
pub fn version() -> Result<String> {
    Library::Nvrtc.require()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: two out-pointers to live integers.
    check("nvrtcVersion", unsafe {
        sys::nvrtcVersion(&mut major, &mut minor)
    })?;
    Ok(format!("{major}.{minor}"))
}

/// The architectures NVRTC can compile for (`sm_80`, `sm_90`, ...).
pub fn supported_archs() -> Result<Vec<String>> {
    Library::Nvrtc.require()?;
    let mut n: c_int = 0;
    // SAFETY: out-pointer, then a buffer of the size NVRTC reported.
    unsafe {
        check(
            "nvrtcGetNumSupportedArchs",
            sys::nvrtcGetNumSupportedArchs(&mut n),
        )?;
        let mut archs = vec![0 as c_int; n.max(0) as usize];
        check(
            "nvrtcGetSupportedArchs",
            sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()),
        )?;
        Ok(archs.into_iter().map(|a| format!("sm_{a}")).collect())
    }
}

/// Compile `text` (named `name` in messages) for `arch` (`sm_90`).
pub fn compile(text: &str, name: &str, arch: &str) -> Result<Compiled> {
    Library::Nvrtc.require()?;
    if !arch.starts_with("sm_") || !arch[3..].chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(error(format!(
            "expected a GPU architecture like sm_90, found {arch:?}"
        )));
    }
    let src = CString::new(text).map_err(|_| error("a kernel source holds a NUL byte"))?;
    let cname = CString::new(format!("{name}.cu")).unwrap();
    let mut options: Vec<CString> =
        vec![CString::new(format!("--gpu-architecture={arch}")).unwrap()];
    options.extend(OPTIONS.iter().map(|o| CString::new(*o).unwrap()));
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer handed to NVRTC outlives the program, which is
    // destroyed before returning.
    unsafe {
        check(
            "nvrtcCreateProgram",
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ),
        )?;
        let compiled =
            sys::nvrtcCompileProgram(prog, option_ptrs.len() as c_int, option_ptrs.as_ptr());
        let log = program_log(prog);
        let result = if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
            Err(error(format!(
                "NVRTC could not compile kernel module {name} for {arch} ({compiled:?}):\n{}",
                log.trim_end()
            )))
        } else {
            cubin(prog).map(|cubin| Compiled { cubin, log })
        };
        sys::nvrtcDestroyProgram(&mut prog);
        result
    }
}

unsafe fn program_log(prog: sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    if sys::nvrtcGetProgramLogSize(prog, &mut size) != sys::nvrtcResult::NVRTC_SUCCESS || size == 0
    {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    if sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char)
        != sys::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    while buf.last() == Some(&0) {
        buf.pop();
    }
    String::from_utf8_lossy(&buf).trim().to_string()
}

unsafe fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>> {
    let mut size = 0usize;
    check("nvrtcGetCUBINSize", sys::nvrtcGetCUBINSize(prog, &mut size))?;
    let mut buf = vec![0u8; size];
    check(
        "nvrtcGetCUBIN",
        sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char),
    )?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_architecture_is_checked_before_nvrtc_is_asked() {
        if !Library::Nvrtc.present() {
            assert!(compile("", "m", "sm_90")
                .unwrap_err()
                .0
                .contains("libnvrtc.so"));
            return;
        }
        assert!(compile("", "m", "90").unwrap_err().0.contains("sm_90"));
    }

    #[test]
    fn every_module_compiles_cleanly_where_nvrtc_is_present() {
        // The Python test suite loads the NVIDIA wheel's libnvrtc; here it runs only
        // where the loader already finds one.
        if !Library::Nvrtc.present() {
            return;
        }
        for arch in ["sm_90", "sm_80"] {
            for module in crate::kernels::modules() {
                let text = crate::kernels::program_text(module).unwrap();
                let out = compile(&text, module, arch).unwrap();
                assert!(!out.cubin.is_empty());
                assert!(out.log.is_empty(), "{module} for {arch}: {}", out.log);
            }
        }
        let broken = compile(
            "extern \"C\" __global__ void k() { undefined_name; }",
            "b",
            "sm_90",
        );
        assert!(broken.unwrap_err().0.contains("undefined_name"));
    }
}
