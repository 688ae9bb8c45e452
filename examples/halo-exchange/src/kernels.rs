//! The Jacobi kernels: one iteration per launch ([`step_f32()`], [`step_f64()`]) and all
//! iterations in one launch ([`persistent_f32()`], [`persistent_f64()`]).
//!
//! # The algorithm
//! Laplace's equation on an `nx × ny` grid with fixed (Dirichlet) values on its border. The
//! `ny - 2` interior rows are split over the PEs in contiguous slabs ([`crate::partition`]);
//! each PE stores its slab with one halo row above and below (`(max_rows + 2) × nx`
//! elements, the same on every PE, so that the buffer is symmetric). An iteration computes
//! every interior point of the slab from `a` into `a_new`:
//!
//! `a_new[y][x] = (((a[y][x-1] + a[y][x+1]) + a[y-1][x]) + a[y+1][x]) * 0.25`
//!
//! in exactly that order, so that the CPU reference ([`crate::reference`]) and the CUDA C++
//! kernels (`cuda/halo.cu`) produce the same bits.
//!
//! # The sweep
//! Block 0 computes the slab's first row, block 1 its last row (block 0 does both when the
//! slab has one row); the other blocks compute the rows in between. When a row is whole
//! 16-byte chunks and the grids are 16-byte aligned (every width divisible by 4 in `f32`,
//! by 2 in `f64`), those rows are cut into bands of chunk columns, a strip each
//! ([`strips`]: as many bands as give every interior thread one strip). A thread walks
//! down its strip with the rows above, at and below in registers, so that it loads 16
//! bytes and stores 16 per row, and the grid is read from memory once and written once a
//! sweep (95 % of a device copy's rate at 16384² on one H200, where the row-per-block
//! loop it replaced, with four 4-byte loads a point, reached 59 %). Other widths go
//! element by element, a row per block. The edge rows always go element by element (the
//! edge path's registers are the kernel's limit: a chunked edge row spilled `step_f64`).
//!
//! # The exchange
//! When an edge row is done, its block puts it into the neighbour's halo row of *its*
//! `a_new` with [`put_signal`] (block scope), which sets the neighbour's signal word to
//! `epoch + 1` after the data has landed. Before an edge block reads a halo row of `a` it
//! waits until the word is at least `epoch` (the halo of the previous iteration has
//! arrived). That one wait also protects the halo it is about to overwrite on the
//! neighbour: the neighbour sent the row being waited for only after reading that halo in
//! the previous iteration. There is no global barrier per iteration; PEs only ever wait for
//! their two neighbours.
//!
//! The grids arrive as `Sym<T>` (a bare pointer) rather than `SymSlice<T>`: a kernel
//! parameter that is a pointer is known to LLVM to point to global memory, so the stencil's
//! loads are `ld.global` as in CUDA C++; a pointer inside a struct parameter reaches the
//! kernel as an integer and gives generic loads (measured: see BENCHMARKS.md).
//!
//! Launch bounds: at most 512 threads per block; the per-iteration kernel is compiled for 3
//! blocks per SM, the persistent one for 2 (CUDA's `__launch_bounds__(512, 3)` and `(512, 2)`,
//! which `cuda/halo.cu` carries too). Without them LLVM's fully inlined kernels took 45 and
//! 108 registers, 2 and 1 blocks per SM: 1.3× and 1.85× slower than the C++ kernels, which
//! nvcc fits in 34 and 58 (measured: see BENCHMARKS.md).
//!
//! Signal words (`sync`): `[0]` the top halo's epoch, `[1]` the bottom halo's epoch,
//! `[2]` arrivals of residual contributions.
//!
//! # The residual
//! On a check iteration every thread also sums `(a_new - a)²` in `f64`; warps reduce with
//! [`warp_sum`] and add to `stats[0]`; the last block to finish (a counter in `work[1]`)
//! sends the PE's sum to slot `check * n + me` of every PE's `norms` with `p`, then, after a
//! [`fence`], adds 1 to every PE's arrival word; it waits for all `n` arrivals and writes
//! the sum over PEs, in PE order (so every PE has the same bits), to `stats[1 + check]`.

use core::ops::{Add, Index, IndexMut, Mul};
use shmem_device::hint;
use shmem_device::kernel::{KernelParam, ParamKind};
use shmem_device::prelude::*;
use shmem_device::rma::Vec16;
use shmem_device::scoped::{self, Gpu};

