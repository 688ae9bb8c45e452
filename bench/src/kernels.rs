//! The measurement kernels, after NVSHMEM's perftests: each launch loops `iters` times over
//! the operation being measured, and the host times the launch with CUDA events.
//!
//! `cuda/perftest.cu` holds the same kernels in CUDA C++, with the same names, parameters
//! and control flow; the host runs both through the same code (`host.rs`).
//!
//! Every kernel is launched with at most 1024 threads per block and says so
//! (`max_threads = 1024`, CUDA's `__launch_bounds__(1024)`, also in the C++ file), so that
//! ptxas budgets registers for full blocks.
//!
//! Scopes are a runtime parameter (`0` thread, `1` warp, `2` block; uniform across the
//! launch), so one kernel covers the three.

use shmem_device::prelude::*;
use shmem_device::scoped;

/// `scope` of the kernels: every thread works on its own part.
pub const THREAD: u32 = 0;
/// `scope`: every warp works on its own part.
pub const WARP: u32 = 1;
/// `scope`: every block works on its own part.
pub const BLOCK: u32 = 2;

/// What a bandwidth kernel moves.
pub const PUT: u32 = 0;
/// What a bandwidth kernel moves: the peer's data into this PE.
pub const GET: u32 = 1;

/// The part of `[0, bytes)` that this thread's unit (thread, warp or block, by `scope`)
/// moves, as `(offset, len)`: the grid's bytes split evenly over its units.
#[inline(always)]
fn unit_part(scope: u32, bytes: usize) -> (usize, usize) {
    let (blk, nblk) = (block_idx_x() as usize, grid_dim_x() as usize);
    let per_block = bytes / nblk;
    match scope {
        THREAD => {
            let (t, nt) = (thread_idx_x() as usize, block_dim_x() as usize);
            let per = per_block / nt;
            (blk * per_block + t * per, per)
        }
        WARP => {
            let (w, nw) = (warp_id() as usize, warps_per_block() as usize);
            let per = per_block / nw;
            (blk * per_block + w * per, per)
        }
        _ => (blk * per_block, per_block),
    }
}

/// One non-blocking put or get of `len` bytes at `off`, at `scope`.
///
/// # Safety
/// `off + len` is within `dst` and `src` on both PEs; `peer` is a valid PE.
#[inline(always)]
unsafe fn move_nbi(
    kind: u32,
    scope: u32,
    dst: Sym<u8>,
    src: Sym<u8>,
    off: usize,
    len: usize,
    peer: i32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let remote_dst = SymSlice::from_raw_parts(dst.as_ptr().add(off), len);
        let local_src = DeviceSlice::from_raw_parts(src.as_ptr().add(off), len);
        let local_dst = DeviceSlice::from_raw_parts(dst.as_ptr().add(off), len);
        let remote_src = SymSlice::from_raw_parts(src.as_ptr().add(off), len);
        match (kind, scope) {
            (PUT, THREAD) => put_nbi(Thread, remote_dst, local_src, peer),
            (PUT, WARP) => put_nbi(Warp, remote_dst, local_src, peer),
            (PUT, _) => put_nbi(Block, remote_dst, local_src, peer),
            (_, THREAD) => get_nbi(Thread, local_dst, remote_src, peer),
            (_, WARP) => get_nbi(Warp, local_dst, remote_src, peer),
            (_, _) => get_nbi(Block, local_dst, remote_src, peer),
        }
    }
}

/// Bandwidth: `iters` times, every unit puts (or gets) its part of `bytes` to (from) `peer`,
/// non-blocking; with `sync_each`, a grid barrier ends every iteration. `quiet` at the end.
///
/// # Safety
/// `dst` and `src` are symmetric with at least `bytes` bytes; `counter` is zero; the grid is
/// co-resident; `peer` is a valid PE that does not touch the buffers meanwhile.
#[shmem_kernel(max_threads = 1024)]
pub unsafe fn bw(
    kind: u32,
    scope: u32,
    dst: Sym<u8>,
    src: Sym<u8>,
    bytes: usize,
    iters: u32,
    sync_each: u32,
    counter: Sym<u32>,
    peer: i32,
) {
    let (off, len) = unit_part(scope, bytes);
    for i in 0..iters {
        if len > 0 {
            // SAFETY: the part lies within `bytes` (kernel contract).
            unsafe { move_nbi(kind, scope, dst, src, off, len, peer) };
        }
        if sync_each != 0 {
            // SAFETY: every block runs every iteration.
            unsafe { scoped::grid_barrier(counter, i + 1) };
        }
    }
    quiet();
}

/// `p` bandwidth: `iters` times, the grid's threads `p` the `words` 32-bit words of `dst`
/// (grid-stride) to `peer`. `quiet` at the end.
///
/// # Safety
/// `dst` is symmetric with at least `words` `u32`s; `peer` is a valid PE.
#[shmem_kernel(max_threads = 1024)]
pub unsafe fn p_bw(dst: Sym<u32>, words: usize, iters: u32, peer: i32) {
    let (first, stride) = (global_idx_x(), grid_stride_x());
    for i in 0..iters {
        let mut w = first;
        while w < words {
            // SAFETY: `w < words` (kernel contract).
            unsafe { p(Sym::from_raw(dst.as_ptr().add(w)), i ^ w as u32, peer) };
            w += stride;
        }
    }
    quiet();
}

