//! Where NVSHMEM's pip wheels are installed: the places both the kernel builder (device
//! bitcode) and the runtime (host library) look, so that the two agree.
//!
//! - project-local installs made by `cargo xtask setup`: `<root>/.shmem/nvshmem-<version>/`;
//! - Python's site-packages (the wheel `nvidia-nvshmem-cu13`, as in a PyTorch virtualenv).
//!
//! A wheel install root holds `nvidia/nvshmem/{lib,include}`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The NVSHMEM release the GPU machines run; the default to link against.
pub const DEFAULT_NVSHMEM: &str = "3.4.5";

/// Where the project-local dependencies live: `<root>/.shmem`.
pub fn local_deps_dir(project_root: &Path) -> PathBuf {
    project_root.join(".shmem")
}

/// The NVSHMEM root inside a wheel install root.
pub fn wheel_nvshmem_root(install: &Path) -> PathBuf {
    install.join("nvidia/nvshmem")
}

/// `.shmem/nvshmem-*` installs (wheel install roots), the default version
/// ([`DEFAULT_NVSHMEM`]) first.
pub fn local_nvshmem_installs(project_root: &Path) -> Vec<PathBuf> {
    let deps = local_deps_dir(project_root);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&deps)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("nvshmem-"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|p| {
        (
            !p.ends_with(format!("nvshmem-{DEFAULT_NVSHMEM}")),
            p.clone(),
        )
    });
    v
}

/// Python's site-packages directories (system, user, and an active virtualenv), asked of
/// Python once per process.
pub fn site_packages() -> Vec<PathBuf> {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(ask_python_for_site_packages).clone()
}

fn ask_python_for_site_packages() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV")
        && let Ok(rd) = std::fs::read_dir(Path::new(&venv).join("lib"))
    {
        dirs.extend(rd.flatten().map(|e| e.path().join("site-packages")));
    }
    for py in ["python3", "python"] {
        let out = Command::new(py)
            .args(["-c", "import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))"])
            .output();
        if let Ok(out) = out
            && out.status.success()
        {
            dirs.extend(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(PathBuf::from),
            );
            break;
        }
    }
    dirs.retain(|d| d.is_dir());
    dirs.dedup();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_installs_default_version_first() {
        let root = std::env::temp_dir().join(format!("shmem-search-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for v in ["3.3.0", DEFAULT_NVSHMEM, "3.8.0"] {
            std::fs::create_dir_all(local_deps_dir(&root).join(format!("nvshmem-{v}"))).unwrap();
        }
        std::fs::create_dir_all(local_deps_dir(&root).join("cuda-nvcc")).unwrap();
        let got = local_nvshmem_installs(&root);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got[0].ends_with(format!("nvshmem-{DEFAULT_NVSHMEM}")),
            "{got:?}"
        );
        assert!(local_nvshmem_installs(&root.join("none")).is_empty());
    }
}