/// The part of the grid one PE owns, and its neighbours. Passed by value to every kernel;
/// the CUDA C++ kernels take the same `struct` (same fields, same order).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slab {
    /// Columns, including the two fixed border columns.
    pub nx: u32,
    /// Rows this PE updates: local rows `1..=rows`; rows `0` and `rows + 1` are halos.
    pub rows: u32,
    /// The PE above, or -1 when row 0 is the domain's top border.
    pub top_pe: i32,
    /// The PE below, or -1 when row `rows + 1` is the domain's bottom border.
    pub bottom_pe: i32,
    /// Rows of the PE above: this PE's first row goes to its row `top_rows + 1`.
    pub top_rows: u32,
    /// Number of PEs (slots per check in `norms`).
    pub n_pes: u32,
}

// SAFETY: `#[repr(C)]` of 4-byte integers with no padding: the same layout on the host and the
// GPU, and every bit pattern is a valid value.
unsafe impl KernelParam for Slab {
    const KIND: ParamKind = ParamKind::Scalar;
}

impl Slab {
    /// The same slab, every field through [`hint::opaque`]: LLVM recomputes what it
    /// derives from the fields where they are used instead of holding it across a loop.
    #[inline(always)]
    fn opaque(self) -> Self {
        Slab {
            nx: hint::opaque(self.nx),
            rows: hint::opaque(self.rows),
            top_pe: hint::opaque(self.top_pe),
            bottom_pe: hint::opaque(self.bottom_pe),
            top_rows: hint::opaque(self.top_rows),
            n_pes: hint::opaque(self.n_pes),
        }
    }
}

