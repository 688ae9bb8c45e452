//! Kernels for the host API's tests (`shmem-host/tests/suite`): small, so that what is
//! checked is the host side — streams, events, CUDA graphs — and not the device API.
//!
//! | kernel | what the host checks with it |
//! |---|---|
//! | [`forward`](forward()) | a launch on a user stream runs after a copy enqueued before it |
//! | [`count_next`](count_next()) | a graph replays every captured launch, once per replay |
//! | [`put_from`](put_from()) | device memory registered with NVSHMEM is the local side of a put |
//! | [`wait_for_nobody`](wait_for_nobody()) | a wait past its bound stops the kernel with a report |
//! | [`barrier_short_of_a_block`](barrier_short_of_a_block()) | so does a grid barrier past the program-wide bound |
//! | [`acquire_for_nobody`](acquire_for_nobody()) | and an acquire wait (`scoped::wait_acquire`) |
//! | [`team_ops`](team_ops()) | a team split on the host numbers its PEs, meets and reduces in a kernel |

#![no_std]

use shmem_device::prelude::*;
use shmem_device::scoped::Gpu;
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

/// Thread 0 of each PE writes `info = [team.my_pe(), team.n_pes(), world number of the
/// team's PE 0]`; on the team's members it then meets the others in a team barrier and sums
/// `x` over the team into `sum` (thread scope).
///
/// # Safety
/// `info` holds 3 `i32`s, `x` and `sum` are symmetric and of equal length; every member of
/// `team` launches it (the others may: they only write `info`).
#[shmem_kernel]
pub unsafe fn team_ops(team: Team, info: SymSlice<i32>, x: SymSlice<i64>, sum: SymSlice<i64>) {
    if global_idx_x() != 0 {
        return;
    }
    let me = team.my_pe();
    // SAFETY: `info` has 3 elements (contract); only this thread writes it.
    unsafe {
        info.write(0, me);
        info.write(1, team.n_pes());
        info.write(2, team.translate_pe(0, Team::WORLD));
    }
    if me < 0 {
        return;
    }
    // SAFETY: every member makes the same two calls (contract); `x` and `sum` are symmetric
    // and of equal length.
    unsafe {
        let _ = barrier(Thread, team);
        let _ = reduce(Thread, team, Sum, sum, x);
    }
}

/// Block 0 puts all of `src` (this PE's device memory, not symmetric) into `dst` of the next
/// PE.
///
/// # Safety
/// `src` is registered with NVSHMEM (or symmetric) and as long as `dst`, which is symmetric;
/// one block.
#[shmem_kernel]
pub unsafe fn put_from(src: DeviceSlice<u64>, dst: SymSlice<u64>) {
    let (next, _) = neighbours(my_pe(), n_pes());
    // SAFETY: the contract: registered local source, symmetric destination, equal lengths;
    // every thread of the block calls the block-scoped put.
    unsafe { put(Block, dst, src, next) };
    quiet();
}

/// Every block but the last meets at a grid barrier ([`shmem_device::scoped::grid_barrier`])
/// that the last block never reaches: under the program-wide bound, block 0's wait stops
/// the kernel with a report (the bound read as a persistent loop's barriers read it).
///
/// # Safety
/// `counter` is a `u32` in global memory, zero at the launch; the grid is co-resident and
/// has at least 2 blocks. Without a bound the kernel never ends.
#[shmem_kernel]
pub unsafe fn barrier_short_of_a_block(counter: Sym<u32>) {
    if block_idx_x() + 1 == grid_dim_x() {
        return;
    }
    // SAFETY: the contract; the barrier deliberately lacks a block.
    unsafe { shmem_device::scoped::grid_barrier(counter, 1) };
}

/// Thread 0 waits with acquire loads ([`shmem_device::scoped::wait_acquire`]) for `word` to
/// become at least 2, which nobody releases: under the program-wide bound, the wait stops
/// the kernel with a report.
///
/// # Safety
/// `word` is a `u32` in global memory that nothing writes during the launch; any launch
/// shape. Without a bound the kernel never ends.
#[shmem_kernel]
pub unsafe fn acquire_for_nobody(word: Sym<u32>) {
    if global_idx_x() != 0 {
        return;
    }
    // SAFETY: the contract.
    unsafe { shmem_device::scoped::wait_acquire(Gpu, word, Cmp::Ge, 2u32) };
}

/// On PE `waiter`, thread 0 waits for `sig` to become 1, which nobody sends: for at most
/// `bound_ms` (per-wait bound) when it is non-zero, else under the program-wide bound. The
/// other PEs return at once.
///
/// # Safety
/// `sig` is a symmetric word; any launch shape. Without a bound the kernel never ends.
#[shmem_kernel]
pub unsafe fn wait_for_nobody(sig: Sym<u64>, waiter: i32, bound_ms: u64) {
    if global_idx_x() != 0 || my_pe() != waiter {
        return;
    }
    // SAFETY: a symmetric word (contract).
    unsafe {
        if bound_ms > 0 {
            let bound = core::time::Duration::from_millis(bound_ms);
            signal_wait_until_within(sig, Cmp::Eq, 1, bound);
        } else {
            wait_until(sig, Cmp::Eq, 1u64);
        }
    }
}
