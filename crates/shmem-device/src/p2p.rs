//! Point-to-point synchronisation: wait for, or test, a symmetric variable that other PEs
//! update (with `p`, a put, an atomic, or a signal).
//!
//! NVSHMEM semantics: `wait_until` returns once the *local* copy of `ivar` satisfies the
//! comparison; updates made with NVSHMEM operations are observed without caching. The
//! `_all` and `_any` forms watch many variables; `status[i] != 0` excludes element `i`.
//!
//! # Safety (common to every function of this module)
//! The variables are valid symmetric memory, updated only by NVSHMEM operations or atomics
//! while being waited on; `status`, when given, has as many elements as the variables; for
//! the waiting forms, some PE eventually satisfies the condition.

use crate::mem::{DeviceSlice, Sym, SymSlice};
use crate::types::WaitElem;

/// A comparison for waits and tests (`NVSHMEM_CMP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Cmp {
    /// `==`
    Eq = 0,
    /// `!=`
    Ne = 1,
    /// `>`
    Gt = 2,
    /// `<=`
    Le = 3,
    /// `<`
    Lt = 4,
    /// `>=`
    Ge = 5,
}

#[inline(always)]
#[track_caller]
fn status_ptr<T>(ivars: SymSlice<T>, status: Option<DeviceSlice<i32>>) -> *const i32 {
    match status {
        None => core::ptr::null(),
        Some(s) => {
            assert!(
                s.len() == ivars.len(),
                "status and ivars have different lengths"
            );
            s.as_ptr().cast_const()
        }
    }
}

/// Waits until `ivar` (this PE's copy) compares to `value` by `cmp`.
/// NVSHMEM: `nvshmem_TYPE_wait_until`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn wait_until<T: WaitElem>(ivar: Sym<T>, cmp: Cmp, value: T) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_wait_until(ivar.as_ptr(), cmp as i32, value) }
}

/// Whether `ivar` compares to `value` by `cmp` now. NVSHMEM: `nvshmem_TYPE_test`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn test<T: WaitElem>(ivar: Sym<T>, cmp: Cmp, value: T) -> bool {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_test(ivar.as_ptr(), cmp as i32, value) != 0 }
}

/// Waits until every non-excluded element of `ivars` satisfies the comparison.
/// NVSHMEM: `nvshmem_TYPE_wait_until_all`.
///
/// # Panics
/// If `status` is given with a different length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn wait_until_all<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
) {
    let st = status_ptr(ivars, status);
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    unsafe { T::raw_wait_until_all(ivars.as_ptr(), ivars.len(), st, cmp as i32, value) }
}

/// Waits until some non-excluded element satisfies the comparison and returns its index,
/// or `None` if every element is excluded. NVSHMEM: `nvshmem_TYPE_wait_until_any`.
///
/// # Panics
/// If `status` is given with a different length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn wait_until_any<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
) -> Option<usize> {
    let st = status_ptr(ivars, status);
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    let i = unsafe { T::raw_wait_until_any(ivars.as_ptr(), ivars.len(), st, cmp as i32, value) };
    (i != usize::MAX).then_some(i)
}

/// Whether every non-excluded element satisfies the comparison now.
/// NVSHMEM: `nvshmem_TYPE_test_all`.
///
/// # Panics
/// If `status` is given with a different length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn test_all<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
) -> bool {
    let st = status_ptr(ivars, status);
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    unsafe { T::raw_test_all(ivars.as_ptr(), ivars.len(), st, cmp as i32, value) != 0 }
}

/// The index of some non-excluded element that satisfies the comparison now, if any.
/// NVSHMEM: `nvshmem_TYPE_test_any`.
///
/// # Panics
/// If `status` is given with a different length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn test_any<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
) -> Option<usize> {
    let st = status_ptr(ivars, status);
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    let i = unsafe { T::raw_test_any(ivars.as_ptr(), ivars.len(), st, cmp as i32, value) };
    (i != usize::MAX).then_some(i)
}
