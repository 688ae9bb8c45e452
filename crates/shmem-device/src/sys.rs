//! Raw `extern "C"` declarations of NVSHMEM's device library (`libnvshmem_device*.bc`).
//!
//! No logic lives here: every item is a C symbol with its C signature. The typed API in the
//! other modules is the only user of this module. Names are the ones present in both NVSHMEM
//! 3.4.5 and 3.8.0 bitcode (the supported range is 3.4 – 3.8).
//!
//! On the host these declarations exist only so that kernel code type-checks; nothing here is
//! ever linked into a host binary, because only device builds call them.

#![allow(missing_docs)]
// The simulator's definitions below mirror C declarations: their safety contract is
// NVSHMEM's for the function of the same name, as for the declarations.
#![cfg_attr(
    all(feature = "sim", not(target_arch = "nvptx64")),
    allow(clippy::missing_safety_doc, clippy::too_many_arguments)
)]

// Used by the declarations (not by the simulator's definitions).
#[allow(unused_imports)]
use core::ffi::c_void;

pub type Team = i32;

#[cfg(not(all(feature = "sim", not(target_arch = "nvptx64"))))]
unsafe extern "C" {
    pub fn nvshmem_my_pe() -> i32;
    pub fn nvshmem_n_pes() -> i32;
    pub fn nvshmem_team_my_pe(team: Team) -> i32;
    pub fn nvshmem_team_n_pes(team: Team) -> i32;
    pub fn nvshmem_team_translate_pe(src: Team, pe: i32, dst: Team) -> i32;
    pub fn nvshmem_ptr(dest: *const c_void, pe: i32) -> *mut c_void;

    pub fn nvshmem_fence();
    pub fn nvshmem_quiet();

    pub fn nvshmem_barrier_all();
    pub fn nvshmemx_barrier_all_warp();
    pub fn nvshmemx_barrier_all_block();
    pub fn nvshmem_sync_all();
    pub fn nvshmemx_sync_all_warp();
    pub fn nvshmemx_sync_all_block();
    pub fn nvshmem_barrier(team: Team) -> i32;
    pub fn nvshmemx_barrier_warp(team: Team) -> i32;
    pub fn nvshmemx_barrier_block(team: Team) -> i32;
    pub fn nvshmem_team_sync(team: Team) -> i32;
    pub fn nvshmemx_team_sync_warp(team: Team) -> i32;
    pub fn nvshmemx_team_sync_block(team: Team) -> i32;

    pub fn nvshmemx_signal_op(sig: *mut u64, signal: u64, op: i32, pe: i32);
    pub fn nvshmem_signal_fetch(sig: *const u64) -> u64;
    pub fn nvshmem_signal_wait_until(sig: *mut u64, cmp: i32, value: u64) -> u64;

    pub fn vprintf(format: *const u8, args: *const u8) -> i32;
}

