//! Developer commands for shmem-rs (the cargo-xtask convention): `cargo xtask <command>`.
//!
//! ```text
//! cargo xtask setup      [--nvshmem-version V]... [--no-ptxas] [--toolchain T]
//! cargo xtask build-ptx  [--arch sm_90[,sm_80]]... [--nvshmem DIR] [--toolchain T]
//!                        [--require-ptxas] [--out DIR] [CRATE|PATH]...
//! cargo xtask sass       [--arch sm_90] [--kernel NAME] [--raw] CRATE|CUBIN...
//!                        the SASS of built kernels (cuobjdump and nvdisasm from pip)
//! cargo xtask ci         everything CI runs: setup, fmt, clippy, docs, tests
//! cargo xtask gpu-bundle [--nvshmem-3.8] [--openmpi] [--twins] [--project]
//!                        what a GPU machine runs, into carry/ (see scripts/gpu-run.sh)
//! ```

mod build_ptx;
mod ci;
mod flags;
mod gpu_bundle;
mod sass;
mod setup;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        eprintln!("{}", flags::USAGE);
        return ExitCode::from(2);
    }
    let cmd = args.remove(0);
    let result = match cmd.as_str() {
        "setup" => setup::run(args),
        "build-ptx" => build_ptx::run(args),
        "sass" => sass::run(args),
        "ci" => ci::run(args),
        "gpu-bundle" => gpu_bundle::run_bundle(args),
        "help" | "--help" | "-h" => {
            println!("{}", flags::USAGE);
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{}", flags::USAGE)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (xtask lives one level below it).
pub fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}
