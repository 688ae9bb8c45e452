//! The measurement kernels: each mirrors the kernel of the NVSHMEM perftest of the same
//! name (`perftest/device/` in NVSHMEM's source): the same loop, the same operations in the
//! same order, the same synchronisation, one buffer `data` as both source and destination
//! as there, and the same element types. Each launch loops `iters` times over the
//! operation; the host times the launch with CUDA events and divides as the perftest does
//! (`host::Measured::metric`).
//!
//! `cuda/perftest.cu` holds the same kernels in CUDA C++, with the same names, parameters
//! and control flow, calling the NVSHMEM functions the perftests call (`nvshmem_double_put_nbi`,
//! `nvshmem_int_g`, `nvshmemx_int32_alltoall_block`, ...); the host runs both through the
//! same code (`host.rs`).
//!
//! Every kernel is launched with at most 1024 threads per block, one block an SM being
//! enough, and says so (`max_threads = 1024, min_blocks = 1`, CUDA's
//! `__launch_bounds__(1024, 1)`, also in the C++ file), so that ptxas budgets registers for
//! full blocks. Without `min_blocks`, ptxas squeezed some Rust kernels to 32 registers, two
//! blocks an SM, and spilled (`put_latency_block`, `p_bw`; BENCHMARKS.md, sixty-fourth
//! session).
//!
//! The kernels of puts and gets are one per scope (thread, warp, block) and direction, as
//! the perftests build them (`put_bw_thread` ... `get_latency_block`): their paths do not
//! share one kernel's registers, and a change to one path cannot move another's code.

use shmem_device::prelude::*;
use shmem_device::scoped::{self, Gpu};

/// `SCOPE` of the kernels: every thread works on its own part.
pub const THREAD: u32 = 0;
/// `SCOPE`: every warp works on its own part.
pub const WARP: u32 = 1;
/// `SCOPE`: every block works on its own part.
pub const BLOCK: u32 = 2;

/// `KIND` of `bw`: this PE's data into the peer (`shmem_put_bw`).
pub const PUT: u32 = 0;
/// `KIND` of `bw`: the peer's data into this PE (`shmem_get_bw`).
pub const GET: u32 = 1;

/// The perftests' barrier of the whole grid (`inter_cta_barrier`): `counter[0]` counts the
/// arrivals of every barrier so far, `counter[1]` is the last released `epoch`. Thread 0 of
/// each block fences, counts itself in, and the last to arrive (after a `quiet` when
/// `quiet_last`) releases the epoch; the others poll for it.
///
/// # Safety
/// The grid is co-resident; `counter` holds two `u32`s, zero at the launch, touched by
/// nothing else; every block calls it with `epoch = 1, 2, ...`.
#[inline(always)]
unsafe fn inter_cta_barrier(counter: Sym<u32>, epoch: u32, quiet_last: bool) {
    sync_threads();
    if thread_idx_x() == 0 {
        let released = counter.wrapping_add(1);
        scoped::fence_acq_rel(Gpu);
        // SAFETY: the caller's contract: both words are only touched atomically here.
        unsafe {
            if scoped::fetch_add_relaxed(Gpu, counter, 1u32) == grid_dim_x() * epoch - 1 {
                if quiet_last {
                    quiet();
                }
                scoped::store_relaxed(Gpu, released, epoch);
            }
            while scoped::load_relaxed(Gpu, released) != epoch {}
        }
    }
    sync_threads();
}

/// Elements `off..off + n` of the symmetric `data` as the perftests use their one buffer:
/// the remote end (`pe`'s copy) and the local end of the same range.
///
/// # Safety
/// The range lies within `data` on every PE.
#[inline(always)]
unsafe fn both_ends<T>(data: Sym<T>, off: usize, n: usize) -> (SymSlice<T>, DeviceSlice<T>) {
    // SAFETY: the caller's contract.
    unsafe {
        let p = data.as_ptr().add(off);
        (
            SymSlice::from_raw_parts(p, n),
            DeviceSlice::from_raw_parts(p, n),
        )
    }
}

/// `cta_quiet` of the perftests: thread 0 of the block quiets, between two block barriers.
#[inline(always)]
fn cta_quiet() {
    sync_threads();
    if thread_idx_x() == 0 {
        quiet();
    }
    sync_threads();
}

