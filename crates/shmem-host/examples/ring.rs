//! The ring, end to end: every PE writes its number into the next PE's buffer from the GPU.
//!
//! Start it directly (it launches one PE per visible GPU) or under `shmem-run -n N` or
//! `mpirun`. Needs the kernels built first: `cargo xtask build-ptx`. Without a GPU (or with
//! `SHMEM_SIM=1`) it runs 2 PEs on the CPU simulator, from its own build of the kernel.
//!
//! 1. start NVSHMEM (one process per GPU; the unique id goes from PE 0 to the others);
//! 2. allocate one symmetric `i32`, collectively;
//! 3. load `ring-kernels` for this GPU and register it with NVSHMEM;
//! 4. launch `ring` (a typed launch: the argument must be a symmetric `i32` buffer);
//! 5. barrier, then read what arrived: PE `i` holds `i - 1` (PE 0 holds `n - 1`).

use clap::Parser;
use shmem_host::{LaunchConfig, Shmem};
use std::path::PathBuf;
use std::process::ExitCode;

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

fn run() -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let received = rt.alloc::<i32>(1)?;
    received.copy_from(&[-1])?;
    let module = rt.load_module(&ptx_dir(), "ring-kernels")?;
    let ring = module.kernel::<ring_kernels::ring>()?;
    rt.barrier_all()?;
    // SAFETY: every PE launches `ring` once; `received` is a symmetric i32 on every PE, read
    // only after the barrier below.
    unsafe { ring.launch(LaunchConfig::linear(1, 32), (&received,))? };
    rt.barrier_all()?;
    let got = received.to_vec()?[0];
    let want = (me + n - 1) % n;
    println!(
        "PE {me} of {n}: received {got} (expected {want}) from {}",
        module.origin().display()
    );
    if got != want {
        return Err(shmem_host::Error::Invalid(format!(
            "PE {me} received {got}, expected {want}"
        )));
    }
    Ok(())
}

/// The ring: every PE writes its number into the next PE's buffer from the GPU.
#[derive(Parser)]
struct Cli {
    /// PEs to launch when started directly [default: one per GPU; 2 on the simulator].
    /// More PEs than GPUs need CUDA MPS.
    #[arg(long, value_name = "N")]
    pes: Option<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match shmem_host::launcher::run(cli.pes, run) {
        Ok(()) => {
            println!("ring: every PE received its neighbour's number");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ring: {e}");
            ExitCode::FAILURE
        }
    }
}
