//! Bulk copies: the SM's copy engine (the Tensor Memory Accelerator of sm_90 and up) moves a
//! whole range between global memory and the block's shared memory in one instruction,
//! holding no registers while the bytes are in flight. CUDA: `cp.async.bulk` with an
//! `mbarrier` (`cuda::memcpy_async` with a `cuda::barrier`, or `cuda::ptx`).
//!
//! - **In:** [`copy_to_shared`] completes on a [`Barrier`] in shared memory. A thread
//!   announces the bytes with [`Barrier::arrive_expect_tx`], issues the copy, and the
//!   threads that read the bytes wait for the barrier's phase ([`Barrier::wait`]).
//! - **Out:** [`copy_to_global`] reads shared memory and writes global memory: this GPU's,
//!   or a peer's mapped through [`crate::ptr`] (NVLink). The copies a thread issued since
//!   its last [`commit_group`] form a *bulk group*. [`wait_read`] waits until all but the
//!   newest `N` groups have read their shared memory (which may then be written again), and
//!   [`wait_all`] until every group's writes are complete and visible to the thread's
//!   ordinary loads, stores and fences ([`crate::quiet`] then publishes them).
//!
//! ```ignore
//! // One thread moves `bytes` from `src` to `dst` through `buf` (shared memory).
//! let bar = unsafe { Barrier::init(bar_at, 1) };
//! unsafe {
//!     bar.arrive_expect_tx(bytes);
//!     copy_to_shared(buf, src, bytes, bar);
//!     bar.wait(0);
//!     copy_to_global(dst, buf, bytes);
//! }
//! commit_group();
//! wait_all();
//! ```
//!
//! They exist where [`AVAILABLE`] is true: in builds for sm_90 and up, and on the simulator.
//! In older builds every function of this module stops the kernel (a trap); a kernel that
//! must run there tests [`AVAILABLE`] (a constant) first.
//!
//! The simulator makes the copies' bytes appear as late as the GPU may: a copy into shared
//! memory lands when a thread's [`Barrier::wait`] sees its phase complete, and a copy out
//! reads shared memory and writes global memory at the [`wait_read`] or [`wait_all`] of its
//! thread that covers its group. So a read of a slot before its wait, a slot written again
//! before its store has read it, and a result published before [`wait_all`] show up as
//! wrong data there. (On the GPU, copies out that no wait covers complete with the kernel;
//! the simulator drops them, which flags the missing wait.)
//!
//! # Safety common to every copy
//! Addresses and sizes are multiples of 16 bytes. The shared end is this block's shared
//! memory ([`crate::shared::dynamic`]); the global end is global memory (this GPU's or a
//! mapped peer's) valid for the bytes; neither end is touched by another thread or copy
//! while the copy may still read or write it.

use crate::mem::SharedPtr;

/// Whether this build has bulk copies: sm_90 and up, and the simulator.
pub const AVAILABLE: bool = cfg!(any(not(target_arch = "nvptx64"), target_feature = "sm_90"));

/// The alignment and the granularity of a bulk copy's addresses and sizes, in bytes.
pub const ALIGN: usize = 16;

/// An `mbarrier` in the block's shared memory: the completion of [`copy_to_shared`]s. Each
/// phase completes when the expected arrivals have arrived and every byte they announced has
/// landed; then the next phase begins, and the phases' parities alternate (0, 1, 0, ...).
#[derive(Clone, Copy)]
pub struct Barrier {
    at: *mut u64,
}

/// The build's implementation, chosen once: PTX from sm_90 up, traps in older builds, the
/// simulator (or a panic naming the operation) on the host, through `crate::host`.
#[cfg(not(target_arch = "nvptx64"))]
use crate::host::bulk as imp;

/// Bulk copies in PTX (sm_90 and up). Each function's safety is its public caller's contract.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
mod imp {
    /// The shared-memory address space's 32-bit address of a generic pointer into it.
    #[inline(always)]
    fn shared_addr<T>(p: *const T) -> u32 {
        let a: u32;
        // SAFETY: converts an address; nothing is accessed.
        unsafe {
            core::arch::asm!(
                "{{ .reg .u64 a; cvta.to.shared.u64 a, {p}; cvt.u32.u64 {a}, a; }}",
                p = in(reg64) p,
                a = out(reg32) a,
                options(pure, nomem, nostack)
            )
        };
        a
    }

