//! One kernel per group of the NVSHMEM device API, each writing results the host can check.
//!
//! Every kernel talks to its ring neighbours: `next = (me + 1) % n`, `prev = (me + n - 1) % n`.
//! The host initialises source buffers with [`suite_common::pattern`] before the launch;
//! after the launch (and a host barrier) it compares what arrived with the expectations in
//! [`suite_common::expect`]. The kernels compile for the host too, so the expectations and
//! the kernels cannot drift apart silently.
//!
//! | kernel | API group | collective |
//! |---|---|---|
//! | [`rma_p_g`](rma_p_g()) | `p`, `g` for every standard type | no |
//! | [`rma_bulk`](rma_bulk()) | `put`, `put_nbi`, `get`, `get_nbi` × thread/warp/block | no |
//! | [`rma_small`](rma_small()) | thread-scope `put`, `put_nbi`, `get`, `get_nbi` of 4 to 160 bytes | no |
//! | [`group_entry`](group_entry()) | block- and warp-scope `put`, `get` and `put_signal` after the group's own writes and reads | no |
//! | [`rma_warp`](rma_warp()) | warp-scope `put`, `put_nbi`, `get`, `get_nbi`, `rma::put_nbi_unmapped` of 4 bytes to 16 KiB | no |
//! | [`signals`](signals()) | `put_signal[_nbi]` × set/add × scopes, `signal_op`, `signal_fetch`, `signal_wait_until` and `signal_wait_until_backoff` | yes (waits) |
//! | [`waits`](waits()) | `wait_until`, `test` and their `_all`/`_any` forms, 4 types | yes (waits) |
//! | [`atomics`](atomics()) | every AMO, 6 types; a contended counter | no |
//! | [`ordering`](ordering()) | `fence` and `quiet` ordering a put before a flag | yes (waits) |
//! | [`barriers`](barriers()) | `barrier_all`, `sync_all`, team `barrier`/`sync` × scopes; team queries | yes |
//! | `collectives` (crate `collectives-suite-kernels`: NVSHMEM's reductions are slow to compile) | block-scope collectives | yes |
//! | [`peer_memory`](peer_memory()) | `ptr`, scoped loads/stores/atomics over peer mappings, `scoped::wait_acquire` | no (waits on memory) |
//! | [`block_shared`](block_shared()) | dynamic shared memory: its size, a release/acquire hand-off and atomics at block scope | no |
//! | [`block_votes`](block_votes()) | `sync_threads_count`, `sync_threads_and`, `sync_threads_or` | no |
//! | [`vec16`](vec16()) | `rma::Vec16`: 16-byte loads and stores of `[u32; 4]`, `[f32; 4]`, `[f64; 2]`, generic and global | no |
//! | [`shared_beyond_default`](shared_beyond_default()) | dynamic shared memory beyond 48 KB a block, which the host opts the kernel in to | no |
//! | [`named_barriers`](named_barriers()) | `NamedBarrier`: some warps of a block meeting among themselves, a hand-off by `arrive` | no |
//! | [`grid_sync_rounds`](grid_sync_rounds()) | `scoped::grid_sync`: rounds of a grid barrier, two launches of different sizes on its words | no |
//! | [`pdl_first`](pdl_first()), [`pdl_second`](pdl_second()) | `pdl`: a kernel launched as a dependent starts while the one before it runs, and sees its writes after `pdl::wait` | no |
//! | [`bulk_copies`](bulk_copies()) | `bulk`: copies into shared memory on a barrier's phases, out to the next PE's memory in groups, a slot used again after its group has read it | no |
//! | [`fp8_convert`](fp8_convert()) | `fp8`: the `e4m3` conversions on the GPU's instructions against their definitions | no |
//! | [`bf16_convert`](bf16_convert()) | `bf16`: the paired `bf16` rounding on the GPU's instruction against its definition | no |
//! | [`bounds_check`](bounds_check()) | the panic handler: an out-of-bounds index traps with its location | no |

#![no_std]

use shmem_device::prelude::*;
use shmem_device::scoped::{self, Cta, Gpu, Sys};
use shmem_device::types::{AmoExtended, AmoInt, RmaElem, WaitElem};
use shmem_device::{pdl, rma, shared};
use suite_common::*;

fn p_g_case<T: RmaElem + Val>(
    k: usize,
    src: SymSlice<u64>,
    dst: SymSlice<u64>,
    got: SymSlice<u64>,
    me: i32,
    next: i32,
) {
    // SAFETY: slot k is one aligned u64 word of each buffer, wide enough for any T; the
    // buffers are symmetric (kernel contract) and `next` is a valid PE.
    unsafe {
        let d: Sym<T> = dst.at(k).cast();
        p(d, T::from_u64(pattern(me, k)), next);
        let s: Sym<T> = src.at(k).cast();
        let v = g(s, next);
        got.write(k, v.bits());
    }
}

/// `p` and `g` for each of the ten standard types (slot `k` = `P_G_TYPES[k]`).
///
/// Host sets `src[k]` to `pattern(pe, k)` as that type (zero-extended bits) and zeroes `dst`.
/// After: `dst[k]` = `pattern(prev, k)` as that type (put by prev), and `got[k]` =
/// `pattern(next, k)` as that type (read from next); see `expect::p_g`.
///
/// # Safety
/// Launch with any shape (thread 0 works); buffers symmetric, ≥ 10 elements.
#[shmem_kernel]
pub unsafe fn rma_p_g(src: SymSlice<u64>, dst: SymSlice<u64>, got: SymSlice<u64>) {
    if global_idx_x() != 0 {
        return;
    }
    let me = my_pe();
    let (next, _) = neighbours(me, n_pes());
    p_g_case::<i8>(0, src, dst, got, me, next);
    p_g_case::<i16>(1, src, dst, got, me, next);
    p_g_case::<i32>(2, src, dst, got, me, next);
    p_g_case::<i64>(3, src, dst, got, me, next);
    p_g_case::<u8>(4, src, dst, got, me, next);
    p_g_case::<u16>(5, src, dst, got, me, next);
    p_g_case::<u32>(6, src, dst, got, me, next);
    p_g_case::<u64>(7, src, dst, got, me, next);
    p_g_case::<f32>(8, src, dst, got, me, next);
    p_g_case::<f64>(9, src, dst, got, me, next);
    quiet();
}

/// Bulk RMA in every form and scope: case `c` moves elements `c*BULK_CASE..(c+1)*BULK_CASE`.
///
/// Host sets `src[i] = pattern(pe, i)` and zeroes `dst`. After: put cases (0–5) hold
/// `pattern(prev, i)` in `dst` (prev put them here); get cases (6–11) hold `pattern(next, i)`
/// (fetched from next); see `expect::bulk`.
///
/// # Safety
/// Launch one block of ≥ 64 threads (warp 0 does the warp cases); buffers symmetric,
/// ≥ `BULK_CASE * BULK_CASES` elements.
#[shmem_kernel]
pub unsafe fn rma_bulk(src: SymSlice<u32>, dst: SymSlice<u32>) {
    let (next, _) = neighbours(my_pe(), n_pes());
    let t = thread_idx_x();
    let region = |c: usize| {
        (
            src.sub(c * BULK_CASE, BULK_CASE),
            dst.sub(c * BULK_CASE, BULK_CASE),
        )
    };
    macro_rules! case {
        ($c:expr, $op:ident, $scope:expr, $who:expr) => {{
            let (s, d) = region($c);
            if $who {
                // SAFETY: disjoint regions of symmetric buffers; `next` is valid; the scope's
                // threads (`$who`) all make the call.
                unsafe { $op($scope, d, s, next) }
            }
        }};
    }
    case!(0, put, Thread, t == 0);
    case!(1, put, Warp, t < 32);
    case!(2, put, Block, true);
    case!(3, put_nbi, Thread, t == 0);
    case!(4, put_nbi, Warp, t < 32);
    case!(5, put_nbi, Block, true);
    case!(6, get, Thread, t == 0);
    case!(7, get, Warp, t < 32);
    case!(8, get, Block, true);
    case!(9, get_nbi, Thread, t == 0);
    case!(10, get_nbi, Warp, t < 32);
    case!(11, get_nbi, Block, true);
    quiet();
    sync_threads();
}

