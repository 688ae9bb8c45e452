//! `shmem setup` (and `cargo xtask setup`): installs, idempotently, what building and
//! checking kernels needs — the toolchain components and, into the per-user directory
//! [`crate::locate::deps_dir`], NVSHMEM's pip wheels and (for `ptxas`) the CUDA compiler
//! wheel. Nothing is installed system-wide or into a project; offline once installed.

use crate::error::{Error, IoContext, Result};
use crate::locate::{Nvshmem, deps_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use shmem_manifest::search::DEFAULT_NVSHMEM;
/// The NVSHMEM releases CI builds against: the oldest and newest supported.
pub const TESTED_NVSHMEM: [&str; 2] = ["3.4.5", "3.8.0"];
/// The pip package that provides `ptxas` 13.0.
pub const NVCC_WHEEL: &str = "nvidia-cuda-nvcc==13.0.88";
/// The pip packages that together make the CUDA 13.0 compiler that builds the CUDA C++
/// twins ([`cuda_toolkit`]): `nvcc` with the GPU machines' version (13.0.88), its headers,
/// the runtime's headers, CCCL (`<cuda/atomic>`), and `cicc` of the same release. Each is
/// pinned: pip's newest `nvidia-nvvm` (13.5) writes PTX 9.5, which `ptxas` 13.0 refuses.
pub const CUDA_TOOLKIT_WHEELS: [&str; 5] = [
    NVCC_WHEEL,
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-nvvm==13.0.88",
];

/// The pip packages that provide `cuobjdump` and the `nvdisasm` it runs, to read the SASS of
/// the cubins `ptxas` writes on a machine without a GPU ([`disassembler`], `cargo xtask
/// sass`). PyPI has no 13.0 release of either (its oldest is 13.2); 13.5 reads the sm_80,
/// sm_90 and sm_100 cubins of `ptxas` 13.0.
pub const DISASSEMBLER_WHEELS: [&str; 2] = [
    "nvidia-cuda-cuobjdump==13.5.37",
    "nvidia-cuda-nvdisasm==13.5.37",
];

/// Marks a completed install, so an interrupted one is redone.
const DONE: &str = ".shmem-install-complete";

/// `rustup component add rust-src llvm-tools` for `toolchain`, if either is missing.
pub fn toolchain_components(toolchain: &str) -> Result<()> {
    if crate::Toolchain::check(toolchain).is_ok() {
        return Ok(());
    }
    let status = Command::new("rustup")
        .args([
            "component",
            "add",
            "rust-src",
            "llvm-tools",
            "--toolchain",
            toolchain,
        ])
        .status()
        .map_err(|e| Error::Setup(format!("cannot run rustup: {e}")))?;
    if !status.success() {
        return Err(Error::Setup(format!(
            "`rustup component add rust-src llvm-tools --toolchain {toolchain}` failed"
        )));
    }
    crate::Toolchain::check(toolchain).map(|_| ())
}

/// Installs `requirement` (e.g. `nvidia-nvshmem-cu13==3.4.5`) with pip into `dir`, unless
/// a previous install completed there.
pub fn pip_install(requirement: &str, dir: &Path) -> Result<bool> {
    pip_install_all(&[requirement], dir)
}

/// [`pip_install`] of several packages into one tree (without their dependencies: each is
/// named), unless a previous install of the same list completed there.
pub fn pip_install_all(requirements: &[&str], dir: &Path) -> Result<bool> {
    let list = requirements.join(" ");
    if std::fs::read_to_string(dir.join(DONE)).is_ok_and(|done| done == list) {
        return Ok(false);
    }
    let tmp = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or_else(|| {
            Error::Setup("no python3 with pip found; install Python 3 and pip".into())
        })?;
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--target",
        ])
        .arg(&tmp)
        .args(requirements)
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .map_err(|e| Error::Setup(format!("cannot run pip: {e}")))?;
    if !status.success() {
        return Err(Error::Setup(format!("`pip install {list}` failed")));
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&tmp, dir).ctx(|| format!("moving {} to {}", tmp.display(), dir.display()))?;
    std::fs::write(dir.join(DONE), &list)
        .ctx(|| format!("writing {}", dir.join(DONE).display()))?;
    Ok(true)
}

/// Installs NVSHMEM `version` into `<deps_dir>/nvshmem-<version>`; returns its directory.
pub fn nvshmem(version: &str) -> Result<PathBuf> {
    let dir = deps_dir().join(format!("nvshmem-{version}"));
    pip_install(&format!("nvidia-nvshmem-cu13=={version}"), &dir)?;
    Nvshmem::at(&dir).map(|n| n.root).ok_or_else(|| {
        Error::Setup(format!(
            "the nvidia-nvshmem-cu13 {version} wheel has no device bitcode under {}",
            dir.display()
        ))
    })
}

/// Installs the pip packages `wheels` into `<deps_dir>/<name>` ([`pip_install_all`]) and
/// returns its directory `root`, once each of `files` (relative to `root`) is there.
fn wheel_tree(name: &str, wheels: &[&str], root: &str, files: &[&str]) -> Result<PathBuf> {
    let dir = deps_dir().join(name);
    pip_install_all(wheels, &dir)?;
    let root = dir.join(root);
    match files.iter().find(|f| !root.join(f).is_file()) {
        None => Ok(root),
        Some(f) => Err(Error::Setup(format!(
            "`pip install {}` left no {f} under {}",
            wheels.join(" "),
            root.display()
        ))),
    }
}

