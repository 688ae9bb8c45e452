//! Scoped loads, stores and atomics with explicit memory-model semantics, for code that
//! synchronises through memory rather than through NVSHMEM calls — the NVLink fast paths of
//! DeepEP-style kernels, which store into a peer's buffer through a [`PeerPtr`]
//! and publish with a release store of a flag.
//!
//! The *scope* is the set of threads the ordering is promised to (PTX memory model):
//! - [`Cta`]: threads of the same block;
//! - [`Gpu`]: threads of the same GPU;
//! - [`Sys`]: every thread of the system, including other GPUs over NVLink and the CPU.
//!   Communication with a peer GPU through mapped memory needs `Sys`.
//!
//! Each operation is one PTX instruction (`ld.acquire.sys.b32`, `st.release.gpu.b64`,
//! `atom.add.release.sys.u32`, ...) on a generic address, so the same functions work on local
//! device memory, this PE's symmetric memory and peer-mapped memory. On a [`SharedPtr`]
//! (block-shared memory) they take the `.shared` forms, on the address in the shared window
//! (`cvta.to.shared`), which ptxas emits as the shared-memory instructions (`ATOMS`, `LDS`,
//! `STS`) instead of generic ones that first find out where the address lies.
//!
//! # Safety (common to every function of this module)
//! The address is valid, aligned to the operand size and mapped on this GPU (a
//! [`DevicePtr`], a symmetric [`Sym`] of this PE, or a
//! [`PeerPtr`] from [`crate::ptr`] whose PE is still alive). Mixing these
//! operations with plain (non-atomic) accesses to the same word concurrently is a data race.

use crate::mem::{DevicePtr, PeerPtr, SharedPtr, Sym};

/// A memory-model scope. Implemented by [`Cta`], [`Gpu`], [`Sys`].
pub trait MemScope: Copy + sealed::Sealed {
    #[doc(hidden)]
    const KIND: u8;
}
mod sealed {
    pub trait Sealed {}
}
/// `.cta`: the calling block.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cta;
/// `.gpu`: the calling GPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gpu;
/// `.sys`: the whole system (peer GPUs, host).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sys;
impl sealed::Sealed for Cta {}
impl sealed::Sealed for Gpu {}
impl sealed::Sealed for Sys {}
impl MemScope for Cta {
    const KIND: u8 = 0;
}
impl MemScope for Gpu {
    const KIND: u8 = 1;
}
impl MemScope for Sys {
    const KIND: u8 = 2;
}

/// A pointer kind the scoped operations accept: local, symmetric (this PE's copy), peer, or
/// block-shared.
pub trait ScopedTarget<T>: Copy {
    /// Whether the address is in the block's shared memory: the operations then name the
    /// `.shared` state space (on the address `cvta.to.shared` gives), so that ptxas emits
    /// the shared-memory instructions (`ATOMS`, `LDS`, `STS`) rather than generic ones, which
    /// first find out where the address lies.
    #[doc(hidden)]
    const SHARED: bool = false;
    /// The generic address.
    fn addr(self) -> *mut T;
}
impl<T> ScopedTarget<T> for DevicePtr<T> {
    #[inline(always)]
    fn addr(self) -> *mut T {
        self.as_ptr()
    }
}
impl<T> ScopedTarget<T> for PeerPtr<T> {
    #[inline(always)]
    fn addr(self) -> *mut T {
        self.as_ptr()
    }
}
impl<T> ScopedTarget<T> for SharedPtr<T> {
    const SHARED: bool = true;
    #[inline(always)]
    fn addr(self) -> *mut T {
        self.as_ptr()
    }
}
impl<T> ScopedTarget<T> for Sym<T> {
    #[inline(always)]
    fn addr(self) -> *mut T {
        self.as_ptr()
    }
}

