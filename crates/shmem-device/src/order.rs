//! Ordering and completion of this PE's outstanding operations.
//!
//! - [`fence`]: puts, AMOs and signals issued before it to a given PE are delivered to that
//!   PE before those issued after it. It completes nothing.
//! - [`quiet`]: every put, non-blocking get, AMO and signal this thread issued before it is
//!   complete and visible to all PEs when it returns; local buffers of `_nbi` calls may be
//!   reused.

/// Orders this thread's puts, AMOs and signals per destination PE. NVSHMEM: `nvshmem_fence`.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn fence() {
    // SAFETY: `nvshmem_fence` has no arguments and only orders memory operations.
    unsafe { crate::sys::nvshmem_fence() }
}

/// Completes this thread's outstanding operations. NVSHMEM: `nvshmem_quiet`.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn quiet() {
    // SAFETY: `nvshmem_quiet` has no arguments and only waits for completions.
    unsafe { crate::sys::nvshmem_quiet() }
}