/// Block- and warp-scope `put`, `get` and `put_signal` against the group's own accesses
/// right before the call: the group meets on entry (`crate::scope`), so a put moves what
/// every thread wrote to the source just before, and a get overwrites the destination only
/// after every thread has read it. Thread `t` writes, or reads, the chunk of 16 bytes the
/// group's copy gives to thread `b - 1 - t` (lane `31 - l`), after a wait that grows with its
/// warp (lane): the last warp's accesses come long after the first warp reached the call.
///
/// With `b` threads and `r = 4 * b` (one chunk a thread), `dst`'s regions are: `[0, r)` a
/// block put, `[r, 2r)` a block get, then [`ENTRY_WARP`] elements each for a warp put and a
/// warp get, then `r` for a block put-signal and [`ENTRY_WARP`] for a warp put-signal (which
/// set `sig[0]` to [`ENTRY_SIGNAL`] and `sig[1]` to one more). The host sets
/// `src[i] = pattern(pe, i)`, `dst[i] = ENTRY_OLD + i` and `sig` to zeros. The kernel writes
/// `pattern(pe, i) + ENTRY_MARK` to the put regions' source and copies the get regions' old
/// destination into `got` (`[0, r)` for the block's, `[r, r + ENTRY_WARP)` for the warp's;
/// the waits' results after that). After: see `expect::group_entry`.
///
/// # Safety
/// Launch one block of [`ENTRY_THREADS`] threads on every PE; buffers symmetric, `src` and
/// `dst` [`entry_len`]`(ENTRY_THREADS)` elements, `got` [`entry_got_len`]`(ENTRY_THREADS)`,
/// `sig` 2.
#[shmem_kernel]
pub unsafe fn group_entry(
    src: SymSlice<u32>,
    dst: SymSlice<u32>,
    got: SymSlice<u32>,
    sig: SymSlice<u64>,
) {
    let (me, n) = (my_pe(), n_pes());
    let (next, _) = neighbours(me, n);
    let (t, b) = (thread_idx_x() as usize, block_dim_x() as usize);
    let r = 4 * b;
    let (w, lane) = (warp_id(), lane_id() as usize);
    // Spins `steps` rounds the compiler cannot fold away; its result goes to `got` past the
    // checked elements.
    let late = |steps: u32, sink: usize| {
        let mut x = t as u32;
        for _ in 0..steps {
            x = shmem_device::hint::opaque(x)
                .wrapping_mul(3)
                .wrapping_add(1);
        }
        // SAFETY: `sink` is below `entry_got_len(b)` (the caller's sizes).
        unsafe { got.write(sink, x) };
    };
    let sinks = r + ENTRY_WARP;
    // Element `k` of the chunk thread `t` accesses in a region of one chunk a thread.
    let (mine, lane_mine) = (4 * (b - 1 - t), 4 * (31 - lane));
    // After `late(steps, sink)`, writes the marked source of this thread's chunk, its four
    // elements from `at + first`, for a put to send.
    let write_late = |steps: u32, sink: usize, at: usize, first: usize| {
        late(steps, sink);
        for k in at + first..at + first + 4 {
            // SAFETY: `k` is inside a put region of `src` (the caller's sizes).
            unsafe { src.write(k, pattern(me, k) as u32 + ENTRY_MARK) };
        }
    };
    // SAFETY: every index is inside the regions above (the caller's sizes); `next` is a
    // valid PE; the whole block makes the block calls and the whole of warp 0 the warp
    // calls.
    unsafe {
        write_late(w * ENTRY_SPIN, sinks + t, 0, mine);
        put(Block, dst.sub(0, r), src.sub(0, r), next);
        late(w * ENTRY_SPIN, sinks + b + t);
        for k in mine..mine + 4 {
            got.write(k, dst.read(r + k));
        }
        get(Block, dst.sub(r, r), src.sub(r, r), next);
        if w == 0 {
            let (put_at, get_at) = (2 * r, 2 * r + ENTRY_WARP);
            write_late(
                lane as u32 * ENTRY_SPIN / 8,
                sinks + 2 * b + lane,
                put_at,
                lane_mine,
            );
            put(
                Warp,
                dst.sub(put_at, ENTRY_WARP),
                src.sub(put_at, ENTRY_WARP),
                next,
            );
            late(lane as u32 * ENTRY_SPIN / 8, sinks + 2 * b + 32 + lane);
            for k in lane_mine..lane_mine + 4 {
                got.write(r + k, dst.read(get_at + k));
            }
            get(
                Warp,
                dst.sub(get_at, ENTRY_WARP),
                src.sub(get_at, ENTRY_WARP),
                next,
            );
        }
        let block_at = 2 * r + 2 * ENTRY_WARP;
        write_late(w * ENTRY_SPIN, sinks + 2 * b + 64 + t, block_at, mine);
        put_signal(
            Block,
            dst.sub(block_at, r),
            src.sub(block_at, r),
            sig.at(0),
            ENTRY_SIGNAL,
            SignalOp::Set,
            next,
        );
        if w == 0 {
            let warp_at = 3 * r + 2 * ENTRY_WARP;
            let sink = sinks + 3 * b + 64 + lane;
            write_late(lane as u32 * ENTRY_SPIN / 8, sink, warp_at, lane_mine);
            put_signal(
                Warp,
                dst.sub(warp_at, ENTRY_WARP),
                src.sub(warp_at, ENTRY_WARP),
                sig.at(1),
                ENTRY_SIGNAL + 1,
                SignalOp::Set,
                next,
            );
        }
    }
    quiet();
}

/// Thread-scope RMA of every length from 1 to `max` (≤ [`SMALL_MAX`]) `u32`s: the peer copy's
/// paths for one to ten 16-byte chunks and the word tails. Case `c = op * SMALL_MAX + len - 1`
/// (`op`: put, put_nbi, get, get_nbi) moves `len` elements at `c * SMALL_SLOT` (16-byte
/// aligned); the lengths are the kernel's argument, not constants the compiler could fold.
///
/// Host sets `src[i] = pattern(pe, i)` and zeroes `dst`. After: see `expect::small` (put cases
/// hold prev's pattern, get cases next's, and zeros past each length).
///
/// # Safety
/// Launch one block; buffers symmetric, ≥ `SMALL_CASES * SMALL_SLOT` elements; `max` ≤
/// `SMALL_MAX`.
#[shmem_kernel]
pub unsafe fn rma_small(src: SymSlice<u32>, dst: SymSlice<u32>, max: u32) {
    if thread_idx_x() != 0 {
        return;
    }
    let (next, _) = neighbours(my_pe(), n_pes());
    for len in 1..=max as usize {
        let region = |op: usize| {
            let at = (op * SMALL_MAX + len - 1) * SMALL_SLOT;
            (src.sub(at, len), dst.sub(at, len))
        };
        // SAFETY: disjoint regions of symmetric buffers (the caller's sizes); `next` is valid.
        unsafe {
            let (s, d) = region(0);
            put(Thread, d, s, next);
            let (s, d) = region(1);
            put_nbi(Thread, d, s, next);
            let (s, d) = region(2);
            get(Thread, d, s, next);
            let (s, d) = region(3);
            get_nbi(Thread, d, s, next);
        }
    }
    quiet();
}

