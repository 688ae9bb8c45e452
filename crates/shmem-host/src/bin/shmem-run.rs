//! `shmem-run`: runs a program once per PE on this machine, forwarding output with a
//! `[pe N]` prefix. If a PE fails, the others are stopped and the exit status is non-zero,
//! naming the PE.

use clap::Parser;
use shmem_host::launcher::{LaunchSpec, launch, visible_gpus};
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

/// Runs PROGRAM once per PE (one process each), with NVSHMEM's unique id handed from PE 0
/// to the others. PEs spread over the visible GPUs round-robin; more PEs than GPUs need
/// CUDA MPS (`nvidia-cuda-mps-control -d`), and each PE then gets an equal share of its
/// GPU's threads (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, unless set).
#[derive(Parser, Debug)]
#[command(name = "shmem-run", version)]
struct Args {
    /// Number of PEs [default: one per visible GPU].
    #[arg(short = 'n', long = "np", value_parser = clap::value_parser!(u32).range(1..))]
    n: Option<u32>,
    /// Stop every PE and fail after this many seconds.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// The program every PE runs, and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let gpus = match visible_gpus() {
        Ok(0) => return fail("no GPU visible"),
        Ok(g) => g,
        Err(e) => return fail(&e.to_string()),
    };
    let mut command = a.command;
    let program = command.remove(0).into();
    match launch(&LaunchSpec {
        n: a.n.map_or(gpus, |n| n as usize),
        gpus: Some(gpus),
        program,
        args: command,
        timeout: a.timeout.map(Duration::from_secs),
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("shmem-run: {msg}");
    ExitCode::FAILURE
}