/// Word types of the scoped operations: `u32`, `i32`, `u64`, `i64`, `f32`, `f64` (the float
/// adds are `atom`/`red` `.add.f32`/`.f64`; compare-and-swap compares the bits).
pub trait ScopedWord: Copy + sealed::Sealed {
    #[doc(hidden)]
    unsafe fn ld<S: MemScope>(acquire: bool, shared: bool, p: *const Self) -> Self;
    #[doc(hidden)]
    unsafe fn st<S: MemScope>(release: bool, shared: bool, p: *mut Self, v: Self);
    #[doc(hidden)]
    unsafe fn fetch_add<S: MemScope>(acq_rel: bool, shared: bool, p: *mut Self, v: Self) -> Self;
    #[doc(hidden)]
    unsafe fn red_add<S: MemScope>(release: bool, shared: bool, p: *mut Self, v: Self);
    #[doc(hidden)]
    unsafe fn cas<S: MemScope>(shared: bool, p: *mut Self, cmp: Self, new: Self) -> Self;
}
impl sealed::Sealed for u32 {}
impl sealed::Sealed for i32 {}
impl sealed::Sealed for u64 {}
impl sealed::Sealed for i64 {}
impl sealed::Sealed for f32 {}
impl sealed::Sealed for f64 {}

/// Runs the asm template with `.cta`, `.gpu` or `.sys` spliced in, chosen by `S` at compile
/// time, and `.shared` after it when `$shared` (a constant once inlined: the target's
/// [`ScopedTarget::SHARED`]), where the address operand is then [`shared_window`]'s.
#[cfg(target_arch = "nvptx64")]
macro_rules! scoped_asm {
    ($s:ty, $shared:expr, $pre:literal, $post:expr, $($rest:tt)*) => {
        match (<$s as MemScope>::KIND, $shared) {
            (0, false) => core::arch::asm!(concat!($pre, ".cta", $post), $($rest)*),
            (1, false) => core::arch::asm!(concat!($pre, ".gpu", $post), $($rest)*),
            (_, false) => core::arch::asm!(concat!($pre, ".sys", $post), $($rest)*),
            (0, true) => core::arch::asm!(concat!($pre, ".cta.shared", $post), $($rest)*),
            (1, true) => core::arch::asm!(concat!($pre, ".gpu.shared", $post), $($rest)*),
            (_, true) => core::arch::asm!(concat!($pre, ".sys.shared", $post), $($rest)*),
        }
    };
}

/// The address operand of a scoped operation: `p` itself, or for a block-shared target its
/// address in the shared window (`cvta.to.shared`), which the `.shared` forms take.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn shared_window<T>(shared: bool, p: *const T) -> u64 {
    if !shared {
        return p as u64;
    }
    let a: u64;
    // SAFETY: `cvta.to.shared` only converts an address; it touches no memory.
    unsafe {
        core::arch::asm!(
            "cvta.to.shared.u64 {a}, {p};",
            a = out(reg64) a,
            p = in(reg64) p,
            options(pure, nomem, nostack)
        )
    };
    a
}

