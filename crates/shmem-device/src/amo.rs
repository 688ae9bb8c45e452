//! Remote atomic memory operations on symmetric variables.
//!
//! NVSHMEM semantics: each operation is atomic with respect to other NVSHMEM atomics on the
//! same variable, from any PE. It is *not* atomic with respect to plain loads and stores, or
//! to non-NVSHMEM atomics, on that variable. The fetching forms return the value before the
//! update; the non-fetching forms return at once and complete at the next `quiet`.
//!
//! Types: `fetch`, `set`, `swap` for `i32`, `i64`, `u32`, `u64`, `f32`, `f64`; everything else
//! for `i32`, `i64`, `u32`, `u64` (what NVSHMEM provides).
//!
//! # Safety (common to every function of this module)
//! `pe` is in `0..n_pes()`; `dest` is valid symmetric memory on every PE; while the
//! operation may be in flight the variable is accessed only by NVSHMEM atomics.

use crate::mem::Sym;
use crate::types::{AmoExtended, AmoInt, BitOp};

/// Atomically reads `pe`'s `src`. NVSHMEM: `nvshmem_TYPE_atomic_fetch`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_fetch<T: AmoExtended>(src: Sym<T>, pe: i32) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_fetch(src.as_ptr(), pe) }
}

/// Atomically writes `value` to `pe`'s `dest`. NVSHMEM: `nvshmem_TYPE_atomic_set`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_set<T: AmoExtended>(dest: Sym<T>, value: T, pe: i32) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_set(dest.as_ptr(), value, pe) }
}

/// Atomically replaces `pe`'s `dest` with `value`; returns the old value.
/// NVSHMEM: `nvshmem_TYPE_atomic_swap`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_swap<T: AmoExtended>(dest: Sym<T>, value: T, pe: i32) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_swap(dest.as_ptr(), value, pe) }
}

/// If `pe`'s `dest` equals `cond`, replaces it with `value`; returns the old value either way.
/// NVSHMEM: `nvshmem_TYPE_atomic_compare_swap`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_compare_swap<T: AmoInt>(dest: Sym<T>, cond: T, value: T, pe: i32) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_compare_swap(dest.as_ptr(), cond, value, pe) }
}

/// Adds `value` to `pe`'s `dest`; returns the old value. NVSHMEM: `nvshmem_TYPE_atomic_fetch_add`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_fetch_add<T: AmoInt>(dest: Sym<T>, value: T, pe: i32) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_fetch_add(dest.as_ptr(), value, pe) }
}

/// Adds `value` to `pe`'s `dest`. NVSHMEM: `nvshmem_TYPE_atomic_add`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_add<T: AmoInt>(dest: Sym<T>, value: T, pe: i32) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_add(dest.as_ptr(), value, pe) }
}

/// Adds one to `pe`'s `dest`; returns the old value. NVSHMEM: `nvshmem_TYPE_atomic_fetch_inc`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_fetch_inc<T: AmoInt>(dest: Sym<T>, pe: i32) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_fetch_inc(dest.as_ptr(), pe) }
}

/// Adds one to `pe`'s `dest`. NVSHMEM: `nvshmem_TYPE_atomic_inc`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn atomic_inc<T: AmoInt>(dest: Sym<T>, pe: i32) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_inc(dest.as_ptr(), pe) }
}

macro_rules! bitwise {
    ($($op:ident: $fetch:ident, $plain:ident, $c:literal;)*) => { $(
        #[doc = concat!("Bitwise-", stringify!($op), "s `value` into `pe`'s `dest`; returns the old value. NVSHMEM: `nvshmem_TYPE_atomic_fetch_", $c, "`.")]
        ///
        /// # Safety
        /// See the [module documentation](self#safety-common-to-every-function-of-this-module).
        #[inline(always)]
        #[cfg_attr(shmem_sim, track_caller)]
        pub unsafe fn $fetch<T: AmoInt>(dest: Sym<T>, value: T, pe: i32) -> T {
            // SAFETY: the caller upholds the module's contract.
            unsafe { T::raw_fetch_bit(BitOp::$op, dest.as_ptr(), value, pe) }
        }
        #[doc = concat!("Bitwise-", stringify!($op), "s `value` into `pe`'s `dest`. NVSHMEM: `nvshmem_TYPE_atomic_", $c, "`.")]
        ///
        /// # Safety
        /// See the [module documentation](self#safety-common-to-every-function-of-this-module).
        #[inline(always)]
        #[cfg_attr(shmem_sim, track_caller)]
        pub unsafe fn $plain<T: AmoInt>(dest: Sym<T>, value: T, pe: i32) {
            // SAFETY: the caller upholds the module's contract.
            unsafe { T::raw_bit(BitOp::$op, dest.as_ptr(), value, pe) }
        }
    )* };
}

bitwise! {
    And: atomic_fetch_and, atomic_and, "and";
    Or: atomic_fetch_or, atomic_or, "or";
    Xor: atomic_fetch_xor, atomic_xor, "xor";
}