/// Bulk byte-wise RMA in the three scopes: `$thread`, `$warp`, `$block` name the C symbols.
macro_rules! bulk_rma {
    ($($thread:ident, $warp:ident, $block:ident: ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        #[cfg(not(all(feature = "sim", not(target_arch = "nvptx64"))))]
        unsafe extern "C" { $(
            pub fn $thread($($arg: $ty),*) $(-> $ret)?;
            pub fn $warp($($arg: $ty),*) $(-> $ret)?;
            pub fn $block($($arg: $ty),*) $(-> $ret)?;
        )* }
    };
}

bulk_rma! {
    nvshmem_putmem, nvshmemx_putmem_warp, nvshmemx_putmem_block:
        (dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32);
    nvshmem_getmem, nvshmemx_getmem_warp, nvshmemx_getmem_block:
        (dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32);
    nvshmem_putmem_nbi, nvshmemx_putmem_nbi_warp, nvshmemx_putmem_nbi_block:
        (dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32);
    nvshmem_getmem_nbi, nvshmemx_getmem_nbi_warp, nvshmemx_getmem_nbi_block:
        (dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32);
    nvshmem_putmem_signal, nvshmemx_putmem_signal_warp, nvshmemx_putmem_signal_block:
        (dest: *mut c_void, src: *const c_void, bytes: usize, sig: *mut u64, signal: u64, op: i32, pe: i32);
    nvshmem_putmem_signal_nbi, nvshmemx_putmem_signal_nbi_warp, nvshmemx_putmem_signal_nbi_block:
        (dest: *mut c_void, src: *const c_void, bytes: usize, sig: *mut u64, signal: u64, op: i32, pe: i32);
    nvshmem_broadcastmem, nvshmemx_broadcastmem_warp, nvshmemx_broadcastmem_block:
        (team: Team, dest: *mut c_void, src: *const c_void, bytes: usize, root: i32) -> i32;
    nvshmem_alltoallmem, nvshmemx_alltoallmem_warp, nvshmemx_alltoallmem_block:
        (team: Team, dest: *mut c_void, src: *const c_void, bytes: usize) -> i32;
    nvshmem_fcollectmem, nvshmemx_fcollectmem_warp, nvshmemx_fcollectmem_block:
        (team: Team, dest: *mut c_void, src: *const c_void, bytes: usize) -> i32;
}

/// Declares, inside a module named after the Rust type, the typed C functions of one NVSHMEM
/// type name (`int32`, `float`, ...). `concat!` builds each C symbol from the type name.
macro_rules! typed_fns {
    ($ty:ty, $c:literal { $($rust:ident = $suffix:literal: ($($arg:ident: $aty:ty),*) $(-> $ret:ty)?;)* }) => {
        #[cfg(not(all(feature = "sim", not(target_arch = "nvptx64"))))]
        unsafe extern "C" { $(
            #[link_name = concat!("nvshmem_", $c, "_", $suffix)]
            pub fn $rust($($arg: $aty),*) $(-> $ret)?;
        )* }
        // The CPU simulator's version of each function (same name and signature).
        $(
            #[cfg(all(feature = "sim", not(target_arch = "nvptx64")))]
            #[track_caller]
            pub unsafe fn $rust($($arg: $aty),*) $(-> $ret)? {
                // SAFETY: NVSHMEM's contract, which the caller upholds.
                unsafe { $crate::sim::shmem::typed::$rust($($arg),*) }
            }
        )*
    };
}

/// Element-wise RMA on one element (`p`, `g`): every standard type.
macro_rules! p_g {
    ($($module:ident: $ty:ty = $c:literal;)*) => { $(
        pub mod $module {
            typed_fns!($ty, $c {
                p = "p": (dest: *mut $ty, value: $ty, pe: i32);
                g = "g": (src: *const $ty, pe: i32) -> $ty;
            });
        }
    )* };
}

/// Extended AMOs (fetch, set, swap): 32/64-bit integers and floats.
macro_rules! amo_extended {
    ($($module:ident: $ty:ty = $c:literal;)*) => { $(
        pub mod $module {
            typed_fns!($ty, $c {
                fetch = "atomic_fetch": (src: *const $ty, pe: i32) -> $ty;
                set = "atomic_set": (dest: *mut $ty, value: $ty, pe: i32);
                swap = "atomic_swap": (dest: *mut $ty, value: $ty, pe: i32) -> $ty;
            });
        }
    )* };
}

/// Standard AMOs (compare-swap, add, inc): 32/64-bit integers.
macro_rules! amo_standard {
    ($($module:ident: $ty:ty = $c:literal;)*) => { $(
        pub mod $module {
            typed_fns!($ty, $c {
                compare_swap = "atomic_compare_swap": (dest: *mut $ty, cond: $ty, value: $ty, pe: i32) -> $ty;
                fetch_add = "atomic_fetch_add": (dest: *mut $ty, value: $ty, pe: i32) -> $ty;
                add = "atomic_add": (dest: *mut $ty, value: $ty, pe: i32);
                fetch_inc = "atomic_fetch_inc": (dest: *mut $ty, pe: i32) -> $ty;
                inc = "atomic_inc": (dest: *mut $ty, pe: i32);
            });
        }
    )* };
}

/// Bitwise AMOs: 32/64-bit integers.
macro_rules! amo_bitwise {
    ($($module:ident: $ty:ty = $c:literal;)*) => { $(
        pub mod $module {
            typed_fns!($ty, $c {
                fetch_and = "atomic_fetch_and": (dest: *mut $ty, value: $ty, pe: i32) -> $ty;
                and = "atomic_and": (dest: *mut $ty, value: $ty, pe: i32);
                fetch_or = "atomic_fetch_or": (dest: *mut $ty, value: $ty, pe: i32) -> $ty;
                or = "atomic_or": (dest: *mut $ty, value: $ty, pe: i32);
                fetch_xor = "atomic_fetch_xor": (dest: *mut $ty, value: $ty, pe: i32) -> $ty;
                xor = "atomic_xor": (dest: *mut $ty, value: $ty, pe: i32);
            });
        }
    )* };
}

/// Point-to-point synchronisation: 32/64-bit integers.
macro_rules! p2p_sync {
    ($($module:ident: $ty:ty = $c:literal;)*) => { $(
        pub mod $module {
            typed_fns!($ty, $c {
                wait_until = "wait_until": (ivar: *mut $ty, cmp: i32, value: $ty);
                test = "test": (ivar: *mut $ty, cmp: i32, value: $ty) -> i32;
                wait_until_all = "wait_until_all": (ivars: *mut $ty, n: usize, status: *const i32, cmp: i32, value: $ty);
                wait_until_any = "wait_until_any": (ivars: *mut $ty, n: usize, status: *const i32, cmp: i32, value: $ty) -> usize;
                test_all = "test_all": (ivars: *mut $ty, n: usize, status: *const i32, cmp: i32, value: $ty) -> i32;
                test_any = "test_any": (ivars: *mut $ty, n: usize, status: *const i32, cmp: i32, value: $ty) -> usize;
            });
        }
    )* };
}

/// Reductions of one operation in the three scopes (`nvshmem_T_OP_reduce`,
/// `nvshmemx_T_OP_reduce_warp`, `nvshmemx_T_OP_reduce_block`).
macro_rules! reduce_fns {
    ($ty:ty, $c:literal: $($op:literal => $thread:ident, $warp:ident, $block:ident;)*) => {
        $(
            #[cfg(all(feature = "sim", not(target_arch = "nvptx64")))]
            #[track_caller]
            pub unsafe fn $thread(_team: $crate::sys::Team, dest: *mut $ty, src: *const $ty, n: usize) -> i32 {
                // SAFETY: NVSHMEM's contract, which the caller upholds.
                unsafe { $crate::sim::shmem::reduce($crate::sim::shmem::Group::Thread, $op, dest, src, n) }
            }
            #[cfg(all(feature = "sim", not(target_arch = "nvptx64")))]
            #[track_caller]
            pub unsafe fn $warp(_team: $crate::sys::Team, dest: *mut $ty, src: *const $ty, n: usize) -> i32 {
                // SAFETY: as above.
                unsafe { $crate::sim::shmem::reduce($crate::sim::shmem::Group::Warp, $op, dest, src, n) }
            }
            #[cfg(all(feature = "sim", not(target_arch = "nvptx64")))]
            #[track_caller]
            pub unsafe fn $block(_team: $crate::sys::Team, dest: *mut $ty, src: *const $ty, n: usize) -> i32 {
                // SAFETY: as above.
                unsafe { $crate::sim::shmem::reduce($crate::sim::shmem::Group::Block, $op, dest, src, n) }
            }
        )*
        #[cfg(not(all(feature = "sim", not(target_arch = "nvptx64"))))]
        unsafe extern "C" { $(
            #[link_name = concat!("nvshmem_", $c, "_", $op, "_reduce")]
            pub fn $thread(team: $crate::sys::Team, dest: *mut $ty, src: *const $ty, n: usize) -> i32;
            #[link_name = concat!("nvshmemx_", $c, "_", $op, "_reduce_warp")]
            pub fn $warp(team: $crate::sys::Team, dest: *mut $ty, src: *const $ty, n: usize) -> i32;
            #[link_name = concat!("nvshmemx_", $c, "_", $op, "_reduce_block")]
            pub fn $block(team: $crate::sys::Team, dest: *mut $ty, src: *const $ty, n: usize) -> i32;
        )* }
    };
}

/// Arithmetic reductions (sum, prod, min, max): every standard type.
macro_rules! reduce_arith {
    ($($module:ident: $ty:ty = $c:literal;)*) => { $(
        pub mod $module {
            reduce_fns!($ty, $c:
                "sum" => sum, sum_warp, sum_block;
                "prod" => prod, prod_warp, prod_block;
                "min" => min, min_warp, min_block;
                "max" => max, max_warp, max_block;
            );
        }
    )* };
}

/// Bitwise reductions (and, or, xor): integers.
macro_rules! reduce_bitwise {
    ($($module:ident: $ty:ty = $c:literal;)*) => { $(
        pub mod $module {
            reduce_fns!($ty, $c:
                "and" => and, and_warp, and_block;
                "or" => or, or_warp, or_block;
                "xor" => xor, xor_warp, xor_block;
            );
        }
    )* };
}

/// `p` / `g` per Rust type.
pub mod rma {
    p_g! {
        int8: i8 = "int8"; int16: i16 = "int16"; int32: i32 = "int32"; int64: i64 = "int64";
        uint8: u8 = "uint8"; uint16: u16 = "uint16"; uint32: u32 = "uint32"; uint64: u64 = "uint64";
        float: f32 = "float"; double: f64 = "double";
    }
}

/// Atomics per Rust type.
pub mod amo {
    /// fetch / set / swap.
    pub mod ext {
        amo_extended! {
            int32: i32 = "int32"; int64: i64 = "int64"; uint32: u32 = "uint32"; uint64: u64 = "uint64";
            float: f32 = "float"; double: f64 = "double";
        }
    }
    /// compare_swap / add / inc. NVSHMEM spells the signed 64-bit type `long` here.
    pub mod std {
        amo_standard! { int32: i32 = "int32"; long: i64 = "long"; uint32: u32 = "uint32"; uint64: u64 = "uint64"; }
    }
    /// and / or / xor.
    pub mod bit {
        amo_bitwise! { int32: i32 = "int32"; int64: i64 = "int64"; uint32: u32 = "uint32"; uint64: u64 = "uint64"; }
    }
}

/// wait_until / test per Rust type.
pub mod p2p {
    p2p_sync! { int32: i32 = "int32"; int64: i64 = "int64"; uint32: u32 = "uint32"; uint64: u64 = "uint64"; }
}

/// Reductions per Rust type.
pub mod reduce {
    /// sum / prod / min / max.
    pub mod arith {
        reduce_arith! {
            int8: i8 = "int8"; int16: i16 = "int16"; int32: i32 = "int32"; int64: i64 = "int64";
            uint8: u8 = "uint8"; uint16: u16 = "uint16"; uint32: u32 = "uint32"; uint64: u64 = "uint64";
            float: f32 = "float"; double: f64 = "double";
        }
    }
    /// and / or / xor.
    pub mod bit {
        reduce_bitwise! {
            int8: i8 = "int8"; int16: i16 = "int16"; int32: i32 = "int32"; int64: i64 = "int64";
            uint8: u8 = "uint8"; uint16: u16 = "uint16"; uint32: u32 = "uint32"; uint64: u64 = "uint64";
        }
    }
}

/// The CPU simulator's versions of the untyped C functions above (same names and
/// signatures; `crate::sim::shmem` documents the semantics).
#[cfg(all(feature = "sim", not(target_arch = "nvptx64")))]
mod sim_c {
    use super::Team;
    use crate::sim::shmem::{self as s, Group};
    use core::ffi::c_void;

    pub unsafe fn nvshmem_my_pe() -> i32 {
        s::my_pe()
    }
    pub unsafe fn nvshmem_n_pes() -> i32 {
        s::n_pes()
    }
    pub unsafe fn nvshmem_team_my_pe(team: Team) -> i32 {
        if team < 0 { -1 } else { s::my_pe() }
    }
    pub unsafe fn nvshmem_team_n_pes(team: Team) -> i32 {
        if team < 0 { -1 } else { s::n_pes() }
    }
    pub unsafe fn nvshmem_team_translate_pe(src: Team, pe: i32, dst: Team) -> i32 {
        if src < 0 || dst < 0 || pe < 0 || pe >= s::n_pes() {
            -1
        } else {
            pe
        }
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
            pub unsafe fn $f() -> $ret { s::pe_barrier(Group::$g, $quiet, stringify!($f)); Default::default() }
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
            pub unsafe fn $f(_team: Team) -> i32 { s::pe_barrier(Group::$g, $quiet, stringify!($f)); 0 }
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
        crate::sim::step(true);
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
    macro_rules! bytes_coll {
        ($($t:ident, $w:ident, $b:ident => $kind:literal;)*) => { $(
            #[track_caller]
            pub unsafe fn $t(_team: Team, dest: *mut c_void, src: *const c_void, bytes: usize) -> i32 {
                // SAFETY: NVSHMEM's contract, which the caller upholds.
                unsafe { s::collect(Group::Thread, $kind, dest, src, bytes, 0) }
            }
            #[track_caller]
            pub unsafe fn $w(_team: Team, dest: *mut c_void, src: *const c_void, bytes: usize) -> i32 {
                // SAFETY: as above.
                unsafe { s::collect(Group::Warp, $kind, dest, src, bytes, 0) }
            }
            #[track_caller]
            pub unsafe fn $b(_team: Team, dest: *mut c_void, src: *const c_void, bytes: usize) -> i32 {
                // SAFETY: as above.
                unsafe { s::collect(Group::Block, $kind, dest, src, bytes, 0) }
            }
        )* };
    }
    bytes_coll! {
        nvshmem_alltoallmem, nvshmemx_alltoallmem_warp, nvshmemx_alltoallmem_block => b'a';
        nvshmem_fcollectmem, nvshmemx_fcollectmem_warp, nvshmemx_fcollectmem_block => b'f';
    }
    #[track_caller]
    pub unsafe fn nvshmem_broadcastmem(
        _team: Team,
        dest: *mut c_void,
        src: *const c_void,
        bytes: usize,
        root: i32,
    ) -> i32 {
        // SAFETY: NVSHMEM's contract, which the caller upholds.
        unsafe { s::collect(Group::Thread, b'b', dest, src, bytes, root) }
    }
    #[track_caller]
    pub unsafe fn nvshmemx_broadcastmem_warp(
        _team: Team,
        dest: *mut c_void,
        src: *const c_void,
        bytes: usize,
        root: i32,
    ) -> i32 {
        // SAFETY: as above.
        unsafe { s::collect(Group::Warp, b'b', dest, src, bytes, root) }
    }
    #[track_caller]
    pub unsafe fn nvshmemx_broadcastmem_block(
        _team: Team,
        dest: *mut c_void,
        src: *const c_void,
        bytes: usize,
        root: i32,
    ) -> i32 {
        // SAFETY: as above.
        unsafe { s::collect(Group::Block, b'b', dest, src, bytes, root) }
    }
}
#[cfg(all(feature = "sim", not(target_arch = "nvptx64")))]
pub use sim_c::*;