/// Installs `ptxas` into `<deps_dir>/cuda-nvcc`; returns its path.
pub fn ptxas() -> Result<PathBuf> {
    wheel_tree("cuda-nvcc", &[NVCC_WHEEL], "nvidia/cu13/bin", &["ptxas"]).map(|b| b.join("ptxas"))
}

/// Installs the CUDA 13.0 compiler of [`CUDA_TOOLKIT_WHEELS`] into
/// `<deps_dir>/cuda-toolkit`; returns its root (`bin/nvcc`, `include`, `include/cccl`,
/// `nvvm`). Not part of [`all`]: only the CUDA C++ twins need it (`cargo xtask gpu-bundle
/// --twins`).
pub fn cuda_toolkit() -> Result<PathBuf> {
    wheel_tree(
        "cuda-toolkit",
        &CUDA_TOOLKIT_WHEELS,
        "nvidia/cu13",
        &["bin/nvcc", "nvvm/bin/cicc"],
    )
}

/// Installs `cuobjdump` and `nvdisasm` ([`DISASSEMBLER_WHEELS`]) into
/// `<deps_dir>/cuda-sass`; returns the directory that holds both (`cuobjdump -sass` runs the
/// `nvdisasm` it finds on `PATH`). Not part of [`all`]: only reading SASS needs them.
pub fn disassembler() -> Result<PathBuf> {
    wheel_tree(
        "cuda-sass",
        &DISASSEMBLER_WHEELS,
        "nvidia/cu13/bin",
        &["cuobjdump", "nvdisasm"],
    )
}

/// What [`all`] installed or found.
#[derive(Clone, Debug)]
pub struct Installed {
    /// The toolchain whose components are present (`nightly`, or `stable` as a fallback).
    pub toolchain: String,
    /// Each NVSHMEM version and its root.
    pub nvshmem: Vec<(String, PathBuf)>,
    /// `ptxas`, unless not asked for.
    pub ptxas: Option<PathBuf>,
}

impl std::fmt::Display for Installed {
    /// One line per thing installed or found, as `shmem setup` prints them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "toolchain   {}: rust-src and llvm-tools present",
            self.toolchain
        )?;
        for (v, dir) in &self.nvshmem {
            write!(f, "\nnvshmem     {v}: {}", dir.display())?;
        }
        if let Some(p) = &self.ptxas {
            write!(f, "\nptxas       {}", p.display())?;
        }
        Ok(())
    }
}

/// Everything building kernels needs, for `toolchain` (default `nightly`, falling back to
/// `stable` with a note when there is no nightly), NVSHMEM `versions` (default
/// [`DEFAULT_NVSHMEM`]) and, with `with_ptxas`, `ptxas`. Idempotent: what is installed is
/// not installed again, and nothing is downloaded then.
pub fn all(toolchain: Option<&str>, versions: &[String], with_ptxas: bool) -> Result<Installed> {
    let tc = match toolchain_components(toolchain.unwrap_or("nightly")) {
        Ok(()) => toolchain.unwrap_or("nightly").to_string(),
        Err(e) if toolchain.is_none() => {
            eprintln!("note: {e}; trying the stable toolchain");
            toolchain_components("stable")?;
            "stable".into()
        }
        Err(e) => return Err(e),
    };
    let default = [DEFAULT_NVSHMEM.to_string()];
    let versions = if versions.is_empty() {
        &default[..]
    } else {
        versions
    };
    let nvshmem = versions
        .iter()
        .map(|v| nvshmem(v).map(|d| (v.clone(), d)))
        .collect::<Result<_>>()?;
    let ptxas = if with_ptxas { Some(ptxas()?) } else { None };
    Ok(Installed {
        toolchain: tc,
        nvshmem,
        ptxas,
    })
}

#[cfg(test)]
mod tests {
    use super::{CUDA_TOOLKIT_WHEELS, DONE, pip_install_all};

    /// A completed install of the same list is kept: nothing runs (pip is not even looked
    /// for), so `setup` and `gpu-bundle --twins` stay offline once installed.
    #[test]
    fn a_completed_install_of_the_same_list_is_kept() {
        let dir = std::env::temp_dir().join(format!("shmem-setup-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(DONE), CUDA_TOOLKIT_WHEELS.join(" ")).unwrap();
        assert!(!pip_install_all(&CUDA_TOOLKIT_WHEELS, &dir).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every toolkit wheel is pinned to one release (an unpinned `nvidia-nvvm` brings a
    /// `cicc` whose PTX the pinned `ptxas` refuses).
    #[test]
    fn every_toolkit_wheel_is_pinned() {
        for w in CUDA_TOOLKIT_WHEELS {
            let (name, version) = w.split_once("==").expect("pinned");
            assert!(name.starts_with("nvidia-"), "{w}");
            assert!(version.starts_with("13.0."), "{w}");
        }
    }
}
