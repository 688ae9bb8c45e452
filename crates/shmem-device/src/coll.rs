//! Barriers, syncs and collectives called from inside a kernel.
//!
//! Every function here is *collective*: every PE of the team must call it, with the same
//! scope and the same sizes, the same number of times in the same order. A kernel that
//! calls one must be launched so that all its blocks on all PEs run at once
//! (`nvshmemx_collective_launch`); `cargo xtask build-ptx` detects such kernels from the
//! linked call graph and marks them `collective` in the manifest, and `shmem-host` launches
//! them accordingly.
//!
//! - [`barrier_all`] / [`barrier`]: completes this PE's outstanding operations (a `quiet`),
//!   then waits for every PE.
//! - [`sync_all`] / [`team_sync`]: waits for every PE, completing nothing — cheaper, for
//!   when the program orders memory by other means.
//! - [`broadcast`], [`alltoall`], [`fcollect`], [`reduce`]: symmetric source and destination;
//!   on return the destination holds the result on the calling PE.
//!
//! The scope argument ([`crate::scope`]) says which threads of this PE take part; with
//! `Block`, every thread of the block calls together and the block does the work.
//!
//! # Safety (common to every function of this module)
//! - every PE of the team makes the matching call (else the kernel hangs);
//! - the kernel is launched collectively (every block of every PE co-resident);
//! - symmetric operands are valid on every PE, of the sizes stated, and not accessed by
//!   anything else until the call returns;
//! - the scope's convergence rule holds.
//!
//! # Code size
//! [`broadcast`], [`alltoall`], [`fcollect`] and [`reduce`] call NVSHMEM from a function of
//! their own (one per scope, type and operation) that is never inlined. NVSHMEM's
//! collectives are large (a block-scope reduction is ~19k lines of LLVM IR, marked
//! `alwaysinline`); inlined, a kernel that calls several becomes one huge PTX function, and
//! `ptxas` time grows faster than a function's size. A collective costs microseconds, the
//! call a few instructions. Barriers and syncs, small and often in hot loops, stay inline.

use crate::mem::SymSlice;
use crate::scope::{Scope, by_scope};
use crate::sys;
use crate::team::Team;
use core::ffi::c_void;
use core::mem::{align_of, size_of};

/// The status an NVSHMEM collective returned, when it was not 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollError(pub i32);

#[inline(always)]
fn status(rc: i32) -> Result<(), CollError> {
    if rc == 0 { Ok(()) } else { Err(CollError(rc)) }
}

/// Completes this PE's operations, then waits for all PEs. NVSHMEM: `nvshmem_barrier_all`,
/// `nvshmemx_barrier_all_warp`, `nvshmemx_barrier_all_block`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn barrier_all<S: Scope>(_scope: S) {
    // SAFETY: the caller upholds the module's contract.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_barrier_all,
            sys::nvshmemx_barrier_all_warp,
            sys::nvshmemx_barrier_all_block,
            ()
        )
    }
}

/// Waits for all PEs without completing operations. NVSHMEM: `nvshmem_sync_all` and forms.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn sync_all<S: Scope>(_scope: S) {
    // SAFETY: the caller upholds the module's contract.
    unsafe {
        by_scope!(
            S,
            sys::nvshmem_sync_all,
            sys::nvshmemx_sync_all_warp,
            sys::nvshmemx_sync_all_block,
            ()
        )
    }
}

/// [`barrier_all`] over `team`. NVSHMEM: `nvshmem_barrier` and forms.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn barrier<S: Scope>(_scope: S, team: Team) -> Result<(), CollError> {
    // SAFETY: the caller upholds the module's contract.
    status(unsafe {
        by_scope!(
            S,
            sys::nvshmem_barrier,
            sys::nvshmemx_barrier_warp,
            sys::nvshmemx_barrier_block,
            (team.0)
        )
    })
}

/// [`sync_all`] over `team`. NVSHMEM: `nvshmem_team_sync` and forms.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn team_sync<S: Scope>(_scope: S, team: Team) -> Result<(), CollError> {
    // SAFETY: the caller upholds the module's contract.
    status(unsafe {
        by_scope!(
            S,
            sys::nvshmem_team_sync,
            sys::nvshmemx_team_sync_warp,
            sys::nvshmemx_team_sync_block,
            (team.0)
        )
    })
}

