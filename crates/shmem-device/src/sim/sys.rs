//! NVSHMEM's device functions on the CPU simulator, with the names and signatures of
//! `crate::sys`'s C declarations: on a host build with the simulator, `crate::sys`
//! re-exports these (through `crate::host`, the one seam) instead of declaring C symbols.
//! [`super::shmem`] documents the semantics.
//!
//! Each function's safety contract is NVSHMEM's for the C function of the same name, as for
//! the declarations it stands in for.

#![allow(missing_docs, clippy::missing_safety_doc, clippy::too_many_arguments)]

use super::shmem::{self as s, Group};
use crate::sys::Team;
use core::ffi::c_void;

pub unsafe fn nvshmem_my_pe() -> i32 {
    s::my_pe()
}
pub unsafe fn nvshmem_n_pes() -> i32 {
    s::n_pes()
}
pub unsafe fn nvshmem_team_my_pe(team: Team) -> i32 {
    s::team_my_pe(team)
}
pub unsafe fn nvshmem_team_n_pes(team: Team) -> i32 {
    s::team_n_pes(team)
}
pub unsafe fn nvshmem_team_translate_pe(src: Team, pe: i32, dst: Team) -> i32 {
    s::team_translate(src, pe, dst)
}
pub unsafe fn nvshmem_ptr(dest: *const c_void, pe: i32) -> *mut c_void {
    s::ptr(dest, pe)
}
#[track_caller]
pub unsafe fn nvshmem_fence() {
    s::fence()
}
#[track_caller]
pub unsafe fn nvshmem_quiet() {
    s::quiet()
}

macro_rules! barriers {
    ($($f:ident: $g:ident, $quiet:literal, $ret:ty;)*) => { $(
        #[track_caller]
        pub unsafe fn $f() -> $ret { s::pe_barrier(Group::$g, 0, $quiet, stringify!($f)); Default::default() }
    )* };
}
barriers! {
    nvshmem_barrier_all: Thread, true, ();
    nvshmemx_barrier_all_warp: Warp, true, ();
    nvshmemx_barrier_all_block: Block, true, ();
    nvshmem_sync_all: Thread, false, ();
    nvshmemx_sync_all_warp: Warp, false, ();
    nvshmemx_sync_all_block: Block, false, ();
}
macro_rules! team_barriers {
    ($($f:ident: $g:ident, $quiet:literal;)*) => { $(
        #[track_caller]
        pub unsafe fn $f(team: Team) -> i32 { s::pe_barrier(Group::$g, team, $quiet, stringify!($f)); 0 }
    )* };
}
team_barriers! {
    nvshmem_barrier: Thread, true;
    nvshmemx_barrier_warp: Warp, true;
    nvshmemx_barrier_block: Block, true;
    nvshmem_team_sync: Thread, false;
    nvshmemx_team_sync_warp: Warp, false;
    nvshmemx_team_sync_block: Block, false;
}

#[track_caller]
pub unsafe fn nvshmemx_signal_op(sig: *mut u64, signal: u64, op: i32, pe: i32) {
    s::signal_op(sig, signal, op, pe)
}
#[track_caller]
pub unsafe fn nvshmem_signal_fetch(sig: *const u64) -> u64 {
    super::step(true);
    // SAFETY: a valid local signal word (NVSHMEM's contract).
    unsafe { sig.read_volatile() }
}
#[track_caller]
pub unsafe fn nvshmem_signal_wait_until(sig: *mut u64, cmp: i32, value: u64) -> u64 {
    // SAFETY: as above.
    unsafe { s::wait_until(sig, cmp, value) }
}
pub unsafe fn vprintf(_format: *const u8, _args: *const u8) -> i32 {
    0
}

