//! One-sided remote memory access: `p`, `g`, `put`, `get` and their non-blocking forms.
//!
//! NVSHMEM semantics (OpenSHMEM §9.5, NVSHMEM "RMA" API):
//! - **Blocking** `put` returns when the *source* may be reused; the data is not yet visible
//!   at the destination. It becomes visible after [`crate::order::quiet`] (or a barrier) by
//!   the caller; [`crate::order::fence`] only orders puts to the same PE.
//! - **Blocking** `get` returns when the data is in the local destination.
//! - **Non-blocking** (`_nbi`) forms return at once; neither side may be touched until the
//!   caller's next `quiet` (or a barrier), which completes them.
//! - `p`/`g` move one element of a standard type; they are the lowest-latency forms.
//!
//! Remote operands are always symmetric ([`Sym`], [`SymSlice`]); local operands are any
//! [`LocalSlice`]. Bulk operations move `T` bit-for-bit (`T: Copy`), so structs and
//! `bf16` wrappers work; element-wise `p`/`g` exist for the standard types only.
//!
//! All functions here take the target PE as `pe: i32` (NVSHMEM's `int`), a PE of
//! `NVSHMEM_TEAM_WORLD`.
//!
//! # Safety (common to every function of this module)
//! - `pe` is in `0..n_pes()`;
//! - every symmetric operand was allocated on the symmetric heap (by `shmem-host` or
//!   `nvshmem_malloc`), is still allocated, and lies within its allocation on every PE;
//! - the local operand is valid device memory for the whole transfer, and for `_nbi` forms
//!   until the completing `quiet`;
//! - no other thread or PE writes the destination, or reads it expecting the old value,
//!   until the transfer is complete and made visible as described above;
//! - the scope's convergence rule ([`crate::scope`]) holds.

use crate::mem::{LocalSlice, Sym, SymSlice, operands};
use crate::scope::{Scope, by_scope};
use crate::sys;
use crate::types::RmaElem;

/// Writes `value` into `pe`'s copy of `dest`. NVSHMEM: `nvshmem_TYPE_p`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn p<T: RmaElem>(dest: Sym<T>, value: T, pe: i32) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_p(dest.as_ptr(), value, pe) }
}

/// Reads `pe`'s copy of `src`. Blocking. NVSHMEM: `nvshmem_TYPE_g`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn g<T: RmaElem>(src: Sym<T>, pe: i32) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_g(src.as_ptr(), pe) }
}

/// Copies the local `src` into `pe`'s copy of `dest`; returns when `src` may be reused.
/// NVSHMEM: `nvshmem_putmem` / `nvshmemx_putmem_warp` / `nvshmemx_putmem_block`.
///
/// # Panics
/// If `dest.len() != src.local_len()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn put<S: Scope, T: Copy>(
    _scope: S,
    dest: SymSlice<T>,
    src: impl LocalSlice<T>,
    pe: i32,
) {
    let o = operands(dest, src);
    let (d, s, bytes) = (o.sym, o.local.cast_const(), o.bytes);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_putmem,
            sys::nvshmemx_putmem_warp,
            sys::nvshmemx_putmem_block,
            (d, s, bytes, pe)
        )
    }
}

/// Starts copying the local `src` into `pe`'s copy of `dest` and returns at once; `src`
/// may be reused after the caller's next [`quiet`](crate::order::quiet).
/// NVSHMEM: `nvshmem_putmem_nbi` and its warp/block forms.
///
/// # Panics
/// If `dest.len() != src.local_len()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn put_nbi<S: Scope, T: Copy>(
    _scope: S,
    dest: SymSlice<T>,
    src: impl LocalSlice<T>,
    pe: i32,
) {
    let o = operands(dest, src);
    let (d, s, bytes) = (o.sym, o.local.cast_const(), o.bytes);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_putmem_nbi,
            sys::nvshmemx_putmem_nbi_warp,
            sys::nvshmemx_putmem_nbi_block,
            (d, s, bytes, pe)
        )
    }
}

/// Copies `pe`'s copy of `src` into the local `dest`; returns when the data has arrived.
/// NVSHMEM: `nvshmem_getmem` and its warp/block forms.
///
/// # Panics
/// If `src.len() != dest.local_len()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn get<S: Scope, T: Copy>(
    _scope: S,
    dest: impl LocalSlice<T>,
    src: SymSlice<T>,
    pe: i32,
) {
    let o = operands(src, dest);
    let (d, s, bytes) = (o.local, o.sym.cast_const(), o.bytes);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_getmem,
            sys::nvshmemx_getmem_warp,
            sys::nvshmemx_getmem_block,
            (d, s, bytes, pe)
        )
    }
}

/// Starts copying `pe`'s copy of `src` into the local `dest`; the data is there after the
/// caller's next [`quiet`](crate::order::quiet). NVSHMEM: `nvshmem_getmem_nbi` and forms.
///
/// # Panics
/// If `src.len() != dest.local_len()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn get_nbi<S: Scope, T: Copy>(
    _scope: S,
    dest: impl LocalSlice<T>,
    src: SymSlice<T>,
    pe: i32,
) {
    let o = operands(src, dest);
    let (d, s, bytes) = (o.local, o.sym.cast_const(), o.bytes);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_getmem_nbi,
            sys::nvshmemx_getmem_nbi_warp,
            sys::nvshmemx_getmem_nbi_block,
            (d, s, bytes, pe)
        )
    }
}
