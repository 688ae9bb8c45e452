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
//! the waiting forms, some PE eventually satisfies the condition (or the wait has a bound:
//! see [`crate::bound`], and the `_within` forms, after which the kernel stops with a
//! report).

use crate::bound::{self, WaitKind, Waiting};
use crate::mem::{DeviceSlice, Sym, SymSlice};
use crate::types::WaitElem;
use core::time::Duration;

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

impl Cmp {
    /// Whether `v cmp x` holds.
    #[inline(always)]
    pub fn holds<T: PartialOrd>(self, v: T, x: T) -> bool {
        match self {
            Cmp::Eq => v == x,
            Cmp::Ne => v != x,
            Cmp::Gt => v > x,
            Cmp::Le => v <= x,
            Cmp::Lt => v < x,
            Cmp::Ge => v >= x,
        }
    }
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

/// Waits until `ivar` (this PE's copy) compares to `value` by `cmp`; bounded by the
/// program-wide bound when one is set ([`crate::bound`]).
/// NVSHMEM: `nvshmem_TYPE_wait_until`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn wait_until<T: WaitElem>(ivar: Sym<T>, cmp: Cmp, value: T) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { wait_until_bounded(ivar, cmp, value, None) }
}

/// [`wait_until`] that stops the kernel with a report after `bound` ([`crate::bound`]).
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn wait_until_within<T: WaitElem>(ivar: Sym<T>, cmp: Cmp, value: T, bound: Duration) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { wait_until_bounded(ivar, cmp, value, Some(bound)) }
}

#[inline(always)]
#[track_caller]
unsafe fn wait_until_bounded<T: WaitElem>(
    ivar: Sym<T>,
    cmp: Cmp,
    value: T,
    bound: Option<Duration>,
) {
    let p = ivar.as_ptr();
    let held = bound::poll_bounded(
        bound,
        bound::BoundRead::Once,
        // SAFETY: the module's contract.
        || unsafe { T::raw_test(p, cmp as i32, value) != 0 },
        || waiting(WaitKind::WaitUntil, cmp, p, value),
    );
    if !held {
        // SAFETY: the module's contract.
        unsafe { T::raw_wait_until(p, cmp as i32, value) }
    }
}

/// What a wait on `p` waits for (its report).
#[inline(always)]
fn waiting<T: Copy>(kind: WaitKind, cmp: Cmp, p: *const T, value: T) -> Waiting {
    Waiting {
        kind,
        cmp,
        addr: p.cast(),
        elem_bytes: core::mem::size_of::<T>() as u32,
        expected: bound::bits(value),
    }
}

/// For a report: the first word of `ivars` not excluded by `status` that does not satisfy
/// the comparison (the first word when every one does, or none is included).
///
/// # Safety
/// As the module's; `status` is null or has `n` entries.
unsafe fn first_unsatisfied<T: WaitElem>(
    ivars: *mut T,
    n: usize,
    status: *const i32,
    cmp: Cmp,
    value: T,
) -> *mut T {
    (0..n)
        // SAFETY: `status` has `n` entries when not null; `ivars` has `n` words.
        .filter(|&i| status.is_null() || unsafe { *status.add(i) == 0 })
        // SAFETY: as above.
        .find(|&i| unsafe { T::raw_test(ivars.add(i), cmp as i32, value) == 0 })
        .map_or(ivars, |i| ivars.wrapping_add(i))
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
    // SAFETY: the caller upholds the module's contract.
    unsafe { wait_until_all_bounded(ivars, status, cmp, value, None) }
}

/// [`wait_until_all`] that stops the kernel with a report after `bound` ([`crate::bound`]).
///
/// # Panics
/// If `status` is given with a different length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn wait_until_all_within<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
    bound: Duration,
) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { wait_until_all_bounded(ivars, status, cmp, value, Some(bound)) }
}

#[inline(always)]
#[track_caller]
unsafe fn wait_until_all_bounded<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
    bound: Option<Duration>,
) {
    let st = status_ptr(ivars, status);
    let (p, n) = (ivars.as_ptr(), ivars.len());
    let held = bound::poll_bounded(
        bound,
        bound::BoundRead::Once,
        // SAFETY: the module's contract; lengths were checked.
        || unsafe { T::raw_test_all(p, n, st, cmp as i32, value) != 0 },
        || {
            // SAFETY: as above.
            let q = unsafe { first_unsatisfied(p, n, st, cmp, value) };
            waiting(WaitKind::WaitUntilAll, cmp, q, value)
        },
    );
    if !held {
        // SAFETY: the caller upholds the module's contract; lengths were checked.
        unsafe { T::raw_wait_until_all(p, n, st, cmp as i32, value) }
    }
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
    // SAFETY: the caller upholds the module's contract.
    unsafe { wait_until_any_bounded(ivars, status, cmp, value, None) }
}

/// [`wait_until_any`] that stops the kernel with a report after `bound` ([`crate::bound`]).
///
/// # Panics
/// If `status` is given with a different length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn wait_until_any_within<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
    bound: Duration,
) -> Option<usize> {
    // SAFETY: the caller upholds the module's contract.
    unsafe { wait_until_any_bounded(ivars, status, cmp, value, Some(bound)) }
}

#[inline(always)]
#[track_caller]
unsafe fn wait_until_any_bounded<T: WaitElem>(
    ivars: SymSlice<T>,
    status: Option<DeviceSlice<i32>>,
    cmp: Cmp,
    value: T,
    bound: Option<Duration>,
) -> Option<usize> {
    let st = status_ptr(ivars, status);
    let (p, n) = (ivars.as_ptr(), ivars.len());
    // SAFETY: `st` is null or has `n` entries (checked).
    let included = || (0..n).any(|i| st.is_null() || unsafe { *st.add(i) == 0 });
    // With every element excluded NVSHMEM's wait returns at once (with none).
    if included() {
        let mut found = usize::MAX;
        let held = bound::poll_bounded(
            bound,
            bound::BoundRead::Once,
            || {
                // SAFETY: the module's contract; lengths were checked.
                found = unsafe { T::raw_test_any(p, n, st, cmp as i32, value) };
                found != usize::MAX
            },
            || waiting(WaitKind::WaitUntilAny, cmp, p, value),
        );
        if held {
            return Some(found);
        }
    }
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    let i = unsafe { T::raw_wait_until_any(p, n, st, cmp as i32, value) };
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