/// Operations of [`latency()`].
pub const LAT_PUT: u32 = 0;
/// [`latency()`]: blocking get.
pub const LAT_GET: u32 = 1;
/// [`latency()`]: `p` of one `u32` (thread scope only).
pub const LAT_P: u32 = 2;
/// [`latency()`]: `g` of one `u32` (thread scope only).
pub const LAT_G: u32 = 3;

/// Latency: `iters` times one blocking operation of `bytes` by the launch's unit (one
/// thread, warp or block: launch 1×1, 1×32 or 1×blockDim), each put or `p` completed by
/// `quiet`. `out[0]` receives what the `g`s read, so that they cannot be optimised away.
///
/// # Safety
/// `dst` and `src` are symmetric with at least `bytes` bytes; `peer` is a valid PE.
#[shmem_kernel(max_threads = 1024)]
pub unsafe fn latency(
    op: u32,
    scope: u32,
    dst: Sym<u8>,
    src: Sym<u8>,
    bytes: usize,
    iters: u32,
    peer: i32,
    out: Sym<u32>,
) {
    // SAFETY: the kernel contract: `bytes` fit the buffers, `peer` is valid.
    unsafe {
        let (d, s) = (
            SymSlice::from_raw_parts(dst.as_ptr(), bytes),
            DeviceSlice::from_raw_parts(src.as_ptr(), bytes),
        );
        let (ld, rs) = (
            DeviceSlice::from_raw_parts(dst.as_ptr(), bytes),
            SymSlice::from_raw_parts(src.as_ptr(), bytes),
        );
        let word: Sym<u32> = dst.cast();
        // One loop per operation (the choice made once, outside the loop): inside one loop
        // every operation's inlined NVSHMEM path was live at once and spilled (140 bytes
        // of spill stores at 64 registers). The operations and their count are the same.
        macro_rules! timed {
            ($op:expr, $complete:expr) => {
                for i in 0..iters {
                    $op(i);
                    if $complete {
                        quiet();
                    }
                }
            };
        }
        match (op, scope) {
            (LAT_PUT, THREAD) => timed!(|_| put(Thread, d, s, peer), true),
            (LAT_PUT, WARP) => timed!(|_| put(Warp, d, s, peer), true),
            (LAT_PUT, _) => timed!(|_| put(Block, d, s, peer), true),
            (LAT_GET, THREAD) => timed!(|_| get(Thread, ld, rs, peer), false),
            (LAT_GET, WARP) => timed!(|_| get(Warp, ld, rs, peer), false),
            (LAT_GET, _) => timed!(|_| get(Block, ld, rs, peer), false),
            (LAT_P, _) => timed!(|i| p(word, i, peer), true),
            (_, _) => {
                let mut acc = 0u32;
                timed!(|_| acc = acc.wrapping_add(g(word, peer)), false);
                if thread_idx_x() == 0 {
                    out.write(acc);
                }
            }
        }
    }
}

/// Ping-pong: PE 0 sends, PE 1 answers, `iters` round trips. `kind` 0: `signal_op` (set to
/// the round number) by one thread (launch 1×1); 1: `put_signal` of `bytes` at block scope
/// (launch 1×blockDim), thread 0 waiting for the answer.
///
/// # Safety
/// Both PEs launch it with the same arguments; `sig` is a symmetric zero `u64`; `dst` and
/// `src` are symmetric with at least `bytes` bytes; `peer` is the other PE.
#[shmem_kernel(max_threads = 1024)]
pub unsafe fn ping_pong(
    kind: u32,
    dst: Sym<u8>,
    src: Sym<u8>,
    bytes: usize,
    sig: Sym<u64>,
    iters: u32,
    peer: i32,
) {
    let me = my_pe();
    // SAFETY: the kernel contract.
    unsafe {
        let (d, s) = (
            SymSlice::from_raw_parts(dst.as_ptr(), bytes),
            DeviceSlice::from_raw_parts(src.as_ptr(), bytes),
        );
        for i in 1..=u64::from(iters) {
            if me != 0 {
                if thread_idx_x() == 0 {
                    signal_wait_until(sig, Cmp::Ge, i);
                }
                sync_threads();
            }
            if kind == 0 {
                signal_op(sig, i, SignalOp::Set, peer);
            } else {
                put_signal(Block, d, s, sig, i, SignalOp::Set, peer);
            }
            if me == 0 {
                if thread_idx_x() == 0 {
                    signal_wait_until(sig, Cmp::Ge, i);
                }
                sync_threads();
            }
        }
    }
}

/// Device alltoall latency: `iters` block-scope alltoalls of `dest.len() / n_pes()` bytes per
/// PE pair on the world team (launch 1×blockDim on every PE).
///
/// # Safety
/// Every PE launches it with the same arguments; the slices are symmetric, equally long and
/// divisible by the PE count.
#[shmem_kernel(max_threads = 1024)]
pub unsafe fn alltoall_lat(dest: SymSlice<u8>, src: SymSlice<u8>, iters: u32) {
    for _ in 0..iters {
        // SAFETY: the kernel contract.
        let _ = unsafe { alltoall(Block, Team::WORLD, dest, src) };
    }
}