macro_rules! scoped_word {
    ($($t:ty: $bits:literal, $add:literal, $reg:ident;)*) => { $(
        #[cfg(target_arch = "nvptx64")]
        impl ScopedWord for $t {
            #[inline(always)]
            unsafe fn ld<S: MemScope>(acquire: bool, shared: bool, p: *const Self) -> Self {
                let v: Self;
                let p = shared_window(shared, p);
                // SAFETY: the caller guarantees a valid, aligned, mapped address.
                unsafe {
                    if acquire {
                        scoped_asm!(S, shared, "ld.acquire", concat!(".b", $bits, " {v}, [{p}];"), v = out($reg) v, p = in(reg64) p, options(nostack));
                    } else {
                        scoped_asm!(S, shared, "ld.relaxed", concat!(".b", $bits, " {v}, [{p}];"), v = out($reg) v, p = in(reg64) p, options(nostack));
                    }
                }
                v
            }
            #[inline(always)]
            unsafe fn st<S: MemScope>(release: bool, shared: bool, p: *mut Self, v: Self) {
                let p = shared_window(shared, p);
                // SAFETY: the caller guarantees a valid, aligned, mapped address.
                unsafe {
                    if release {
                        scoped_asm!(S, shared, "st.release", concat!(".b", $bits, " [{p}], {v};"), p = in(reg64) p, v = in($reg) v, options(nostack));
                    } else {
                        scoped_asm!(S, shared, "st.relaxed", concat!(".b", $bits, " [{p}], {v};"), p = in(reg64) p, v = in($reg) v, options(nostack));
                    }
                }
            }
            #[inline(always)]
            unsafe fn fetch_add<S: MemScope>(acq_rel: bool, shared: bool, p: *mut Self, v: Self) -> Self {
                let old: Self;
                let p = shared_window(shared, p);
                // SAFETY: the caller guarantees a valid, aligned, mapped address.
                unsafe {
                    if acq_rel {
                        scoped_asm!(S, shared, "atom.acq_rel", concat!(".add.", $add, " {o}, [{p}], {v};"), o = out($reg) old, p = in(reg64) p, v = in($reg) v, options(nostack));
                    } else {
                        scoped_asm!(S, shared, "atom.relaxed", concat!(".add.", $add, " {o}, [{p}], {v};"), o = out($reg) old, p = in(reg64) p, v = in($reg) v, options(nostack));
                    }
                }
                old
            }
            #[inline(always)]
            unsafe fn red_add<S: MemScope>(release: bool, shared: bool, p: *mut Self, v: Self) {
                let p = shared_window(shared, p);
                // SAFETY: the caller guarantees a valid, aligned, mapped address.
                unsafe {
                    if release {
                        scoped_asm!(S, shared, "red.release", concat!(".add.", $add, " [{p}], {v};"), p = in(reg64) p, v = in($reg) v, options(nostack));
                    } else {
                        scoped_asm!(S, shared, "red.relaxed", concat!(".add.", $add, " [{p}], {v};"), p = in(reg64) p, v = in($reg) v, options(nostack));
                    }
                }
            }
            #[inline(always)]
            unsafe fn cas<S: MemScope>(shared: bool, p: *mut Self, cmp: Self, new: Self) -> Self {
                let old: Self;
                let p = shared_window(shared, p);
                // SAFETY: the caller guarantees a valid, aligned, mapped address.
                unsafe {
                    scoped_asm!(S, shared, "atom.acq_rel", concat!(".cas.b", $bits, " {o}, [{p}], {c}, {n};"), o = out($reg) old, p = in(reg64) p, c = in($reg) cmp, n = in($reg) new, options(nostack));
                }
                old
            }
        }
        // On the host: a yield point of the simulator, then the operation (only one
        // simulated thread runs at a time, so a plain access is atomic); else a panic.
        #[cfg(not(target_arch = "nvptx64"))]
        impl ScopedWord for $t {
            #[track_caller]
            unsafe fn ld<S: MemScope>(_: bool, _: bool, p: *const Self) -> Self {
                host_step("scoped::load", true);
                // SAFETY: the caller guarantees a valid, aligned address.
                unsafe { p.read_volatile() }
            }
            #[track_caller]
            unsafe fn st<S: MemScope>(_: bool, _: bool, p: *mut Self, v: Self) {
                host_step("scoped::store", false);
                // SAFETY: as above.
                unsafe { p.write_volatile(v) }
            }
            #[track_caller]
            unsafe fn fetch_add<S: MemScope>(_: bool, _: bool, p: *mut Self, v: Self) -> Self {
                host_step("scoped::fetch_add", false);
                // SAFETY: as above.
                unsafe {
                    let old = p.read_volatile();
                    p.write_volatile(old.wrapping_add_word(v));
                    old
                }
            }
            #[track_caller]
            unsafe fn red_add<S: MemScope>(_: bool, _: bool, p: *mut Self, v: Self) {
                // SAFETY: the caller's contract.
                unsafe { Self::fetch_add::<S>(false, false, p, v) };
            }
            #[track_caller]
            unsafe fn cas<S: MemScope>(_: bool, p: *mut Self, cmp: Self, new: Self) -> Self {
                host_step("scoped::compare_swap", false);
                // SAFETY: as above.
                unsafe {
                    let old = p.read_volatile();
                    if old.to_bits_word() == cmp.to_bits_word() {
                        p.write_volatile(new);
                    }
                    old
                }
            }
        }
    )* };
}

