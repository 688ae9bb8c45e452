//! Finding NVSHMEM's device bitcode and `ptxas`.
//!
//! Search order for NVSHMEM (first hit wins): an explicit directory (`--nvshmem`), the
//! `NVSHMEM_HOME` environment variable, the per-user installs made by `shmem setup` (or
//! `cargo xtask setup`) in [`deps_dir`] (`nvshmem-<version>/`), then Python's site-packages
//! (the pip wheel `nvidia-nvshmem-cu13`, as in a PyTorch virtualenv). A directory qualifies if it
//! has `lib/libnvshmem_device.bc` or per-arch `lib/libnvshmem_device_sm_NN.bc`; a wheel's
//! install root (`.../site-packages`) is accepted too and resolved to `nvidia/nvshmem`.

use crate::Arch;
use crate::error::{Error, Result};
pub use shmem_manifest::search::{deps_dir, nvshmem_installs, site_packages};
use std::path::{Path, PathBuf};

/// One NVSHMEM installation's device library.
#[derive(Clone, Debug)]
pub struct Nvshmem {
    /// The NVSHMEM root (has `lib/` and `include/`).
    pub root: PathBuf,
}

impl Nvshmem {
    /// Accepts `dir` if it is (or contains, as a wheel install) an NVSHMEM with device bitcode.
    pub fn at(dir: &Path) -> Option<Nvshmem> {
        for root in [dir.to_path_buf(), dir.join("nvidia/nvshmem")] {
            let lib = root.join("lib");
            let has_bc = std::fs::read_dir(&lib).ok().is_some_and(|rd| {
                rd.flatten().any(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("libnvshmem_device") && n.ends_with(".bc")
                })
            });
            if has_bc {
                return Some(Nvshmem { root });
            }
        }
        None
    }

    /// The bitcode to link for `arch`: the per-arch file when the release ships them (3.8+),
    /// else the single `libnvshmem_device.bc` (3.4).
    pub fn bitcode(&self, arch: Arch) -> Result<PathBuf> {
        let lib = self.root.join("lib");
        let per_arch = lib.join(format!("libnvshmem_device_sm_{}.bc", arch.number()));
        if per_arch.is_file() {
            return Ok(per_arch);
        }
        let single = lib.join("libnvshmem_device.bc");
        if single.is_file() {
            return Ok(single);
        }
        Err(Error::NvshmemInvalid {
            dir: self.root.clone(),
            why: format!(
                "it has per-arch bitcode but none for {arch} ({} missing)",
                per_arch.display()
            ),
        })
    }

    /// Locates NVSHMEM by the documented search order.
    pub fn locate(explicit: Option<&Path>) -> Result<Nvshmem> {
        let home = std::env::var_os("NVSHMEM_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let installs = nvshmem_installs();
        // Where `shmem setup` installs, listed as searched even when it holds nothing yet.
        let setup_dir = deps_dir().join(format!(
            "nvshmem-{}",
            shmem_manifest::search::DEFAULT_NVSHMEM
        ));
        let candidates = if installs.is_empty() {
            vec![setup_dir]
        } else {
            installs
        }
        .into_iter()
        .chain(site_packages())
        .collect();
        Self::locate_in(explicit, home.as_deref(), candidates)
    }

    /// The search itself: `explicit`, then `home`, then each candidate (every one is listed
    /// in the error when none qualifies).
    pub fn locate_in(
        explicit: Option<&Path>,
        home: Option<&Path>,
        candidates: Vec<PathBuf>,
    ) -> Result<Nvshmem> {
        if let Some(dir) = explicit {
            return Nvshmem::at(dir).ok_or_else(|| Error::NvshmemInvalid {
                dir: dir.to_path_buf(),
                why: "no lib/libnvshmem_device*.bc under it (nor under nvidia/nvshmem/)".into(),
            });
        }
        if let Some(dir) = home {
            return Nvshmem::at(dir).ok_or_else(|| Error::NvshmemInvalid {
                dir: dir.to_path_buf(),
                why: "NVSHMEM_HOME is set, but there is no lib/libnvshmem_device*.bc under it"
                    .into(),
            });
        }
        let mut searched = Vec::new();
        for dir in candidates {
            if let Some(n) = Nvshmem::at(&dir) {
                return Ok(n);
            }
            searched.push(dir);
        }
        Err(Error::NvshmemNotFound { searched })
    }
}

/// Finds `ptxas`: `PTXAS`, `CUDA_HOME`/`CUDA_PATH`, `PATH`, the per-user
/// `cuda-nvcc/` of [`deps_dir`], then pip's `nvidia-cuda-nvcc` in site-packages.
pub fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = std::env::var_os(var) {
            candidates.push(PathBuf::from(h).join("bin/ptxas"));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("ptxas")));
    }
    let wheel_bins = |root: PathBuf| {
        [
            root.join("nvidia/cu13/bin/ptxas"),
            root.join("nvidia/cuda_nvcc/bin/ptxas"),
        ]
    };
    candidates.extend(wheel_bins(deps_dir().join("cuda-nvcc")));
    for sp in site_packages() {
        candidates.extend(wheel_bins(sp));
    }
    candidates.into_iter().find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shmem-locate-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn missing_nvshmem_lists_where_it_looked_and_what_to_do() {
        let a = tmp("a");
        let err = Nvshmem::locate_in(None, None, vec![a.clone(), a.join("second")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not found")
                && err.contains(&a.display().to_string())
                && err.contains(&a.join("second").display().to_string()),
            "{err}"
        );
        assert!(
            err.contains("shmem setup") && err.contains("NVSHMEM_HOME"),
            "{err}"
        );
    }

    #[test]
    fn explicit_and_home_must_be_valid() {
        let a = tmp("b");
        let err = Nvshmem::locate_in(Some(&a), None, vec![])
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a usable NVSHMEM"), "{err}");
        let err = Nvshmem::locate_in(None, Some(&a), vec![])
            .unwrap_err()
            .to_string();
        assert!(err.contains("NVSHMEM_HOME is set"), "{err}");
    }

    #[test]
    fn wheel_layout_and_per_arch_bitcode() {
        let a = tmp("c");
        let lib = a.join("nvidia/nvshmem/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libnvshmem_device_sm_90.bc"), b"").unwrap();
        let n = Nvshmem::locate_in(None, None, vec![tmp("empty"), a.clone()]).unwrap();
        assert_eq!(n.root, a.join("nvidia/nvshmem"));
        assert_eq!(
            n.bitcode(crate::Arch::Sm90).unwrap(),
            lib.join("libnvshmem_device_sm_90.bc")
        );
        let err = n.bitcode(crate::Arch::Sm80).unwrap_err().to_string();
        assert!(err.contains("none for sm_80"), "{err}");
        std::fs::write(lib.join("libnvshmem_device.bc"), b"").unwrap();
        assert_eq!(
            n.bitcode(crate::Arch::Sm80).unwrap(),
            lib.join("libnvshmem_device.bc")
        );
    }
}