/// The element types of the solver.
pub trait Real: Copy + Add<Output = Self> + Mul<Output = Self> + 'static {
    /// `0.25`.
    const QUARTER: Self;
    /// Elements in 16 bytes.
    const LANES: usize;
    /// `LANES` elements: one 16-byte load or store ([`Vec16`]).
    type Lanes: Vec16 + Index<usize, Output = Self> + IndexMut<usize>;
    /// Widening to `f64` (exact for both types).
    fn to_f64(self) -> f64;
}
impl Real for f32 {
    const QUARTER: f32 = 0.25;
    const LANES: usize = 4;
    type Lanes = [f32; 4];
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl Real for f64 {
    const QUARTER: f64 = 0.25;
    const LANES: usize = 2;
    type Lanes = [f64; 2];
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

/// One Jacobi update of `a_new[c]` from `a`; returns the new value.
///
/// # Safety
/// `c - nx`, `c - 1`, `c + 1` and `c + nx` are in bounds of `a`, `c` of `a_new`, and no other
/// thread writes them during the call.
#[inline(always)]
pub unsafe fn update<T: Real>(a: *const T, a_new: *mut T, c: usize, nx: usize) -> T {
    // SAFETY: the caller's contract.
    unsafe {
        let v = stencil(a, c, nx);
        *a_new.add(c) = v;
        v
    }
}

/// The Jacobi value of point `c` from `a`.
///
/// # Safety
/// `c - nx`, `c - 1`, `c + 1` and `c + nx` are in bounds of `a`.
#[inline(always)]
unsafe fn stencil<T: Real>(a: *const T, c: usize, nx: usize) -> T {
    // SAFETY: the caller's contract.
    unsafe { (((*a.add(c - 1) + *a.add(c + 1)) + *a.add(c - nx)) + *a.add(c + nx)) * T::QUARTER }
}

/// Points of its edge row that a thread of the per-iteration kernel updates a round
/// ([`update_row`]'s `K`): their loads go out together, then their stores.
///
/// The edge row is on the exchange's critical path: the block sends it when it is done.
/// One point a round, a thread waits for each point's four loads before it loads the next
/// point's (LLVM and nvcc both keep that order, since `a_new` may alias `a`), so a
/// 4096-point row (8 points a thread) took eight load latencies. Measured on two and four
/// H200s (BENCHMARKS.md, "The edge row two points a round"): two a round took 3 % off an
/// iteration at 1024², 6-9 % at 4096² on four GPUs; the CUDA C++ twin does the same. Four
/// a round spill `step_f32`/`step_f64` on sm_90; the persistent kernels' edge loops spill
/// with two, so they keep one.
const EDGE_POINTS: usize = 2;

/// Updates interior columns `1 + first, 1 + first + stride, ... < nx - 1` of local row `row`,
/// adding the squared changes to `acc` when `check`, `K` points a round ([`EDGE_POINTS`]),
/// then the rest one at a time.
///
/// `old_on_check` (a constant where it is called) says where the old value is read in the
/// one-at-a-time loop (the rounds of `K > 1` read it only when `check`):
/// - `true`: only when `check`. With it read in every iteration, LLVM computed the residual
///   in every iteration and selected it away when `!check`, so the reload after the store
///   and its conversions sat in the loop. In the per-iteration kernel's edge row, a
///   latency-bound loop on the exchange's critical path, that cost 1-2.5 % of an iteration
///   at 1024² (2 and 4 PEs under MPS; BENCHMARKS.md, "The edge row without the residual").
/// - `false`: in every iteration, with the update. The persistent kernels' edge loops keep
///   this form: with the other, their 64 registers spill 16 bytes on sm_90.
///
/// # Safety
/// `row` is in `1..=rows` of a slab laid out as in the module documentation.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn update_row<T: Real, const K: usize>(
    old_on_check: bool,
    a: *const T,
    a_new: *mut T,
    nx: usize,
    row: usize,
    first: u32,
    stride: u32,
    check: bool,
    acc: &mut f64,
) {
    let base = row * nx;
    let mut x = 1 + first;
    let step = stride as usize;
    if K > 1 {
        // `K` points a round: all their loads first, then their stores. A loop for each
        // value of `check`, as nvcc makes of the twin's: in one loop the residual's
        // predicated loads, conversions and `f64` arithmetic were issued every round, and
        // an iteration took 1.5-2 % more (1024² on two H200s, 4096² on four; BENCHMARKS.md).
        let round = |x: u32, check: bool, acc: &mut f64| {
            let c0 = base + x as usize;
            // SAFETY: every `c0 + k * step` is an interior point of `row` (loop condition).
            let v: [T; K] = core::array::from_fn(|k| unsafe { stencil(a, c0 + k * step, nx) });
            for (k, v) in v.iter().enumerate() {
                // SAFETY: as above; this thread's point.
                unsafe { *a_new.add(c0 + k * step) = *v };
            }
            if check {
                for (k, v) in v.iter().enumerate() {
                    // SAFETY: as above.
                    let d = v.to_f64() - unsafe { *a.add(c0 + k * step) }.to_f64();
                    *acc += d * d;
                }
            }
        };
        if check {
            while x as usize + (K - 1) * step < nx - 1 {
                round(x, true, acc);
                x += K as u32 * stride;
            }
        } else {
            while x as usize + (K - 1) * step < nx - 1 {
                round(x, false, acc);
                x += K as u32 * stride;
            }
        }
    }
    while (x as usize) < nx - 1 {
        let c = base + x as usize;
        // SAFETY: `1 <= x < nx - 1` and `row` has rows above and below (caller's contract).
        let v = unsafe { update(a, a_new, c, nx) };
        // SAFETY: as above.
        let old = (!old_on_check).then(|| unsafe { *a.add(c) });
        if check {
            // SAFETY: as above.
            let old = old.unwrap_or_else(|| unsafe { *a.add(c) });
            let d = v.to_f64() - old.to_f64();
            *acc += d * d;
        }
        x += stride;
    }
}

/// Whether the interior rows can be swept 16 bytes at a time ([`update_strip`]): rows of
/// whole 16-byte chunks, both grids 16-byte aligned. Otherwise [`update_row`] goes element
/// by element.
#[inline(always)]
fn by_chunks<T: Real>(a: *const T, a_new: *mut T, nx: usize) -> bool {
    nx.is_multiple_of(T::LANES) && (a as usize | a_new as usize).is_multiple_of(16)
}

/// Updates local rows `row0..row0 + n` of chunk column `v` (the [`Real::LANES`] elements
/// from column `v * LANES`), walking down the rows with the three rows the stencil reads in
/// registers: per row one 16-byte load of the row below, the left and right neighbours as
/// single elements (their lines are in L1: the neighbouring threads load them), one 16-byte
/// store. So the grid is read from memory once and written once. The border columns (the
/// first element of chunk 0, the last of chunk `w - 1`) are stored with the value they have
/// in `a`, which is theirs in `a_new` too (fixed values, the same in both grids), and add 0
/// to the residual. Adds the squared changes to `acc` when `CHECK`.
///
/// `CHECK` is a constant so that a sweep without the residual has none of its arithmetic:
/// with a run-time flag LLVM computed the squared changes on every row and selected them
/// away (`FSEL`), where nvcc keeps two loops.
///
/// Each row's loads are typed ([`Real::Lanes`]), and with `by_three` (a constant after
/// inlining: [`PERSISTENT_BY_THREE`]) the rows go three at a time: the three register sets
/// take turns as the rows above, at and below, so no values move between registers, as in
/// nvcc's unrolled loop. One row at a time, rotating the rows through register moves, and
/// loaded as [`Chunk`](shmem_device::rma::Chunk)s, a row took 37 instructions (`f64`,
/// sm_90) against 23, and `step_f64` 1.63 M warp instructions at 1024² against 1.43 M
/// (nvcc's: 1.36 M); Rust/twin time there went from 1.018-1.022 to 1.013-1.016 (one H200,
/// 1 PE). Three at a time with `Chunk` loads, or four at a time, ptxas spilled at the step
/// kernels' 40 registers (BENCHMARKS.md, forty-first session).
///
/// # Safety
/// [`by_chunks`] holds, `w = nx / LANES`, `v < w`, `1 <= row0`, `row0 + n` is at most the
/// slab's last halo row, both grids hold the same border columns, and no other thread
/// writes the points this call writes or reads.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn update_strip<T: Real, const CHECK: bool>(
    a: *const T,
    a_new: *mut T,
    nx: u32,
    w: u32,
    row0: u32,
    n: u32,
    v: u32,
    by_three: bool,
    acc: &mut f64,
) {
    let (first, last) = (v == 0, v == w - 1);
    let (nx, at) = (nx as usize, |row: u32| {
        row as usize * nx as usize + v as usize * T::LANES
    });
    // Updates the row at `*src` into `*dst` from the rows `up`, `cur` (its own) and the row
    // below, which it loads and returns; moves both pointers down a row.
    let row =
        |up: &T::Lanes, cur: &T::Lanes, src: &mut *const T, dst: &mut *mut T, acc: &mut f64| {
            // SAFETY: `*src` and `*dst` are a row of this strip in `row0..row0 + n`: the row
            // below and the elements on either side of the chunk are in the buffer (before
            // chunk 0 the previous row's last element, after chunk `w - 1` the next row's
            // first: the caller's contract); 16-byte aligned (`by_chunks`), global memory (a
            // kernel's grids); the store is this call's points.
            unsafe {
                let (s, d, below) = (*src, *dst, (*src).add(nx));
                (*src, *dst) = (below, d.add(nx));
                let down = T::Lanes::load_global(below.cast::<T::Lanes>());
                let (left, right) = (*s.sub(1), *s.add(T::LANES));
                let mut out = *cur;
                for i in 0..T::LANES {
                    let l = if i == 0 { left } else { cur[i - 1] };
                    let x = if i + 1 == T::LANES { right } else { cur[i + 1] };
                    let val = (((l + x) + up[i]) + down[i]) * T::QUARTER;
                    let border = (i == 0 && first) || (i + 1 == T::LANES && last);
                    out[i] = if border { cur[i] } else { val };
                }
                out.store_global(d.cast::<T::Lanes>());
                if CHECK {
                    for i in 0..T::LANES {
                        let d = out[i].to_f64() - cur[i].to_f64();
                        *acc += d * d;
                    }
                }
                down
            }
        };
    // SAFETY: rows `row0 - 1` and `row0` hold this chunk (`row0 >= 1`, the caller's
    // contract), aligned global memory as above. (The row above is addressed from `a`,
    // not as `src - nx`: that offset held in two more registers made ptxas spill.)
    let (mut src, mut dst, mut up, mut cur) = unsafe {
        let src = a.add(at(row0));
        let up = T::Lanes::load_global(a.add(at(row0 - 1)).cast::<T::Lanes>());
        (
            src,
            a_new.add(at(row0)),
            up,
            T::Lanes::load_global(src.cast::<T::Lanes>()),
        )
    };
    let (s, d) = (&mut src, &mut dst);
    if !by_three {
        for _ in 0..n {
            let down = row(&up, &cur, s, d, acc);
            (up, cur) = (cur, down);
        }
        return;
    }
    let mut k = n;
    while k >= 3 {
        let d0 = row(&up, &cur, s, d, acc);
        let d1 = row(&cur, &d0, s, d, acc);
        let d2 = row(&d0, &d1, s, d, acc);
        (up, cur) = (d1, d2);
        k -= 3;
    }
    if k >= 1 {
        let d0 = row(&up, &cur, s, d, acc);
        if k >= 2 {
            row(&cur, &d0, s, d, acc);
        }
    }
}

