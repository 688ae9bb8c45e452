//! Device side of shmem-rs: NVSHMEM from Rust GPU kernels.
//!
//! A kernel is an `unsafe fn` marked [`#[shmem_kernel]`](shmem_kernel). It is compiled to PTX
//! for `nvptx64-nvidia-cuda` by `cargo xtask build-ptx` (or `shmem_build` from a `build.rs`),
//! linked with NVSHMEM's device library, and launched on every PE by `shmem-host`.
//!
//! ```ignore
//! use shmem_device::prelude::*;
//!
//! /// Every PE writes its number into the next PE's `dst`.
//! #[shmem_kernel]
//! pub unsafe fn ring(dst: Sym<i32>) {
//!     if global_idx_x() == 0 {
//!         let (me, n) = (my_pe(), n_pes());
//!         unsafe { p(dst, me, (me + 1) % n) };
//!         quiet();
//!     }
//! }
//! ```
//!
//! # From CUDA C++ NVSHMEM
//!
//! | CUDA C++ | shmem-device |
//! |---|---|
//! | `__global__ void k(int *sym, ...)` | `#[shmem_kernel] unsafe fn k(sym: SymSlice<i32>, ...)` |
//! | `threadIdx.x`, `blockIdx.x`, `blockDim.x`, `__syncthreads()` | [`thread_idx_x`], [`block_idx_x`], [`block_dim_x`], [`sync_threads`] |
//! | `nvshmem_my_pe()`, `nvshmem_n_pes()` | [`my_pe`], [`n_pes`] |
//! | `nvshmem_team_my_pe(NVSHMEMX_TEAM_NODE)` | `Team::NODE.my_pe()` |
//! | `nvshmem_ptr(p, pe)` | [`ptr`]`(sym, pe) -> Option<PeerPtr<T>>` |
//! | `nvshmem_int_p(dst, v, pe)` / `nvshmem_int_g(src, pe)` | [`rma::p`]`(dst, v, pe)` / [`rma::g`]`(src, pe)` |
//! | `nvshmem_int_put(dst, src, n, pe)` | [`rma::put`]`(Thread, dst, src, pe)` |
//! | `nvshmemx_int_put_nbi_block(dst, src, n, pe)` | [`rma::put_nbi`]`(Block, dst, src, pe)` |
//! | `nvshmemx_getmem_warp(dst, src, bytes, pe)` | [`rma::get`]`(Warp, dst, src, pe)` |
//! | `nvshmem_putmem_signal_nbi(d, s, b, sig, v, NVSHMEM_SIGNAL_ADD, pe)` | [`signal::put_signal_nbi`]`(Thread, d, s, sig, v, SignalOp::Add, pe)` |
//! | `nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v)` | [`signal::signal_wait_until`]`(sig, Cmp::Ge, v)` |
//! | `nvshmem_uint64_wait_until(ivar, NVSHMEM_CMP_EQ, v)` | [`p2p::wait_until`]`(ivar, Cmp::Eq, v)` |
//! | `while (*(volatile uint64_t *)sig < v) __nanosleep(ns);` (a wait with a backoff: none in NVSHMEM) | [`signal::signal_wait_until_backoff`]`(sig, Cmp::Ge, v, ns)`; [`nanosleep`]`(ns)` |
//! | (a wait that gives up: none in NVSHMEM) | [`p2p::wait_until_within`]`(ivar, Cmp::Eq, v, bound)`, or any wait under a program-wide bound ([`bound`]) |
//! | `nvshmem_int_atomic_fetch_add(dst, v, pe)` | [`amo::atomic_fetch_add`]`(dst, v, pe)` |
//! | `nvshmem_fence()`, `nvshmem_quiet()` | [`fence`], [`quiet`] |
//! | `nvshmem_barrier_all()`, `nvshmemx_sync_all_block()` | [`coll::barrier_all`]`(Thread)`, [`coll::sync_all`]`(Block)` |
//! | `nvshmemx_float_sum_reduce_block(team, d, s, n)` | [`coll::reduce`]`(Block, team, Sum, d, s)` |
//! | `ld.acquire.sys.global.u32` | [`scoped::load_acquire`]`(Sys, p)` |
//! | `while (cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*p).load(cuda::memory_order_acquire) < v);` | [`scoped::wait_acquire`]`(Gpu, p, Cmp::Ge, v)` (under the program-wide bound) |
//! | `extern __shared__ uint32_t smem[];` (launched with `n` bytes) | [`shared::dynamic`]`::<u32>(len) -> Option<SharedPtr<u32>>` |
//! | `cp.async.bulk` with an `mbarrier` (`cuda::memcpy_async`, `cuda::ptx`) | [`bulk::copy_to_shared`]`(dst, src, bytes, bar)`, [`bulk::copy_to_global`], [`bulk::Barrier`] |
//! | `cudaGridDependencySynchronize()`, `cudaTriggerProgrammaticLaunchCompletion()` | [`pdl::wait`], [`pdl::launch_dependents`] (launched with `LaunchConfig::with_dependent_launch`) |
//!
//! # Memory and safety model
//!
//! Remote operands are symmetric addresses ([`Sym`], [`SymSlice`]); see [`mem`] for the
//! address types. NVSHMEM operations are `unsafe`: the compiler cannot check that the PE
//! exists, that every PE reaches a collective, or that nobody reads a buffer a put is still
//! writing. Each module documents those obligations once in a "Safety" section, and each
//! function refers to it. Reads of local memory through the handles are `unsafe` too,
//! because GPU memory is shared by every thread and PE.
//!
//! On the host this crate compiles (so the workspace type-checks and documents without the
//! GPU target), but device operations panic if executed there.