/// One never-inlined function per `*mem` collective (see [code size](self#code-size)),
/// generic over the scope: `name(params) => thread, warp, block`.
macro_rules! out_of_line {
    ($($name:ident($($p:ident: $t:ty),*) => $thread:path, $warp:path, $block:path;)*) => { $(
        /// The NVSHMEM call of its collective, kept out of line.
        ///
        /// # Safety
        /// As the caller's.
        #[inline(never)]
        #[cfg_attr(shmem_sim, track_caller)]
        unsafe fn $name<S: Scope>($($p: $t),*) -> i32 {
            // SAFETY: forwarded obligation of the caller.
            unsafe { by_scope!(S, $thread, $warp, $block, ($($p),*)) }
        }
    )* };
}

out_of_line! {
    broadcast_out_of_line(team: i32, d: *mut c_void, s: *const c_void, b: usize, root: i32) =>
        sys::nvshmem_broadcastmem, sys::nvshmemx_broadcastmem_warp, sys::nvshmemx_broadcastmem_block;
    alltoall_out_of_line(team: i32, d: *mut c_void, s: *const c_void, b: usize) =>
        sys::nvshmem_alltoallmem, sys::nvshmemx_alltoallmem_warp, sys::nvshmemx_alltoallmem_block;
    alltoall32_out_of_line(team: i32, d: *mut i32, s: *const i32, n: usize) =>
        sys::nvshmem_int32_alltoall, sys::nvshmemx_int32_alltoall_warp, sys::nvshmemx_int32_alltoall_block;
    alltoall64_out_of_line(team: i32, d: *mut i64, s: *const i64, n: usize) =>
        sys::nvshmem_int64_alltoall, sys::nvshmemx_int64_alltoall_warp, sys::nvshmemx_int64_alltoall_block;
    fcollect_out_of_line(team: i32, d: *mut c_void, s: *const c_void, b: usize) =>
        sys::nvshmem_fcollectmem, sys::nvshmemx_fcollectmem_warp, sys::nvshmemx_fcollectmem_block;
}

/// Copies `root`'s `src` into every team member's `dest` (the root's `dest` too).
/// `root` is numbered in `team`. NVSHMEM: `nvshmem_broadcastmem` and forms.
///
/// # Panics
/// If `dest` and `src` differ in length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn broadcast<S: Scope, T: Copy>(
    _scope: S,
    team: Team,
    dest: SymSlice<T>,
    src: SymSlice<T>,
    root: i32,
) -> Result<(), CollError> {
    assert!(
        dest.len() == src.len(),
        "broadcast operands have different lengths"
    );
    let (d, s, b) = (
        dest.as_ptr().cast::<c_void>(),
        src.as_ptr().cast::<c_void>().cast_const(),
        src.len() * size_of::<T>(),
    );
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    status(unsafe { broadcast_out_of_line::<S>(team.0, d, s, b, root) })
}

/// Every member sends block `j` of its `src` to member `j`, which stores it as block `i`
/// (the sender's number) of its `dest`. Both slices hold `team.n_pes()` equal blocks.
/// NVSHMEM: `nvshmem_int64_alltoall` for elements aligned to 8 bytes, `nvshmem_int32_alltoall`
/// for elements aligned to 4 (what NVSHMEM's `alltoall_latency` perftest measures), else
/// `nvshmem_alltoallmem`; and their warp and block forms. The choice is made at compile time.
///
/// # Panics
/// If the lengths differ or are not a multiple of the team size.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn alltoall<S: Scope, T: Copy>(
    _scope: S,
    team: Team,
    dest: SymSlice<T>,
    src: SymSlice<T>,
) -> Result<(), CollError> {
    let n = team.n_pes().max(1) as usize;
    assert!(
        dest.len() == src.len() && src.len().is_multiple_of(n),
        "alltoall needs equal lengths divisible by the team size"
    );
    let (d, s, b) = (
        dest.as_ptr(),
        src.as_ptr().cast_const(),
        src.len() / n * size_of::<T>(),
    );
    // SAFETY: the caller upholds the module's contract; lengths were checked. A block of
    // elements aligned to 8 (4) bytes is a whole number of aligned 8 (4)-byte words, as
    // `size_of` is a multiple of `align_of`.
    status(unsafe {
        match align_of::<T>() {
            8.. => alltoall64_out_of_line::<S>(team.0, d.cast(), s.cast(), b / 8),
            4 => alltoall32_out_of_line::<S>(team.0, d.cast(), s.cast(), b / 4),
            _ => alltoall_out_of_line::<S>(team.0, d.cast(), s.cast(), b),
        }
    })
}