    #[inline(always)]
    pub(super) unsafe fn init(at: *mut u64, arrivals: u32) {
        // SAFETY: the caller's contract: an aligned word of this block's shared memory.
        unsafe {
            core::arch::asm!(
                "mbarrier.init.shared::cta.b64 [{a}], {n};",
                "fence.mbarrier_init.release.cluster;",
                a = in(reg32) shared_addr(at),
                n = in(reg32) arrivals,
                options(nostack)
            )
        }
    }

    #[inline(always)]
    pub(super) unsafe fn arrive_expect_tx(at: *mut u64, bytes: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            core::arch::asm!(
                "mbarrier.arrive.expect_tx.shared::cta.b64 _, [{a}], {b};",
                a = in(reg32) shared_addr(at),
                b = in(reg32) bytes,
                options(nostack)
            )
        }
    }

    #[inline(always)]
    pub(super) unsafe fn wait(at: *mut u64, parity: u32) {
        loop {
            let done: u32;
            // SAFETY: the caller's contract.
            unsafe {
                core::arch::asm!(
                    "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{a}], {q}; selp.u32 {d}, 1, 0, p; }}",
                    a = in(reg32) shared_addr(at),
                    q = in(reg32) parity,
                    d = out(reg32) done,
                    options(nostack)
                )
            };
            if done != 0 {
                break;
            }
        }
    }

    #[inline(always)]
    pub(super) unsafe fn copy_to_shared(dst: *mut u8, src: *const u8, bytes: u32, bar: *mut u64) {
        // SAFETY: the caller's contract.
        unsafe {
            core::arch::asm!(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
                d = in(reg32) shared_addr(dst),
                s = in(reg64) src,
                n = in(reg32) bytes,
                b = in(reg32) shared_addr(bar),
                options(nostack)
            )
        }
    }

    #[inline(always)]
    pub(super) unsafe fn copy_to_global(dst: *mut u8, src: *const u8, bytes: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            core::arch::asm!(
                "cp.async.bulk.global.shared::cta.bulk_group [{d}], [{s}], {n};",
                d = in(reg64) dst,
                s = in(reg32) shared_addr(src),
                n = in(reg32) bytes,
                options(nostack)
            )
        }
    }

    #[inline(always)]
    pub(super) fn commit_group() {
        // SAFETY: groups this thread's own bulk copies; touches no memory.
        unsafe { core::arch::asm!("cp.async.bulk.commit_group;", options(nostack)) }
    }

    #[inline(always)]
    pub(super) fn wait_read<const N: u32>() {
        // SAFETY: waits for this thread's own bulk copies.
        unsafe {
            core::arch::asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack))
        }
    }

    #[inline(always)]
    pub(super) fn wait_all() {
        // SAFETY: waits for this thread's own bulk copies, then fences between proxies.
        unsafe {
            core::arch::asm!(
                "cp.async.bulk.wait_group 0;",
                "fence.proxy.async.global;",
                options(nostack)
            )
        }
    }
}

/// Builds without bulk copies (before sm_90): every function stops the kernel (see
/// [`AVAILABLE`](super::AVAILABLE)).
#[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90")))]
mod imp {
    #[inline(always)]
    fn unavailable() -> ! {
        // SAFETY: `trap` ends the kernel with an error the host reports; nothing is left half
        // done that a caller relied on (the copy was never issued).
        unsafe { core::arch::nvptx::trap() }
    }
    #[inline(always)]
    pub(super) unsafe fn init(_at: *mut u64, _arrivals: u32) {
        unavailable()
    }
    #[inline(always)]
    pub(super) unsafe fn arrive_expect_tx(_at: *mut u64, _bytes: u32) {
        unavailable()
    }
    #[inline(always)]
    pub(super) unsafe fn wait(_at: *mut u64, _parity: u32) {
        unavailable()
    }
    #[inline(always)]
    pub(super) unsafe fn copy_to_shared(_d: *mut u8, _s: *const u8, _n: u32, _b: *mut u64) {
        unavailable()
    }
    #[inline(always)]
    pub(super) unsafe fn copy_to_global(_d: *mut u8, _s: *const u8, _n: u32) {
        unavailable()
    }
    #[inline(always)]
    pub(super) fn commit_group() {
        unavailable()
    }
    #[inline(always)]
    pub(super) fn wait_read<const N: u32>() {
        unavailable()
    }
    #[inline(always)]
    pub(super) fn wait_all() {
        unavailable()
    }
}

