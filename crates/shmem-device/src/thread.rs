//! CUDA's execution model: where the calling thread sits in the grid.
//!
//! A kernel launch runs a *grid* of *blocks* (CTAs); each block is a group of threads that
//! run on one SM, can share memory and meet at [`sync_threads`]. Within a block, threads are
//! scheduled in *warps* of [`WARP_SIZE`] lanes. Every function here reads a special register
//! and costs one instruction.
//!
//! NVSHMEM's scoped operations (`Warp`, `Block` in [`crate::scope`]) follow the same
//! hierarchy: a warp-scoped call must be made by all lanes of the warp, a block-scoped call
//! by all threads of the block.
//!
//! These functions are meaningful only inside a kernel running on a GPU. The crate also
//! compiles for the host, so that `cargo check`, clippy, docs and rust-analyzer see kernel
//! code; called on the host, they panic with a message that says so.

/// Threads per warp on every NVIDIA GPU NVSHMEM supports.
pub const WARP_SIZE: u32 = 32;

/// A three-dimensional index or extent, as CUDA's `dim3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// Fastest-varying coordinate.
    pub x: u32,
    /// Middle coordinate.
    pub y: u32,
    /// Slowest-varying coordinate.
    pub z: u32,
}

macro_rules! special_registers {
    ($($(#[$doc:meta])* $name:ident => $intr:ident;)*) => { $(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() -> u32 {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: reading a special register has no preconditions inside a kernel, and
            // device code only ever runs inside a kernel.
            unsafe { core::arch::nvptx::$intr() }
            #[cfg(not(target_arch = "nvptx64"))]
            crate::host::register(stringify!($name))
        }
    )* };
}

special_registers! {
    /// `threadIdx.x`: this thread's index in its block, x coordinate.
    thread_idx_x => _thread_idx_x;
    /// `threadIdx.y`.
    thread_idx_y => _thread_idx_y;
    /// `threadIdx.z`.
    thread_idx_z => _thread_idx_z;
    /// `blockIdx.x`: this block's index in the grid, x coordinate.
    block_idx_x => _block_idx_x;
    /// `blockIdx.y`.
    block_idx_y => _block_idx_y;
    /// `blockIdx.z`.
    block_idx_z => _block_idx_z;
    /// `blockDim.x`: threads per block along x.
    block_dim_x => _block_dim_x;
    /// `blockDim.y`.
    block_dim_y => _block_dim_y;
    /// `blockDim.z`.
    block_dim_z => _block_dim_z;
    /// `gridDim.x`: blocks per grid along x.
    grid_dim_x => _grid_dim_x;
    /// `gridDim.y`.
    grid_dim_y => _grid_dim_y;
    /// `gridDim.z`.
    grid_dim_z => _grid_dim_z;
}

/// `threadIdx`.
#[inline(always)]
pub fn thread_idx() -> Dim3 {
    Dim3 {
        x: thread_idx_x(),
        y: thread_idx_y(),
        z: thread_idx_z(),
    }
}

/// `blockIdx`.
#[inline(always)]
pub fn block_idx() -> Dim3 {
    Dim3 {
        x: block_idx_x(),
        y: block_idx_y(),
        z: block_idx_z(),
    }
}

/// `blockDim`.
#[inline(always)]
pub fn block_dim() -> Dim3 {
    Dim3 {
        x: block_dim_x(),
        y: block_dim_y(),
        z: block_dim_z(),
    }
}

/// `gridDim`.
#[inline(always)]
pub fn grid_dim() -> Dim3 {
    Dim3 {
        x: grid_dim_x(),
        y: grid_dim_y(),
        z: grid_dim_z(),
    }
}

/// This thread's linear index within its block (x fastest, then y, then z).
#[inline(always)]
pub fn thread_rank_in_block() -> u32 {
    (thread_idx_z() * block_dim_y() + thread_idx_y()) * block_dim_x() + thread_idx_x()
}

/// Threads per block (`blockDim.x * blockDim.y * blockDim.z`).
#[inline(always)]
pub fn block_size() -> u32 {
    block_dim_x() * block_dim_y() * block_dim_z()
}