macro_rules! bulk {
    ($($t:ident, $w:ident, $b:ident => $f:ident;)*) => { $(
        #[track_caller]
        pub unsafe fn $t(dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32) {
            // SAFETY: NVSHMEM's contract, which the caller upholds.
            unsafe { s::$f(Group::Thread, dest, src, bytes, pe) }
        }
        #[track_caller]
        pub unsafe fn $w(dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32) {
            // SAFETY: as above.
            unsafe { s::$f(Group::Warp, dest, src, bytes, pe) }
        }
        #[track_caller]
        pub unsafe fn $b(dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32) {
            // SAFETY: as above.
            unsafe { s::$f(Group::Block, dest, src, bytes, pe) }
        }
    )* };
}
bulk! {
    nvshmem_putmem, nvshmemx_putmem_warp, nvshmemx_putmem_block => put;
    nvshmem_putmem_nbi, nvshmemx_putmem_nbi_warp, nvshmemx_putmem_nbi_block => put;
    nvshmem_getmem, nvshmemx_getmem_warp, nvshmemx_getmem_block => get;
    nvshmem_getmem_nbi, nvshmemx_getmem_nbi_warp, nvshmemx_getmem_nbi_block => get;
}
macro_rules! bulk_signal {
    ($($t:ident, $w:ident, $b:ident;)*) => { $(
        #[track_caller]
        pub unsafe fn $t(dest: *mut c_void, src: *const c_void, bytes: usize, sig: *mut u64, signal: u64, op: i32, pe: i32) {
            // SAFETY: NVSHMEM's contract, which the caller upholds.
            unsafe { s::put_signal(Group::Thread, dest, src, bytes, sig, signal, op, pe) }
        }
        #[track_caller]
        pub unsafe fn $w(dest: *mut c_void, src: *const c_void, bytes: usize, sig: *mut u64, signal: u64, op: i32, pe: i32) {
            // SAFETY: as above.
            unsafe { s::put_signal(Group::Warp, dest, src, bytes, sig, signal, op, pe) }
        }
        #[track_caller]
        pub unsafe fn $b(dest: *mut c_void, src: *const c_void, bytes: usize, sig: *mut u64, signal: u64, op: i32, pe: i32) {
            // SAFETY: as above.
            unsafe { s::put_signal(Group::Block, dest, src, bytes, sig, signal, op, pe) }
        }
    )* };
}
bulk_signal! {
    nvshmem_putmem_signal, nvshmemx_putmem_signal_warp, nvshmemx_putmem_signal_block;
    nvshmem_putmem_signal_nbi, nvshmemx_putmem_signal_nbi_warp, nvshmemx_putmem_signal_nbi_block;
}
/// The byte collectives in the three scopes; `root` only for broadcast (`$root` names its
/// parameter there, `_` elsewhere).
macro_rules! bytes_coll {
    ($($t:ident, $w:ident, $b:ident => $kind:literal $(, $root:ident)?;)*) => { $(
        bytes_coll!(@one $t, Thread, $kind $(, $root)?);
        bytes_coll!(@one $w, Warp, $kind $(, $root)?);
        bytes_coll!(@one $b, Block, $kind $(, $root)?);
    )* };
    (@one $f:ident, $g:ident, $kind:literal) => {
        #[track_caller]
        pub unsafe fn $f(team: Team, dest: *mut c_void, src: *const c_void, bytes: usize) -> i32 {
            // SAFETY: NVSHMEM's contract, which the caller upholds.
            unsafe { s::collect(Group::$g, team, $kind, dest, src, bytes, 0) }
        }
    };
    (@one $f:ident, $g:ident, $kind:literal, $root:ident) => {
        #[track_caller]
        pub unsafe fn $f(team: Team, dest: *mut c_void, src: *const c_void, bytes: usize, $root: i32) -> i32 {
            // SAFETY: NVSHMEM's contract, which the caller upholds.
            unsafe { s::collect(Group::$g, team, $kind, dest, src, bytes, $root) }
        }
    };
}
bytes_coll! {
    nvshmem_alltoallmem, nvshmemx_alltoallmem_warp, nvshmemx_alltoallmem_block => b'a';
    nvshmem_fcollectmem, nvshmemx_fcollectmem_warp, nvshmemx_fcollectmem_block => b'f';
    nvshmem_broadcastmem, nvshmemx_broadcastmem_warp, nvshmemx_broadcastmem_block => b'b', root;
}

/// The typed alltoalls (`nvshmem_int32_alltoall`, ...): the byte-wise one on `nelems`
/// elements.
macro_rules! typed_alltoall {
    ($($t:ident, $w:ident, $b:ident: $ty:ty;)*) => { $(
        typed_alltoall!(@one $t, Thread, $ty);
        typed_alltoall!(@one $w, Warp, $ty);
        typed_alltoall!(@one $b, Block, $ty);
    )* };
    (@one $f:ident, $g:ident, $ty:ty) => {
        #[track_caller]
        pub unsafe fn $f(team: Team, dest: *mut $ty, src: *const $ty, nelems: usize) -> i32 {
            let bytes = nelems * size_of::<$ty>();
            // SAFETY: NVSHMEM's contract, which the caller upholds.
            unsafe { s::collect(Group::$g, team, b'a', dest.cast(), src.cast(), bytes, 0) }
        }
    };
}
typed_alltoall! {
    nvshmem_int32_alltoall, nvshmemx_int32_alltoall_warp, nvshmemx_int32_alltoall_block: i32;
    nvshmem_int64_alltoall, nvshmemx_int64_alltoall_warp, nvshmemx_int64_alltoall_block: i64;
}

/// The typed functions (`nvshmem_TYPE_OP`), generic over the element type: `crate::sys`'s
/// per-type modules re-export them under the C declarations' names.
pub mod typed {
    pub use super::super::shmem::typed::*;
}

/// Reductions (`nvshmem_TYPE_OP_reduce` and the warp and block forms), generic over the
/// element type.
pub mod reduce {
    use super::super::shmem::{Group, Word, reduce};
    use crate::sys::Team;

    macro_rules! reductions {
        ($($op:literal => $thread:ident, $warp:ident, $block:ident;)*) => { $(
            #[track_caller]
            pub unsafe fn $thread<T: Word>(team: Team, dest: *mut T, src: *const T, n: usize) -> i32 {
                // SAFETY: NVSHMEM's contract, which the caller upholds.
                unsafe { reduce(Group::Thread, team, $op, dest, src, n) }
            }
            #[track_caller]
            pub unsafe fn $warp<T: Word>(team: Team, dest: *mut T, src: *const T, n: usize) -> i32 {
                // SAFETY: as above.
                unsafe { reduce(Group::Warp, team, $op, dest, src, n) }
            }
            #[track_caller]
            pub unsafe fn $block<T: Word>(team: Team, dest: *mut T, src: *const T, n: usize) -> i32 {
                // SAFETY: as above.
                unsafe { reduce(Group::Block, team, $op, dest, src, n) }
            }
        )* };
    }
    reductions! {
        "sum" => sum, sum_warp, sum_block;
        "prod" => prod, prod_warp, prod_block;
        "min" => min, min_warp, min_block;
        "max" => max, max_warp, max_block;
        "and" => and, and_warp, and_block;
        "or" => or, or_warp, or_block;
        "xor" => xor, xor_warp, xor_block;
    }
}
