//! The device-API suite (`suite/mod.rs`) on real GPUs: every test launched through the
//! launcher on every visible GPU (or `SHMEM_GPU_PES` PEs, several per GPU under CUDA MPS),
//! each result compared with what the host expects (`suite_common::expect`). Also the
//! runtime's failure paths on real hardware.
//!
//! Opt in with `SHMEM_GPU_TESTS=1`; kernels come from `SHMEM_PTX_DIR` (default
//! `target/ptx`, made by `cargo xtask build-ptx`). Without the opt-in every test prints
//! that it was skipped. Each test re-runs this binary once per PE under
//! `shmem_host::launcher` (`<test> --exact`), and the PEs do the checking. Under `mpirun`
//! (`mpirun -np 2 gpu-tests <test> --exact`), each rank is a PE directly, through NVSHMEM's
//! PMIx bootstrap; one test per `mpirun`, since NVSHMEM starts once per process.

mod suite;

use shmem_host::Shmem;
use shmem_host::launcher::{gpu_test, visible_gpus};

/// Runs `body` on every PE (at least 2): see [`shmem_host::launcher::gpu_test`].
fn on_all_pes(name: &str, body: fn(&Shmem)) {
    if let Ok(n) = visible_gpus() {
        let n = std::env::var("SHMEM_GPU_PES").map_or(n, |v| v.parse().unwrap_or(n));
        let opted_in = std::env::var("SHMEM_GPU_TESTS").as_deref() == Ok("1");
        let is_pe = shmem_host::runtime::Bootstrap::from_env(|k| std::env::var(k).ok()).is_ok();
        assert!(
            !opted_in || is_pe || n >= 2,
            "the GPU suite needs at least 2 PEs, found {n} (SHMEM_GPU_PES=2 runs 2 on one GPU under MPS)"
        );
    }
    gpu_test(name, None, body);
}

/// One `#[test]` per suite case, named like it (what `gpu_test` re-runs in each PE).
macro_rules! gpu_tests {
    ($($name:ident: $pes:literal),* $(,)?) => { $(
        #[test]
        fn $name() {
            on_all_pes(stringify!($name), suite::$name);
        }
    )* };
}

suite::simulated_cases!(gpu_tests);
suite::gpu_only_cases!(gpu_tests);
