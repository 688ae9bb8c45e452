//! `shmem-run`: runs a program once per PE on this machine, forwarding output with a
//! `[pe N]` prefix. If a PE fails, the others are stopped and the exit status is non-zero,
//! naming the PE.

use clap::Parser;
use shmem_host::BackendKind;
use shmem_host::launcher::{LaunchSpec, choose_backend, launch, visible_gpus};
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

/// Runs PROGRAM once per PE (one process each), with NVSHMEM's unique id handed from PE 0
/// to the others. PEs spread over the visible GPUs round-robin; more PEs than GPUs need
/// CUDA MPS (`nvidia-cuda-mps-control -d`), and each PE then gets an equal share of its
/// GPU's threads (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, unless set). With SHMEM_SIM=1 (or no
/// GPU) it runs PROGRAM once, whose PEs are then threads on the CPU simulator (SHMEM_PES=N).
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
    let sim_var = std::env::var("SHMEM_SIM").ok();
    let gpus = match sim_var.as_deref() {
        Some("1") => Ok(0),
        _ => visible_gpus(),
    };
    let mut command = a.command;
    let program = command.remove(0);
    let gpus = match choose_backend(sim_var.as_deref(), &gpus) {
        Err(e) => return fail(&e.to_string()),
        Ok(c) if c.backend == BackendKind::Simulator => {
            // The simulator's PEs are threads of one process: run the program once.
            let mut cmd = std::process::Command::new(&program);
            cmd.args(&command).env("SHMEM_SIM", "1");
            if let Some(n) = a.n {
                cmd.env("SHMEM_PES", n.to_string());
            }
            eprintln!(
                "shmem-run: {}: running {} once, its PEs on the CPU simulator",
                c.why,
                program.to_string_lossy()
            );
            return match cmd.status() {
                Ok(s) if s.success() => ExitCode::SUCCESS,
                Ok(s) => fail(&format!("{} {s}", program.to_string_lossy())),
                Err(e) => fail(&format!("cannot start {}: {e}", program.to_string_lossy())),
            };
        }
        Ok(_) => gpus.unwrap_or(0),
    };
    let program = program.into();
    match launch(&LaunchSpec {
        n: a.n.map_or(gpus, |n| n as usize),
        gpus: Some(gpus),
        program,
        args: command,
        timeout: a.timeout.map(Duration::from_secs),
        env: Vec::new(),
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("shmem-run: {msg}");
    ExitCode::FAILURE
}