/// Warp-scope RMA of every length in [`WARP_LENS`]: the peer copy's warp paths (lanes left
/// idle, one chunk a lane, the first round loaded before the peer's address is known, the
/// rounds, chunks and tails after them), and `put_nbi_unmapped` (NVSHMEM's own warp put).
/// Case `c = op * WARP_LENS.len() + k` (`op`: put, put_nbi, get, get_nbi,
/// put_nbi_unmapped) moves `WARP_LENS[k]` elements at `c * WARP_SLOT`; the lengths are
/// read at run time (`count` of them), not constants the compiler could fold.
///
/// Host sets `src[i] = pattern(pe, i)` and zeroes `dst`. After: see `expect::warp`.
///
/// # Safety
/// Launch one block of 32 threads or more (warp 0 makes the calls); buffers symmetric,
/// ≥ `WARP_CASES * WARP_SLOT` elements; `count` ≤ `WARP_LENS.len()`.
#[shmem_kernel]
pub unsafe fn rma_warp(src: SymSlice<u32>, dst: SymSlice<u32>, count: u32) {
    if warp_id() != 0 {
        return;
    }
    let (next, _) = neighbours(my_pe(), n_pes());
    // An index below a count known at run time: no iteration a compiler could unroll with
    // its length as a constant.
    #[allow(clippy::needless_range_loop)]
    for k in 0..count as usize {
        let len = WARP_LENS[k] as usize;
        let region = |op: usize| {
            let at = (op * WARP_LENS.len() + k) * WARP_SLOT;
            (src.sub(at, len), dst.sub(at, len))
        };
        // SAFETY: disjoint regions of symmetric buffers (the caller's sizes); `next` is valid;
        // the whole warp makes each call.
        unsafe {
            let (s, d) = region(0);
            put(Warp, d, s, next);
            let (s, d) = region(1);
            put_nbi(Warp, d, s, next);
            let (s, d) = region(2);
            get(Warp, d, s, next);
            let (s, d) = region(3);
            get_nbi(Warp, d, s, next);
            let (s, d) = region(4);
            rma::put_nbi_unmapped(Warp, d, s, next);
        }
    }
    quiet();
}

/// `put_signal` / `put_signal_nbi` with Set and Add in every scope, then `signal_op`.
///
/// Case `c` (0–11) moves `SIGNAL_CASE` elements from `src` to next's `dst` and updates
/// next's `sig[c]` to `c + 1` (Set, or Add onto 0); each PE waits for its own `sig[c]`
/// (odd cases with `signal_wait_until_backoff`). Then `signal_op` adds 7 to next's `sig[12]`
/// (waited for with the backoff) and sets next's `sig[13]` to 9.
///
/// Host sets `src[i] = pattern(pe, i)`, zeroes `dst`, `sig`. After: `dst` = `pattern(prev, i)`
/// over the 12 cases, `sig[c] = got[c] = c + 1`, `sig[12] = got[12] = 7`, `sig[13] = got[13] = 9`.
///
/// # Safety
/// Launch one block of ≥ 64 threads on every PE; buffers symmetric and large enough.
#[shmem_kernel]
pub unsafe fn signals(
    src: SymSlice<u64>,
    dst: SymSlice<u64>,
    sig: SymSlice<u64>,
    got: SymSlice<u64>,
) {
    let (next, _) = neighbours(my_pe(), n_pes());
    let t = thread_idx_x();
    let mut c = 0usize;
    macro_rules! case {
        ($f:ident, $op:expr, $scope:expr, $who:expr) => {{
            let (s, d) = (
                src.sub(c * SIGNAL_CASE, SIGNAL_CASE),
                dst.sub(c * SIGNAL_CASE, SIGNAL_CASE),
            );
            if $who {
                // SAFETY: symmetric buffers, disjoint case regions; the scope's threads call together.
                unsafe { $f($scope, d, s, sig.at(c), c as u64 + 1, $op, next) }
            }
            if t == 0 {
                // SAFETY: prev makes the matching put_signal, so the wait ends.
                let v = unsafe {
                    if c % 2 == 1 {
                        signal_wait_until_backoff(sig.at(c), Cmp::Eq, c as u64 + 1, 100)
                    } else {
                        signal_wait_until(sig.at(c), Cmp::Eq, c as u64 + 1)
                    }
                };
                // SAFETY: only thread 0 writes `got`.
                unsafe { got.write(c, v) };
            }
            sync_threads();
            c += 1;
        }};
    }
    case!(put_signal, SignalOp::Set, Thread, t == 0);
    case!(put_signal, SignalOp::Set, Warp, t < 32);
    case!(put_signal, SignalOp::Set, Block, true);
    case!(put_signal, SignalOp::Add, Thread, t == 0);
    case!(put_signal, SignalOp::Add, Warp, t < 32);
    case!(put_signal, SignalOp::Add, Block, true);
    case!(put_signal_nbi, SignalOp::Set, Thread, t == 0);
    case!(put_signal_nbi, SignalOp::Set, Warp, t < 32);
    case!(put_signal_nbi, SignalOp::Set, Block, true);
    case!(put_signal_nbi, SignalOp::Add, Thread, t == 0);
    case!(put_signal_nbi, SignalOp::Add, Warp, t < 32);
    case!(put_signal_nbi, SignalOp::Add, Block, true);
    debug_assert_eq!(c, SIGNAL_CASES);
    if t == 0 {
        // SAFETY: symmetric signal words; prev does the same to us, so both waits end.
        unsafe {
            signal_op(sig.at(12), 7, SignalOp::Add, next);
            signal_op(sig.at(13), 9, SignalOp::Set, next);
            signal_wait_until_backoff(sig.at(12), Cmp::Ge, 7, 1000);
            got.write(12, signal_fetch(sig.at(12)));
            signal_wait_until(sig.at(13), Cmp::Eq, 9);
            got.write(13, signal_fetch(sig.at(13)));
        }
        quiet();
    }
}

fn wait_case<T: WaitElem + RmaElem + Val>(
    iv: SymSlice<T>,
    status: SymSlice<i32>,
    got: SymSlice<u64>,
    base: usize,
    next: i32,
) {
    let v = T::from_u64;
    // SAFETY: `iv` has 4 symmetric elements; prev writes ours exactly as we write next's,
    // so every wait below is satisfied; `status` has 4 elements.
    unsafe {
        for i in 0..4 {
            p(iv.at(i), v(i as u64 + 1), next);
        }
        quiet();
        wait_until(iv.at(0), Cmp::Eq, v(1));
        got.write(base, test(iv.at(0), Cmp::Eq, v(1)) as u64);
        got.write(base + 1, test(iv.at(0), Cmp::Ne, v(1)) as u64);
        wait_until_all(iv, None, Cmp::Ge, v(1));
        got.write(base + 2, test_all(iv, None, Cmp::Ge, v(1)) as u64);
        got.write(base + 3, test_all(iv, None, Cmp::Gt, v(1)) as u64);
        let any = wait_until_any(iv, Some(status.local()), Cmp::Gt, v(0));
        got.write(base + 4, any.map_or(u64::MAX, |i| i as u64));
        got.write(
            base + 5,
            test_any(iv, None, Cmp::Eq, v(3)).map_or(u64::MAX, |i| i as u64),
        );
        got.write(
            base + 6,
            test_any(iv, None, Cmp::Eq, v(99)).map_or(u64::MAX, |i| i as u64),
        );
        got.write(
            base + 7,
            wait_until_any(iv, None, Cmp::Ge, v(4)).map_or(u64::MAX, |i| i as u64),
        );
    }
}