/// `blockIdx.x * blockDim.x + threadIdx.x`: the usual global index of a 1-D launch.
#[inline(always)]
pub fn global_idx_x() -> usize {
    block_idx_x() as usize * block_dim_x() as usize + thread_idx_x() as usize
}

/// `gridDim.x * blockDim.x`: the stride of a grid-stride loop over a 1-D launch.
#[inline(always)]
pub fn grid_stride_x() -> usize {
    grid_dim_x() as usize * block_dim_x() as usize
}

/// This thread's lane in its warp, `0..WARP_SIZE` (`%laneid`).
#[inline(always)]
pub fn lane_id() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let lane: u32;
        // SAFETY: `%laneid` is a read-only special register; the asm touches nothing else.
        unsafe {
            core::arch::asm!("mov.u32 {0}, %laneid;", out(reg32) lane, options(nomem, nostack, pure))
        };
        lane
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::register("lane_id")
}

/// Nanoseconds of the GPU's global timer (`%globaltimer`, CUDA's `globaltimer` register):
/// a clock every SM reads alike, for measuring or bounding a wait inside a kernel. Under the
/// simulator, the host's clock; called outside a kernel on the host, it panics.
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    crate::bound::now_ns()
}

/// Suspends the calling thread for about `ns` nanoseconds (PTX `nanosleep`, CUDA's
/// `__nanosleep`; sm_70 and up): the hardware sleeps somewhere in `0 ..= 2 ns`, at most a
/// millisecond. For the backoff of a poll that is not urgent, so that many waiting threads
/// leave the memory system to the work they wait for
/// ([`crate::signal::signal_wait_until_backoff`]). Under the simulator it returns at once.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: `nanosleep` only suspends the thread; it reads no memory and writes none.
    unsafe {
        core::arch::asm!("nanosleep.u32 {0};", in(reg32) ns, options(nomem, nostack))
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = ns;
}

/// Whether every lane of the calling thread's warp executes this call with it
/// (`activemask.b32` is all ones): a hint for the shape of a peer copy
/// ([`crate::rma`]), which holds only at the instant it is read. No code on the host asks
/// (the simulator's transfers go through its own NVSHMEM, not the peer copy).
#[inline(always)]
pub(crate) fn whole_warp_active() -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let mask: u32;
        // SAFETY: `activemask` reads which lanes execute it; the asm touches nothing else.
        // Not `pure`: reads in different branches must not be merged.
        unsafe {
            core::arch::asm!("activemask.b32 {0};", out(reg32) mask, options(nomem, nostack))
        };
        mask == u32::MAX
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::device_only("whole_warp_active")
}

/// This thread's warp within its block: `thread_rank_in_block() / WARP_SIZE`.
///
/// This is the logical warp index, stable for the life of the block, not the hardware
/// `%warpid` (which may change under preemption).
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_rank_in_block() / WARP_SIZE
}

/// Warps per block, rounding a partial last warp up.
#[inline(always)]
pub fn warps_per_block() -> u32 {
    block_size().div_ceil(WARP_SIZE)
}

/// `__syncthreads()`: waits until every thread of the block has reached this point, and
/// makes the block's shared and global memory writes before it visible to the block after it.
///
/// Every thread of the block must reach the same `sync_threads` (it must not sit in a branch
/// that only some threads take), or the block deadlocks.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn sync_threads() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: `bar.sync 0` has no memory-safety preconditions; a divergent call deadlocks
    // (documented above) but cannot corrupt memory.
    unsafe {
        core::arch::nvptx::_syncthreads()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::sync_threads()
}

/// `__syncthreads_count(pred)`: [`sync_threads`], returning how many of the block's threads
/// called it with `pred` true (PTX `bar.red.popc`). Every thread of the block must reach it,
/// as [`sync_threads`]; each gets the same count.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn sync_threads_count(pred: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: `bar.red.popc` is `bar.sync 0` with a count of the predicates; a divergent
        // call deadlocks but cannot corrupt memory. No `nomem`: it orders memory as the
        // barrier does.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {v}, 0; bar.red.popc.u32 {o}, 0, p; }}",
                o = out(reg32) out,
                v = in(reg32) u32::from(pred),
                options(nostack)
            )
        };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::sync_threads_vote(pred).0
}