/// How the interior blocks cut the `m` rows between the edge rows into work: bands of
/// whole rows, each band `w` strips of one chunk column (16 bytes wide), strip `i` in
/// band `i / w` at column `i % w`. Returns the band height and the number of strips: as
/// many bands as give each of the `threads` interior threads one strip (at least one
/// band), so the threads walk down their strips side by side and none waits on a second
/// round. `m > 0`, `w > 0`, `m + threads < 2^32`.
///
/// Rounded up by `(m + d - 1) / d` as the twin does: `div_ceil`'s remainder test and its
/// checks for zero took about 6 more instructions in every interior warp's prologue
/// (`ncu`, BENCHMARKS.md, forty-first session).
#[inline(always)]
#[allow(clippy::manual_div_ceil, reason = "measured: fewer instructions")]
pub fn strips(m: u32, w: u32, threads: u32) -> (u32, u32) {
    let bands = (threads / w).max(1);
    let height = (m + bands - 1) / bands;
    (height, (m + height - 1) / height * w)
}

/// The symmetric buffers of a solve.
#[derive(Clone, Copy)]
struct Bufs<T> {
    a: Sym<T>,
    a_new: Sym<T>,
    sync: SymSlice<u64>,
    work: SymSlice<u32>,
    stats: SymSlice<f64>,
    norms: SymSlice<f64>,
}