/// A scoped operation on the host: a yield point of the CPU simulator, or a panic outside it.
#[cfg(not(target_arch = "nvptx64"))]
use crate::host::step as host_step;

/// Host-side arithmetic of the scoped words (the simulator's atomics).
#[cfg(not(target_arch = "nvptx64"))]
trait HostWord: Copy {
    fn wrapping_add_word(self, v: Self) -> Self;
    fn to_bits_word(self) -> u64;
}
#[cfg(not(target_arch = "nvptx64"))]
macro_rules! host_word {
    (int: $($t:ty),*; float: $($f:ty),*) => {
        $(impl HostWord for $t {
            fn wrapping_add_word(self, v: Self) -> Self { self.wrapping_add(v) }
            fn to_bits_word(self) -> u64 { self as u64 }
        })*
        $(impl HostWord for $f {
            fn wrapping_add_word(self, v: Self) -> Self { self + v }
            fn to_bits_word(self) -> u64 { self.to_bits().into() }
        })*
    };
}
#[cfg(not(target_arch = "nvptx64"))]
host_word!(int: u32, i32, u64, i64; float: f32, f64);

scoped_word! {
    u32: "32", "u32", reg32;
    i32: "32", "s32", reg32;
    u64: "64", "u64", reg64;
    i64: "64", "u64", reg64;
    f32: "32", "f32", reg32;
    f64: "64", "f64", reg64;
}

/// Whether `p` is block-shared ([`ScopedTarget::SHARED`]), for an argument of `impl` type.
#[inline(always)]
fn shared<T, P: ScopedTarget<T>>(_: &P) -> bool {
    P::SHARED
}

/// Load with acquire semantics at scope `S`: later accesses of this thread are not moved
/// before it, and it sees what a matching release made visible. PTX: `ld.acquire.S`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn load_acquire<S: MemScope, T: ScopedWord>(_scope: S, p: impl ScopedTarget<T>) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::ld::<S>(true, shared(&p), p.addr()) }
}

/// An integer word [`wait_acquire`] waits on: `u32`, `i32`, `u64`, `i64`.
pub trait ScopedInt: ScopedWord + PartialOrd {
    /// The word's bits, zero-extended (for a wait's report).
    #[doc(hidden)]
    fn report_bits(self) -> u64;
}
impl ScopedInt for u32 {
    #[inline(always)]
    fn report_bits(self) -> u64 {
        self.into()
    }
}
impl ScopedInt for i32 {
    #[inline(always)]
    fn report_bits(self) -> u64 {
        (self as u32).into()
    }
}
impl ScopedInt for u64 {
    #[inline(always)]
    fn report_bits(self) -> u64 {
        self
    }
}
impl ScopedInt for i64 {
    #[inline(always)]
    fn report_bits(self) -> u64 {
        self as u64
    }
}

