//! Which CUDA libraries the process can open, asked before cudarc touches any
//! of them: cudarc panics when a library it needs is missing, so every entry
//! point of this crate checks here first and returns an error instead.

use std::sync::OnceLock;

/// A library this backend loads, as cudarc names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Library {
    Driver,
    Nvrtc,
    Cublas,
    CublasLt,
}

impl Library {
    pub const ALL: [Library; 4] = [
        Library::Driver,
        Library::Nvrtc,
        Library::Cublas,
        Library::CublasLt,
    ];

    /// The stem cudarc looks for (`cuda` is `libcuda.so`, the driver).
    pub fn stem(self) -> &'static str {
        match self {
            Library::Driver => "cuda",
            Library::Nvrtc => "nvrtc",
            Library::Cublas => "cublas",
            Library::CublasLt => "cublasLt",
        }
    }

    /// The file names cudarc tries with `dlopen`, in order.
    pub fn candidates(self) -> Vec<String> {
        cudarc::get_lib_name_candidates(self.stem())
    }

    /// True when one of [`Library::candidates`] opens (what cudarc will do).
    pub fn present(self) -> bool {
        // SAFETY: these only dlopen and dlclose the library; no symbol is called.
        unsafe {
            match self {
                Library::Driver => cudarc::driver::sys::is_culib_present(),
                Library::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                Library::Cublas => cudarc::cublas::sys::is_culib_present(),
                Library::CublasLt => cudarc::cublaslt::sys::is_culib_present(),
            }
        }
    }

    /// Ok when present; otherwise the error naming the library and the names tried.
    pub fn require(self) -> crate::Result<()> {
        if self.present() {
            return Ok(());
        }
        Err(crate::error(format!(
            "lib{}.so could not be opened (dlopen tried {})",
            self.stem(),
            self.candidates().join(", ")
        )))
    }
}

/// The driver, checked once per process (the driver cannot appear later).
pub fn require_driver() -> crate::Result<()> {
    static DRIVER: OnceLock<crate::Result<()>> = OnceLock::new();
    DRIVER.get_or_init(|| Library::Driver.require()).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_name_the_library_and_the_cuda_13_soname() {
        for lib in Library::ALL {
            let names = lib.candidates();
            assert!(names.iter().all(|n| n.contains(lib.stem())));
            assert!(names.contains(&format!("lib{}.so", lib.stem())));
        }
        assert!(Library::Nvrtc
            .candidates()
            .contains(&"libnvrtc.so.13".to_string()));
    }

    #[test]
    fn probing_never_panics_and_a_missing_library_is_an_error_with_the_names_tried() {
        for lib in Library::ALL {
            match lib.require() {
                Ok(()) => assert!(lib.present()),
                Err(e) => {
                    assert!(e.0.contains(&format!("lib{}.so", lib.stem())), "{e}");
                    assert!(e.0.contains("dlopen tried"), "{e}");
                }
            }
        }
    }
}