/// [`iterate`]'s `ROLE`: the block decides at run time whether it is an edge block.
const ANY: u8 = 0;
/// [`iterate`]'s `ROLE`: an edge block of a persistent loop that decides its direction at
/// run time (block 0 of a one-row slab sends both ways; on sm_100 blocks 0 and 1), its
/// inputs through [`hint::opaque`] ([`ONE_WAY_LOOPS`]).
const EDGE: u8 = 1;
/// [`iterate`]'s `ROLE`: the caller knows this is not an edge block.
const INTERIOR: u8 = 2;
/// [`iterate`]'s `ROLE`: block 0 of a slab of at least 2 rows: the first row, sent up.
const TOP: u8 = 3;
/// [`iterate`]'s `ROLE`: block 1 of a slab of at least 2 rows: the last row, sent down.
const BOTTOM: u8 = 4;

/// Whether the persistent kernels' blocks 0 and 1 run loops of one direction each
/// ([`TOP`], [`BOTTOM`]) rather than the [`EDGE`] loop.
///
/// LLVM hoists the put's addresses out of an edge block's loop and keeps them in registers
/// for the loop's whole life. A loop that sends one way fits them in its 64 registers on
/// sm_80 and sm_90, and is the faster (1024² at 2 PEs under MPS, BENCHMARKS.md). A loop
/// that may send both ways spills them (20-24 bytes on sm_90), so [`EDGE`] takes the slab
/// and the signal array through [`hint::opaque`] each iteration and computes the addresses
/// where they are used: no spills anywhere. On sm_100 the one-way loops spill 20-28 bytes
/// (12 with `opaque`), so there blocks 0 and 1 run [`EDGE`].
const ONE_WAY_LOOPS: bool = !cfg!(all(target_arch = "nvptx64", target_feature = "sm_100"));

/// Whether the persistent kernels sweep their strips three rows at a time, as the
/// per-iteration kernels do ([`update_strip`]). On sm_90 that measured as fast as the
/// `Chunk` rows a row at a time or up to 1 % faster (H200s, 1 PE, 1024²-16384²), and a row
/// at a time with typed loads, which LLVM unrolled by two, 3 % slower at 1024² `f32`
/// (BENCHMARKS.md, forty-first session). On sm_100 three at a time spilled 4 bytes at their
/// 64 registers, so there they go a row at a time.
const PERSISTENT_BY_THREE: bool = !cfg!(all(target_arch = "nvptx64", target_feature = "sm_100"));

/// Whether this block updates and sends an edge row (module documentation).
#[inline(always)]
fn is_edge_block(s: Slab) -> bool {
    let blk = block_idx_x();
    blk == 0 || (blk == 1 && s.rows >= 2)
}

/// One iteration over the whole slab by the whole grid; returns this thread's residual part.
/// `STEP`: in the per-iteration kernel (whose edge rows go [`EDGE_POINTS`] a round and
/// interior rows three at a time, [`update_strip`]), not a persistent loop.
///
/// # Safety
/// The kernels' contract; every block of the grid calls it with the same arguments.
#[inline(always)]
unsafe fn iterate<T: Real, const ROLE: u8, const STEP: bool>(
    b: &Bufs<T>,
    s: Slab,
    epoch: u64,
    check: bool,
) -> f64 {
    let (blk, nblk) = (block_idx_x() as usize, grid_dim_x() as usize);
    let (tid, bs) = (thread_idx_x() as usize, block_dim_x() as usize);
    let (nx, rows) = (s.nx as usize, s.rows as usize);
    let (a, a_new) = (b.a.as_ptr().cast_const(), b.a_new.as_ptr());
    let mut acc = 0.0f64;
    let edge = match ROLE {
        EDGE | TOP | BOTTOM => true,
        INTERIOR => false,
        _ => is_edge_block(s),
    };
    if edge {
        let (sync, s) = if ROLE == EDGE {
            (hint::opaque(b.sync.as_ptr()), s.opaque())
        } else {
            (b.sync.as_ptr(), s)
        };
        // SAFETY: the caller's contract; an edge block, of this `ROLE`.
        acc = unsafe { edge_block::<T, ROLE, STEP>(a, a_new, sync, s, epoch, check) };
    } else if blk >= 2 && rows > 2 {
        // (Block 1 of a one-row slab has nothing to do: it is neither an edge block nor
        // an interior one. The CPU simulator found `blk - 2` underflowing here.)
        if by_chunks(a, a_new, nx) {
            let w = (nx / T::LANES) as u32;
            // SAFETY: `nx >= 3` (the kernels' contract) and `by_chunks`: a chunk at least.
            // (Told to LLVM so that the divisions by `w` carry no check for zero.)
            unsafe { core::hint::assert_unchecked(w > 0) };
            let threads = ((nblk - 2) * bs) as u32;
            let (height, count) = strips(rows as u32 - 2, w, threads);
            let mut i = ((blk - 2) * bs + tid) as u32;
            while i < count {
                let row0 = 2 + (i / w) * height;
                let n = height.min(rows as u32 - row0);
                // SAFETY: rows `row0..row0 + n` are in `2..rows`, interior rows of the slab;
                // strip `i` is this thread's alone.
                unsafe {
                    let (nx, v, by_three) = (s.nx, i % w, STEP || PERSISTENT_BY_THREE);
                    if check {
                        update_strip::<T, true>(a, a_new, nx, w, row0, n, v, by_three, &mut acc)
                    } else {
                        update_strip::<T, false>(a, a_new, nx, w, row0, n, v, by_three, &mut acc)
                    }
                };
                i += threads;
            }
        } else {
            let mut row = 2 + (blk - 2);
            while row < rows {
                // SAFETY: `2 <= row < rows`: an interior row of the slab, this block's.
                unsafe {
                    update_row::<T, 1>(
                        true, a, a_new, nx, row, tid as u32, bs as u32, check, &mut acc,
                    )
                };
                row += nblk - 2;
            }
        }
    }
    acc
}

