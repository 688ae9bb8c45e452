//! What device operations do when kernel code runs on the host: the one place that chooses.
//!
//! Kernel crates compile for the host so that the whole workspace type-checks without the
//! GPU target. There, with the CPU simulator (cfg `shmem_sim`: the `sim` feature on a host
//! target, set by `build.rs`), device operations run on the simulated GPU thread that calls
//! them ([`crate::sim`]); without it, or outside a simulated launch, reaching one is a bug in
//! the caller, reported by name. The API modules call this module (intrinsics) and
//! [`crate::sys`] (NVSHMEM, which takes its host functions from here) and never ask which.

/// Panics: `op` is a device operation reached on the host outside a simulated launch.
#[cold]
#[inline(never)]
#[track_caller]
pub(crate) fn device_only(op: &str) -> ! {
    panic!(
        "shmem_device::{op} runs only inside a GPU kernel: build the kernel crate with \
         `cargo xtask build-ptx` and launch it through shmem-host (or run it on the CPU \
         simulator, shmem-host's `sim` feature)"
    )
}

/// Bulk copies ([`crate::bulk`]) as the simulator performs them.
#[cfg(shmem_sim)]
pub(crate) use crate::sim::bulk;
#[cfg(shmem_sim)]
pub(crate) use crate::sim::device::{
    ballot, dynamic_shared, named_barrier, register, shfl_idx, shfl_xor, step, sync_threads,
    sync_threads_vote, sync_warp,
};
/// NVSHMEM's device functions as the simulator implements them (what `crate::sys`
/// re-exports on the host).
#[cfg(shmem_sim)]
pub(crate) use crate::sim::sys as nvshmem;

/// The clock and program-wide bound of bounded waits ([`crate::bound`]) on the host.
#[cfg(shmem_sim)]
pub(crate) use crate::sim::{now_ns, wait_bound_ns};

#[cfg(not(shmem_sim))]
pub(crate) use unsimulated::bulk;
#[cfg(not(shmem_sim))]
pub(crate) use unsimulated::{
    ballot, dynamic_shared, named_barrier, now_ns, register, shfl_idx, shfl_xor, step,
    sync_threads, sync_threads_vote, sync_warp, wait_bound_ns,
};

/// Without the simulator every device operation reached on the host panics with its name.
#[cfg(not(shmem_sim))]
mod unsimulated {
    use super::device_only;

    #[track_caller]
    pub(crate) fn register(name: &str) -> u32 {
        device_only(name)
    }
    #[track_caller]
    pub(crate) fn sync_threads() {
        device_only("sync_threads")
    }
    #[track_caller]
    pub(crate) fn sync_threads_vote(_pred: bool) -> (u32, u32) {
        device_only("sync_threads_count")
    }
    #[track_caller]
    pub(crate) fn sync_warp(_mask: u32) {
        device_only("sync_warp")
    }
    #[track_caller]
    pub(crate) fn named_barrier(_id: u32, _threads: u32, wait: bool) {
        device_only(if wait {
            "NamedBarrier::sync"
        } else {
            "NamedBarrier::arrive"
        })
    }
    #[track_caller]
    pub(crate) fn shfl_xor(_v: u32, _lane_mask: u32) -> u32 {
        device_only("shfl_xor")
    }
    #[track_caller]
    pub(crate) fn shfl_idx(_v: u32, _src_lane: u32) -> u32 {
        device_only("shfl_idx")
    }
    #[track_caller]
    pub(crate) fn ballot(_pred: bool) -> u32 {
        device_only("ballot")
    }
    #[track_caller]
    pub(crate) fn step(op: &str, _poll: bool) {
        device_only(op)
    }
    #[track_caller]
    pub(crate) fn dynamic_shared() -> (*mut u8, u32) {
        device_only("shared::dynamic")
    }

    /// Bulk copies: each panics with its name.
    pub(crate) mod bulk {
        use super::device_only;

        #[track_caller]
        pub(crate) unsafe fn init(_at: *mut u64, _arrivals: u32) {
            device_only("bulk::Barrier::init")
        }
        #[track_caller]
        pub(crate) unsafe fn arrive_expect_tx(_at: *mut u64, _bytes: u32) {
            device_only("bulk::Barrier::arrive_expect_tx")
        }
        #[track_caller]
        pub(crate) unsafe fn wait(_at: *mut u64, _parity: u32) {
            device_only("bulk::Barrier::wait")
        }
        #[track_caller]
        pub(crate) unsafe fn copy_to_shared(
            _dst: *mut u8,
            _src: *const u8,
            _bytes: u32,
            _bar: *mut u64,
        ) {
            device_only("bulk::copy_to_shared")
        }
        #[track_caller]
        pub(crate) unsafe fn copy_to_global(_dst: *mut u8, _src: *const u8, _bytes: u32) {
            device_only("bulk::copy_to_global")
        }
        #[track_caller]
        pub(crate) fn commit_group() {
            device_only("bulk::commit_group")
        }
        #[track_caller]
        pub(crate) fn wait_read<const N: u32>() {
            device_only("bulk::wait_read")
        }
        #[track_caller]
        pub(crate) fn wait_all() {
            device_only("bulk::wait_all")
        }
    }
    /// No kernel runs here, so no wait is bounded.
    pub(crate) fn wait_bound_ns() -> u64 {
        0
    }
    #[track_caller]
    pub(crate) fn now_ns() -> u64 {
        device_only("a bounded wait's clock")
    }
}