/// `wait_until`, `test`, `wait_until_all/any`, `test_all/any` on `i32`, `i64`, `u32`, `u64`
/// (results at `got[WAIT_RESULTS * type_index ..]`).
///
/// Each PE `p`s 1, 2, 3, 4 into next's four variables, then waits on its own. Host zeroes
/// the variables and sets `status = [1, 1, 1, 0]` (exclude all but the last). After, per
/// type: `expect::WAITS`.
///
/// # Safety
/// Thread 0 works; every PE launches it; buffers symmetric with ≥ 4 elements.
#[shmem_kernel]
pub unsafe fn waits(
    iv32: SymSlice<i32>,
    iv64: SymSlice<i64>,
    uv32: SymSlice<u32>,
    uv64: SymSlice<u64>,
    status: SymSlice<i32>,
    got: SymSlice<u64>,
) {
    if global_idx_x() != 0 {
        return;
    }
    let (next, _) = neighbours(my_pe(), n_pes());
    wait_case(iv32, status, got, 0, next);
    wait_case(iv64, status, got, WAIT_RESULTS, next);
    wait_case(uv32, status, got, 2 * WAIT_RESULTS, next);
    wait_case(uv64, status, got, 3 * WAIT_RESULTS, next);
}

fn amo_int_case<T: AmoInt + Val>(vars: SymSlice<T>, got: SymSlice<u64>, base: usize, next: i32) {
    let v = T::from_u64;
    let (a, b) = (vars.at(0), vars.at(1));
    let mut r = [0u64; AMO_INT_RESULTS];
    // SAFETY: two symmetric variables on `next`, touched only by these AMOs (from prev
    // towards us, from us towards next); fences order non-fetching AMOs before later ones.
    unsafe {
        atomic_set(a, v(10), next);
        fence();
        r[0] = atomic_fetch_add(a, v(5), next).bits();
        atomic_add(a, v(2), next);
        fence();
        r[1] = atomic_fetch_inc(a, next).bits();
        atomic_inc(a, next);
        fence();
        r[2] = atomic_fetch(a, next).bits();
        r[3] = atomic_compare_swap(a, v(19), v(100), next).bits();
        r[4] = atomic_compare_swap(a, v(5), v(7), next).bits();
        r[5] = atomic_swap(a, v(3), next).bits();
        r[6] = atomic_fetch(a, next).bits();
        atomic_set(b, v(12), next);
        fence();
        r[7] = atomic_fetch_and(b, v(10), next).bits();
        atomic_and(b, v(15), next);
        fence();
        r[8] = atomic_fetch_or(b, v(1), next).bits();
        atomic_or(b, v(4), next);
        fence();
        r[9] = atomic_fetch_xor(b, v(15), next).bits();
        atomic_xor(b, v(3), next);
        fence();
        r[10] = atomic_fetch(b, next).bits();
        for (i, x) in r.iter().enumerate() {
            got.write(base + i, *x);
        }
    }
}

fn amo_float_case<T: AmoExtended + Val>(
    vars: SymSlice<T>,
    got: SymSlice<u64>,
    base: usize,
    next: i32,
) {
    // SAFETY: one symmetric variable on `next`, touched only by these AMOs.
    unsafe {
        let a = vars.at(0);
        atomic_set(a, T::from_u64(3), next);
        fence();
        got.write(base, atomic_fetch(a, next).bits());
        got.write(base + 1, atomic_swap(a, T::from_u64(7), next).bits());
        got.write(base + 2, atomic_fetch(a, next).bits());
    }
}

/// Every AMO on next's variables, per type; and a counter on PE 0 that every thread of
/// every PE increments once.
///
/// Integer results (per type, `i32, i64, u32, u64`): `expect::AMO_INT`; final variables on
/// each PE: `vars[0] = 3`, `vars[1] = 1`. Float results (`f32, f64`): `expect::amo_float`.
/// Counter on PE 0: threads per launch × n_pes.
///
/// # Safety
/// Any launch shape; every PE launches the same shape; buffers symmetric and zeroed.
#[shmem_kernel]
pub unsafe fn atomics(
    v32: SymSlice<i32>,
    v64: SymSlice<i64>,
    u32s: SymSlice<u32>,
    u64s: SymSlice<u64>,
    f32s: SymSlice<f32>,
    f64s: SymSlice<f64>,
    counter: Sym<u64>,
    got: SymSlice<u64>,
) {
    // SAFETY: `counter` is a symmetric u64 on PE 0, only incremented by AMOs.
    unsafe { atomic_add(counter, 1u64, 0) };
    if global_idx_x() == 0 {
        let (next, _) = neighbours(my_pe(), n_pes());
        amo_int_case(v32, got, 0, next);
        amo_int_case(v64, got, AMO_INT_RESULTS, next);
        amo_int_case(u32s, got, 2 * AMO_INT_RESULTS, next);
        amo_int_case(u64s, got, 3 * AMO_INT_RESULTS, next);
        amo_float_case(f32s, got, 4 * AMO_INT_RESULTS, next);
        amo_float_case(f64s, got, 4 * AMO_INT_RESULTS + AMO_FLOAT_RESULTS, next);
    }
    quiet();
}

fn mismatches(data: SymSlice<u64>, pe: i32, first: usize) -> u64 {
    let mut bad = 0;
    for i in 0..data.len() {
        // SAFETY: the wait before this call made the data visible; nobody writes it now.
        if unsafe { data.at(i).read_volatile() } != pattern(pe, first + i) {
            bad += 1;
        }
    }
    bad
}

/// `fence` and `quiet` order a bulk put before a flag.
///
/// Phase 0: `put_nbi` of `data[2L..3L]` into next's `data[0..L]`, `fence`, `p` of
/// `flags[0] = 1`. Phase 1: the same into `data[L..2L]` with `quiet` and `flags[1]`. Each PE
/// waits for its flag and counts elements that differ from prev's source: `got = [0, 0]`.
/// Host sets `data[i] = pattern(pe, i)` for `i` in `2L..3L`, zero elsewhere, zeroes `flags`.
///
/// # Safety
/// Thread 0 works; every PE launches it; `data` ≥ 3·ORDER_LEN, `flags` ≥ 2.
#[shmem_kernel]
pub unsafe fn ordering(data: SymSlice<u64>, flags: SymSlice<u64>, got: SymSlice<u64>) {
    if global_idx_x() != 0 {
        return;
    }
    let me = my_pe();
    let (next, prev) = neighbours(me, n_pes());
    let l = ORDER_LEN;
    let src = data.sub(2 * l, l);
    // SAFETY: disjoint regions of symmetric buffers; prev mirrors every step, so the waits end.
    unsafe {
        put_nbi(Thread, data.sub(0, l), src, next);
        fence();
        p(flags.at(0), 1u64, next);
        wait_until(flags.at(0), Cmp::Eq, 1);
        got.write(0, mismatches(data.sub(0, l), prev, 2 * l));

        put_nbi(Thread, data.sub(l, l), src, next);
        quiet();
        p(flags.at(1), 1u64, next);
        wait_until(flags.at(1), Cmp::Eq, 1);
        got.write(1, mismatches(data.sub(l, l), prev, 2 * l));
    }
    quiet();
}