/// The edge block's part of an iteration (block 0: the first row, block 1: the last):
/// wait for the neighbours' halos, update the row, send it with its signal. `ROLE`
/// [`TOP`] or [`BOTTOM`] fixes the block's direction at compile time (the persistent
/// loops), any other decides from the block index.
///
/// # Safety
/// As [`iterate`], on block 0 or 1 (with at least 2 rows for block 1, and `ROLE` matching
/// the block); `sync` is the 3-word symmetric signal array.
#[inline(always)]
unsafe fn edge_block<T: Real, const ROLE: u8, const STEP: bool>(
    a: *const T,
    a_new: *mut T,
    sync: *mut u64,
    s: Slab,
    epoch: u64,
    check: bool,
) -> f64 {
    let blk = block_idx_x() as usize;
    let (tid, bs) = (thread_idx_x() as usize, block_dim_x() as usize);
    let (nx, rows) = (s.nx as usize, s.rows as usize);
    // SAFETY: the caller's contract: 3 symmetric words.
    let sync = unsafe { SymSlice::from_raw_parts(sync, 3) };
    let mut acc = 0.0f64;
    // An edge block: the first row (block 0) or the last (block 1, or block 0 when the
    // slab has one row).
    let (first, last) = match ROLE {
        TOP => (true, false),
        BOTTOM => (false, true),
        _ => (blk == 0, blk == 1 || rows == 1),
    };
    let row = if first { 1 } else { rows };
    let to_top = first && s.top_pe >= 0;
    let to_bottom = last && s.bottom_pe >= 0;
    if tid == 0 {
        // SAFETY: `sync` is symmetric with 3 words; the neighbours set these words.
        unsafe {
            if to_top {
                signal_wait_until(sync.at(0), Cmp::Ge, epoch);
            }
            if to_bottom {
                signal_wait_until(sync.at(1), Cmp::Ge, epoch);
            }
        }
    }
    sync_threads();
    // SAFETY: `row` is in `1..=rows`; this block alone writes it.
    unsafe {
        let (tid, bs) = (tid as u32, bs as u32);
        if STEP {
            update_row::<T, EDGE_POINTS>(true, a, a_new, nx, row, tid, bs, check, &mut acc)
        } else {
            update_row::<T, 1>(false, a, a_new, nx, row, tid, bs, check, &mut acc)
        }
    };
    // No barrier between the row's update and its send: a block-scope `put_signal` meets
    // the block on entry (`shmem_device::scope`), so it sends what every thread wrote. With
    // a `sync_threads()` of its own here (and `__syncthreads()` in the twin), an iteration
    // at 1024² took 0.2-1.1 % longer on two H200s, the twin's 1.8-3.6 % (BENCHMARKS.md,
    // fortieth session).
    // SAFETY: the neighbours are valid PEs with the same buffers, whose halo rows (row 0,
    // row `top_rows + 1`) are in bounds; those rows are theirs to receive (module
    // documentation), `row` is this block's own, and the whole block calls.
    unsafe {
        let src = DeviceSlice::from_raw_parts(a_new.add(row * nx), nx);
        if to_top {
            let halo = a_new.add((s.top_rows as usize + 1) * nx);
            let halo = SymSlice::from_raw_parts(halo, nx);
            put_signal(
                Block,
                halo,
                src,
                sync.at(1),
                epoch + 1,
                SignalOp::Set,
                s.top_pe,
            );
        }
        if to_bottom {
            let halo = SymSlice::from_raw_parts(a_new, nx);
            put_signal(
                Block,
                halo,
                src,
                sync.at(0),
                epoch + 1,
                SignalOp::Set,
                s.bottom_pe,
            );
        }
    }
    acc
}