/// Concatenates every member's `src` into every member's `dest`, in team order
/// (`dest.len() == src.len() * team.n_pes()`). NVSHMEM: `nvshmem_fcollectmem` and forms.
///
/// # Panics
/// If `dest.len() != src.len() * team.n_pes()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn fcollect<S: Scope, T: Copy>(
    _scope: S,
    team: Team,
    dest: SymSlice<T>,
    src: SymSlice<T>,
) -> Result<(), CollError> {
    let n = team.n_pes().max(1) as usize;
    assert!(
        dest.len() == src.len() * n,
        "fcollect needs dest.len() == src.len() * team size"
    );
    let (d, s, b) = (
        dest.as_ptr().cast::<c_void>(),
        src.as_ptr().cast::<c_void>().cast_const(),
        src.len() * size_of::<T>(),
    );
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    status(unsafe { fcollect_out_of_line::<S>(team.0, d, s, b) })
}

/// A reduction operator usable on element type `T`: [`Sum`], [`Prod`], [`Min`], [`Max`] for
/// every standard type; [`And`], [`Or`], [`Xor`] for integers.
#[diagnostic::on_unimplemented(message = "NVSHMEM has no `{Self}` reduction for `{T}`")]
pub trait ReduceOp<T>: Copy {
    #[doc(hidden)]
    unsafe fn raw<S: Scope>(team: i32, dest: *mut T, src: *const T, n: usize) -> i32;
}

macro_rules! reduce_ops {
    ($($op:ident $thread:ident $warp:ident $block:ident [$group:ident: $($t:ident => $m:ident),*];)*) => { $(
        #[doc = concat!("The `", stringify!($thread), "` reduction operator.")]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op;
        $(
            impl ReduceOp<$t> for $op {
                // Out of line: see the module's "Code size".
                #[inline(never)]
                #[cfg_attr(shmem_sim, track_caller)]
                unsafe fn raw<S: Scope>(team: i32, dest: *mut $t, src: *const $t, n: usize) -> i32 {
                    use sys::reduce::$group::$m as f;
                    // SAFETY: forwarded obligation of the caller (`reduce`).
                    unsafe { by_scope!(S, f::$thread, f::$warp, f::$block, (team, dest, src, n)) }
                }
            }
        )*
    )* };
}

reduce_ops! {
    Sum sum sum_warp sum_block [arith: i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16, u32 => uint32, u64 => uint64, f32 => float, f64 => double];
    Prod prod prod_warp prod_block [arith: i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16, u32 => uint32, u64 => uint64, f32 => float, f64 => double];
    Min min min_warp min_block [arith: i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16, u32 => uint32, u64 => uint64, f32 => float, f64 => double];
    Max max max_warp max_block [arith: i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16, u32 => uint32, u64 => uint64, f32 => float, f64 => double];
    And and and_warp and_block [bit: i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16, u32 => uint32, u64 => uint64];
    Or or or_warp or_block [bit: i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16, u32 => uint32, u64 => uint64];
    Xor xor xor_warp xor_block [bit: i8 => int8, i16 => int16, i32 => int32, i64 => int64, u8 => uint8, u16 => uint16, u32 => uint32, u64 => uint64];
}

/// Element-wise reduction with `op` of every member's `src` into every member's `dest`.
/// NVSHMEM: `nvshmem_TYPE_OP_reduce`, `nvshmemx_TYPE_OP_reduce_warp` / `_block`.
///
/// # Panics
/// If `dest` and `src` differ in length.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn reduce<S: Scope, T: Copy, O: ReduceOp<T>>(
    _scope: S,
    team: Team,
    _op: O,
    dest: SymSlice<T>,
    src: SymSlice<T>,
) -> Result<(), CollError> {
    assert!(
        dest.len() == src.len(),
        "reduce operands have different lengths"
    );
    // SAFETY: the caller upholds the module's contract; lengths were checked.
    status(unsafe { O::raw::<S>(team.0, dest.as_ptr(), src.as_ptr().cast_const(), src.len()) })
}