/// Waits until the word at `p` compares with `value` as `cmp` says, polling it with
/// [`load_acquire`] at scope `S`, and returns the value that did. The acquire orders this
/// thread's later accesses after that load: what the matching release published before it
/// is visible to them, with no fence after the wait (where a poll and then
/// [`fence_acq_rel`] would order every access of the thread, earlier ones included).
///
/// The wait obeys the program-wide bound ([`crate::bound`]): its first poll comes alone, and
/// a wait that expires ends in a report naming `scoped::wait_acquire`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module); the
/// word is written only atomically while the wait reads it.
#[inline(always)]
#[track_caller]
pub unsafe fn wait_acquire<S: MemScope, T: ScopedInt>(
    scope: S,
    p: impl ScopedTarget<T>,
    cmp: crate::p2p::Cmp,
    value: T,
) -> T {
    let mut seen = value;
    let mut done = || {
        // SAFETY: the caller's contract.
        seen = unsafe { load_acquire(scope, p) };
        cmp.holds(seen, value)
    };
    let waiting = || crate::bound::Waiting {
        kind: crate::bound::WaitKind::WaitAcquire,
        cmp,
        addr: p.addr().cast(),
        elem_bytes: core::mem::size_of::<T>() as u32,
        expected: value.report_bits(),
    };
    if !crate::bound::poll_bounded(None, crate::bound::BoundRead::Once, &mut done, waiting) {
        while !done() {}
    }
    seen
}

/// Relaxed (atomic, unordered) load at scope `S`: for polling. PTX: `ld.relaxed.S`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn load_relaxed<S: MemScope, T: ScopedWord>(_scope: S, p: impl ScopedTarget<T>) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::ld::<S>(false, shared(&p), p.addr()) }
}

/// Store with release semantics at scope `S`: this thread's earlier accesses are visible to
/// whoever acquires this value. PTX: `st.release.S`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn store_release<S: MemScope, T: ScopedWord>(
    _scope: S,
    p: impl ScopedTarget<T>,
    value: T,
) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::st::<S>(true, shared(&p), p.addr(), value) }
}

/// Relaxed (atomic, unordered) store at scope `S`. PTX: `st.relaxed.S`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn store_relaxed<S: MemScope, T: ScopedWord>(
    _scope: S,
    p: impl ScopedTarget<T>,
    value: T,
) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::st::<S>(false, shared(&p), p.addr(), value) }
}

/// Atomic add with acquire-release semantics; returns the old value. PTX: `atom.acq_rel.S.add`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn fetch_add<S: MemScope, T: ScopedWord>(
    _scope: S,
    p: impl ScopedTarget<T>,
    value: T,
) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::fetch_add::<S>(true, shared(&p), p.addr(), value) }
}

/// Atomic add with no ordering; returns the old value. PTX: `atom.relaxed.S.add` (CUDA's
/// `atomicAdd`). For counters that hand out unique slots, where only atomicity matters: an
/// acquire-release add first waits for this thread's earlier memory operations (peer
/// stores included) to complete.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn fetch_add_relaxed<S: MemScope, T: ScopedWord>(
    _scope: S,
    p: impl ScopedTarget<T>,
    value: T,
) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::fetch_add::<S>(false, shared(&p), p.addr(), value) }
}

/// Atomic add with release semantics, no result (a reduction). PTX: `red.release.S.add`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn add_release<S: MemScope, T: ScopedWord>(
    _scope: S,
    p: impl ScopedTarget<T>,
    value: T,
) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::red_add::<S>(true, shared(&p), p.addr(), value) }
}

/// Atomic add with no ordering and no result. PTX: `red.relaxed.S.add`: for counters read
/// after a later synchronisation (a kernel's end, a barrier).
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn add_relaxed<S: MemScope, T: ScopedWord>(
    _scope: S,
    p: impl ScopedTarget<T>,
    value: T,
) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::red_add::<S>(false, shared(&p), p.addr(), value) }
}

/// Atomic compare-and-swap with acquire-release semantics; returns the old value.
/// PTX: `atom.acq_rel.S.cas`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
pub unsafe fn compare_swap<S: MemScope, T: ScopedWord>(
    _scope: S,
    p: impl ScopedTarget<T>,
    current: T,
    new: T,
) -> T {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::cas::<S>(shared(&p), p.addr(), current, new) }
}

/// A fence with acquire-release semantics at scope `S`. PTX: `fence.acq_rel.S`.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn fence_acq_rel<S: MemScope>(_scope: S) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a fence only orders this thread's memory accesses.
    unsafe {
        scoped_asm!(S, false, "fence.acq_rel", ";", options(nostack))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    host_step("scoped::fence_acq_rel", false)
}