/// Adds the block's residual parts to `stats[0]`; the last block of the grid to do so
/// exchanges the PE's sum with the other PEs (module documentation) and writes the total to
/// `stats[1 + check]`.
///
/// # Safety
/// Every thread of every block calls it once per check, with full warps.
#[inline(always)]
unsafe fn finish_check(b: &Bufs<f64>, s: Slab, check: usize, acc: f64) {
    let sum = warp_sum(acc);
    if lane_id() == 0 {
        // SAFETY: `stats[0]` is this PE's accumulator, only touched atomically here.
        unsafe { scoped::add_release(Gpu, b.stats.at(0), sum) };
    }
    sync_threads();
    if thread_idx_x() != 0 {
        return;
    }
    let nblk = grid_dim_x();
    // SAFETY: `work[1]` counts the blocks done with this check; only touched atomically.
    let done = unsafe { scoped::fetch_add(Gpu, b.work.at(1), 1u32) };
    if done + 1 != nblk {
        return;
    }
    // The last block: every other block's additions happened before its increment.
    let (me, n) = (my_pe() as usize, s.n_pes as usize);
    // SAFETY: this thread alone touches `stats[0]` and `work[1]` until the next check, which
    // is after the next launch or grid barrier; `norms` has `n` slots per check, of which
    // slot `me` is written only by this PE; `sync[2]` only counts arrivals.
    unsafe {
        let local = scoped::load_acquire(Gpu, b.stats.at(0));
        scoped::store_relaxed(Gpu, b.stats.at(0), 0.0);
        scoped::store_relaxed(Gpu, b.work.at(1), 0u32);
        let slot = b.norms.at(check * n + me);
        for pe in 0..n {
            p(slot, local, pe as i32);
        }
        fence();
        for pe in 0..n {
            signal_op(b.sync.at(2), 1, SignalOp::Add, pe as i32);
        }
        signal_wait_until(b.sync.at(2), Cmp::Ge, ((check + 1) * n) as u64);
        let mut total = 0.0f64;
        for pe in 0..n {
            total += b.norms.at(check * n + pe).read_volatile();
        }
        b.stats.write(1 + check, total);
    }
}

/// One iteration (the per-iteration variant).
///
/// # Safety
/// The kernels' contract: see [`step_f32()`].
#[inline(always)]
unsafe fn step<T: Real>(b: Bufs<T>, s: Slab, epoch: u64, check: i32) {
    // Blocks 0 and 1 of a slab of at least 2 rows know their direction at compile time, as
    // in the persistent kernels: one put site each, no test of the direction (1-1.5 % of an
    // iteration on four H200s, about 0.5 % on two; BENCHMARKS.md).
    let check_now = check >= 0;
    // SAFETY: the kernels' contract; the role matches the block.
    let acc = unsafe {
        match (block_idx_x(), s.rows >= 2) {
            (0, true) => iterate::<T, TOP, true>(&b, s, epoch, check_now),
            (1, true) => iterate::<T, BOTTOM, true>(&b, s, epoch, check_now),
            _ => iterate::<T, ANY, true>(&b, s, epoch, check_now),
        }
    };
    if check >= 0 {
        // SAFETY: every thread reaches this with the same `check`.
        unsafe { finish_check(&b.f64_view(), s, check as usize, acc) };
    }
}

/// All `iters` iterations, with a grid barrier between them (the persistent variant).
///
/// # Safety
/// The kernels' contract: see [`persistent_f32()`].
#[inline(always)]
unsafe fn persistent<T: Real>(b: Bufs<T>, s: Slab, iters: u32, check_every: u32) {
    // Each kind of block runs a loop of its own: in one loop the edge rows' waits and puts
    // and the interior rows' stencil were live together and spilled (80 to 124 bytes at
    // the 64 registers of two 512-thread blocks per SM). The edge row is inline in its
    // loop: as a call (no spills, a 24-byte frame) it cost 0.3-0.5 us an iteration at
    // 1024² under MPS (1 us in the twin, BENCHMARKS.md).
    // SAFETY: the kernels' contract; the role matches the block.
    unsafe {
        match (block_idx_x(), s.rows >= 2) {
            (0, true) if ONE_WAY_LOOPS => persistent_loop::<T, TOP>(b, s, iters, check_every),
            (1, true) if ONE_WAY_LOOPS => persistent_loop::<T, BOTTOM>(b, s, iters, check_every),
            _ if is_edge_block(s) => persistent_loop::<T, EDGE>(b, s, iters, check_every),
            _ => persistent_loop::<T, INTERIOR>(b, s, iters, check_every),
        }
    }
}

