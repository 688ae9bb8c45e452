//! Which Rust types each NVSHMEM operation accepts.
//!
//! NVSHMEM's typed operations exist for a fixed set of C types and not every operation
//! exists for every type (there is no 8-bit atomic, no floating-point `xor`). Each capability
//! is a sealed trait here, so calling an operation on a type NVSHMEM lacks is a compile error
//! that names the trait, not a link error in the PTX build.

#![allow(clippy::missing_safety_doc)] // hidden plumbing; the public wrappers carry the docs

use crate::sys;

mod sealed {
    pub trait Sealed {}
}

macro_rules! sealed {
    ($($t:ty)*) => { $(impl sealed::Sealed for $t {})* };
}
sealed!(i8 i16 i32 i64 u8 u16 u32 u64 f32 f64);

/// Types with element-wise RMA (`p`, `g`): `i8`–`i64`, `u8`–`u64`, `f32`, `f64`.
#[diagnostic::on_unimplemented(
    message = "NVSHMEM has no element-wise RMA (`p`/`g`) for `{Self}`",
    label = "use one of i8, i16, i32, i64, u8, u16, u32, u64, f32, f64"
)]
pub trait RmaElem: Copy + sealed::Sealed {
    #[doc(hidden)]
    unsafe fn raw_p(dest: *mut Self, value: Self, pe: i32);
    #[doc(hidden)]
    unsafe fn raw_g(src: *const Self, pe: i32) -> Self;
}

