//! GPU architectures we build for.

use std::fmt;
use std::str::FromStr;

/// A GPU architecture (`-mcpu`), with the PTX ISA version we emit for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// Ampere (A100).
    Sm80,
    /// Hopper (H100, H200).
    Sm90,
    /// Blackwell (B200).
    Sm100,
}

impl Arch {
    /// Every supported architecture.
    pub const ALL: [Arch; 3] = [Arch::Sm80, Arch::Sm90, Arch::Sm100];

    /// The architecture of compute capability `cc` (`90` for 9.0), if we build for it.
    pub fn from_number(cc: u32) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.number() == cc)
    }

    /// `sm_90` etc.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm90 => "sm_90",
            Arch::Sm100 => "sm_100",
        }
    }

    /// The compute capability number, `90` for `sm_90`.
    pub fn number(self) -> u32 {
        match self {
            Arch::Sm80 => 80,
            Arch::Sm90 => 90,
            Arch::Sm100 => 100,
        }
    }

    /// The PTX ISA we emit: NVSHMEM's device code needs ≥ 8.2 (`.mmio`, `cp.async.bulk`), and
    /// `sm_100` needs ≥ 8.6. CUDA 12.8+ drivers (and ptxas 13.0) accept both.
    pub fn ptx_isa(self) -> (u32, u32) {
        match self {
            Arch::Sm80 | Arch::Sm90 => (8, 5),
            Arch::Sm100 => (8, 6),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`Arch::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownArch(pub String);

impl fmt::Display for UnknownArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown GPU architecture `{}`: use one of {} (e.g. `--arch sm_90`)",
            self.0,
            Arch::ALL.map(Arch::name).join(", ")
        )
    }
}

impl std::error::Error for UnknownArch {}

impl FromStr for Arch {
    type Err = UnknownArch;
    fn from_str(s: &str) -> Result<Self, UnknownArch> {
        let t = s.trim().to_ascii_lowercase();
        let t = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("sm"))
            .unwrap_or(&t);
        Arch::ALL
            .into_iter()
            .find(|a| a.number().to_string() == t)
            .ok_or_else(|| UnknownArch(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!("sm_90".parse::<Arch>().unwrap(), Arch::Sm90);
        assert_eq!("SM80".parse::<Arch>().unwrap(), Arch::Sm80);
        assert_eq!("100".parse::<Arch>().unwrap(), Arch::Sm100);
        let e = "sm_75".parse::<Arch>().unwrap_err().to_string();
        assert!(
            e.contains("unknown GPU architecture `sm_75`") && e.contains("sm_90"),
            "{e}"
        );
    }
}