/// [`persistent`]'s loop over the iterations, for blocks of one `ROLE`.
///
/// # Safety
/// As [`persistent`]; `ROLE` is this block's.
#[inline(always)]
unsafe fn persistent_loop<T: Real, const ROLE: u8>(
    b: Bufs<T>,
    s: Slab,
    iters: u32,
    check_every: u32,
) {
    let mut check = 0usize;
    for it in 0..iters {
        // Chosen afresh from the parameters each iteration rather than swapped: a pointer
        // carried around the loop loses LLVM's knowledge that it is global (generic loads).
        let bufs = if it % 2 == 0 {
            b
        } else {
            Bufs {
                a: b.a_new,
                a_new: b.a,
                ..b
            }
        };
        let checking = check_every > 0 && (it + 1) % check_every == 0;
        // SAFETY: the kernels' contract; the barrier below separates iterations.
        let acc = unsafe { iterate::<T, ROLE, false>(&bufs, s, it as u64, checking) };
        if checking {
            // SAFETY: every thread reaches this in the same iteration.
            unsafe { finish_check(&bufs.f64_view(), s, check, acc) };
            check += 1;
        }
        // SAFETY: cooperative launch, every block runs every iteration.
        unsafe { scoped::grid_barrier(bufs.work.at(0), it + 1) };
    }
}

impl<T> Bufs<T> {
    /// The same buffers with the field type erased (the residual code needs only the rest).
    #[inline(always)]
    fn f64_view(&self) -> Bufs<f64> {
        // SAFETY: `a` and `a_new` are never dereferenced through the view.
        unsafe {
            Bufs {
                a: self.a.cast(),
                a_new: self.a_new.cast(),
                sync: self.sync,
                work: self.work,
                stats: self.stats,
                norms: self.norms,
            }
        }
    }
}

macro_rules! kernels {
    ($t:ty, $step:ident, $persistent:ident) => {
        #[doc = concat!("One Jacobi iteration on `", stringify!($t), "` from `a` into `a_new`, at `epoch`.")]
        ///
        /// `check >= 0` also computes the residual into `stats[1 + check]`.
        ///
        /// # Safety
        /// Every PE launches it, with the same `epoch` and `check`, grid of at least 3 blocks
        /// whose block size is a multiple of 32, co-resident (cooperative launch). `a` and
        /// `a_new` are symmetric `(max_rows + 2) * nx` buffers laid out as in the module
        /// documentation with `slab` this PE's part from [`crate::partition`] of a grid of
        /// at least 3 × 3, holding the same values in the border columns (the sweep
        /// rewrites them); `sync` (3),
        /// `work` (2), `stats` (1 + checks) and `norms` (`n_pes * checks`) are symmetric,
        /// zeroed together with a barrier before epoch 0, and epochs go up by one per launch.
        #[shmem_kernel(max_threads = 512, min_blocks = 3)]
        pub unsafe fn $step(
            a: Sym<$t>,
            a_new: Sym<$t>,
            sync: SymSlice<u64>,
            work: SymSlice<u32>,
            stats: SymSlice<f64>,
            norms: SymSlice<f64>,
            slab: Slab,
            epoch: u64,
            check: i32,
        ) {
            let b = Bufs { a, a_new, sync, work, stats, norms };
            // SAFETY: this kernel's contract.
            unsafe { step(b, slab, epoch, check) }
        }

        #[doc = concat!("`iters` Jacobi iterations on `", stringify!($t), "` in one launch, starting from `a`.")]
        ///
        /// Iteration `i` writes into `a` when `i` is odd, `a_new` when even (so the result is
        /// in `a_new` when `iters` is odd). With `check_every > 0`, every `check_every`-th
        /// iteration writes a residual to `stats[1 + k]`, `k = 0, 1, ...`.
        ///
        /// # Safety
        /// As [`step_f32()`], with epochs starting at 0 for this launch, and `work` zeroed
        /// before it (the grid barrier counts in `work[0]`).
        #[shmem_kernel(max_threads = 512, min_blocks = 2)]
        pub unsafe fn $persistent(
            a: Sym<$t>,
            a_new: Sym<$t>,
            sync: SymSlice<u64>,
            work: SymSlice<u32>,
            stats: SymSlice<f64>,
            norms: SymSlice<f64>,
            slab: Slab,
            iters: u32,
            check_every: u32,
        ) {
            let b = Bufs { a, a_new, sync, work, stats, norms };
            // SAFETY: this kernel's contract.
            unsafe { persistent(b, slab, iters, check_every) }
        }
    };
}

kernels!(f32, step_f32, persistent_f32);
kernels!(f64, step_f64, persistent_f64);