/// `bar.red.<op>.pred` of `pred` over the block (`op`: `"and"` or `"or"`), as a `bool`.
#[cfg(target_arch = "nvptx64")]
macro_rules! bar_red_pred {
    ($op:literal, $pred:expr) => {{
        let out: u32;
        // SAFETY: `bar.red` is `bar.sync 0` with a reduction of the predicates; a divergent
        // call deadlocks but cannot corrupt memory. No `nomem`: it orders memory as the
        // barrier does.
        unsafe {
            core::arch::asm!(
                concat!(
                    "{{ .reg .pred p, q; setp.ne.u32 p, {v}, 0; bar.red.",
                    $op,
                    ".pred q, 0, p; selp.u32 {o}, 1, 0, q; }}"
                ),
                o = out(reg32) out,
                v = in(reg32) u32::from($pred),
                options(nostack)
            )
        };
        out != 0
    }};
}

/// `__syncthreads_and(pred)`: [`sync_threads`], returning whether every thread of the block
/// called it with `pred` true (PTX `bar.red.and`). Same rule as [`sync_threads`].
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn sync_threads_and(pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        bar_red_pred!("and", pred)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (yes, all) = crate::host::sync_threads_vote(pred);
        yes == all
    }
}

/// `__syncthreads_or(pred)`: [`sync_threads`], returning whether some thread of the block
/// called it with `pred` true (PTX `bar.red.or`): a block's decision without shared memory.
/// Same rule as [`sync_threads`].
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn sync_threads_or(pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        bar_red_pred!("or", pred)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::host::sync_threads_vote(pred).0 != 0
    }
}

/// `__syncwarp(mask)`: the lanes named in `mask` wait for each other and their memory
/// accesses before it are ordered before those after it. Each lane in `mask` must call it
/// with the same mask.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn sync_warp(mask: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: `bar.warp.sync` only synchronises lanes; a mask naming a lane that never
    // arrives hangs the warp but cannot corrupt memory.
    unsafe {
        core::arch::asm!("bar.warp.sync {0};", in(reg32) mask, options(nostack))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::sync_warp(mask)
}

/// A barrier that some warps of a block keep among themselves while the others go on: PTX's
/// named barrier `id` (1 to 15; barrier 0 is [`sync_threads`]'s) of `threads` threads, whole
/// warps. It is how a warp-specialised kernel's warps meet without stopping the rest: the
/// metadata warps of a dispatch agreeing on their slots while a copying warp streams rows,
/// or a producer warp handing consumers a tile ([`NamedBarrier::arrive`]).
///
/// Each generation completes when `threads` threads have arrived, by [`sync`](Self::sync)
/// (which waits for that) or [`arrive`](Self::arrive) (which does not); then the barrier is
/// ready for the next. Arrivals are counted a warp at a time, so every lane of a warp arrives
/// at the same call, and every participant names the same `threads`. Like
/// [`sync_threads`], memory accesses of the arriving threads before the barrier are visible
/// to those that waited on it after it; a generation that never completes hangs its waiters
/// (the simulator reports it as a deadlock).
///
/// ```ignore
/// // Warps 1.. of the block agree among themselves; warp 0 does not wait for them.
/// if warp_id() != 0 {
///     let meta = NamedBarrier::new(1, block_dim_x() - 32);
///     // ... each writes its part of a shared table ...
///     meta.sync();
///     // ... each reads the whole table ...
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedBarrier {
    id: u32,
    threads: u32,
}

