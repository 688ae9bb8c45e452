//! {{name}}: every PE sends 256 numbers to the next PE from the GPU, and checks what it got.
//!
//! `cargo run --release` runs one PE per local GPU, or, where there is no GPU, 2 PEs on the
//! CPU simulator; `SHMEM_PES=4` chooses the number of PEs, `SHMEM_SIM=1` the simulator.

use shmem_host::{EmbeddedKernels, Error, LaunchConfig, Shmem};
use std::process::ExitCode;

/// The kernels, built by `build.rs` and embedded: the program runs from any directory.
static KERNELS: EmbeddedKernels = shmem_host::include_kernels!("{{name}}-kernels");

const LEN: usize = 256;

/// One PE's part (every PE runs it).
fn pe() -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let data = rt.alloc::<i32>(LEN)?; // collective: the same size on every PE
    let module = rt.load_embedded(&KERNELS)?;
    let send = module.kernel::<{{crate}}_kernels::send_to_next>()?;
    rt.barrier_all()?;
    // SAFETY: every PE launches it once; `data` is symmetric with LEN elements everywhere and
    // read only after the barrier below.
    unsafe { send.launch(LaunchConfig::linear(1, LEN as u32), (&data,))? };
    rt.barrier_all()?;
    let from = (me + n - 1) % n;
    let want: Vec<i32> = (0..LEN as i32).map(|i| from * 1000 + i).collect();
    if data.to_vec()? != want {
        return Err(Error::Invalid(format!(
            "PE {me}: the numbers from PE {from} are wrong"
        )));
    }
    println!(
        "PE {me} of {n}: {LEN} numbers from PE {from}, all correct ({})",
        module.origin().display()
    );
    Ok(())
}

fn main() -> ExitCode {
    match shmem_host::launcher::run(None, pe) {
        Ok(()) => {
            println!("PASS");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{{name}}: {e}");
            ExitCode::FAILURE
        }
    }
}