/// Barriers and syncs in every scope, then team queries.
///
/// Phase `k`: thread 0 `p`s `pattern(me, k)` into next's `slots[k]` (and `quiet`s before the
/// sync variants, which complete nothing); the phase's barrier/sync runs in its scope; thread
/// 0 reads its own `slots[k]` into `got[k]`, which must be `pattern(prev, k)`. Then
/// `got[12..18] = [WORLD.my_pe, WORLD.n_pes, NODE.my_pe, NODE.n_pes, SHARED.n_pes, WORLD→NODE(me)]`.
///
/// # Safety
/// Launch one block of ≥ 64 threads on every PE; collective launch.
#[shmem_kernel]
pub unsafe fn barriers(slots: SymSlice<u64>, got: SymSlice<u64>) {
    let me = my_pe();
    let (next, _) = neighbours(me, n_pes());
    let t = thread_idx_x();
    let mut k = 0usize;
    macro_rules! phase {
        ($call:expr, $who:expr, $completes:expr) => {{
            if t == 0 {
                // SAFETY: symmetric slot; only prev writes ours, in this phase.
                unsafe { p(slots.at(k), pattern(me, k), next) };
                if !$completes {
                    quiet();
                }
            }
            sync_threads();
            if $who {
                // SAFETY: every PE runs the same phases in order; the scope's threads call together.
                let _ = unsafe { $call };
            }
            sync_threads();
            if t == 0 {
                // SAFETY: the barrier made prev's `p` visible; nobody writes the slot again.
                unsafe { got.write(k, slots.at(k).read_volatile()) };
            }
            k += 1;
        }};
    }
    phase!(barrier_all(Thread), t == 0, true);
    phase!(barrier_all(Warp), t < 32, true);
    phase!(barrier_all(Block), true, true);
    phase!(sync_all(Thread), t == 0, false);
    phase!(sync_all(Warp), t < 32, false);
    phase!(sync_all(Block), true, false);
    phase!(barrier(Thread, Team::WORLD).ok(), t == 0, true);
    phase!(barrier(Warp, Team::WORLD).ok(), t < 32, true);
    phase!(barrier(Block, Team::WORLD).ok(), true, true);
    phase!(team_sync(Thread, Team::WORLD).ok(), t == 0, false);
    phase!(team_sync(Warp, Team::WORLD).ok(), t < 32, false);
    phase!(team_sync(Block, Team::WORLD).ok(), true, false);
    debug_assert_eq!(k, BARRIER_PHASES);
    if t == 0 {
        let q = [
            Team::WORLD.my_pe(),
            Team::WORLD.n_pes(),
            Team::NODE.my_pe(),
            Team::NODE.n_pes(),
            Team::SHARED.n_pes(),
            Team::WORLD.translate_pe(me, Team::NODE),
        ];
        for (i, v) in q.iter().enumerate() {
            // SAFETY: only thread 0 writes `got`.
            unsafe { got.write(BARRIER_PHASES + i, *v as i64 as u64) };
        }
    }
}

/// Peer pointers and scoped memory operations, without NVSHMEM calls on the data path.
///
/// Thread 0: `got[0]` = whether next is load/store reachable (`ptr` is `Some`), `got[1]` =
/// whether `ptr(x, me)` is `x`'s own address. It stores `pattern(me, i)` into next's `data`
/// through the peer mapping, publishes with `store_release(Sys)` of next's `flag = 1`, waits
/// with `wait_acquire(Sys)` (acquire loads) on its own flag, and counts mismatches against
/// prev's pattern:
/// `got[2] = 0`. Then, through peer pointers: `fetch_add(Sys)` of 1 on PE 0's `counter[0]`,
/// `add_release(Sys)` of 2 on PE 0's `counter[1]`, `compare_swap(Sys, 0 → me + 1)` on next's
/// `counter[2]` (`got[3]` = old value 0), `store_relaxed(Sys)` of 42 to next's `counter[3]`.
/// Every thread: `fetch_add(Gpu)` of 1 on its own `counter[4]`.
///
/// After (host barrier): PE 0 `counter[0] = n`, `counter[1] = 2n`; every PE
/// `counter[2] = prev + 1`, `counter[3] = 42`, `counter[4]` = threads per launch.
///
/// # Safety
/// One block; every PE launches it; all PEs load/store reachable (one node with P2P).
#[shmem_kernel]
pub unsafe fn peer_memory(
    data: SymSlice<u64>,
    flag: SymSlice<u32>,
    counter: SymSlice<u64>,
    got: SymSlice<u64>,
) {
    let me = my_pe();
    let (next, prev) = neighbours(me, n_pes());
    // SAFETY: counter[4] is this PE's own symmetric word, only touched atomically.
    unsafe { scoped::fetch_add(Gpu, counter.at(4), 1u64) };
    if thread_idx_x() != 0 {
        return;
    }
    let (Some(peer), Some(peer_flag), Some(pe0), Some(next_counter)) = (
        ptr_slice(data, next),
        ptr(flag.at(0), next),
        ptr_slice(counter, 0),
        ptr_slice(counter, next),
    ) else {
        // SAFETY: only thread 0 writes `got`.
        unsafe { got.write(0, 0) };
        return;
    };
    // SAFETY: peer mappings of symmetric buffers of the stated sizes; only this thread
    // writes next's data and flag; the flag protocol orders data before the read-back.
    unsafe {
        got.write(0, 1);
        let own = ptr(data.at(0), me).map(|p| p.as_ptr()) == Some(data.as_ptr());
        got.write(1, own as u64);
        for i in 0..PEER_LEN.min(data.len()) {
            peer.write(i, pattern(me, i));
        }
        scoped::store_release(Sys, peer_flag, 1u32);
        scoped::wait_acquire(Sys, flag.at(0), Cmp::Eq, 1u32);
        let mut bad = 0u64;
        for i in 0..PEER_LEN.min(data.len()) {
            if data.read(i) != pattern(prev, i) {
                bad += 1;
            }
        }
        got.write(2, bad);
        scoped::fetch_add(Sys, pe0.at(0), 1u64);
        scoped::add_release(Sys, pe0.at(1), 2u64);
        got.write(
            3,
            scoped::compare_swap(Sys, next_counter.at(2), 0u64, me as u64 + 1),
        );
        scoped::store_relaxed(Sys, next_counter.at(3), 42u64);
        scoped::fence_acq_rel(Sys);
    }
}

/// Writes 1 into `data[index]` from thread 0: in bounds it works; out of bounds the bounds
/// check panics, and the panic handler prints the location and traps the kernel, which the
/// host sees as a failed launch.
///
/// # Safety
/// `data` is a symmetric buffer; if `index` is out of range the launch fails (by design),
/// which leaves the CUDA context unusable: the process must exit.
#[shmem_kernel]
pub unsafe fn bounds_check(data: SymSlice<u32>, index: u32) {
    if global_idx_x() == 0 {
        // SAFETY: only thread 0 writes; `write` checks the index against `data.len()`.
        unsafe { data.write(index as usize, 1) };
    }
}

