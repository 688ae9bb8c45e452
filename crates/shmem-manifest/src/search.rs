//! Where NVSHMEM's pip wheels and `ptxas` are installed: the places both the kernel builder
//! (device bitcode, `ptxas`) and the runtime (host library) look, so that the two agree.
//!
//! - the per-user install that `shmem setup` (or `cargo xtask setup`) makes, [`deps_dir`]:
//!   `$SHMEM_HOME`, else `$XDG_CACHE_HOME/shmem-rs`, else `~/.cache/shmem-rs`, holding
//!   `nvshmem-<version>/` and `cuda-nvcc/` (not in any project's tree, so every project of
//!   the user, and programs started from any directory, find them);
//! - Python's site-packages (the wheel `nvidia-nvshmem-cu13`, as in a PyTorch virtualenv).
//!
//! A wheel install root holds `nvidia/nvshmem/{lib,include}`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The NVSHMEM release the GPU machines run; the default to link against.
pub const DEFAULT_NVSHMEM: &str = "3.4.5";

/// Where `shmem setup` installs NVSHMEM and `ptxas` for this user: `$SHMEM_HOME`, else
/// `$XDG_CACHE_HOME/shmem-rs`, else `$HOME/.cache/shmem-rs` (`./.shmem-rs` without a home).
pub fn deps_dir() -> PathBuf {
    deps_dir_from(|k| std::env::var_os(k).filter(|v| !v.is_empty()))
}

/// [`deps_dir`] with the environment given (for tests).
pub fn deps_dir_from(get: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    if let Some(h) = get("SHMEM_HOME") {
        return PathBuf::from(h);
    }
    if let Some(c) = get("XDG_CACHE_HOME") {
        return PathBuf::from(c).join("shmem-rs");
    }
    match get("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/shmem-rs"),
        None => PathBuf::from(".shmem-rs"),
    }
}

/// The NVSHMEM root inside a wheel install root.
pub fn wheel_nvshmem_root(install: &Path) -> PathBuf {
    install.join("nvidia/nvshmem")
}

/// The `nvshmem-*` installs (wheel install roots) in [`deps_dir`], the default version
/// ([`DEFAULT_NVSHMEM`]) first.
pub fn nvshmem_installs() -> Vec<PathBuf> {
    nvshmem_installs_in(&deps_dir())
}

/// The `nvshmem-*` installs in `deps`, the default version first.
pub fn nvshmem_installs_in(deps: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(deps)
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
    fn installs_default_version_first() {
        let root = std::env::temp_dir().join(format!("shmem-search-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for v in ["3.3.0", DEFAULT_NVSHMEM, "3.8.0"] {
            std::fs::create_dir_all(root.join(format!("nvshmem-{v}"))).unwrap();
        }
        std::fs::create_dir_all(root.join("cuda-nvcc")).unwrap();
        let got = nvshmem_installs_in(&root);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got[0].ends_with(format!("nvshmem-{DEFAULT_NVSHMEM}")),
            "{got:?}"
        );
        assert!(nvshmem_installs_in(&root.join("none")).is_empty());
    }

    #[test]
    fn the_user_install_directory() {
        use std::ffi::OsString;
        let env = |pairs: &'static [(&str, &str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        const HOME: &[(&str, &str)] = &[("HOME", "/home/u")];
        assert_eq!(
            deps_dir_from(env(HOME)),
            PathBuf::from("/home/u/.cache/shmem-rs")
        );
        const XDG: &[(&str, &str)] = &[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/c")];
        assert_eq!(deps_dir_from(env(XDG)), PathBuf::from("/c/shmem-rs"));
        const OWN: &[(&str, &str)] = &[("HOME", "/home/u"), ("SHMEM_HOME", "/opt/s")];
        assert_eq!(deps_dir_from(env(OWN)), PathBuf::from("/opt/s"));
    }
}
