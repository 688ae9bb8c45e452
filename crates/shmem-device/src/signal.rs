//! Signals: a `u64` on the symmetric heap that a put can update *after* its data has
//! landed, so the receiver waits on one word instead of polling the data.
//!
//! NVSHMEM semantics: in [`put_signal`] the update of `sig` on `pe` becomes visible only
//! after the whole data transfer is visible there. A receiver that sees the signal change
//! (via [`signal_wait_until`] or [`crate::p2p::wait_until`]) may read the data.
//!
//! # Safety (common to every function of this module)
//! Those of [`crate::rma`], and: `sig` is a symmetric `u64` that only signal operations and
//! waits access while signals are in flight.

use crate::mem::{LocalSlice, Sym, SymSlice, operands};
use crate::p2p::Cmp;
use crate::rma::try_p2p;
use crate::scope::{Scope, ScopeKind, by_scope};
use crate::sys;

/// How a signal word is updated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum SignalOp {
    /// `NVSHMEM_SIGNAL_SET`: the word becomes the value.
    Set = 9,
    /// `NVSHMEM_SIGNAL_ADD`: the value is added atomically.
    Add = 10,
}

/// The smallest thread-scope `put_signal` that [`try_put_signal_p2p`] copies itself. Below,
/// NVSHMEM's path (4-byte copy, fence and signal in one function) is faster: the ping-pong
/// at 16 and 32 bytes took 1.08-1.14x the twin's time with the separate fence and signal
/// call, 0.97-1.03 at 64 bytes, 0.90 and below from 128 (shmem-bench, 2 PEs on one H100
/// under MPS, 2026-11-23).
const P2P_PUT_SIGNAL_MIN_BYTES: usize = 128;

/// `put_signal`'s peer-to-peer path, taken at thread scope from [`P2P_PUT_SIGNAL_MIN_BYTES`]:
/// shmem-rs's 16-byte copy ([`crate::rma`]'s, where NVSHMEM's bitcode moves 4 bytes per
/// load: a thread-scope put-signal ping-pong of 64 KiB took 1.09x the CUDA C++ twin's time,
/// 0.55x with this path), then a system fence (`nvshmem_fence`, `membar.sys` on a mapped
/// peer, as NVSHMEM's own path) and the signal, so the signal lands after the data. Warp
/// and block scope stay on NVSHMEM's path: the same copy made the halo's block-scope edge
/// sends and the block-scope ping-pong slower (BENCHMARKS.md, the halo's "what is left"),
/// and so did a block-scope copy shaped as nvcc compiles NVSHMEM's library (16-byte loads,
/// weak stores, the signal's address taken before the fence): 1-3 % more per halo
/// iteration on two and four H200s (BENCHMARKS.md, thirty-second session).
/// Returns `false`, doing nothing, when NVSHMEM must do it.
///
/// # Safety
/// As [`put_signal`], for the operands `operands` checked.
#[inline(always)]
unsafe fn try_put_signal_p2p<S: Scope>(
    dest: *mut core::ffi::c_void,
    src: *mut core::ffi::c_void,
    bytes: usize,
    sig: Sym<u64>,
    value: u64,
    op: SignalOp,
    pe: i32,
) -> bool {
    if S::KIND != ScopeKind::Thread || bytes < P2P_PUT_SIGNAL_MIN_BYTES {
        return false;
    }
    // SAFETY: the caller's contract.
    if !unsafe { try_p2p::<S>(dest, src, bytes, pe, true) } {
        return false;
    }
    crate::order::fence();
    // SAFETY: the caller's contract.
    unsafe { signal_op(sig, value, op, pe) };
    true
}

/// Copies `src` into `pe`'s `dest`, then updates `pe`'s `sig` with `op` and `value`;
/// returns when `src` may be reused. NVSHMEM: `nvshmem_putmem_signal` and warp/block forms.
///
/// # Panics
/// If `dest.len() != src.local_len()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn put_signal<S: Scope, T: Copy>(
    _scope: S,
    dest: SymSlice<T>,
    src: impl LocalSlice<T>,
    sig: Sym<u64>,
    value: u64,
    op: SignalOp,
    pe: i32,
) {
    let o = operands(dest, src);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    if unsafe { try_put_signal_p2p::<S>(o.sym, o.local, o.bytes, sig, value, op, pe) } {
        return;
    }
    let (d, s, bytes) = (o.sym, o.local.cast_const(), o.bytes);
    let (sg, o) = (sig.as_ptr(), op as i32);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_putmem_signal,
            sys::nvshmemx_putmem_signal_warp,
            sys::nvshmemx_putmem_signal_block,
            (d, s, bytes, sg, value, o, pe)
        )
    }
}