/// `shmem_put_bw` / `shmem_get_bw` for one `KIND` and `SCOPE`: `iters` times, every unit
/// (thread, warp or block, by `SCOPE`) puts (gets) its part of the `len` doubles of `data` to
/// (from) `peer`, non-blocking: the grid's doubles split evenly over its blocks, a block's
/// over its units. With `sync_each` the perftest's grid barrier ends every iteration and a
/// last one, after which one thread quiets (its default in NVSHMEM 3.4); without, each block
/// ends with `cta_quiet` (`--final_quiet_only`).
///
/// The perftests build one kernel per scope and per direction; so do [`put_bw_thread`] ...
/// [`get_bw_block`] (and `cuda/perftest.cu`): each kernel holds one path only, and its
/// registers are budgeted for that path alone.
///
/// # Safety
/// `data` is symmetric with at least `len` doubles; `counter` holds two zero `u32`s; the grid
/// is co-resident; `peer` is a valid PE that does not touch `data` meanwhile.
#[inline(always)]
unsafe fn bw<const KIND: u32, const SCOPE: u32>(
    data: Sym<f64>,
    len: usize,
    iters: u32,
    sync_each: u32,
    counter: Sym<u32>,
    peer: i32,
) {
    let per_block = len / grid_dim_x() as usize;
    let (off, n) = match SCOPE {
        THREAD => {
            let per = per_block / block_dim_x() as usize;
            (thread_idx_x() as usize * per, per)
        }
        WARP => {
            let per = per_block / warps_per_block() as usize;
            (warp_id() as usize * per, per)
        }
        _ => (0, per_block),
    };
    let off = block_idx_x() as usize * per_block + off;
    // SAFETY: the part lies within `len` (the caller's contract).
    let (remote, local) = unsafe { both_ends(data, off, n) };
    for i in 0..iters {
        // SAFETY: as above; `peer` is valid (the caller's contract).
        unsafe {
            match (KIND, SCOPE) {
                (PUT, THREAD) => put_nbi(Thread, remote, local, peer),
                (PUT, WARP) => put_nbi(Warp, remote, local, peer),
                (PUT, _) => put_nbi(Block, remote, local, peer),
                (_, THREAD) => get_nbi(Thread, local, remote, peer),
                (_, WARP) => get_nbi(Warp, local, remote, peer),
                (_, _) => get_nbi(Block, local, remote, peer),
            }
        }
        if sync_each != 0 {
            // SAFETY: every block runs every iteration (the caller's contract).
            unsafe { inter_cta_barrier(counter, i + 1, false) };
        }
    }
    if sync_each != 0 {
        // SAFETY: as above.
        unsafe { inter_cta_barrier(counter, iters + 1, true) };
    } else {
        cta_quiet();
    }
}