#![no_std]
// `core::intrinsics::gpu`, the one way to the launch-sized shared memory ([`shared`]), sits
// behind `core_intrinsics`.
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        stdarch_nvptx,
        asm_experimental_arch,
        core_intrinsics,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem
    )
)]

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(all(target_arch = "nvptx64", feature = "panic-handler"))]
mod panic;

pub mod amo;
pub mod bf16;
pub mod bound;
pub mod bulk;
pub mod coll;
pub mod fp8;
pub mod hint;
pub mod kernel;
pub mod mem;
pub mod order;
pub mod p2p;
pub mod pdl;
pub mod rma;
pub mod scope;
pub mod scoped;
pub mod shared;
pub mod signal;
#[cfg(shmem_sim)]
pub mod sim;
pub mod sys;
pub mod team;
pub mod thread;
pub mod types;

pub use mem::{
    DevicePtr, DeviceSlice, LocalSlice, PeerPtr, PeerSlice, Sym, SymSlice, ptr, ptr_slice,
};
pub use order::{fence, quiet};
pub use scope::{Block, Thread, Warp};
pub use shmem_macros::shmem_kernel;
pub use team::{Team, my_pe, n_pes};
pub use thread::*;

/// Everything a kernel usually needs: `use shmem_device::prelude::*;`.
pub mod prelude {
    pub use crate::amo::*;
    pub use crate::coll::{
        And, Max, Min, Or, Prod, Sum, Xor, alltoall, barrier, barrier_all, broadcast, fcollect,
        reduce, sync_all, team_sync,
    };
    pub use crate::mem::{
        DevicePtr, DeviceSlice, PeerPtr, PeerSlice, Sym, SymSlice, ptr, ptr_slice,
    };
    pub use crate::order::{fence, quiet};
    pub use crate::p2p::{
        Cmp, test, test_all, test_any, wait_until, wait_until_all, wait_until_all_within,
        wait_until_any, wait_until_any_within, wait_until_within,
    };
    pub use crate::rma::{g, get, get_nbi, p, put, put_nbi};
    pub use crate::scope::{Block, Thread, Warp};
    pub use crate::signal::{
        SignalOp, put_signal, put_signal_nbi, signal_fetch, signal_op, signal_wait_until,
        signal_wait_until_backoff, signal_wait_until_within,
    };
    pub use crate::team::{Team, my_pe, n_pes};
    pub use crate::thread::*;
    pub use shmem_macros::shmem_kernel;
}
