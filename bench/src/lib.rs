//! shmem-bench: NVSHMEM's standard measurements (perftests) for kernels written with
//! shmem-rs, run next to the same kernels in CUDA C++ (`cuda/perftest.cu`).
//!
//! - [`kernels`]: the Rust measurement kernels;
//! - `host` (host builds): the plan of measurements, the interleaved runs, the statistics,
//!   the table and the JSON file; `src/bin/shmem-bench.rs` is the command;
//! - `pool` (host builds): Rust/CUDA C++ ratios pooled over several runs, with their 95 %
//!   intervals, and a control's beside them; `src/bin/shmem-pool.rs` is the command;
//! - `plot.py` draws the curves from the JSON file; `run.sh` is the one command on the GPU
//!   machine (builds the CUDA C++ cubin with nvcc, runs both, plots).

#![cfg_attr(target_arch = "nvptx64", no_std)]

pub mod kernels;

#[cfg(not(target_arch = "nvptx64"))]
pub mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub mod pool;
