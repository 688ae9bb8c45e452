//! Block-shared memory: CUDA's `extern __shared__` array, sized at launch.
//!
//! A launch gives each block `shared_mem_bytes` of dynamic shared memory (shmem-host's
//! `LaunchConfig::with_shared_mem`); [`dynamic`] returns a pointer to it, checked against the
//! size this launch gave ([`dynamic_bytes`]). Its threads share it, and it lives as long as
//! the block: the usual place for a count one warp publishes and the others wait for, a
//! staging tile, or a block's partial sums.
//!
//! ```ignore
//! use shmem_device::prelude::*;
//! use shmem_device::scoped::{self, Cta};
//! use shmem_device::shared;
//!
//! /// Launched with `LaunchConfig::linear(g, 256).with_shared_mem(4)`.
//! #[shmem_kernel]
//! pub unsafe fn producer_consumer(out: DeviceSlice<u32>) {
//!     let Some(flag) = shared::dynamic::<u32>(1) else { return };
//!     if thread_idx_x() == 0 {
//!         // SAFETY: the block's own word; nobody reads it before the barrier.
//!         unsafe { scoped::store_relaxed(Cta, flag, 0) };
//!     }
//!     sync_threads();
//!     // warp 0 publishes with a release, the others wait with an acquire ...
//! }
//! ```
//!
//! Memory in it is not initialised: a block sees what the block before it on the same SM
//! left there (the simulator fills it with `0xa5` bytes, so that a read before a write shows).
//! So a flag is reset, and the block synchronised, before anyone polls it: without the
//! reset a block on an H100 read a finished block's flag as set, and that block's words.
//!
//! # Safety of accesses through a [`SharedPtr`]
//! The address is within the block's dynamic shared memory and aligned for `T`; accesses
//! from several threads of the block are ordered by a barrier ([`crate::sync_threads`]) or by
//! the scoped operations ([`crate::scoped`], scope [`Cta`](crate::scoped::Cta)), or they are a
//! data race.

pub use crate::mem::SharedPtr;

/// The alignment [`dynamic`] guarantees: CUDA aligns dynamic shared memory to 16 bytes.
pub const ALIGN: usize = 16;

/// Bytes of dynamic shared memory this launch gave each block (`%dynamic_smem_size`).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn dynamic_bytes() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let bytes: u32;
        // SAFETY: reads a special register; no memory is touched.
        unsafe {
            core::arch::asm!(
                "mov.u32 {0}, %dynamic_smem_size;",
                out(reg32) bytes,
                options(pure, nomem, nostack)
            )
        };
        bytes
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::dynamic_shared().1
}

/// The block's dynamic shared memory as `len` elements of `T`, or `None` when this launch
/// gave fewer than `len * size_of::<T>()` bytes. `T`'s alignment must be at most [`ALIGN`]
/// (checked at compile time).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn dynamic<T>(len: usize) -> Option<SharedPtr<T>> {
    const { assert!(core::mem::align_of::<T>() <= ALIGN) };
    let need = len.checked_mul(core::mem::size_of::<T>())?;
    if need > dynamic_bytes() as usize {
        return None;
    }
    #[cfg(target_arch = "nvptx64")]
    let p = core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<u128>().cast::<T>();
    #[cfg(not(target_arch = "nvptx64"))]
    let p = crate::host::dynamic_shared().0.cast::<T>();
    // SAFETY: the start of this block's dynamic shared memory, `need` bytes of it given by
    // the launch and aligned for `T` (`ALIGN`): a block-shared address of `len` `T`s.
    Some(unsafe { SharedPtr::from_raw(p) })
}