/// Non-blocking [`put_signal`]: returns at once; `src` may be reused after the next
/// [`quiet`](crate::order::quiet). The signal still follows the data at the target.
/// NVSHMEM: `nvshmem_putmem_signal_nbi` and warp/block forms.
///
/// # Panics
/// If `dest.len() != src.local_len()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn put_signal_nbi<S: Scope, T: Copy>(
    _scope: S,
    dest: SymSlice<T>,
    src: impl LocalSlice<T>,
    sig: Sym<u64>,
    value: u64,
    op: SignalOp,
    pe: i32,
) {
    let o = operands(dest, src);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    if unsafe { try_put_signal_p2p::<S>(o.sym, o.local, o.bytes, sig, value, op, pe) } {
        return;
    }
    let (d, s, bytes) = (o.sym, o.local.cast_const(), o.bytes);
    let (sg, o) = (sig.as_ptr(), op as i32);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_putmem_signal_nbi,
            sys::nvshmemx_putmem_signal_nbi_warp,
            sys::nvshmemx_putmem_signal_nbi_block,
            (d, s, bytes, sg, value, o, pe)
        )
    }
}

/// Updates `pe`'s `sig` atomically with `op` and `value`, without data.
/// NVSHMEM: `nvshmemx_signal_op`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn signal_op(sig: Sym<u64>, value: u64, op: SignalOp, pe: i32) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { sys::nvshmemx_signal_op(sig.as_ptr(), value, op as i32, pe) }
}

/// Reads this PE's `sig` atomically. NVSHMEM: `nvshmem_signal_fetch`.
///
/// # Safety
/// `sig` is a valid symmetric `u64`.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn signal_fetch(sig: Sym<u64>) -> u64 {
    // SAFETY: the caller guarantees `sig` is valid.
    unsafe { sys::nvshmem_signal_fetch(sig.as_ptr()) }
}

/// Waits until this PE's `sig` compares to `value` by `cmp`; returns the value seen.
/// Data put with that signal is visible when it returns. NVSHMEM: `nvshmem_signal_wait_until`.
///
/// Bounded by the program-wide bound when one is set ([`crate::bound`]).
///
/// # Safety
/// `sig` is a valid symmetric `u64`, and some PE eventually makes the condition true
/// (otherwise the kernel never finishes, or stops at its bound).
#[inline(always)]
#[track_caller]
pub unsafe fn signal_wait_until(sig: Sym<u64>, cmp: Cmp, value: u64) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { signal_wait_bounded(sig, cmp, value, None, 0) }
}

/// [`signal_wait_until`] for a wait that is not urgent: between polls the thread sleeps
/// about `sleep_ns` nanoseconds ([`crate::thread::nanosleep`]). Where many threads wait at
/// once, their tight polls compete with the work they wait for (the loads and atomics of
/// the threads that will make the condition true, on the same memory); with the backoff
/// they leave it alone, and each returns up to about `2 sleep_ns` after the condition
/// holds. Not in NVSHMEM. (The MoE layout's expert columns wait so for each other;
/// BENCHMARKS.md, fiftieth session.)
///
/// Bounded by the program-wide bound when one is set ([`crate::bound`]).
///
/// # Safety
/// As [`signal_wait_until`].
#[inline(always)]
#[track_caller]
pub unsafe fn signal_wait_until_backoff(sig: Sym<u64>, cmp: Cmp, value: u64, sleep_ns: u32) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { signal_wait_bounded(sig, cmp, value, None, sleep_ns) }
}

/// [`signal_wait_until`] that stops the kernel with a report after `bound`
/// ([`crate::bound`]).
///
/// # Safety
/// `sig` is a valid symmetric `u64`.
#[inline(always)]
#[track_caller]
pub unsafe fn signal_wait_until_within(
    sig: Sym<u64>,
    cmp: Cmp,
    value: u64,
    bound: core::time::Duration,
) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { signal_wait_bounded(sig, cmp, value, Some(bound), 0) }
}

#[inline(always)]
#[track_caller]
unsafe fn signal_wait_bounded(
    sig: Sym<u64>,
    cmp: Cmp,
    value: u64,
    bound: Option<core::time::Duration>,
    sleep_ns: u32,
) -> u64 {
    let p = sig.as_ptr();
    let mut seen = 0;
    // One poll; with a backoff, a sleep after each that fails.
    let mut poll = || {
        // SAFETY: the caller guarantees `sig` is valid.
        seen = unsafe { sys::nvshmem_signal_fetch(p) };
        let holds = cmp.holds(seen, value);
        if !holds && sleep_ns > 0 {
            crate::thread::nanosleep(sleep_ns);
        }
        holds
    };
    let held = crate::bound::poll_bounded(bound, crate::bound::BoundRead::Once, &mut poll, || {
        crate::bound::Waiting {
            kind: crate::bound::WaitKind::SignalWaitUntil,
            cmp,
            addr: p.cast(),
            elem_bytes: 8,
            expected: value,
        }
    });
    if held {
        // The fetch that saw the condition hold is NVSHMEM's wait's own last read.
        return seen;
    }
    if sleep_ns > 0 {
        while !poll() {}
        return seen;
    }
    // SAFETY: the caller guarantees `sig` is valid.
    unsafe { sys::nvshmem_signal_wait_until(p, cmp as i32, value) }
}