impl NamedBarrier {
    /// Barrier `id` of `threads` threads.
    ///
    /// # Panics
    /// Unless `1 <= id <= 15` and `threads` is a nonzero multiple of 32 (on the GPU a panic
    /// ends the kernel, as any device panic).
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    pub fn new(id: u32, threads: u32) -> NamedBarrier {
        assert!(
            (1..16).contains(&id) && threads != 0 && threads.is_multiple_of(WARP_SIZE),
            "NamedBarrier: id must be 1 to 15 and threads a nonzero multiple of 32"
        );
        NamedBarrier { id, threads }
    }

    /// The barrier's number.
    pub fn id(self) -> u32 {
        self.id
    }

    /// Threads that complete a generation.
    pub fn threads(self) -> u32 {
        self.threads
    }

    /// `bar.sync id, threads`: arrives and waits until the generation is complete.
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    pub fn sync(self) {
        self.meet(true)
    }

    /// `bar.arrive id, threads`: counts this warp's arrival and goes on without waiting (a
    /// producer's signal that its writes before it are there for the waiters).
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    pub fn arrive(self) {
        self.meet(false)
    }

    /// Arrives, and with `wait` waits for the generation.
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    fn meet(self, wait: bool) {
        #[cfg(target_arch = "nvptx64")]
        // SAFETY: `bar.sync` and `bar.arrive` only synchronise threads (`new` checked their
        // operands); a generation that never completes hangs but cannot corrupt memory. No
        // `nomem`: they order memory as `sync_threads` does.
        unsafe {
            if wait {
                core::arch::asm!(
                    "bar.sync {0}, {1};",
                    in(reg32) self.id,
                    in(reg32) self.threads,
                    options(nostack)
                )
            } else {
                core::arch::asm!(
                    "bar.arrive {0}, {1};",
                    in(reg32) self.id,
                    in(reg32) self.threads,
                    options(nostack)
                )
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        crate::host::named_barrier(self.id, self.threads, wait)
    }
}

/// Values a warp shuffle moves: 32-bit words in one `shfl`, 64-bit ones in two.
pub trait Shuffle: Copy + sealed::Sealed {
    #[doc(hidden)]
    fn shfl_bfly(self, lane_mask: u32) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn shfl_bfly_u32(v: u32, lane_mask: u32) -> u32 {
    let out: u32;
    // SAFETY: `shfl.sync.bfly` reads registers of the lanes in the full mask only; the
    // convergence rule of [`shfl_xor`] is the caller's, and a violation hangs the warp
    // rather than touching memory.
    unsafe {
        core::arch::asm!(
            "shfl.sync.bfly.b32 {o}, {v}, {m}, 0x1f, 0xffffffff;",
            o = out(reg32) out,
            v = in(reg32) v,
            m = in(reg32) lane_mask,
            options(nomem, nostack)
        )
    };
    out
}

#[cfg(not(target_arch = "nvptx64"))]
use crate::host::shfl_xor as shfl_bfly_u32;

macro_rules! shuffle32 {
    ($($t:ty),*) => { $(
        impl sealed::Sealed for $t {}
        impl Shuffle for $t {
            #[inline(always)]
            fn shfl_bfly(self, lane_mask: u32) -> Self {
                <$t>::from_ne_bytes(shfl_bfly_u32(u32::from_ne_bytes(self.to_ne_bytes()), lane_mask).to_ne_bytes())
            }
        }
    )* };
}
macro_rules! shuffle64 {
    ($($t:ty),*) => { $(
        impl sealed::Sealed for $t {}
        impl Shuffle for $t {
            #[inline(always)]
            fn shfl_bfly(self, lane_mask: u32) -> Self {
                let bits = u64::from_ne_bytes(self.to_ne_bytes());
                let lo = shfl_bfly_u32(bits as u32, lane_mask) as u64;
                let hi = shfl_bfly_u32((bits >> 32) as u32, lane_mask) as u64;
                <$t>::from_ne_bytes((lo | (hi << 32)).to_ne_bytes())
            }
        }
    )* };
}
shuffle32!(u32, i32, f32);
shuffle64!(u64, i64, f64);

/// `__shfl_xor_sync(0xffffffff, v, lane_mask)`: this lane gets `v` of lane
/// `lane_id() ^ lane_mask`. All 32 lanes of the warp must call it together (a full warp,
/// converged), or the warp hangs.
///
/// # Performance
/// The warp functions here ([`shfl_xor`], [`shfl_idx`], [`ballot`], [`warp_sum`],
/// [`warp_prefix_sum`], [`warp_or`]) take one instruction a shuffle when the compiler can see
/// that the warp is converged. After a branch on something that differs between lanes
/// (`if e >= 0 { .. }` on a lane's own value), the warp may still be diverged where the call
/// is, and `ptxas` runs a slow path for a divergent warp around every shuffle
/// (`WARPSYNC.COLLECTIVE`, `ENDCOLLECTIVE` in the SASS). Compute a lane's operand without
/// a branch (a select, `u32::from(cond) << n`). The MoE combine lost 2–5 % to one such
/// branch before a [`warp_or`].
#[inline(always)]
pub fn shfl_xor<T: Shuffle>(v: T, lane_mask: u32) -> T {
    v.shfl_bfly(lane_mask)
}

/// The sum of `v` over the 32 lanes of the warp, in every lane (a butterfly of
/// [`shfl_xor`]s: the same order of additions in every lane, so every lane gets the same
/// bits). Same convergence rule as [`shfl_xor`].
#[inline(always)]
pub fn warp_sum<T: Shuffle + core::ops::Add<Output = T>>(mut v: T) -> T {
    let mut m = WARP_SIZE / 2;
    while m > 0 {
        v = v + shfl_xor(v, m);
        m /= 2;
    }
    v
}

/// The sum of `v` over lanes `from ..= lane_id()` of the warp, in each lane (an inclusive
/// scan of [`shfl_idx`]s, Hillis and Steele's). Each lane gives its own `from`, at most its
/// lane: with `from = 0` in every lane, a plain prefix sum; with each lane's `from` the first
/// lane of its run of lanes, a sum within runs (a segmented scan: every lane of a run must
/// give the run's first lane). Same convergence rule as [`shfl_xor`].
#[inline(always)]
pub fn warp_prefix_sum(v: u32, from: u32) -> u32 {
    let lane = lane_id();
    let mut x = v;
    let mut off = 1;
    while off < WARP_SIZE {
        let y = shfl_idx(x, lane.saturating_sub(off));
        x += if lane >= from + off { y } else { 0 };
        off *= 2;
    }
    x
}

/// `__shfl_sync(0xffffffff, v, src_lane)`: every lane gets `v` of lane `src_lane` (`0..32`).
/// Same convergence rule as [`shfl_xor`].
#[inline(always)]
pub fn shfl_idx(v: u32, src_lane: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: `shfl.sync.idx` reads registers of the lanes in the full mask only; a
        // warp that is not converged hangs rather than touching memory.
        unsafe {
            core::arch::asm!(
                "shfl.sync.idx.b32 {o}, {v}, {l}, 0x1f, 0xffffffff;",
                o = out(reg32) out,
                v = in(reg32) v,
                l = in(reg32) src_lane,
                options(nomem, nostack)
            )
        };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::shfl_idx(v, src_lane)
}

/// `__ballot_sync(0xffffffff, pred)`: bit `i` is set when lane `i`'s `pred` is true, in every
/// lane. Same convergence rule as [`shfl_xor`].
#[inline(always)]
pub fn ballot(pred: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: `vote.sync.ballot` reads predicates of the lanes in the full mask only; a
        // warp that is not converged hangs rather than touching memory.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {v}, 0; vote.sync.ballot.b32 {o}, p, 0xffffffff; }}",
                o = out(reg32) out,
                v = in(reg32) u32::from(pred),
                options(nomem, nostack)
            )
        };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::ballot(pred)
}

/// The bitwise OR of `v` over the 32 lanes of the warp, in every lane. Same convergence rule
/// as [`shfl_xor`].
#[inline(always)]
pub fn warp_or(mut v: u32) -> u32 {
    let mut m = WARP_SIZE / 2;
    while m > 0 {
        v |= shfl_xor(v, m);
        m /= 2;
    }
    v
}