/// A barrier of the whole grid on a counter that only grows: the `k`-th barrier of a launch
/// (`k = 1, 2, ...`) returns when every block has arrived, i.e. when `counter` reaches
/// `k * gridDim.x`. One thread per block adds 1 with `atom.acq_rel.gpu` and polls with
/// `ld.acquire.gpu`; `sync_threads` on both sides extends the ordering to the whole block.
/// CUDA's cooperative-groups `grid.sync()`, for a persistent kernel.
///
/// # Safety
/// - the whole grid is resident at once (a cooperative launch, or a grid within what
///   `KernelFn::max_coresident_blocks` reports), or the barrier deadlocks;
/// - every thread of every block calls it the same number of times, with `k` counting the
///   calls from 1;
/// - `counter` is a `u32` in global memory, zero at the launch, that nothing else touches
///   during it.
///
/// The wait obeys the program-wide bound ([`crate::bound`]): a grid that is not resident at
/// once ends in a report rather than a hang when a bound is set.
#[inline(always)]
#[track_caller]
pub unsafe fn grid_barrier(counter: impl ScopedTarget<u32>, k: u32) {
    crate::thread::sync_threads();
    if crate::thread::thread_idx_x() == 0 {
        let target = k * crate::thread::grid_dim_x();
        // SAFETY: the caller's contract; the counter is only touched atomically.
        unsafe { fetch_add(Gpu, counter, 1u32) };
        crate::bound::poll(
            // SAFETY: as above.
            || unsafe { load_acquire(Gpu, counter) } >= target,
            || grid_waiting(counter.addr(), crate::p2p::Cmp::Ge, target),
        );
    }
    crate::thread::sync_threads();
}

/// What a grid barrier waits for (its report).
fn grid_waiting(p: *mut u32, cmp: crate::p2p::Cmp, value: u32) -> crate::bound::Waiting {
    crate::bound::Waiting {
        kind: crate::bound::WaitKind::GridBarrier,
        cmp,
        addr: p.cast(),
        elem_bytes: 4,
        expected: value as u64,
    }
}

/// A reusable barrier of the whole grid on two words that persist across launches: `count`
/// (arrivals of the current barrier) and `generation` (completed barriers). The last block
/// to arrive resets `count` and bumps `generation`; the others wait for the bump. Unlike
/// [`grid_barrier`] it does not assume the same grid in every launch, so launches of
/// different shapes (or different kernels, such as a Rust kernel and its CUDA C++ twin) can
/// share the words.
///
/// # Safety
/// - the whole grid is resident at once (a cooperative launch), or the barrier deadlocks;
/// - every thread of every block calls it the same number of times;
/// - `count` and `generation` are `u32`s in global memory, `count` zero before the first use,
///   touched by nothing else, and by one grid at a time.
///
/// The wait obeys the program-wide bound, as [`grid_barrier`]'s does.
#[inline(always)]
#[track_caller]
pub unsafe fn grid_sync(count: impl ScopedTarget<u32>, generation: impl ScopedTarget<u32>) {
    crate::thread::sync_threads();
    if crate::thread::thread_idx_x() == 0 {
        // SAFETY: the caller's contract; both words are only touched atomically. The
        // generation cannot move before this block arrives, so `g` is the current one.
        unsafe {
            let g = load_acquire(Gpu, generation);
            if fetch_add(Gpu, count, 1u32) + 1 == crate::thread::grid_dim_x() {
                store_relaxed(Gpu, count, 0u32);
                fetch_add(Gpu, generation, 1u32);
            } else {
                crate::bound::poll(
                    || load_acquire(Gpu, generation) != g,
                    || grid_waiting(generation.addr(), crate::p2p::Cmp::Ne, g),
                );
            }
        }
    }
    crate::thread::sync_threads();
}
