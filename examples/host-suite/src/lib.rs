//! Kernels for the host API's tests (`shmem-host/tests/suite`): small, so that what is
//! checked is the host side — streams, events, CUDA graphs — and not the device API.
//!
//! | kernel | what the host checks with it |
//! |---|---|
//! | [`forward`](forward()) | a launch on a user stream runs after a copy enqueued before it |
//! | [`count_next`](count_next()) | a graph replays every captured launch, once per replay |

#![no_std]

use shmem_device::prelude::*;
use suite_common::neighbours;

/// Every thread `i < src.len()` puts `2 * src[i] + 1` into `dst[i]` of the next PE.
///
/// # Safety
/// `src` and `dst` are symmetric and of equal length; any launch shape (threads beyond the
/// length do nothing, elements beyond the grid are not forwarded).
#[shmem_kernel]
pub unsafe fn forward(src: SymSlice<u64>, dst: SymSlice<u64>) {
    let i = global_idx_x() as usize;
    if i >= src.len() {
        return;
    }
    let (next, _) = neighbours(my_pe(), n_pes());
    // SAFETY: `i` is in bounds of both (equal lengths, checked above); symmetric by the
    // contract; `next` is a PE.
    unsafe {
        let v = src.read(i);
        p(dst.at(i), 2 * v + 1, next);
    }
    quiet();
}

/// Thread 0 of block 0 adds 1 to `counter` on the next PE.
///
/// # Safety
/// `counter` is a symmetric word; any launch shape.
#[shmem_kernel]
pub unsafe fn count_next(counter: Sym<u64>) {
    if global_idx_x() != 0 {
        return;
    }
    let (next, _) = neighbours(my_pe(), n_pes());
    // SAFETY: a symmetric word (contract); `next` is a PE.
    unsafe { atomic_add(counter, 1u64, next) };
    quiet();
}
