//! The device intrinsics on simulated GPU threads, as `crate::host` (the seam) offers them:
//! each runs on the calling simulated thread, and outside a simulated launch panics with its
//! name like any device operation reached on the host.

use crate::host::device_only;

/// Special register `name` (`thread_idx_x`, `lane_id`, ...) of the calling simulated thread.
#[track_caller]
pub(crate) fn register(name: &str) -> u32 {
    super::register(name).unwrap_or_else(|| device_only(name))
}

/// `__syncthreads()`.
#[track_caller]
pub(crate) fn sync_threads() {
    if super::current_pe().is_none() {
        device_only("sync_threads")
    }
    super::sync_threads()
}

/// `__syncthreads()` that also counts the block's threads calling it with `pred` true:
/// `(true, calling)`.
#[track_caller]
pub(crate) fn sync_threads_vote(pred: bool) -> (u32, u32) {
    if super::current_pe().is_none() {
        device_only("sync_threads_count")
    }
    super::sync_threads_vote(pred)
}

/// `bar.sync id, threads` (`wait`) or `bar.arrive id, threads`.
#[track_caller]
pub(crate) fn named_barrier(id: u32, threads: u32, wait: bool) {
    if super::current_pe().is_none() {
        device_only(if wait {
            "NamedBarrier::sync"
        } else {
            "NamedBarrier::arrive"
        })
    }
    super::named_barrier(id, threads, wait)
}

/// The calling simulated thread's block's dynamic shared memory and its size in bytes.
#[track_caller]
pub(crate) fn dynamic_shared() -> (*mut u8, u32) {
    super::dynamic_shared().unwrap_or_else(|| device_only("shared::dynamic"))
}

/// `__syncwarp(mask)` (every live lane of the warp takes part).
#[track_caller]
pub(crate) fn sync_warp(_mask: u32) {
    super::warp_collective("sync_warp", 0, 0, |_, _| 0);
}

/// `shfl.sync.bfly`: lane `l` gets the value of lane `l ^ lane_mask`.
#[track_caller]
pub(crate) fn shfl_xor(v: u32, lane_mask: u32) -> u32 {
    super::warp_collective("shfl_xor", v.into(), lane_mask, |all, l| {
        let from = l ^ all[l].1 as usize;
        all.get(from).map_or(all[l].0, |a| a.0)
    }) as u32
}

/// `shfl.sync.idx`: every lane gets the value of lane `src_lane`.
#[track_caller]
pub(crate) fn shfl_idx(v: u32, src_lane: u32) -> u32 {
    super::warp_collective("shfl_idx", v.into(), src_lane, |all, l| {
        all.get(all[l].1 as usize).map_or(all[l].0, |a| a.0)
    }) as u32
}

/// `vote.sync.ballot`.
#[track_caller]
pub(crate) fn ballot(pred: bool) -> u32 {
    super::warp_collective("ballot", pred.into(), 0, |all, _| {
        all.iter()
            .enumerate()
            .fold(0, |m, (l, a)| m | (u64::from(a.0 != 0) << l))
    }) as u32
}

/// A yield point of a scoped memory operation `op` (`poll`: it only looked at memory).
#[track_caller]
pub(crate) fn step(op: &str, poll: bool) {
    if super::current_pe().is_none() {
        device_only(op)
    }
    super::step(poll)
}