/// The `e4m3` conversions of [`shmem_device::fp8`], which take the GPU's conversion
/// instructions on `sm_89` and later, for the host to compare with their definitions in
/// integer arithmetic (the host build and the simulator's). The grid's threads share the
/// work: `enc4[i]` = `e4m3x4_from_f32` of `vals[4 i .. 4 i + 4]` (`f32` bits), `enc2[i]` =
/// `e4m3x2_from_f32(vals[2 i + 1], vals[2 i])`, and `dec[4 i + j]` = the bits of value `j`
/// of `e4m3x4_to_f32` of the word whose bytes are the codes `4 i .. 4 i + 4` (`dec.len()`
/// is 256: every code).
///
/// # Safety
/// Any 1-D launch; `enc4` holds `vals.len() / 4` words, `enc2` `vals.len() / 2`, `dec` 256.
#[shmem_kernel]
pub unsafe fn fp8_convert(
    vals: SymSlice<u32>,
    enc4: SymSlice<u32>,
    enc2: SymSlice<u32>,
    dec: SymSlice<u32>,
) {
    use shmem_device::fp8::{e4m3x2_from_f32, e4m3x4_from_f32, e4m3x4_to_f32};
    let (me, all) = (global_idx_x(), grid_stride_x());
    // SAFETY: every index is below its buffer's length (the kernel's contract); each output
    // word is one thread's.
    unsafe {
        let v = |i: usize| f32::from_bits(vals.read(i));
        let mut i = me;
        while i < vals.len() / 4 {
            enc4.write(i, e4m3x4_from_f32([0, 1, 2, 3].map(|j| v(4 * i + j))));
            i += all;
        }
        let mut i = me;
        while i < vals.len() / 2 {
            enc2.write(i, u32::from(e4m3x2_from_f32(v(2 * i + 1), v(2 * i))));
            i += all;
        }
        let mut i = me;
        while i < 64 {
            let codes = u32::from_le_bytes([0, 1, 2, 3].map(|j| (4 * i + j) as u8));
            for (j, x) in e4m3x4_to_f32(codes).into_iter().enumerate() {
                dec.write(4 * i + j, x.to_bits());
            }
            i += all;
        }
    }
}

/// [`shmem_device::bf16::pack`], which takes the GPU's conversion instruction on `sm_80` and
/// later, for the host to compare with its definition ([`shmem_device::bf16::from_f32`], the
/// host build's and the simulator's): `packed[i]` = `pack(vals[2 i], vals[2 i + 1])` (`f32`
/// bits). The grid's threads share the work.
///
/// # Safety
/// Any 1-D launch; `packed` holds `vals.len() / 2` words.
#[shmem_kernel]
pub unsafe fn bf16_convert(vals: SymSlice<u32>, packed: SymSlice<u32>) {
    let (me, all) = (global_idx_x(), grid_stride_x());
    // SAFETY: every index is below its buffer's length (the kernel's contract); each output
    // word is one thread's.
    unsafe {
        let v = |i: usize| f32::from_bits(vals.read(i));
        let mut i = me;
        while i < vals.len() / 2 {
            packed.write(i, shmem_device::bf16::pack(v(2 * i), v(2 * i + 1)));
            i += all;
        }
    }
}

/// The block-wide votes: every thread of block `b` writes, into `got[block_size * b + t]`,
/// `count | and_all << 8 | and_one_false << 9 | or_one << 10 | or_none << 11`: the count of
/// threads with `t % 3 == b % 3`, `sync_threads_and` of a predicate true everywhere and of
/// one false on the last thread, `sync_threads_or` of one true on thread `b + 7` and of none.
#[shmem_kernel]
pub unsafe fn block_votes(got: SymSlice<u32>) {
    let (b, t, n) = (block_idx_x(), thread_idx_x(), block_dim_x());
    let count = sync_threads_count(t % 3 == b % 3);
    let all = sync_threads_and(t < n);
    let not_all = sync_threads_and(t + 1 != n);
    let one = sync_threads_or(t == b + 7);
    let none = sync_threads_or(false);
    let v = count | u32::from(all) << 8 | u32::from(not_all) << 9;
    let v = v | u32::from(one) << 10 | u32::from(none) << 11;
    // SAFETY: each thread writes its own word; the caller's `got` has `blocks * n` words.
    unsafe { got.write((n * b + t) as usize, v) };
}

/// Bytes of dynamic shared memory [`shared_beyond_default`](shared_beyond_default()) is
/// launched with: 160 KiB, more than the 48 KB a block has unless its kernel opts in (which
/// the host does for it), and within what every GPU from sm_80 gives one block.
pub const LARGE_SHARED_BYTES: u32 = 160 * 1024;

/// Dynamic shared memory beyond 48 KB: each thread of a block fills its words of all
/// [`LARGE_SHARED_BYTES`] (word `i` is thread `i % threads`'), and after the barrier reads
/// the words of the next thread. Thread 0 of block `b` writes `got[2 b]`, the size the launch
/// gave, and every thread adds to `got[2 b + 1]` the words it read wrong.
///
/// # Safety
/// Launched with [`LARGE_SHARED_BYTES`] of dynamic shared memory; `got` holds two zeroed
/// words a block.
#[shmem_kernel]
pub unsafe fn shared_beyond_default(got: SymSlice<u32>) {
    let (b, t, n) = (block_idx_x(), thread_idx_x(), block_dim_x());
    let len = LARGE_SHARED_BYTES / 4;
    let Some(words) = shared::dynamic::<u32>(len as usize) else {
        return;
    };
    let value = |i: u32| i.wrapping_mul(0x9e37_79b9) ^ b;
    // SAFETY: each thread writes only its own words, and reads the next thread's after the
    // barrier that follows every write; `got`'s words `2 b ..` are this block's (the
    // kernel's contract).
    unsafe {
        let mut i = t;
        while i < len {
            words.wrapping_add(i as usize).write(value(i));
            i += n;
        }
        sync_threads();
        let mut wrong = 0u32;
        let mut i = (t + 1) % n;
        while i < len {
            wrong += u32::from(words.wrapping_add(i as usize).read() != value(i));
            i += n;
        }
        if t == 0 {
            got.write(2 * b as usize, shared::dynamic_bytes());
        }
        if wrong != 0 {
            scoped::fetch_add(Gpu, got.at(2 * b as usize + 1), wrong);
        }
    }
}

/// Rounds of [`grid_sync_rounds`](grid_sync_rounds()).
pub const GRID_SYNC_ROUNDS: u32 = 3;

/// `scoped::grid_sync`, the grid barrier that launches of different sizes can share: in each
/// of [`GRID_SYNC_ROUNDS`] rounds, thread 0 of block `b` writes the round into `got[b]`, the
/// grid meets, and then counts into `got[grid + b]` the blocks whose word is still behind
/// (none, where the barrier holds). `work` holds the barrier's two words (arrivals,
/// generation), which the host leaves as the last launch left them.
///
/// # Safety
/// A cooperative launch (every block resident); `got` holds two words a block, zeroed;
/// `work` two words, zeroed before the first launch that uses them.
#[shmem_kernel]
pub unsafe fn grid_sync_rounds(got: SymSlice<u32>, work: SymSlice<u32>) {
    let (b, g) = (block_idx_x() as usize, grid_dim_x() as usize);
    // SAFETY: `got[b]` is this block's, written by its thread 0 and read by the others only
    // after the barrier that follows; `got[g + b]` this block's; `work`'s two words are the
    // barrier's, which every block of the cooperative launch reaches each round.
    unsafe {
        for k in 1..=GRID_SYNC_ROUNDS {
            if thread_idx_x() == 0 {
                scoped::store_relaxed(Gpu, got.at(b), k);
            }
            scoped::grid_sync(work.at(0), work.at(1));
            if thread_idx_x() == 0 {
                let behind = (0..g)
                    .filter(|&o| scoped::load_relaxed(Gpu, got.at(o)) < k)
                    .count() as u32;
                if behind != 0 {
                    scoped::fetch_add(Gpu, got.at(g + b), behind);
                }
            }
        }
    }
}

