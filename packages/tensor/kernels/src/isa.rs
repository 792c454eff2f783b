//! The vector unit kernels use: detected once per process, lowered (never
//! raised) by `RIFTCO_CPU_ISA` or [`set_cap`], so every path the CPU can run is
//! testable in one process.
//!
//! The levels are ordered: a kernel with an [`Isa::Avx512`] version uses it when
//! [`current`] is at least that level, and otherwise falls to the next version
//! it has (AVX2 + FMA, then the portable code).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// A vector instruction set level, widest last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Isa {
    /// Plain Rust, whatever the target.
    Portable = 0,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2 = 1,
    /// AVX2 plus AVX-512 F, BW, DQ and VL.
    Avx512 = 2,
    /// AVX-512 plus VNNI (`vpdpbusd`).
    Avx512Vnni = 3,
}

impl Isa {
    /// Every level, narrowest first.
    pub const ALL: [Isa; 4] = [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni];

    /// The name `RIFTCO_CPU_ISA` and the bindings use.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512-vnni",
        }
    }

    /// The level called `name`, if there is one.
    pub fn parse(name: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name() == name.trim().to_ascii_lowercase())
    }

    fn from_u8(v: u8) -> Isa {
        Isa::ALL[usize::from(v).min(Isa::ALL.len() - 1)]
    }
}

/// The widest level this CPU supports.
pub fn detected() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma") && has!("f16c")) {
        return Isa::Portable;
    }
    if !(has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl")) {
        return Isa::Avx2;
    }
    if has!("avx512vnni") {
        Isa::Avx512Vnni
    } else {
        Isa::Avx512
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Isa {
    Isa::Portable
}

/// Whether the CPU also has AVX-512 BF16 (`vdpbf16ps`); only meaningful when
/// [`current`] is at least [`Isa::Avx512`].
pub fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static FLAG: OnceLock<bool> = OnceLock::new();
        current() >= Isa::Avx512
            && *FLAG.get_or_init(|| std::arch::is_x86_feature_detected!("avx512bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

const UNSET: u8 = u8::MAX;
static CURRENT: AtomicU8 = AtomicU8::new(UNSET);

fn initial() -> Isa {
    let cap = std::env::var("RIFTCO_CPU_ISA")
        .ok()
        .and_then(|v| Isa::parse(&v));
    cap.map_or(detected(), |cap| cap.min(detected()))
}

/// The level kernels use now: the detected one, capped by `RIFTCO_CPU_ISA`
/// (an unknown name is ignored; [`env_error`] says so) or [`set_cap`].
#[inline]
pub fn current() -> Isa {
    let v = CURRENT.load(Ordering::Relaxed);
    if v != UNSET {
        return Isa::from_u8(v);
    }
    let isa = initial();
    CURRENT.store(isa as u8, Ordering::Relaxed);
    isa
}

/// Cap the level at `cap` (lowered to what the CPU has) and return the level in
/// use. Results are only bit-identical across levels where a kernel says so.
pub fn set_cap(cap: Isa) -> Isa {
    let isa = cap.min(detected());
    CURRENT.store(isa as u8, Ordering::Relaxed);
    isa
}

/// A message when `RIFTCO_CPU_ISA` is set to a name that is not a level.
pub fn env_error() -> Option<String> {
    let value = std::env::var("RIFTCO_CPU_ISA").ok()?;
    if Isa::parse(&value).is_some() {
        return None;
    }
    let names: Vec<&str> = Isa::ALL.iter().map(|isa| isa.name()).collect();
    Some(format!(
        "RIFTCO_CPU_ISA={value:?} is not one of {}",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_order() {
        for isa in Isa::ALL {
            assert_eq!(Isa::parse(isa.name()), Some(isa));
        }
        assert_eq!(Isa::parse(" AVX2 "), Some(Isa::Avx2));
        assert_eq!(Isa::parse("sse9"), None);
        assert!(Isa::Portable < Isa::Avx2 && Isa::Avx512 < Isa::Avx512Vnni);
    }

    #[test]
    fn the_cap_only_lowers() {
        let before = current();
        assert_eq!(set_cap(Isa::Portable), Isa::Portable);
        assert_eq!(current(), Isa::Portable);
        assert_eq!(set_cap(Isa::Avx512Vnni), detected());
        set_cap(before);
    }
}
