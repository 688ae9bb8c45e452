//! `cargo xtask setup`: installs, idempotently, what building and checking kernels needs —
//! the toolchain components and, into the project-local `.shmem/`, NVSHMEM's pip wheels and
//! (for `ptxas`) the CUDA compiler wheel. Nothing is installed system-wide.

use crate::error::{Error, IoContext, Result};
use crate::locate::{Nvshmem, local_deps_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use shmem_manifest::search::DEFAULT_NVSHMEM;
/// The NVSHMEM releases CI builds against: the oldest and newest supported.
pub const TESTED_NVSHMEM: [&str; 2] = ["3.4.5", "3.8.0"];
/// The pip package that provides `ptxas` 13.0.
pub const NVCC_WHEEL: &str = "nvidia-cuda-nvcc==13.0.88";

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
    if dir.join(DONE).is_file() {
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
        .arg(requirement)
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .map_err(|e| Error::Setup(format!("cannot run pip: {e}")))?;
    if !status.success() {
        return Err(Error::Setup(format!("`pip install {requirement}` failed")));
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&tmp, dir).ctx(|| format!("moving {} to {}", tmp.display(), dir.display()))?;
    std::fs::write(dir.join(DONE), requirement)
        .ctx(|| format!("writing {}", dir.join(DONE).display()))?;
    Ok(true)
}

/// Installs NVSHMEM `version` into `.shmem/nvshmem-<version>`; returns its directory.
pub fn nvshmem(project_root: &Path, version: &str) -> Result<PathBuf> {
    let dir = local_deps_dir(project_root).join(format!("nvshmem-{version}"));
    pip_install(&format!("nvidia-nvshmem-cu13=={version}"), &dir)?;
    Nvshmem::at(&dir).map(|n| n.root).ok_or_else(|| {
        Error::Setup(format!(
            "the nvidia-nvshmem-cu13 {version} wheel has no device bitcode under {}",
            dir.display()
        ))
    })
}

/// Installs `ptxas` into `.shmem/cuda-nvcc`; returns its path.
pub fn ptxas(project_root: &Path) -> Result<PathBuf> {
    let dir = local_deps_dir(project_root).join("cuda-nvcc");
    pip_install(NVCC_WHEEL, &dir)?;
    let p = dir.join("nvidia/cu13/bin/ptxas");
    if p.is_file() {
        Ok(p)
    } else {
        Err(Error::Setup(format!(
            "{NVCC_WHEEL} has no ptxas at {}",
            p.display()
        )))
    }
}