/// How long [`pdl_first`](pdl_first()) waits for [`pdl_second`](pdl_second()) to start
/// (ns): far more than a launch takes, and short enough that an ordinary launch, where the
/// second cannot start first, costs little.
pub const PDL_WAIT_NS: u64 = 50_000_000;

/// What [`pdl_first`](pdl_first()) waits: [`PDL_WAIT_NS`] on the GPU; on the simulator, which
/// runs a stream's launches in order (the dependent never starts first), one poll. Waiting
/// there, the simulator could declare the poll a deadlock before the time was up: after
/// `POLL_LIMIT` polls, which an optimised build makes in less than 50 ms.
const PDL_WAIT: u64 = if cfg!(target_arch = "nvptx64") {
    PDL_WAIT_NS
} else {
    0
};

/// The first kernel of a programmatic dependent launch: every block lets its dependent start
/// (`pdl::launch_dependents`); thread 0 of block 0 then waits up to [`PDL_WAIT_NS`] (on
/// the GPU) for `flag[0]`, which the dependent sets before its `pdl::wait`, and writes into
/// `seen[0]` whether it saw it (1) or not (0); after that the block's threads write `data[i]
/// = 3 i + 1` for every thread `i` of the grid. So where the dependent started early it ran while
/// this kernel did, and it must wait for `data`.
///
/// # Safety
/// `data` holds a word a thread of the grid, `flag` and `seen` one word each, zeroed.
#[shmem_kernel]
pub unsafe fn pdl_first(data: SymSlice<u32>, flag: SymSlice<u32>, seen: SymSlice<u32>) {
    pdl::launch_dependents();
    let i = global_idx_x();
    // SAFETY: `flag[0]` is written only by the dependent, atomically; `seen[0]` is this
    // thread's; `data[i]` this thread's (the caller sized it).
    unsafe {
        if i == 0 {
            let start = global_timer_ns();
            let saw = loop {
                if scoped::load_relaxed(Gpu, flag.at(0)) != 0 {
                    break 1;
                }
                if global_timer_ns().wrapping_sub(start) > PDL_WAIT {
                    break 0;
                }
            };
            scoped::store_relaxed(Gpu, seen.at(0), saw);
        }
        sync_threads();
        data.write(i, 3 * i as u32 + 1);
    }
}

/// The dependent of [`pdl_first`](pdl_first()), launched after it on the same stream with
/// `with_dependent_launch(true)` and the same shape: thread 0 of block 0 sets `flag[0]`, then
/// every thread waits for the first kernel (`pdl::wait`) and copies `data[i]` into `out[i]`.
///
/// # Safety
/// As [`pdl_first`](pdl_first()); `out` as `data`.
#[shmem_kernel]
pub unsafe fn pdl_second(data: SymSlice<u32>, flag: SymSlice<u32>, out: SymSlice<u32>) {
    let i = global_idx_x();
    // SAFETY: `flag[0]` is read by the first kernel atomically; `data[i]` is complete once
    // the first kernel has (after `pdl::wait`); `out[i]` is this thread's.
    unsafe {
        if i == 0 {
            scoped::store_relaxed(Gpu, flag.at(0), 1u32);
        }
        pdl::wait();
        out.write(i, data.read(i));
    }
}

/// Threads a block of [`named_barriers`](named_barriers()) has, and words of dynamic shared
/// memory (`u32`) it is launched with: one a thread.
pub const NAMED_THREADS: u32 = 128;

/// Rounds the group of [`named_barriers`](named_barriers()) meets in.
pub const NAMED_ROUNDS: u32 = 3;

/// [`NamedBarrier`]: in each block of `NAMED_THREADS` threads, warps 1 to 3 meet on barrier 1
/// (96 threads) for `NAMED_ROUNDS` rounds: each thread writes its shared word, and after the
/// barrier reads that of a thread of another warp (then meets again before the next round's
/// writes). Before them, warp 0 hands warp 1 a tile on barrier 2 (64 threads): it writes
/// words 0 to 31, arrives without waiting and goes on; warp 1 waits, then reads them. Thread
/// `t` of block `b` writes `got[NAMED_THREADS * b + t]`: bit 0, every read of the rounds was
/// right (warps 1-3); bit 1, the tile was right (warp 1); bit 2, warp 0 arrived and went on.
///
/// # Safety
/// Blocks of `NAMED_THREADS` threads with `NAMED_THREADS * 4` bytes of dynamic shared memory;
/// `got` holds a word a thread.
#[shmem_kernel]
pub unsafe fn named_barriers(got: SymSlice<u32>) {
    let (b, t) = (block_idx_x(), thread_idx_x());
    let Some(words) = shared::dynamic::<u32>(NAMED_THREADS as usize) else {
        return;
    };
    let word = |i: u32| words.wrapping_add(i as usize).as_ptr();
    let hand = NamedBarrier::new(2, 64);
    // SAFETY: for the whole kernel: each thread writes only its own shared word, and reads
    // another's only after a barrier that the writer reached after writing it and before
    // writing it again; `got` has a word a thread (the kernel's contract).
    unsafe {
        let v = if t < 32 {
            word(t).write_volatile(7000 + t);
            hand.arrive();
            4
        } else {
            let mut v = 1;
            if t < 64 {
                hand.sync();
                v |= u32::from(word(t - 32).read_volatile() == 7000 + t - 32) << 1;
            }
            let group = NamedBarrier::new(1, NAMED_THREADS - 32);
            let other = 32 + (t - 32 + 37) % (NAMED_THREADS - 32);
            for r in 0..NAMED_ROUNDS {
                word(t).write_volatile(r * 1000 + t);
                group.sync();
                if word(other).read_volatile() != r * 1000 + other {
                    v &= !1;
                }
                group.sync();
            }
            v
        };
        got.write((NAMED_THREADS * b + t) as usize, v);
    }
}

/// [`rma::Vec16`]'s loads and stores: thread `t` of the block moves chunk `t` of each of
/// six regions of `src` (`VEC16_CHUNKS` chunks of four words each) to the same place in
/// `dst`, changing every lane so that a lane moved to the wrong place shows: regions 0 and
/// 1 as `[u32; 4]` adding `i + 1` to lane `i`, 2 and 3 as `[f32; 4]` adding `0.5 * (i + 1)`,
/// 4 and 5 as `[f64; 2]` adding `i + 1`. Even regions are loaded through a generic address
/// and stored to global memory, odd regions the other way round.
#[shmem_kernel]
pub unsafe fn vec16(src: SymSlice<u32>, dst: SymSlice<u32>) {
    use rma::Vec16;
    let t = thread_idx_x() as usize;
    if t >= VEC16_CHUNKS {
        return;
    }
    // Moves chunk `t` of region `r` as a `V`, changed by `f`.
    fn one<V: Vec16>(
        src: SymSlice<u32>,
        dst: SymSlice<u32>,
        r: usize,
        t: usize,
        f: impl Fn(V) -> V,
    ) {
        let at = 4 * (r * VEC16_CHUNKS + t);
        let (s, d) = (
            src.as_ptr().wrapping_add(at).cast::<V>(),
            dst.as_ptr().wrapping_add(at).cast::<V>(),
        );
        // SAFETY: the chunk lies in both buffers (`6 * VEC16_CHUNKS` chunks each, the host's
        // allocation), 16-byte aligned (symmetric allocations are), global memory; this
        // thread's alone.
        unsafe {
            if r.is_multiple_of(2) {
                f(V::load(s)).store_global(d)
            } else {
                f(V::load_global(s)).store(d)
            }
        }
    }
    for r in 0..2 {
        one(src, dst, r, t, |v: [u32; 4]| {
            core::array::from_fn(|i| v[i].wrapping_add(i as u32 + 1))
        });
        one(src, dst, 2 + r, t, |v: [f32; 4]| {
            core::array::from_fn(|i| v[i] + 0.5 * (i + 1) as f32)
        });
        one(src, dst, 4 + r, t, |v: [f64; 2]| {
            core::array::from_fn(|i| v[i] + (i + 1) as f64)
        });
    }
}

