//! Host side of shmem-rs: NVSHMEM started on every GPU, symmetric memory, kernel modules
//! from `cargo xtask build-ptx`, typed launches.
//!
//! ```no_run
//! use shmem_host::{LaunchConfig, Shmem};
//! # fn main() -> shmem_host::Result<()> {
//! let rt = Shmem::init()?; // under `shmem-run -n 2 -- ./my-program`
//! let received = rt.alloc::<i32>(1)?; // collective, same size on every PE
//! let module = rt.load_module("target/ptx".as_ref(), "ring-kernels")?;
//! let ring = module.kernel::<ring_kernels::ring>()?;
//! // SAFETY: every PE launches it; `received` is a symmetric i32.
//! unsafe { ring.launch(LaunchConfig::linear(1, 32), (&received,))? };
//! rt.barrier_all()?;
//! println!("PE {} received {:?}", rt.my_pe(), received.to_vec()?);
//! # Ok(()) }
//! ```
//!
//! | NVSHMEM (C) | shmem-host |
//! |---|---|
//! | `nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, ...)` | [`Shmem::init`] (under [`launcher`] / `shmem-run`) |
//! | `nvshmem_finalize()` | dropping [`Shmem`] |
//! | `nvshmem_malloc(n * sizeof(T))`, `nvshmem_free` | [`Shmem::alloc`] → [`SymBuffer`], dropped |
//! | `cuModuleLoadData` + `nvshmemx_cumodule_init` | [`Shmem::load_module`], [`Shmem::load_cuda_module`] |
//! | `cuLaunchKernel` / `nvshmemx_collective_launch` | [`KernelFn::launch`] with a [`LaunchConfig`] (cooperative when the manifest says collective) |
//! | `cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, p)` | [`LaunchConfig::with_shared_carveout`] ([`SharedCarveout`]) |
//! | `nvshmem_barrier_all()`, `nvshmemx_barrier_all_on_stream(s)` | [`Shmem::barrier_all`], [`Shmem::barrier_all_on`] |
//! | `nvshmem_team_split_strided`, `_split_2d`, `nvshmemx_barrier_on_stream`, `nvshmemx_TYPE_OP_reduce_on_stream` | [`Team::split_strided`], [`Team::split_2d`], [`Team::barrier_on`], [`Team::reduce_on`] |
//! | `cudaStreamBeginCapture` … `cudaGraphLaunch` | [`Shmem::capture`] → [`Graph::launch`] |
//!
//! NVSHMEM's host library is loaded at run time ([`nvshmem`]); building this crate needs
//! neither CUDA nor NVSHMEM.
//!
//! Without a GPU the same program runs on the CPU simulator ([`sim`], feature `sim`, on by
//! default): [`launcher::run`] starts the PEs as threads of this process where no GPU is
//! visible, and [`Shmem::init`] on such a thread returns its simulated PE.

pub mod args;
mod backend;
pub mod buffer;
pub mod error;
pub mod launcher;
pub mod measure;
pub mod module;
pub mod nvshmem;
pub mod runtime;
#[cfg(feature = "sim")]
#[path = "backend/sim.rs"]
pub mod sim;
pub mod stream;
pub mod team;

pub use buffer::{CudaView, Registered, SymAt, SymBuffer};
/// The CUDA driver bindings the runtime is built on (contexts, streams, events).
pub use cudarc;
pub use error::{Error, Result};
pub use module::{
    EmbeddedBuild, EmbeddedKernels, Implementation, KernelFn, LaunchConfig, Module, ModuleKind,
    SharedCarveout,
};
pub use runtime::{BackendKind, Mark, Shmem, StreamHold};
pub use stream::{Capture, Enqueue, Graph, RawStream, StreamRef, UserStream};
pub use team::{HostReduce, Team};
