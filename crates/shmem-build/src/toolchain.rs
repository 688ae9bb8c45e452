//! The Rust toolchain that builds device code: a nightly with `rust-src` and `llvm-tools`,
//! or failing that the stable toolchain with `RUSTC_BOOTSTRAP=1` (same LLVM, same result).

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A checked toolchain.
#[derive(Clone, Debug)]
pub struct Toolchain {
    /// The rustup name (`nightly`, `stable`).
    pub name: String,
    /// `rustc -V`.
    pub version: String,
    /// Its `cargo`.
    pub cargo: PathBuf,
    /// Its `rustc`.
    pub rustc: PathBuf,
    /// Whether nightly features need `RUSTC_BOOTSTRAP=1`.
    pub bootstrap: bool,
    /// `llvm-link`, `opt`, `llc`, `llvm-dis` live here.
    pub llvm_bin: PathBuf,
}

impl Toolchain {
    /// Finds and checks a toolchain. `wanted` names one (`SHMEM_TOOLCHAIN` otherwise);
    /// by default `nightly` is tried first, then `stable`.
    pub fn detect(wanted: Option<&str>) -> Result<Toolchain> {
        let env = std::env::var("SHMEM_TOOLCHAIN").ok();
        let wanted = wanted.map(str::to_string).or(env);
        let candidates: Vec<String> = match &wanted {
            Some(w) => vec![w.clone()],
            None => vec!["nightly".into(), "stable".into()],
        };
        let mut last = None;
        for name in &candidates {
            match Self::check(name) {
                Ok(t) => return Ok(t),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Toolchain {
            problem: "no Rust toolchain found".into(),
            fix: "install rustup (https://rustup.rs), then run `shmem setup` (`cargo xtask setup` in the shmem-rs checkout)".into(),
        }))
    }

    /// Checks one named toolchain.
    pub fn check(name: &str) -> Result<Toolchain> {
        let which = |tool: &str| -> Result<PathBuf> {
            let out = Command::new("rustup")
                .args(["which", tool, "--toolchain", name])
                .output()
                .map_err(|e| Error::Toolchain {
                    problem: format!("cannot run rustup ({e})"),
                    fix: "install rustup (https://rustup.rs), then run `shmem setup` (`cargo xtask setup` in the shmem-rs checkout)".into(),
                })?;
            if !out.status.success() {
                return Err(Error::Toolchain {
                    problem: format!("the Rust toolchain `{name}` is not installed"),
                    fix: format!(
                        "rustup toolchain install {name} --component rust-src,llvm-tools   (or `shmem setup`)"
                    ),
                });
            }
            Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        };
        let rustc = which("rustc")?;
        let cargo = which("cargo")?;
        let version = run_stdout(Command::new(&rustc).arg("-V"))?
            .trim()
            .to_string();
        let sysroot =
            PathBuf::from(run_stdout(Command::new(&rustc).args(["--print", "sysroot"]))?.trim());
        let host = host_triple(&rustc)?;
        let llvm_bin = check_components(name, &sysroot, &host)?;
        let bootstrap = !version.contains("nightly") && !version.contains("-dev");
        Ok(Toolchain {
            name: name.to_string(),
            version,
            cargo,
            rustc,
            bootstrap,
            llvm_bin,
        })
    }

    /// Path of an LLVM tool of this toolchain.
    pub fn llvm(&self, tool: &str) -> PathBuf {
        self.llvm_bin.join(tool)
    }
}

/// Checks that `sysroot` has `rust-src` and `llvm-tools`; returns the LLVM tools' directory.
pub fn check_components(name: &str, sysroot: &Path, host: &str) -> Result<PathBuf> {
    let src = sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml");
    if !src.is_file() {
        return Err(Error::Toolchain {
            problem: format!(
                "toolchain `{name}` lacks the `rust-src` component (needed to build `core` for nvptx64)"
            ),
            fix: format!("rustup component add rust-src --toolchain {name}   (or `shmem setup`)"),
        });
    }
    let llvm_bin = sysroot.join("lib/rustlib").join(host).join("bin");
    for tool in ["llvm-link", "opt", "llc", "llvm-dis"] {
        if !llvm_bin.join(tool).is_file() {
            return Err(Error::Toolchain {
                problem: format!(
                    "toolchain `{name}` lacks the `llvm-tools` component ({tool} not in {})",
                    llvm_bin.display()
                ),
                fix: format!(
                    "rustup component add llvm-tools --toolchain {name}   (or `shmem setup`)"
                ),
            });
        }
    }
    Ok(llvm_bin)
}

fn host_triple(rustc: &Path) -> Result<String> {
    let vv = run_stdout(Command::new(rustc).arg("-vV"))?;
    vv.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| Error::Toolchain {
            problem: "cannot read the host triple from `rustc -vV`".into(),
            fix: "reinstall the toolchain".into(),
        })
}

/// Runs a command and returns stdout, or a `Tool` error with its output.
pub(crate) fn run_stdout(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| Error::Tool {
        command: shown.clone(),
        output: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(Error::Tool {
            command: shown,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_components_are_named_with_the_fix() {
        let root = std::env::temp_dir().join(format!("shmem-sysroot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let e = check_components("nightly", &root, "x86_64-unknown-linux-gnu")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lacks the `rust-src` component")
                && e.contains("rustup component add rust-src --toolchain nightly"),
            "{e}"
        );
        let core = root.join("lib/rustlib/src/rust/library/core");
        std::fs::create_dir_all(&core).unwrap();
        std::fs::write(core.join("Cargo.toml"), "").unwrap();
        let e = check_components("nightly", &root, "x86_64-unknown-linux-gnu")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lacks the `llvm-tools` component")
                && e.contains("rustup component add llvm-tools"),
            "{e}"
        );
    }
}