macro_rules! impl_rma {
    ($($t:ty => $m:ident),*) => { $(
        impl RmaElem for $t {
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_p(dest: *mut Self, value: Self, pe: i32) {
                // SAFETY: forwarded obligation of the caller (`rma::p`).
                unsafe { sys::rma::$m::p(dest, value, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_g(src: *const Self, pe: i32) -> Self {
                // SAFETY: forwarded obligation of the caller (`rma::g`).
                unsafe { sys::rma::$m::g(src, pe) }
            }
        }
    )* };
}
impl_rma!(i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16,
          u32 => uint32, u64 => uint64, f32 => float, f64 => double);

/// Types with the extended AMOs (`fetch`, `set`, `swap`): `i32`, `i64`, `u32`, `u64`, `f32`, `f64`.
#[diagnostic::on_unimplemented(
    message = "NVSHMEM has no atomic fetch/set/swap for `{Self}`",
    label = "use one of i32, i64, u32, u64, f32, f64"
)]
pub trait AmoExtended: Copy + sealed::Sealed {
    #[doc(hidden)]
    unsafe fn raw_fetch(src: *const Self, pe: i32) -> Self;
    #[doc(hidden)]
    unsafe fn raw_set(dest: *mut Self, value: Self, pe: i32);
    #[doc(hidden)]
    unsafe fn raw_swap(dest: *mut Self, value: Self, pe: i32) -> Self;
}

macro_rules! impl_amo_ext {
    ($($t:ty => $m:ident, swap: |$d:ident, $v:ident, $pe:ident| $swap:expr;)*) => { $(
        impl AmoExtended for $t {
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_fetch(src: *const Self, pe: i32) -> Self {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_fetch`).
                unsafe { sys::amo::ext::$m::fetch(src, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_set(dest: *mut Self, value: Self, pe: i32) {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_set`).
                unsafe { sys::amo::ext::$m::set(dest, value, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_swap($d: *mut Self, $v: Self, $pe: i32) -> Self {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_swap`); the float
                // forms pass the same address as the unsigned type of the same size and alignment.
                unsafe { $swap }
            }
        }
    )* };
}
// A swap moves bits, so for floats the unsigned swap of the same width is the same operation.
// It is used because NVSHMEM 3.4's `nvshmem_double_atomic_swap` converts the old value
// numerically (`uitofp`) instead of reinterpreting it (found on H200s; fixed in 3.8).
impl_amo_ext! {
    i32 => int32, swap: |d, v, pe| sys::amo::ext::int32::swap(d, v, pe);
    i64 => int64, swap: |d, v, pe| sys::amo::ext::int64::swap(d, v, pe);
    u32 => uint32, swap: |d, v, pe| sys::amo::ext::uint32::swap(d, v, pe);
    u64 => uint64, swap: |d, v, pe| sys::amo::ext::uint64::swap(d, v, pe);
    f32 => float, swap: |d, v, pe| f32::from_bits(sys::amo::ext::uint32::swap(d.cast(), v.to_bits(), pe));
    f64 => double, swap: |d, v, pe| f64::from_bits(sys::amo::ext::uint64::swap(d.cast(), v.to_bits(), pe));
}

/// Integer types with the standard AMOs (`compare_swap`, `fetch_add`, `add`, `fetch_inc`,
/// `inc`) and bitwise AMOs: `i32`, `i64`, `u32`, `u64`.
#[diagnostic::on_unimplemented(
    message = "NVSHMEM has no atomic arithmetic for `{Self}`",
    label = "use one of i32, i64, u32, u64"
)]
pub trait AmoInt: AmoExtended {
    #[doc(hidden)]
    unsafe fn raw_compare_swap(dest: *mut Self, cond: Self, value: Self, pe: i32) -> Self;
    #[doc(hidden)]
    unsafe fn raw_fetch_add(dest: *mut Self, value: Self, pe: i32) -> Self;
    #[doc(hidden)]
    unsafe fn raw_add(dest: *mut Self, value: Self, pe: i32);
    #[doc(hidden)]
    unsafe fn raw_fetch_inc(dest: *mut Self, pe: i32) -> Self;
    #[doc(hidden)]
    unsafe fn raw_inc(dest: *mut Self, pe: i32);
    #[doc(hidden)]
    unsafe fn raw_fetch_bit(op: BitOp, dest: *mut Self, value: Self, pe: i32) -> Self;
    #[doc(hidden)]
    unsafe fn raw_bit(op: BitOp, dest: *mut Self, value: Self, pe: i32);
}

/// A bitwise operation (and, or, xor).
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BitOp {
    And,
    Or,
    Xor,
}

macro_rules! impl_amo_int {
    ($($t:ty => $std:ident, $bit:ident),*) => { $(
        impl AmoInt for $t {
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_compare_swap(dest: *mut Self, cond: Self, value: Self, pe: i32) -> Self {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_compare_swap`).
                unsafe { sys::amo::std::$std::compare_swap(dest, cond, value, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_fetch_add(dest: *mut Self, value: Self, pe: i32) -> Self {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_fetch_add`).
                unsafe { sys::amo::std::$std::fetch_add(dest, value, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_add(dest: *mut Self, value: Self, pe: i32) {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_add`).
                unsafe { sys::amo::std::$std::add(dest, value, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_fetch_inc(dest: *mut Self, pe: i32) -> Self {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_fetch_inc`).
                unsafe { sys::amo::std::$std::fetch_inc(dest, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_inc(dest: *mut Self, pe: i32) {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_inc`).
                unsafe { sys::amo::std::$std::inc(dest, pe) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_fetch_bit(op: BitOp, dest: *mut Self, value: Self, pe: i32) -> Self {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_fetch_{and,or,xor}`).
                unsafe {
                    match op {
                        BitOp::And => sys::amo::bit::$bit::fetch_and(dest, value, pe),
                        BitOp::Or => sys::amo::bit::$bit::fetch_or(dest, value, pe),
                        BitOp::Xor => sys::amo::bit::$bit::fetch_xor(dest, value, pe),
                    }
                }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_bit(op: BitOp, dest: *mut Self, value: Self, pe: i32) {
                // SAFETY: forwarded obligation of the caller (`amo::atomic_{and,or,xor}`).
                unsafe {
                    match op {
                        BitOp::And => sys::amo::bit::$bit::and(dest, value, pe),
                        BitOp::Or => sys::amo::bit::$bit::or(dest, value, pe),
                        BitOp::Xor => sys::amo::bit::$bit::xor(dest, value, pe),
                    }
                }
            }
        }
    )* };
}
impl_amo_int!(i32 => int32, int32, i64 => long, int64, u32 => uint32, uint32, u64 => uint64, uint64);

/// Integer types with point-to-point synchronisation (`wait_until`, `test` and their
/// `_all`/`_any` forms): `i32`, `i64`, `u32`, `u64`.
#[diagnostic::on_unimplemented(
    message = "NVSHMEM has no wait_until/test for `{Self}`",
    label = "use one of i32, i64, u32, u64"
)]
pub trait WaitElem: Copy + sealed::Sealed {
    #[doc(hidden)]
    unsafe fn raw_wait_until(ivar: *mut Self, cmp: i32, value: Self);
    #[doc(hidden)]
    unsafe fn raw_test(ivar: *mut Self, cmp: i32, value: Self) -> i32;
    #[doc(hidden)]
    unsafe fn raw_wait_until_all(
        ivars: *mut Self,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: Self,
    );
    #[doc(hidden)]
    unsafe fn raw_wait_until_any(
        ivars: *mut Self,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: Self,
    ) -> usize;
    #[doc(hidden)]
    unsafe fn raw_test_all(
        ivars: *mut Self,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: Self,
    ) -> i32;
    #[doc(hidden)]
    unsafe fn raw_test_any(
        ivars: *mut Self,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: Self,
    ) -> usize;
}

macro_rules! impl_wait {
    ($($t:ty => $m:ident),*) => { $(
        impl WaitElem for $t {
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_wait_until(ivar: *mut Self, cmp: i32, value: Self) {
                // SAFETY: forwarded obligation of the caller (`p2p::wait_until`).
                unsafe { sys::p2p::$m::wait_until(ivar, cmp, value) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_test(ivar: *mut Self, cmp: i32, value: Self) -> i32 {
                // SAFETY: forwarded obligation of the caller (`p2p::test`).
                unsafe { sys::p2p::$m::test(ivar, cmp, value) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_wait_until_all(ivars: *mut Self, n: usize, status: *const i32, cmp: i32, value: Self) {
                // SAFETY: forwarded obligation of the caller (`p2p::wait_until_all`).
                unsafe { sys::p2p::$m::wait_until_all(ivars, n, status, cmp, value) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_wait_until_any(ivars: *mut Self, n: usize, status: *const i32, cmp: i32, value: Self) -> usize {
                // SAFETY: forwarded obligation of the caller (`p2p::wait_until_any`).
                unsafe { sys::p2p::$m::wait_until_any(ivars, n, status, cmp, value) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_test_all(ivars: *mut Self, n: usize, status: *const i32, cmp: i32, value: Self) -> i32 {
                // SAFETY: forwarded obligation of the caller (`p2p::test_all`).
                unsafe { sys::p2p::$m::test_all(ivars, n, status, cmp, value) }
            }
            #[inline(always)]
            #[cfg_attr(shmem_sim, track_caller)]
            unsafe fn raw_test_any(ivars: *mut Self, n: usize, status: *const i32, cmp: i32, value: Self) -> usize {
                // SAFETY: forwarded obligation of the caller (`p2p::test_any`).
                unsafe { sys::p2p::$m::test_any(ivars, n, status, cmp, value) }
            }
        }
    )* };
}
impl_wait!(i32 => int32, i64 => int64, u32 => uint32, u64 => uint64);
