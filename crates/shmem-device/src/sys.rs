//! Raw `extern "C"` declarations of NVSHMEM's device library (`libnvshmem_device*.bc`).
//!
//! No logic lives here: every item is a C symbol with its C signature. The typed API in the
//! other modules is the only user of this module. Names are the ones present in both NVSHMEM
//! 3.4.5 and 3.8.0 bitcode (the supported range is 3.4 – 3.8).
//!
//! On a host build with the CPU simulator (cfg `shmem_sim`) the same names are the
//! simulator's functions, re-exported from `crate::host` (the seam); on a host build without
//! it these declarations exist only so that kernel code type-checks, and nothing here is ever
//! linked into a host binary, because only device builds call them.

#![allow(missing_docs)]

#[cfg(not(shmem_sim))]
use core::ffi::c_void;

#[cfg(shmem_sim)]
pub use crate::host::nvshmem::*;

pub type Team = i32;

#[cfg(not(shmem_sim))]
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
        #[cfg(not(shmem_sim))]
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
    nvshmem_int32_alltoall, nvshmemx_int32_alltoall_warp, nvshmemx_int32_alltoall_block:
        (team: Team, dest: *mut i32, src: *const i32, nelems: usize) -> i32;
    nvshmem_int64_alltoall, nvshmemx_int64_alltoall_warp, nvshmemx_int64_alltoall_block:
        (team: Team, dest: *mut i64, src: *const i64, nelems: usize) -> i32;
}

/// Declares, inside a module named after the Rust type, the typed C functions of one NVSHMEM
/// type name (`int32`, `float`, ...). `concat!` builds each C symbol from the type name.
macro_rules! typed_fns {
    ($ty:ty, $c:literal { $($rust:ident = $suffix:literal: ($($arg:ident: $aty:ty),*) $(-> $ret:ty)?;)* }) => {
        #[cfg(not(shmem_sim))]
        unsafe extern "C" { $(
            #[link_name = concat!("nvshmem_", $c, "_", $suffix)]
            pub fn $rust($($arg: $aty),*) $(-> $ret)?;
        )* }
        #[cfg(shmem_sim)]
        pub use $crate::host::nvshmem::typed::{$($rust),*};
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
        #[cfg(shmem_sim)]
        pub use $crate::host::nvshmem::reduce::{$($thread, $warp, $block),*};
        #[cfg(not(shmem_sim))]
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