/// Bytes of dynamic shared memory [`bulk_copies`](bulk_copies()) is launched with: a line
/// for the barriers, then the slots.
pub const BULK_COPY_SHARED: usize = 128 + BULK_COPY_SLOTS * BULK_COPY_PIECE;

/// [`bulk`](shmem_device::bulk): thread 0 moves `BULK_COPY_BYTES` of this PE's `src` into
/// the next PE's `dst` by bulk copies, `BULK_COPY_PIECES` pieces (the last one shorter, not
/// a multiple of the others) through `BULK_COPY_SLOTS` slots of shared memory, two pieces in
/// flight: each piece comes in on its slot's barrier (whose phases wrap, 0, 1, 0), goes out
/// in a group of its own, and its slot takes a piece again once that group has read it. The
/// block then waits for every group, quiets, and meets every PE. Where the build has no bulk
/// copies (`bulk::AVAILABLE`, before sm_90) thread 0 copies with ordinary loads and stores,
/// so that the suite's check still holds there. The next PE's memory must be mapped here.
///
/// # Safety
/// `src` and `dst` hold `BULK_COPY_BYTES` bytes each on every PE; one block, launched with
/// `BULK_COPY_SHARED` bytes of dynamic shared memory, on every PE.
#[shmem_kernel]
pub unsafe fn bulk_copies(src: SymSlice<u8>, dst: SymSlice<u8>) {
    use shmem_device::bulk::{self, Barrier};
    let next = (my_pe() + 1) % n_pes();
    if thread_idx_x() == 0 {
        let to = ptr_slice(dst, next);
        let Some(mem) = shared::dynamic::<u8>(BULK_COPY_SHARED) else {
            return;
        };
        let (Some(to), true) = (to, bulk::AVAILABLE) else {
            // SAFETY: both ranges hold `BULK_COPY_BYTES` (the kernel's contract); the next
            // PE's copy through a mapped address, or this PE's when it is not mapped (the
            // check then fails).
            unsafe {
                let to = to.map_or(dst.as_ptr(), |p| p.as_ptr());
                core::ptr::copy_nonoverlapping(src.as_ptr(), to, BULK_COPY_BYTES);
            }
            quiet();
            return;
        };
        let slots = BULK_COPY_SLOTS as u32;
        // SAFETY: the shared memory is the launch's `BULK_COPY_SHARED` bytes, this thread's
        // alone: the barriers in its first line, then the slots; the pieces lie within `src`
        // and the next PE's `dst`, multiples of 16 bytes at offsets of 16; a slot takes a
        // piece again only after the group that read it has (`wait_read`).
        unsafe {
            let at = |off: usize| shared::SharedPtr::from_raw(mem.as_ptr().add(off));
            let bar = |k: u32| Barrier::from_shared(at(8 * (k % slots) as usize).cast::<u64>());
            let slot = |k: u32| at(128 + (k % slots) as usize * BULK_COPY_PIECE);
            for i in 0..slots {
                Barrier::init(at(8 * i as usize).cast::<u64>(), 1);
            }
            let piece = |k: u32| {
                let off = k as usize * BULK_COPY_PIECE;
                (off, BULK_COPY_PIECE.min(BULK_COPY_BYTES - off) as u32)
            };
            let load = |k: u32| {
                let (off, len) = piece(k);
                bar(k).arrive_expect_tx(len);
                bulk::copy_to_shared(slot(k), src.as_ptr().add(off), len, bar(k));
            };
            let pieces = BULK_COPY_PIECES as u32;
            for k in 0..slots - 1 {
                load(k);
            }
            for k in 0..pieces {
                if k + slots - 1 < pieces {
                    bulk::wait_read::<0>();
                    load(k + slots - 1);
                }
                bar(k).wait(k / slots % 2);
                let (off, len) = piece(k);
                bulk::copy_to_global(to.as_ptr().add(off), slot(k), len);
                bulk::commit_group();
            }
            bulk::wait_all();
        }
        quiet();
    }
}

/// Words of dynamic shared memory [`block_shared`](block_shared()) is launched with.
pub const SHARED_WORDS: usize = 64;

/// Dynamic shared memory ([`shared`]), launched with `SHARED_WORDS * 4` bytes; writes four
/// words a block into `got` (`got.len() >= 4 * blocks`): the size the launch gave, whether
/// one word more is refused, the words thread 0 handed over that another thread read wrong
/// (thread 0 writes words `1..SHARED_WORDS`, then releases word 0; the others acquire it,
/// then read their word), and the block's count of threads, three a thread (at block scope
/// a `fetch_add`, an `add_relaxed` and a `compare_swap` loop: the `.shared` forms of the
/// scoped operations, `ATOMS` in the SASS).
#[shmem_kernel]
pub unsafe fn block_shared(got: SymSlice<u32>) {
    let (b, t) = (block_idx_x() as usize, thread_idx_x() as usize);
    let Some(words) = shared::dynamic::<u32>(SHARED_WORDS) else {
        if t == 0 {
            // SAFETY: this block's words of `got`, written by thread 0 only.
            unsafe { got.write(4 * b, shared::dynamic_bytes()) };
        }
        return;
    };
    let (flag, sum) = (words, words.wrapping_add(SHARED_WORDS - 1));
    // SAFETY: the block's own shared words: the flag is reset before the barrier (the
    // memory holds what an earlier block on the SM left: on an H100 a block read a finished
    // block's flag and words before this reset was here); thread 0 writes the words before
    // the release, the others read them after the acquire; the last word is only touched by
    // atomics after the barrier that follows its reset. `got`'s words `4 b ..` are this
    // block's, thread 0's.
    unsafe {
        if t == 0 {
            scoped::store_relaxed(Cta, flag, 0u32);
        }
        sync_threads();
        if t == 0 {
            for i in 1..SHARED_WORDS {
                words.wrapping_add(i).write((b * 1000 + i) as u32);
            }
            scoped::store_release(Cta, flag, 1u32);
        } else {
            while scoped::load_acquire(Cta, flag) != 1 {}
            if t < SHARED_WORDS - 1 && words.wrapping_add(t).read() != (b * 1000 + t) as u32 {
                scoped::fetch_add(Gpu, got.at(4 * b + 2), 1u32);
            }
        }
        sync_threads();
        if t == 0 {
            sum.write(0);
        }
        sync_threads();
        scoped::fetch_add(Cta, sum, 1u32);
        scoped::add_relaxed(Cta, sum, 1u32);
        let mut seen = scoped::load_relaxed(Cta, sum);
        loop {
            let was = scoped::compare_swap(Cta, sum, seen, seen + 1);
            if was == seen {
                break;
            }
            seen = was;
        }
        sync_threads();
        if t == 0 {
            got.write(4 * b, shared::dynamic_bytes());
            got.write(
                4 * b + 1,
                u32::from(shared::dynamic::<u32>(SHARED_WORDS + 1).is_none()),
            );
            got.write(4 * b + 3, sum.read());
        }
    }
}
