//! Step 1: compile a kernel crate for `nvptx64-nvidia-cuda` into one fat-LTO bitcode module.
//!
//! The child cargo runs with a clean environment (nothing from an outer cargo or build
//! script leaks in), its own target directory per arch (so switching arch rebuilds nothing),
//! `-Zbuild-std=core`, and profile settings by environment so kernel crates need no special
//! `Cargo.toml`. rustc's nvptx "linker" is replaced by `true`: we only want the bitcode
//! (`--emit=llvm-bc`), and do the real link ourselves with NVSHMEM's library.

use crate::Arch;
use crate::error::{Error, Result};
use crate::toolchain::Toolchain;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Removes from `cmd`'s environment what an outer cargo or build script sets (its `CARGO_*`
/// but the user's configuration, `RUSTC*`, `RUSTFLAGS`, `OUT_DIR`, `TARGET`, ...), so that the
/// cargo it starts builds as one started by hand: the kernel builds here, and `cargo xtask
/// gpu-bundle --project`'s build of a user's project.
pub fn scrub(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        let keep_cargo = [
            "CARGO_HOME",
            "CARGO_NET_",
            "CARGO_HTTP_",
            "CARGO_REGISTRIES_",
            "CARGO_REGISTRY_",
            "CARGO_TERM_",
        ]
        .iter()
        .any(|p| k.starts_with(p));
        let drop = (k.starts_with("CARGO") && !keep_cargo)
            || k.starts_with("RUSTC")
            || k.starts_with("RUSTDOC")
            || k.starts_with("RUSTUP_TOOLCHAIN")
            || [
                "RUSTFLAGS",
                "OUT_DIR",
                "TARGET",
                "HOST",
                "PROFILE",
                "OPT_LEVEL",
                "DEBUG",
                "NUM_JOBS",
            ]
            .contains(&k.as_str());
        if drop {
            cmd.env_remove(&k);
        }
    }
}

/// Builds `package` (in the workspace at `manifest_path`) for `arch`; returns the bitcode.
pub fn build_bitcode(
    tc: &Toolchain,
    manifest_path: &Path,
    package: &str,
    arch: Arch,
    target_dir: &Path,
) -> Result<(PathBuf, String)> {
    let mut cmd = Command::new(&tc.cargo);
    scrub(&mut cmd);
    cmd.env("RUSTC", &tc.rustc)
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("-Ctarget-cpu={}", arch.name()),
        )
        .env("CARGO_TERM_COLOR", "never");
    if tc.bootstrap {
        cmd.env("RUSTC_BOOTSTRAP", "1");
    }
    cmd.arg("rustc")
        .arg("--manifest-path")
        .arg(manifest_path)
        .args([
            "-p",
            package,
            "--release",
            "--lib",
            "--crate-type",
            "cdylib",
        ])
        .args(["-Zbuild-std=core", "--target", "nvptx64-nvidia-cuda"])
        .arg("--target-dir")
        .arg(target_dir)
        .args([
            "--",
            "--emit=llvm-bc",
            "-Clinker=true",
            "-Zcrate-attr=feature(abi_ptx)",
        ]);
    let shown = format!("cargo rustc -p {package} --target nvptx64-nvidia-cuda ({arch})");
    let out = cmd.output().map_err(|e| Error::Tool {
        command: shown.clone(),
        output: e.to_string(),
    })?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(Error::Tool {
            command: shown,
            output: log,
        });
    }
    let deps = target_dir.join("nvptx64-nvidia-cuda/release/deps");
    let stem = package.replace('-', "_");
    let bc = deps.join(format!("{stem}.bc"));
    if !bc.is_file() {
        return Err(Error::Tool {
            command: shown,
            output: format!("{log}\n(no bitcode at {})", bc.display()),
        });
    }
    // Cargo expects the cdylib that the (skipped) nvptx link would have written; without it
    // every run recompiles the crate. An empty stand-in, newer than the sources, keeps cargo's
    // freshness check meaningful. The real PTX is ours, written elsewhere.
    let placeholder = deps.join(format!("{stem}.ptx"));
    std::fs::write(&placeholder, b"").map_err(|e| Error::Io {
        context: format!("writing {}", placeholder.display()),
        source: e,
    })?;
    Ok((bc, log))
}
