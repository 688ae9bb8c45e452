//! The smallest GPU-initiated communication: a ring.
//!
//! Every PE writes its own number into `received` on the next PE (`(me + 1) % n`) with
//! one `p`, then `quiet` completes the write. After the launch and a host-side barrier,
//! PE `i` holds `i - 1` (PE 0 holds `n - 1`). One thread does the work; the rest of the
//! grid idles, so the kernel works for any launch shape.
//!
//! The kernel has no barrier or wait, so `cargo xtask build-ptx` marks it *not* collective:
//! it can be launched with a plain `cuLaunchKernel`.

#![no_std]

use shmem_device::prelude::*;

/// Writes this PE's number into `received` on the next PE.
///
/// # Safety
/// `received` is a symmetric `i32` allocated on every PE, not read until the host has
/// synchronised the launch and passed a barrier.
#[shmem_kernel]
pub unsafe fn ring(received: Sym<i32>) {
    if global_idx_x() == 0 {
        let (me, n) = (my_pe(), n_pes());
        // SAFETY: `(me + 1) % n` is a valid PE and `received` is symmetric (caller's contract).
        unsafe { p(received, me, (me + 1) % n) };
        quiet();
    }
}