/// Declares kernels that each run `$body` for one set of its const parameters (a direction,
/// a scope), with `$body`'s parameters and contract.
macro_rules! one_kernel_per_path {
    ($body:ident $params:tt; $($(#[$doc:meta])* $name:ident = <$($c:ident),*>;)*) => {$(
        one_kernel_per_path!(@one $body $params [$(#[$doc])*] $name [$($c),*]);
    )*};
    (@one $body:ident ($($arg:ident: $ty:ty),*) [$(#[$doc:meta])*] $name:ident [$($c:ident),*]) => {
        $(#[$doc])*
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($body), "`'s.")]
        #[shmem_kernel(max_threads = 1024, min_blocks = 1)]
        pub unsafe fn $name($($arg: $ty),*) {
            // SAFETY: the kernel's contract is the body's.
            unsafe { $body::<$($c),*>($($arg),*) }
        }
    };
}

one_kernel_per_path! {
    bw(data: Sym<f64>, len: usize, iters: u32, sync_each: u32, counter: Sym<u32>, peer: i32);
    /// `shmem_put_bw`, every thread putting its part (`bw`).
    put_bw_thread = <PUT, THREAD>;
    /// `shmem_put_bw`, every warp putting its part (`bw`).
    put_bw_warp = <PUT, WARP>;
    /// `shmem_put_bw`, every block putting its part (`bw`).
    put_bw_block = <PUT, BLOCK>;
    /// `shmem_get_bw`, every thread getting its part (`bw`).
    get_bw_thread = <GET, THREAD>;
    /// `shmem_get_bw`, every warp getting its part (`bw`).
    get_bw_warp = <GET, WARP>;
    /// `shmem_get_bw`, every block getting its part (`bw`).
    get_bw_block = <GET, BLOCK>;
}

/// `shmem_p_bw` (32-bit elements, stride 1): `iters` times, the grid's threads `p` each of the
/// `len` words of `data` with its local value to `peer`, two per thread per round (the
/// perftest's `UNROLL`), a block barrier after each full round; the perftest's grid barrier
/// ends every iteration, and a last one with a `quiet`.
///
/// # Safety
/// `data` is symmetric with at least `len` `u32`s; `counter` holds two zero `u32`s; the grid
/// is co-resident; `peer` is a valid PE.
#[shmem_kernel(max_threads = 1024, min_blocks = 1)]
pub unsafe fn p_bw(data: Sym<u32>, len: usize, iters: u32, counter: Sym<u32>, peer: i32) {
    const UNROLL: usize = 2;
    let threads = (grid_dim_x() * block_dim_x()) as usize;
    let tid = global_idx_x();
    let slice = UNROLL * threads;
    // SAFETY: every index is below `len` (the full rounds end before `len - slice`, the last
    // one checks); the kernel contract gives the rest.
    unsafe {
        let p_one = |idx: usize| {
            let w = Sym::from_raw(data.as_ptr().add(idx));
            p(w, w.read(), peer);
        };
        for i in 0..iters {
            let mut j = 0;
            while j + slice < len {
                for u in 0..UNROLL {
                    p_one(j + u * threads + tid);
                }
                sync_threads();
                j += slice;
            }
            for u in 0..UNROLL {
                let idx = j + u * threads + tid;
                if idx < len {
                    p_one(idx);
                }
            }
            inter_cta_barrier(counter, i + 1, false);
        }
        inter_cta_barrier(counter, iters + 1, true);
    }
}

/// `shmem_put_latency`: `iters` times one put of the first `len` `i32`s of `data` to `peer`
/// by the launch's one unit (launch 1×1, 1×32 or 1×blockDim, by `SCOPE`), each completed by a
/// `quiet`: thread scope `put_nbi` then `quiet`; warp and block scope the blocking put, then
/// `cta_quiet`. One kernel per scope: [`put_latency_thread`] ... [`put_latency_block`].
///
/// # Safety
/// `data` is symmetric with at least `len` `i32`s; `peer` is a valid PE.
#[inline(always)]
unsafe fn put_latency<const SCOPE: u32>(data: Sym<i32>, len: usize, iters: u32, peer: i32) {
    // SAFETY: the caller's contract.
    let (remote, local) = unsafe { both_ends(data, 0, len) };
    for _ in 0..iters {
        // SAFETY: as above.
        unsafe {
            match SCOPE {
                THREAD => {
                    put_nbi(Thread, remote, local, peer);
                    quiet();
                }
                WARP => {
                    put(Warp, remote, local, peer);
                    cta_quiet();
                }
                _ => {
                    put(Block, remote, local, peer);
                    cta_quiet();
                }
            }
        }
    }
}

/// `shmem_get_latency`: `iters` times one non-blocking get of the first `len` `i32`s of
/// `data` from `peer` by the launch's one unit (by `SCOPE`), then a `quiet` (thread scope) or
/// `cta_quiet` (warp and block scope). One kernel per scope: [`get_latency_thread`] ...
/// [`get_latency_block`].
///
/// # Safety
/// `data` is symmetric with at least `len` `i32`s; `peer` is a valid PE.
#[inline(always)]
unsafe fn get_latency<const SCOPE: u32>(data: Sym<i32>, len: usize, iters: u32, peer: i32) {
    // SAFETY: the caller's contract.
    let (remote, local) = unsafe { both_ends(data, 0, len) };
    for _ in 0..iters {
        // SAFETY: as above.
        unsafe {
            match SCOPE {
                THREAD => {
                    get_nbi(Thread, local, remote, peer);
                    quiet();
                }
                WARP => {
                    get_nbi(Warp, local, remote, peer);
                    cta_quiet();
                }
                _ => {
                    get_nbi(Block, local, remote, peer);
                    cta_quiet();
                }
            }
        }
    }
}

one_kernel_per_path! {
    put_latency(data: Sym<i32>, len: usize, iters: u32, peer: i32);
    /// `shmem_put_latency` by one thread (`put_latency`).
    put_latency_thread = <THREAD>;
    /// `shmem_put_latency` by one warp (`put_latency`).
    put_latency_warp = <WARP>;
    /// `shmem_put_latency` by one block (`put_latency`).
    put_latency_block = <BLOCK>;
}

one_kernel_per_path! {
    get_latency(data: Sym<i32>, len: usize, iters: u32, peer: i32);
    /// `shmem_get_latency` by one thread (`get_latency`).
    get_latency_thread = <THREAD>;
    /// `shmem_get_latency` by one warp (`get_latency`).
    get_latency_warp = <WARP>;
    /// `shmem_get_latency` by one block (`get_latency`).
    get_latency_block = <BLOCK>;
}

/// `shmem_p_latency`: `iters` times, the block's threads `p` each of the first `len` `i32`s
/// of `data` (block-stride) with its local value to `peer`, then `cta_quiet`.
///
/// # Safety
/// `data` is symmetric with at least `len` `i32`s; `peer` is a valid PE.
#[shmem_kernel(max_threads = 1024, min_blocks = 1)]
pub unsafe fn p_latency(data: Sym<i32>, len: usize, iters: u32, peer: i32) {
    for _ in 0..iters {
        let mut j = thread_idx_x() as usize;
        while j < len {
            // SAFETY: `j < len` (kernel contract).
            unsafe {
                let w = Sym::from_raw(data.as_ptr().add(j));
                p(w, w.read(), peer);
            }
            j += block_dim_x() as usize;
        }
        cta_quiet();
    }
}

/// `shmem_g_latency` (the perftest's `pull`): `iters` times, the block's threads `g` each of
/// the first `len` `i32`s of `data` (block-stride) from `peer` into the local copy, then a
/// block barrier.
///
/// # Safety
/// `data` is symmetric with at least `len` `i32`s; `peer` is a valid PE that does not write
/// `data` meanwhile.
#[shmem_kernel(max_threads = 1024, min_blocks = 1)]
pub unsafe fn g_latency(data: Sym<i32>, len: usize, iters: u32, peer: i32) {
    for _ in 0..iters {
        let mut j = thread_idx_x() as usize;
        while j < len {
            // SAFETY: `j < len` (kernel contract); each thread writes its own elements.
            unsafe {
                let w = Sym::from_raw(data.as_ptr().add(j));
                w.write(g(w, peer));
            }
            j += block_dim_x() as usize;
        }
        sync_threads();
    }
}

/// `shmem_signal_ping_pong_latency` (launch 1×1 on both PEs): `iters` round trips; in round
/// `i` PE 0 sets the peer's `sig` to `i + 1` with `signal_op` and waits for its own to equal
/// it, the other PE waits first and answers. A `quiet` at the end.
///
/// # Safety
/// Both PEs launch it with the same arguments; `sig` is a symmetric `u64`, zero on both PEs
/// at the launch; `peer` is the other PE.
#[shmem_kernel(max_threads = 1024, min_blocks = 1)]
pub unsafe fn signal_ping_pong(sig: Sym<u64>, iters: u32, peer: i32) {
    let me = my_pe();
    for i in 1..=u64::from(iters) {
        // SAFETY: the kernel contract.
        unsafe {
            if me != 0 {
                wait_until(sig, Cmp::Eq, i);
                signal_op(sig, i, SignalOp::Set, peer);
            } else {
                signal_op(sig, i, SignalOp::Set, peer);
                wait_until(sig, Cmp::Eq, i);
            }
        }
    }
    quiet();
}

/// `shmem_put_signal_ping_pong_latency` (its thread-scope kernel, launch 1×1 on both PEs):
/// as [`signal_ping_pong()`], each message a non-blocking `put_signal` of the first `len`
/// `i32`s of `data` that sets the peer's `sig`.
///
/// # Safety
/// Both PEs launch it with the same arguments; `sig` is a symmetric `u64`, zero on both PEs
/// at the launch; `data` is symmetric with at least `len` `i32`s; `peer` is the other PE.
#[shmem_kernel(max_threads = 1024, min_blocks = 1)]
pub unsafe fn put_signal_ping_pong(
    data: Sym<i32>,
    sig: Sym<u64>,
    len: usize,
    iters: u32,
    peer: i32,
) {
    let me = my_pe();
    // SAFETY: the kernel contract.
    let (remote, local) = unsafe { both_ends(data, 0, len) };
    for i in 1..=u64::from(iters) {
        // SAFETY: the kernel contract.
        unsafe {
            if me != 0 {
                wait_until(sig, Cmp::Eq, i);
                put_signal_nbi(Thread, remote, local, sig, i, SignalOp::Set, peer);
            } else {
                put_signal_nbi(Thread, remote, local, sig, i, SignalOp::Set, peer);
                wait_until(sig, Cmp::Eq, i);
            }
        }
    }
    quiet();
}

/// `alltoall_latency` (its 32-bit block-scope curve, one block): `iters` alltoalls of `src`
/// into `dest` on the world team, `dest.len() / n_pes()` `i32`s per PE pair (NVSHMEM's
/// `nvshmemx_int32_alltoall_block`, which [`alltoall`] calls for `i32`).
///
/// # Safety
/// Every PE launches it with the same arguments; the slices are symmetric, equally long and
/// divisible by the PE count.
#[shmem_kernel(max_threads = 1024, min_blocks = 1)]
pub unsafe fn alltoall_latency(dest: SymSlice<i32>, src: SymSlice<i32>, iters: u32) {
    for _ in 0..iters {
        // SAFETY: the kernel contract.
        let _ = unsafe { alltoall(Block, Team::WORLD, dest, src) };
    }
}