impl Barrier {
    /// Initialises the barrier at `at` for `arrivals` arrivals a phase (at most 2^15 - 1), its
    /// first phase of parity 0, and makes that visible to the copy engine.
    ///
    /// # Safety
    /// `at` is this block's shared memory, 8-byte aligned; one thread initialises it, and the
    /// threads that use it synchronise with that thread afterwards (a barrier, or
    /// [`crate::sync_warp`] within its warp); nothing else uses the word meanwhile.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn init(at: SharedPtr<u64>, arrivals: u32) -> Barrier {
        let at = at.as_ptr();
        // SAFETY: the caller's contract.
        unsafe { imp::init(at, arrivals) };
        Barrier { at }
    }

    /// The barrier at `at`, which a thread of the block has initialised ([`Barrier::init`]).
    ///
    /// # Safety
    /// As [`Barrier::init`]'s: the calling thread has synchronised with the initialising one.
    #[inline(always)]
    pub unsafe fn from_shared(at: SharedPtr<u64>) -> Barrier {
        Barrier { at: at.as_ptr() }
    }

    /// Arrives once at the current phase and announces `bytes` more that copies into shared
    /// memory will land in it (`mbarrier.arrive.expect_tx`).
    ///
    /// # Safety
    /// The barrier is initialised ([`Barrier::from_shared`]); the phase expects this arrival.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn arrive_expect_tx(self, bytes: u32) {
        // SAFETY: the caller's contract.
        unsafe { imp::arrive_expect_tx(self.at, bytes) }
    }

    /// Waits until the phase of parity `parity` (0 or 1) has completed: the bytes of its
    /// copies are in shared memory and visible to the calling thread.
    ///
    /// # Safety
    /// The barrier is initialised; the phase of that parity is the current or the one before.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn wait(self, parity: u32) {
        // SAFETY: the caller's contract.
        unsafe { imp::wait(self.at, parity) }
    }
}

/// Copies `bytes` from global memory at `src` into shared memory at `dst`; they count
/// against `bar`'s current phase as they land (`cp.async.bulk.shared::cluster.global`).
///
/// # Safety
/// The module's [copy contract](self#safety-common-to-every-copy); the bytes were announced
/// to `bar`'s phase ([`Barrier::arrive_expect_tx`]), before or after this call.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub unsafe fn copy_to_shared(dst: SharedPtr<u8>, src: *const u8, bytes: u32, bar: Barrier) {
    // SAFETY: the caller's contract.
    unsafe { imp::copy_to_shared(dst.as_ptr(), src, bytes, bar.at) }
}

/// Copies `bytes` from shared memory at `src` to global memory at `dst` (this GPU's or a
/// mapped peer's), in the calling thread's current bulk group
/// (`cp.async.bulk.global.shared::cta.bulk_group`).
///
/// # Safety
/// The module's [copy contract](self#safety-common-to-every-copy); `src`'s bytes stay as
/// they are until [`wait_read`] or [`wait_all`] says the group has read them.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub unsafe fn copy_to_global(dst: *mut u8, src: SharedPtr<u8>, bytes: u32) {
    // SAFETY: the caller's contract.
    unsafe { imp::copy_to_global(dst, src.as_ptr(), bytes) }
}

/// Closes the calling thread's current bulk group of [`copy_to_global`]s
/// (`cp.async.bulk.commit_group`).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn commit_group() {
    imp::commit_group()
}

/// Waits until every bulk group of the calling thread but the newest `N` has read its shared
/// memory, which may then be written again (`cp.async.bulk.wait_group.read N`).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn wait_read<const N: u32>() {
    imp::wait_read::<N>()
}

/// Waits until every bulk group of the calling thread is complete, and orders their writes
/// before the thread's later memory operations, fences included (`cp.async.bulk.wait_group 0`
/// and `fence.proxy.async.global`): a [`crate::quiet`] or a release after it publishes them.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn wait_all() {
    imp::wait_all()
}
