//! The MoE kernels: [`moe_layout()`], the dispatch ([`moe_dispatch()`],
//! [`moe_dispatch_throughput()`], [`moe_dispatch_fp8()`]: a kernel per [`DispatchPath`], the
//! `bf16` ones with register kernels beside them, [`Shape::dispatch_by_registers`]),
//! [`moe_experts()`], [`moe_combine()`]; and for the front ([`crate::host::front`]),
//! [`moe_stage()`] and [`moe_gather()`]. The dispatch and combine kernels come twice: as
//! named, for any PEs ([`Probed`]), and `…_mapped`, for where every PE's memory is mapped
//! here ([`Mapped`], [`Reach`]), which the host launches there ([`Shape::mapped`]).
//!
//! # Layout
//! With `n` PEs, `T` tokens per PE, `H` hidden (a multiple of 8), `E` experts, `K` choices
//! per token and `L = E / n` experts per PE (every buffer in [`Bufs`] is symmetric):
//!
//! - a token goes to PE `d` when any of its `K` experts is in `d * L .. (d + 1) * L`; it is
//!   written there once, as row `j` of the region of its source `s`: received row
//!   `r = s * T + j` of `recv_x` (`n × T × H`), with its source index in `recv_src[r]`, its
//!   weights in `recv_w[r][k]` and, for each choice `k` whose expert is on `d`, the *pair*
//!   index in `recv_pair[r][k]` (-1 for other PEs' experts and dropped pairs); `recv_count[s]`
//!   is the number of rows from `s`. In throughput mode `j` counts the tokens sent there, so
//!   the rows are packed below the count; in low-latency mode `j = t`, the token's own index,
//!   and a row from `s` whose token did not come holds source index -1;
//! - a pair (token, local expert) has one slot of `expert_rows` (holding the received row
//!   `r`) and one output row of `expert_y`. The pairs of local expert `l` from source `s`
//!   are `expert_offset[l * n + s] ..` `+ expert_count[l * n + s]`: per local expert, the
//!   tokens, and through `recv_src`, the way back to their source;
//! - on the sender, `send_slot[t][d]` is `j` (or -1) and `send_pair[t][k]` the pair index on
//!   the expert's PE (-1 dropped, -2 no expert).
//!
//! # Modes
//! - **Low latency** ([`MODE_LOW_LATENCY`]): one kernel. A row's slot is its token's index and
//!   pairs take slots with atomic adds on the *sender's* counters, so nothing waits before
//!   sending, and the rows wait for no atomic. Pairs of `(l, s)` have
//!   fixed slots `(l * n + s) * C ..` with `C = capacity`; a pair beyond `C` is dropped and
//!   counted in `dropped`. Each receiver reads the counts from the senders' counters once
//!   every block has arrived (Completion). From sm_90 up, given its shared memory
//!   ([`Shape::dispatch_shared_bytes`]), a block's warp 0 moves its rows by bulk copies
//!   through shared memory, finding their PEs from the routing, while the other warps send
//!   the metadata. Else a block takes two tokens at a time: its threads load the first row
//!   into registers while the atomics of the two tokens' metadata are in flight, then store
//!   both rows into every PE they go to.
//! - **Throughput** ([`MODE_THROUGHPUT`]): [`moe_layout()`] first computes, with warp ballots
//!   over the tokens, every token's row slot per destination and every pair's rank among its
//!   expert's pairs from this PE (in two parts: the rank within its segment of tokens, and
//!   the expert's pairs in the earlier segments, [`seg_prefix_at`]), and exchanges the
//!   per-expert counts between all PEs (a `put_signal` of `E + n` words to each other PE).
//!   Every PE then knows every offset: the pairs of local expert `l` are packed (sources in
//!   order, tokens in order), at most `capacity` per expert, the rest dropped and counted.
//!   [`moe_dispatch_throughput()`] then copies as the low-latency `bf16` dispatch does, a
//!   block per token (from sm_90 its warp 0 moving the rows by bulk copies into the slots the
//!   layout gave them), without atomics. The host launches the throughput dispatch as a
//!   programmatic dependent of the layout ([`shmem_device::pdl`]; from sm_90): every layout
//!   block lets it start at once.
//!   Where the dispatch's blocks take shared memory (`bf16`) and the layout's grid covers the
//!   SMs, the layout runs at the SMs' largest shared-memory carveout, so that the dispatch's
//!   blocks can start beside the layout's (`shmem_host::LaunchConfig::with_shared_carveout`).
//!   The layout scans the destinations' columns first and counts them done in
//!   `signals[SIG_SLOTS]`; the dispatch's rows wait for that count (`wait_slots`), after
//!   their first bulk copies into shared memory are under way, and only its metadata waits
//!   for the whole layout (`pdl::wait`).
//! - With `e4m3` tokens ([`DTYPE_FP8`]) the dispatch quantises the rows in registers and
//!   stores the `e4m3` values straight into every PE they go to. In low-latency mode the
//!   grid's blocks are split by role: one in [`ROLE_META_SHARE`] sends the metadata, the
//!   others' warps take the rows 1024 values at a time, waiting for none of it. In
//!   throughput mode too: the last `n + 1` in [`TP_META_SHARE`] at `n` PEs send the
//!   metadata once the layout is out; the others' warps take the rows 1024 values at a time,
//!   their first loads issued before the rows' slots are waited for (once the layout's
//!   destination columns are done, as the `bf16` rows).
//!
//! # Completion
//! A block's puts are complete before it signals: when every PE's memory is mapped (the
//! puts were stores), warp 0 fences after a barrier and its lane `d` signals PE `d`; else
//! every thread's own `quiet` comes first, and thread 0 signals (`arrive_block`). Every
//! block adds its share of its PE's arrival to the signal word of every PE, [`ARRIVAL`] a PE
//! a round whatever the grid size (`arrive`), and does not wait for the other blocks: the
//! signal words count up across rounds, and round `R` waits for `R * n * ARRIVAL`. In the
//! dispatch, block 0 waits; in low-latency mode it then reads from every source how many
//! rows and pairs it sent here (the source's cursors, which it resets for the next round).
//! The low-latency `bf16` dispatch by bulk copies, with several tokens a block and every PE
//! mapped, reads them earlier: each block's metadata warps arrive at `signals[SIG_RESERVED]`
//! once its cursors are final, and block 0's wait for those and read run while the rows
//! still move (`counts_early`, [`EARLY_COUNTS_TOKENS`]); that word waits for one round's
//! arrivals and goes back to zero each round.
//! A dispatch's rows and metadata for its own PE need no arrival: the kernels after it on
//! the stream see them. So only the blocks whose work block 0 reads back after its wait add
//! to their own PE's word (the blocks that take the cursors; in throughput mode, or with
//! the counts read early, block 0 alone, for all of them), and at one PE the other blocks
//! end without a barrier, fence or signal.
//! In the combine every block waits, then adds the returned sums.
//! (Measured on one H100 against a count of finished blocks whose last sent the signals:
//! 1.2–1.5 µs less a round for the combine and the throughput dispatch.)
//!
//! # Arithmetic
//! A received row's sum is `acc = acc + w_k * y_k` over its choices `k` in order, in `f32`
//! (no fused multiply-add, as in `cuda/moe.cu`), rounded to `bf16`; the token's PE adds the
//! sums of its destinations in PE order, in `f32`, starting from the first as it is (so a
//! token with one destination gets that sum's `bf16` unchanged), and rounds to `bf16`. The
//! CPU reference ([`crate::reference`]) does the same operations.
//!
//! The combine writes the sums of a PE's own tokens straight into its `out`, and the other
//! rows' into their sources' `comb_recv`; after the completion wait it adds a token's sums
//! where it has more than one destination (or none: zeros). With one PE, or with every
//! expert of a token on its own PE, the combine reads each expert output row once and
//! writes each token once: the memory traffic's floor.

use crate::{bf16, expert_scale};
use shmem_device::fp8::{bf16x2_amax, e4m3x4_from_f32, e4m3x4_to_f32};
use shmem_device::kernel::{KernelParam, ParamKind};
use shmem_device::prelude::*;
use shmem_device::rma::{Chunk, put_nbi_unmapped};
use shmem_device::scoped::{self, Gpu};
use shmem_device::types::RmaElem;

/// Runs `$body` with `$i` bound to each of the listed constants, written out rather than
/// looped: LLVM keeps an array indexed by a loop variable in local memory (measured: 1.75x
/// slower than CUDA C++'s `#pragma unroll`), and in registers when every index is a
/// constant.
macro_rules! unrolled {
    ($($n:literal)*; $i:ident => $body:block) => {{
        $({
            let $i: usize = $n;
            $body
        })*
    }};
}

/// The largest [`Shape::top_k`].
pub const MAX_TOP_K: usize = 16;

/// [`Shape::mode`]: one kernel, atomics, fixed slots.
pub const MODE_LOW_LATENCY: u32 = 0;
/// [`Shape::mode`]: a layout pass, then a packed layout.
pub const MODE_THROUGHPUT: u32 = 1;

/// [`Shape::dtype`]: the dispatch sends `bf16` tokens as they are.
pub const DTYPE_BF16: u32 = 0;
/// [`Shape::dtype`]: the dispatch sends tokens as `e4m3` with one `f32` scale per 128
/// values ([`crate::fp8`]), quantised on the fly.
pub const DTYPE_FP8: u32 = 1;

/// `work[LAYOUT_BARRIER]`, `work[LAYOUT_BARRIER + 1]`: the layout kernel's blocks that have
/// finished their units this launch, and its launches (the generation, whose successor
/// tags the launch's `scratch` words).
pub const LAYOUT_BARRIER: usize = 0;
/// Counter `ROW_CURSORS + d` of `work` (word `(ROW_CURSORS + d) * COUNTER_STRIDE`):
/// low-latency rows sent towards PE `d`; counter `ROW_CURSORS + n + e`: pair slots taken of
/// expert `e`.
pub const ROW_CURSORS: usize = 2;
/// Words from one counter of `work` to the next: each on a 128-byte line of its own. The
/// low-latency dispatch adds to its sender's counters `1 + K` times a token (the row count,
/// the pairs' slots); with the counters packed into three lines, those atomics contended for them.
/// Measured on one H100 at 4096 tokens, 1 PE: the twin's low-latency dispatch took 0.91
/// (`bf16`) and 0.90 (FP8) of its time with the counters packed (BENCHMARKS.md, nineteenth
/// session).
pub const COUNTER_STRIDE: usize = 32;
/// Words of `work`: the layout's barrier, then `n + E` counters (after the row cursors, one
/// pair cursor per expert), [`COUNTER_STRIDE`] words each.
pub const fn work_len(n_pes: u32, experts: u32) -> usize {
    (ROW_CURSORS + n_pes as usize + experts as usize) * COUNTER_STRIDE
}

/// Counter `i` of `work` ([`COUNTER_STRIDE`]).
#[inline(always)]
fn counter(b: Bufs, i: usize) -> Sym<u32> {
    b.work.wrapping_add(i * COUNTER_STRIDE)
}

/// Signal words: `signals[SIG_DISPATCH]` counts dispatch arrivals, `[SIG_COMBINE]` combine
/// arrivals, `[SIG_COUNTS]` the throughput layout's count rows, `[SIG_SLOTS]` the throughput
/// layout's units that have placed this PE's rows ([`slot_units`] a round).
pub const SIG_DISPATCH: usize = 0;
/// See [`SIG_DISPATCH`].
pub const SIG_COMBINE: usize = 1;
/// See [`SIG_DISPATCH`].
pub const SIG_COUNTS: usize = 2;
/// See [`SIG_DISPATCH`].
pub const SIG_SLOTS: usize = 3;
/// Low latency: arrivals of blocks whose pair slots and rows are counted on their PE's
/// cursors (`counts_early`, [`EARLY_COUNTS_TOKENS`]).
pub const SIG_RESERVED: usize = 4;
/// Words of [`Bufs::signals`].
pub const SIGNAL_WORDS: usize = 5;

/// The sizes, mode and round of a call; the same on every PE. The CUDA C++ kernels take the
/// same `struct`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Tokens per PE (`T`).
    pub tokens: u32,
    /// `bf16` values per token (`H`, a multiple of 8).
    pub hidden: u32,
    /// Experts (`E`, a multiple of `n_pes`).
    pub experts: u32,
    /// Choices per token (`K`, at most [`MAX_TOP_K`]).
    pub top_k: u32,
    /// PEs (`n`, at most 32).
    pub n_pes: u32,
    /// Pairs kept per (local expert, source) in low-latency mode, per local expert in
    /// throughput mode.
    pub capacity: u32,
    /// The call's round, from 1: the signal words wait for `round * n_pes`.
    pub round: u32,
    /// [`MODE_LOW_LATENCY`] or [`MODE_THROUGHPUT`].
    pub mode: u32,
    /// What the dispatch sends: [`DTYPE_BF16`] or [`DTYPE_FP8`] (then `hidden` is a
    /// multiple of 128). The combine sends `bf16` either way.
    pub dtype: u32,
    /// 1: the combine reads the expert rows with [`Chunk::load_global_once_if`] (not kept
    /// in L1); 0: with plain loads. The host sets it when the rows take at most
    /// [`READ_ONCE_L2S`] times the GPU's L2 cache ([`Shape::for_l2`]).
    pub read_once: u32,
    /// 1: every PE's memory is mapped here (`nvshmem_ptr` gives every PE's address), and the
    /// host launches the kernels for that, [`Mapped`]; 0: those that look each PE up,
    /// [`Probed`] ([`Shape::mapped`]). The kernels do not read it.
    pub mapped: u32,
}

/// Up to how many L2 caches' worth of expert rows ([`Shape::expert_row_bytes`]) the combine
/// reads them with [`Chunk::load_global_once_if`]. Measured on one H100 (50 MiB of L2; 64
/// experts, hidden 7168, top-8, 1 PE, held stream; BENCHMARKS.md, twenty-third session): a
/// round (dispatch and combine) with those loads took 0.97-0.99 of the time with plain ones
/// at 128 tokens (0.3 L2s of rows), 0.88 at 512 (1.1), 0.94 at 1024 (2.2), 0.99 at 2048
/// (4.5) and 1.02 at 4096 (9.0), where the combine took the same time and the dispatch
/// after it 4 µs more.
pub const READ_ONCE_L2S: u64 = 3;

/// How a kernel reaches the other PEs' memory, fixed when it was compiled: the dispatch and
/// combine kernels come in two sets. [`Probed`] kernels ask NVSHMEM for each PE's address
/// and send through NVSHMEM's puts and signals where it has none (another node, no P2P).
/// [`Mapped`] kernels (named `…_mapped`), for where every PE's memory is mapped here, have
/// no code for that: their metadata goes by stores, their `quiet` is a fence. The
/// low-latency `bf16` dispatch by bulk copies is 2,432 instructions and 48 registers on
/// sm_90 instead of 5,440 and 64; on one H200 at 1 PE, held, its round took 0.92 of the
/// [`Probed`] kernel's time at 128 tokens and 0.99 at 4096 (the twin, changed alike, 0.95
/// and 0.995; BENCHMARKS.md, seventy-ninth session). The host picks the set once, from
/// whether `nvshmem_ptr` maps every PE ([`Shape::mapped`]).
pub trait Reach: Copy {
    /// Every PE's memory is mapped here.
    const ALL: bool;
    /// `pe`'s copy of `sym`, mapped here, or `None` (for [`Mapped`], never).
    fn ptr<T>(self, sym: Sym<T>, pe: i32) -> Option<PeerPtr<T>>;
    /// `value` into `pe`'s copy of `sym`: NVSHMEM's `p`, for [`Mapped`] a store through the
    /// peer address (what `p` does there, without its path through the proxy).
    ///
    /// # Safety
    /// As [`p`]: `sym` is symmetric, `pe` a PE; nothing else writes that word meanwhile.
    unsafe fn p<T: RmaElem>(self, sym: Sym<T>, value: T, pe: i32);
    /// Completes this thread's puts and stores to other PEs before what follows it:
    /// NVSHMEM's `quiet`, for [`Mapped`] (where they were all stores) a fence at system
    /// scope (what `quiet` does there, without its path through the proxy).
    fn quiet(self);
}

/// [`Reach`] for kernels that look each PE up ([`shmem_device::mem::ptr`]).
#[derive(Clone, Copy, Debug)]
pub struct Probed;

impl Reach for Probed {
    const ALL: bool = false;
    #[inline(always)]
    fn ptr<T>(self, sym: Sym<T>, pe: i32) -> Option<PeerPtr<T>> {
        ptr(sym, pe)
    }
    #[inline(always)]
    unsafe fn p<T: RmaElem>(self, sym: Sym<T>, value: T, pe: i32) {
        // SAFETY: the caller's contract.
        unsafe { p(sym, value, pe) }
    }
    #[inline(always)]
    fn quiet(self) {
        quiet()
    }
}

/// [`Reach`] for kernels launched only where every PE's memory is mapped here
/// ([`Shape::mapped`]): their contract, which they assume ([`shmem_device::hint::assume`];
/// the simulator checks it).
#[derive(Clone, Copy, Debug)]
pub struct Mapped;

impl Reach for Mapped {
    const ALL: bool = true;
    #[inline(always)]
    fn ptr<T>(self, sym: Sym<T>, pe: i32) -> Option<PeerPtr<T>> {
        let p = ptr(sym, pe);
        // SAFETY: the kernel's contract: every PE's memory is mapped here. Assumed, not
        // checked: a check here cost the low-latency `bf16` round 1-2 % at 4096 tokens
        // ([`shmem_device::hint::assume`]); the simulator checks it.
        unsafe {
            shmem_device::hint::assume(
                p.is_some(),
                "a `_mapped` MoE kernel was launched where some PE's memory is not mapped here",
            )
        };
        p
    }
    #[inline(always)]
    unsafe fn p<T: RmaElem>(self, sym: Sym<T>, value: T, pe: i32) {
        if let Some(q) = self.ptr(sym, pe) {
            // SAFETY: `q` is `pe`'s copy of `sym` (the caller's contract: a word that nothing
            // else writes meanwhile).
            unsafe { q.as_ptr().write(value) }
        }
    }
    #[inline(always)]
    fn quiet(self) {
        scoped::fence_acq_rel(scoped::Sys)
    }
}

/// Which dispatch kernel a shape takes ([`Shape::dispatch_path`]). Each path is a kernel of
/// its own, so that its own registers set its occupancy: from sm_90 each fits in 64
/// registers, four blocks of 256 threads an SM, and below, where some need 72 or 80, each
/// takes what it needs. (Measured on one H100 at 4096 tokens, on a held stream,
/// against one kernel for all three at 80 registers: throughput `bf16` 4 % faster;
/// BENCHMARKS.md, seventeenth session. The throughput FP8 dispatch in a kernel of its own at
/// 64 registers: 0.95 of the time of the FP8 kernel of both modes at 80 on one H200;
/// forty-eighth session.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchPath {
    /// `bf16`, low-latency mode: [`moe_dispatch()`] (or [`moe_dispatch_registers()`]:
    /// [`Shape::dispatch_by_registers`]).
    LowLatency,
    /// `bf16`, throughput mode: [`moe_dispatch_throughput()`] (or
    /// [`moe_dispatch_throughput_registers()`]).
    Throughput,
    /// FP8, low-latency mode: [`moe_dispatch_fp8()`].
    Fp8LowLatency,
    /// FP8, throughput mode: [`moe_dispatch_fp8_throughput()`].
    Fp8Throughput,
}

impl DispatchPath {
    /// Whether the path sends FP8 rows.
    pub fn fp8(self) -> bool {
        matches!(
            self,
            DispatchPath::Fp8LowLatency | DispatchPath::Fp8Throughput
        )
    }

    /// The fewest blocks a grid of its kernel may have: the FP8 dispatches split their blocks
    /// by role, some sending the metadata while the others copy ([`moe_dispatch_fp8()`],
    /// [`moe_dispatch_fp8_throughput()`]).
    pub fn min_blocks(self) -> u32 {
        match self {
            DispatchPath::Fp8LowLatency | DispatchPath::Fp8Throughput => 2,
            _ => 1,
        }
    }
}

impl Shape {
    /// Tells the compiler what the host checked of every launch's shape (`Options::check`
    /// in the host driver): at least one PE, token, choice and pair of capacity, `hidden` a
    /// positive multiple of 8, the experts a positive multiple of the PEs; its divisions by
    /// these then take no test for zero (and no panic path), as the twin's. The low-latency
    /// FP8 dispatch calls it first (in `dispatch`): on one H200 at 1 PE, held, four calls in
    /// each slot order, its Rust/twin ratio went from 1.021 / 1.017 / 1.005 to 0.986 / 0.988 /
    /// 1.004 at 128 / 512 / 4096 tokens (Rust 7.04 / 9.68 / 26.00 µs to 6.82 / 9.41 / 25.81;
    /// `moe_dispatch_fp8_mapped` 2,064 instructions to 1,984 on sm_90). Every kernel calling it
    /// cost the low-latency `bf16` dispatch 2 % at 512 and 4096 tokens (ptxas gave it 56
    /// registers instead of 48) and the throughput `bf16` one 5 % at 4096, and left the
    /// throughput FP8 one as it was (BENCHMARKS.md, eightieth session): they do not.
    ///
    /// # Safety
    /// The shape is one the host accepted (the simulator checks it).
    #[inline(always)]
    pub unsafe fn assume_checked(self) {
        let ok = self.n_pes >= 1
            && self.tokens >= 1
            && self.top_k >= 1
            && self.capacity >= 1
            && self.hidden >= 8
            && self.experts >= self.n_pes;
        // SAFETY: the caller's contract.
        unsafe {
            shmem_device::hint::assume(
                ok,
                "a MoE kernel was launched with a shape the host refuses",
            )
        }
    }

    /// Whether the dispatch sends FP8.
    pub fn fp8(&self) -> bool {
        self.dtype == DTYPE_FP8
    }

    /// Bytes of expert rows the combine reads on a PE when every pair is kept: `T · K · H`
    /// `bf16` values (its tokens' share of every PE's pairs).
    pub fn expert_row_bytes(&self) -> u64 {
        u64::from(self.tokens) * u64::from(self.top_k) * u64::from(self.hidden) * 2
    }

    /// This shape with [`Shape::read_once`] set for a GPU with `l2_bytes` of L2 cache: when
    /// the expert rows take at most [`READ_ONCE_L2S`] of it.
    pub fn for_l2(self, l2_bytes: u64) -> Shape {
        let once = self.expert_row_bytes() <= READ_ONCE_L2S * l2_bytes;
        Shape {
            read_once: u32::from(once),
            ..self
        }
    }

    /// Whether the host launches this shape's [`Mapped`] kernels ([`Shape::mapped`]), else
    /// the [`Probed`] ones.
    pub fn mapped(&self) -> bool {
        self.mapped != 0
    }

    /// Whether a launch of this shape's dispatch in blocks of `threads` with `shared` bytes
    /// of dynamic shared memory takes the register kernel of its path
    /// ([`moe_dispatch_registers()`], [`moe_dispatch_throughput_registers()`]): the `bf16`
    /// kernels by bulk copies need more than one warp a block and
    /// [`Shape::dispatch_shared_bytes`]. The host and the simulator's tests launch the kernel
    /// this names; the kernels by bulk copies stop with a panic if launched otherwise.
    pub fn dispatch_by_registers(&self, threads: u32, shared: u32) -> bool {
        !self.fp8() && (threads <= 32 || shared < self.dispatch_shared_bytes())
    }

    /// The dispatch kernel this shape takes.
    pub fn dispatch_path(&self) -> DispatchPath {
        match (self.fp8(), self.mode == MODE_THROUGHPUT) {
            (false, false) => DispatchPath::LowLatency,
            (false, true) => DispatchPath::Throughput,
            (true, false) => DispatchPath::Fp8LowLatency,
            (true, true) => DispatchPath::Fp8Throughput,
        }
    }

    /// Bytes of dynamic shared memory the dispatch kernel of this shape is launched with:
    /// for the `bf16` dispatches, a line of barriers ([`BULK_HEADER`]), with at most
    /// [`RESERVE_EXPERTS`] experts the table of the pair slots the low-latency one reserves a
    /// block at a time, then the bulk copies' [`BULK_SLOTS`] slots of a piece of a row each;
    /// for the low-latency FP8 dispatch the line and the table of its metadata blocks'
    /// reserved pair slots ([`FP8_RESERVE_PAIRS`]), with at most [`RESERVE_EXPERTS`]
    /// experts; 0 for the throughput FP8 dispatch. Given fewer, a `bf16` dispatch takes its
    /// register kernel ([`Shape::dispatch_by_registers`]), as it does on a GPU without bulk
    /// copies, and the FP8 one takes an atomic a pair.
    pub fn dispatch_shared_bytes(&self) -> u32 {
        if !self.dispatch_path().fp8() {
            self.bulk_slots_offset() + BULK_SLOTS as u32 * self.bulk_slot_bytes()
        } else if self.mode != MODE_THROUGHPUT && self.experts <= RESERVE_EXPERTS {
            BULK_HEADER + (self.experts * 4 + FP8_RESERVE_PAIRS * 2).next_multiple_of(128)
        } else {
            0
        }
    }

    /// Where the bulk slots start in the dispatch's shared memory: after the barriers and
    /// the reserved pair slots' table (which starts at [`BULK_HEADER`]), on a line of their
    /// own.
    fn bulk_slots_offset(&self) -> u32 {
        let table = if self.experts <= RESERVE_EXPERTS {
            self.experts * 4 + RESERVE_PAIRS * 2
        } else {
            0
        };
        BULK_HEADER + table.next_multiple_of(128)
    }

    /// The bytes of a row that one bulk copy moves: the row, up to [`BULK_PIECE`].
    fn bulk_piece(&self) -> u32 {
        (self.hidden * 2).min(BULK_PIECE)
    }

    /// A bulk slot's bytes in shared memory: a piece, rounded up to 128-byte lines.
    fn bulk_slot_bytes(&self) -> u32 {
        self.bulk_piece().next_multiple_of(128)
    }

    /// `u16` units of a row as the dispatch sends it: `hidden` `bf16`, or an FP8 row
    /// ([`crate::fp8::row_bytes`]) in the first bytes of a received row.
    pub fn sent_row(&self) -> usize {
        if self.fp8() {
            crate::fp8::row_bytes(self.hidden as usize) / 2
        } else {
            self.hidden as usize
        }
    }

    /// Pair slots (and expert-output rows) per PE: `L · n · C` in low-latency mode (fixed
    /// slots per (expert, source)); in throughput mode what can arrive, `n · T · min(K, L)`,
    /// or `L · C` if smaller.
    pub fn pair_slots(&self) -> usize {
        let (n, l) = (self.n_pes as usize, (self.experts / self.n_pes) as usize);
        let cap = self.capacity as usize;
        if self.mode == MODE_LOW_LATENCY {
            l * n * cap
        } else {
            (l * cap).min(n * self.tokens as usize * (self.top_k as usize).min(l))
        }
    }
}

// SAFETY: `#[repr(C)]` of `u32`s with no padding: the same layout on the host and the GPU,
// and every bit pattern is a valid value.
unsafe impl KernelParam for Shape {
    const KIND: ParamKind = ParamKind::Scalar;
}

/// The one list of the buffers: each buffer's name, element type, length (from a shape's
/// [`Dims`]) and meaning. A buffer marked `as local` is only read or written by its own PE:
/// it is a [`DevicePtr`] in [`Bufs`], so that it may be any device memory (the caller's
/// tensors, through [`crate::host::front`]); the others are symmetric ([`Sym`]). Everything that needs the list is made from it by a
/// callback macro: [`Bufs`] (what the kernels take), [`Lens`] and [`Shape::lens`] here, the
/// host driver's allocations (`host.rs`), the simulator test's, and the check that the CUDA
/// C++ twin's `struct Bufs` (`cuda/moe.cu`) names the same fields in the same order
/// ([`BUFFER_NAMES`]).
#[macro_export]
macro_rules! moe_buffers {
    ($callback:ident) => {
        $callback! {
            /// `T × H` tokens.
            x: u16 = |d| d.t * d.h;
            /// `T × K` expert ids (-1: no expert), then [`MAX_TOP_K`] words of padding that
            /// the layout's scan reads past the last token (and ignores).
            topk: i32 = |d| d.t * d.k + MAX_TOP_K;
            /// `T × K` routing weights.
            weights: f32 = |d| d.t * d.k;
            /// `T × K`: each choice's pair index on its expert's PE (-1 dropped, -2 none).
            send_pair: i32 = |d| d.t * d.k;
            /// `T × n`: each token's row slot on each PE (-1: not sent there).
            send_slot: i32 = |d| d.t * d.n;
            /// [`work_len`] words: the layout's barrier and the counters ([`COUNTER_STRIDE`]).
            work: u32 = |d| d.work;
            /// Throughput: `n × (E + n)`: row `s` is PE `s`'s pairs per expert, then rows per PE.
            counts: u32 = |d| d.n * (d.e + d.n);
            /// Throughput: `2 × E`: the first pair index of this PE's pairs of expert `e`, and
            /// the end of expert `e`'s capacity.
            base: u32 = |d| 2 * d.e;
            /// Throughput: [`scratch_len`] words, the layout's hits per (column, chunk) in the
            /// low half, the launch's tag in the high half; then each expert's pairs before
            /// each segment ([`seg_prefix_at`]).
            scratch: u64 = |d| d.scratch;
            /// `n × T × H` received tokens (FP8: each row's first [`crate::fp8::row_bytes`] bytes).
            recv_x: u16 = |d| d.n * d.t * d.h;
            /// `n × T`: each received row's index on its source.
            recv_src: i32 = |d| d.n * d.t;
            /// `n × T × K`: each received row's pair per choice (-1: not here, or dropped).
            recv_pair: i32 = |d| d.n * d.t * d.k;
            /// `n × T × K`: each received row's weights.
            recv_w: f32 = |d| d.n * d.t * d.k;
            /// `n`: rows received from each PE.
            recv_count: u32 = |d| d.n;
            /// `L × n`: pairs kept per (local expert, source).
            expert_count: u32 = |d| d.l * d.n;
            /// `L × n`: first pair of each (local expert, source).
            expert_offset: u32 = |d| d.l * d.n;
            /// One per pair slot: the received row of the pair.
            expert_rows: i32 = |d| d.pairs;
            /// One `H` row per pair slot: the expert's output (local: any device memory).
            expert_y: u16 as local = |d| d.pairs * d.h;
            /// `n × T × H`: on a token's PE, the weighted sum from each other destination (its
            /// own PE's goes straight into `out`).
            comb_recv: u16 = |d| d.n * d.t * d.h;
            /// `n × T × H`: combine's rows staged for `put` when a peer is not mapped; in an FP8
            /// dispatch to such a peer, row `t` holds token `t` quantised (no combine runs
            /// meanwhile).
            comb_stage: u16 = |d| d.n * d.t * d.h;
            /// `T × H`: the combined tokens (local: any device memory).
            out: u16 as local = |d| d.t * d.h;
            /// [`SIGNAL_WORDS`] signal words (`SIG_*`).
            signals: u64 = |_| SIGNAL_WORDS;
            /// 1: pairs this PE's dispatches dropped for capacity, over all rounds.
            dropped: u32 = |_| 1;
        }
    };
}

/// The type of a buffer of [`moe_buffers!`] in [`Bufs`]: [`Sym`], or [`DevicePtr`] for a
/// buffer marked `as local`.
#[macro_export]
#[doc(hidden)]
macro_rules! buf_type {
    ($t:ty) => { ::shmem_device::Sym<$t> };
    ($t:ty, local) => { ::shmem_device::DevicePtr<$t> };
}

/// A shape's dimensions, as the buffer list's lengths use them (in elements).
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Tokens per PE.
    pub t: usize,
    /// Values per token.
    pub h: usize,
    /// Choices per token.
    pub k: usize,
    /// Experts.
    pub e: usize,
    /// PEs.
    pub n: usize,
    /// Experts per PE.
    pub l: usize,
    /// Pair slots per PE ([`Shape::pair_slots`]).
    pub pairs: usize,
    /// [`work_len`].
    pub work: usize,
    /// [`scratch_len`].
    pub scratch: usize,
}

impl Shape {
    /// The dimensions the buffer lengths are computed from.
    pub fn dims(&self) -> Dims {
        let n = self.n_pes as usize;
        Dims {
            t: self.tokens as usize,
            h: self.hidden as usize,
            k: self.top_k as usize,
            e: self.experts as usize,
            n,
            l: (self.experts / self.n_pes) as usize,
            pairs: self.pair_slots(),
            work: work_len(self.n_pes, self.experts),
            scratch: scratch_len(self.tokens, self.n_pes, self.experts),
        }
    }
}

/// Makes [`Bufs`], [`Lens`], [`Shape::lens`] and [`BUFFER_NAMES`] from the list.
macro_rules! define_bufs {
    ($($(#[$doc:meta])* $name:ident: $t:ty $(as $local:ident)? = $len:expr;)*) => {
        /// The symmetric buffers (module documentation), passed by value to every kernel; the
        /// CUDA C++ kernels take the same `struct` of pointers.
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct Bufs {
            $($(#[$doc])* pub $name: $crate::buf_type!($t $(, $local)?),)*
        }

        /// Element counts of the buffers of [`Bufs`], field by field ([`Shape::lens`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Lens {
            $($(#[$doc])* pub $name: usize,)*
        }

        /// The fields of [`Bufs`], in order.
        pub const BUFFER_NAMES: &[&str] = &[$(stringify!($name)),*];

        impl Shape {
            /// The length, in elements, of every buffer of [`Bufs`] for this shape (the host
            /// driver and the simulator tests allocate by it).
            pub fn lens(&self) -> Lens {
                let d = self.dims();
                Lens {
                    $($name: {
                        let f: fn(&Dims) -> usize = $len;
                        f(&d)
                    },)*
                }
            }
        }
    };
}
moe_buffers!(define_bufs);

/// Copies one call's inputs into the symmetric buffers and restarts the signal words: the
/// front's first step ([`crate::host::front`]).
///
/// # Safety
/// Shape and buffers as [`moe_dispatch()`]; `i.x` (unless null), `i.topk`, `i.weights`
/// point at `i.tokens` rows of this PE's device memory; the previous call's combine has
/// finished on this PE, and a barrier of every PE follows before the dispatch.
#[shmem_kernel]
pub unsafe fn moe_stage(b: Bufs, s: Shape, i: Stage) {
    // SAFETY: this kernel's contract.
    unsafe { stage(b, s, i) }
}

/// Writes the received tokens by local expert into the caller's memory: what the front's
/// dispatch returns ([`crate::host::front`]).
///
/// # Safety
/// After [`moe_dispatch()`] of the same round on this PE's stream; `g.x` holds
/// [`Shape::pair_slots`] rows of `hidden` values (`bf16`, or `e4m3` bytes in an FP8
/// dispatch), 16-byte aligned, in an FP8 dispatch `g.scales` as many rows of `hidden / 128`
/// `f32`, and `g.layout` `2 × L × n` words, in this PE's device memory.
#[shmem_kernel]
pub unsafe fn moe_gather(b: Bufs, s: Shape, g: Gather) {
    // SAFETY: this kernel's contract.
    unsafe { gather(b, s, g) }
}

// SAFETY: `#[repr(C)]` of pointer-sized handles with no padding: the same layout on the host
// and the GPU (the kernels' contract says what the pointers must be).
unsafe impl KernelParam for Bufs {
    const KIND: ParamKind = ParamKind::Scalar;
}

/// This thread's warp in its block. The MoE kernels run in 1-D blocks (the host launches
/// them so), where it is `threadIdx.x / 32`: `shmem_device`'s [`thread::warp_id`] ranks a
/// thread in all three dimensions, which every warp of the dispatch paid for in its prologue.
/// With [`warps_per_block`] and [`tokens_from`] that took the low-latency `bf16` dispatch's
/// prologue from 23 instructions a warp beyond the twin's to 8 (sm_90; BENCHMARKS.md,
/// forty-fourth session).
///
/// [`thread::warp_id`]: shmem_device::thread::warp_id
#[inline(always)]
fn warp_id() -> u32 {
    thread_idx_x() / shmem_device::thread::WARP_SIZE
}

/// Warps per 1-D block ([`warp_id`]).
#[inline(always)]
fn warps_per_block() -> u32 {
    block_dim_x().div_ceil(shmem_device::thread::WARP_SIZE)
}

/// How many of `tokens` a block takes that starts at token `first` and steps by `stride`
/// (`first`, `first + stride`, ... below `tokens`), in 32-bit arithmetic with one division:
/// as `usize::div_ceil` of a saturating difference it took 64-bit operations and a second
/// multiply in every warp's prologue. `tokens + stride` stays below 2^32 (a `u32` token
/// count and grid).
#[inline(always)]
// `u32::div_ceil` keeps the remainder's test: two instructions more in the prologue (sm_90).
#[allow(clippy::manual_div_ceil)]
fn tokens_from(tokens: u32, first: u32, stride: u32) -> u32 {
    (tokens.saturating_sub(first) + stride - 1) / stride
}

/// `(lane, global warp, warps in the grid)`.
#[inline(always)]
fn warps() -> (u32, u32, u32) {
    let wpb = warps_per_block();
    (
        lane_id(),
        block_idx_x() * wpb + warp_id(),
        grid_dim_x() * wpb,
    )
}

/// Element `i` of this PE's copy of `s`.
///
/// # Safety
/// `i` is in bounds.
#[inline(always)]
unsafe fn ld<T: Copy>(s: Sym<T>, i: usize) -> T {
    // SAFETY: the caller's contract; these words are not written concurrently.
    unsafe { s.as_ptr().add(i).read() }
}

/// Writes element `i` of this PE's copy of `s`.
///
/// # Safety
/// `i` is in bounds and no other thread touches it.
#[inline(always)]
unsafe fn st<T: Copy>(s: Sym<T>, i: usize, v: T) {
    // SAFETY: the caller's contract.
    unsafe { s.as_ptr().add(i).write(v) }
}

/// Element `i` of `s` as written by another PE before a signal this thread has waited for.
///
/// # Safety
/// `i` is in bounds.
#[inline(always)]
unsafe fn ld_remote<T: Copy>(s: Sym<T>, i: usize) -> T {
    // SAFETY: the caller's contract; volatile, so that no earlier read is reused.
    unsafe { s.as_ptr().add(i).read_volatile() }
}

/// Eight `bf16` of a 16-byte chunk, widened.
#[inline(always)]
fn widen(c: Chunk) -> [f32; 8] {
    let mut v = [0f32; 8];
    for i in 0..4 {
        v[2 * i] = bf16::to_f32(c.0[i] as u16);
        v[2 * i + 1] = bf16::to_f32((c.0[i] >> 16) as u16);
    }
    v
}

/// Eight `f32` rounded to `bf16` into a 16-byte chunk, two at a time by the GPU's conversion
/// ([`bf16::pack`]; the twin's `__floats2bfloat162_rn`). Against the integer rounding in
/// both languages, one H200, 1 PE (BENCHMARKS.md, eighty-first session): the stand-in experts
/// kernel 1,824 SASS instructions to 976, a round's step 33.6 to 27.9 µs at 128 tokens (the
/// twin's 32.5 to 28.3), the combine 9.76 to 9.33 µs at 128 tokens and 21.9 to 20.9 at 512.
#[inline(always)]
fn narrow(v: [f32; 8]) -> Chunk {
    let mut c = [0u32; 4];
    for i in 0..4 {
        c[i] = bf16::pack(v[2 * i], v[2 * i + 1]);
    }
    Chunk(c)
}

/// Tokens per chunk of the layout's scan: one warp's tokens, a lane each, for one column (an
/// expert or a destination PE), so that a chunk is one ballot; the layout relies on it. The
/// CUDA C++ twin uses the same (checked by a test).
pub const LAYOUT_CHUNK: usize = shmem_device::thread::WARP_SIZE as usize;

/// Chunks of [`LAYOUT_CHUNK`] tokens a unit of the layout's scan takes, in one warp: the
/// counts of a column's earlier chunks within the unit are the warp's own, and only those of
/// earlier units come through `scratch`; 4096 tokens' units take one pass of the grid. With
/// up to 8 choices a token the unit loads all its chunks' choices at once (`scan_unit`).
/// One H200, 1 PE, held, throughput rounds against a chunk a unit (and blocks of 1024): 1.0-2.1
/// µs shorter at 128-4096 tokens, both types (BENCHMARKS.md, forty-sixth session); its
/// chunks' loads one after another, 1.4-2.5 µs longer at 128 and 512 tokens. The twin uses
/// the same (checked by a test).
pub const LAYOUT_SEGMENT: usize = 4;
const _: () = assert!(
    LAYOUT_SEGMENT == 4,
    "the layout's `unrolled!` lists name its chunks"
);

/// Segments of [`LAYOUT_SEGMENT`] chunks of [`LAYOUT_CHUNK`] tokens that `tokens` take: a
/// column's units of the layout's scan.
pub const fn layout_segments(tokens: u32) -> usize {
    (tokens as usize).div_ceil(LAYOUT_CHUNK * LAYOUT_SEGMENT)
}

/// Units of the layout's scan (a warp each): one per (column, segment,
/// [`layout_segments`]).
pub const fn layout_units(tokens: u32, n_pes: u32, experts: u32) -> usize {
    (experts as usize + n_pes as usize) * layout_segments(tokens)
}

/// The sleep between the polls of an expert column's last unit of the layout, which waits for
/// the column's earlier units ([`signal_wait_until_backoff`]): the destinations' units, which
/// the dispatch's rows wait for, are scanned meanwhile. Measured when every expert unit
/// waited so (before [`moe_layout()`] ranked pairs within their segment): on one H200 at 1 PE,
/// held, 4096 tokens, the twin's throughput rounds took 1.1-1.3 µs less with 256 ns (`bf16`
/// 37.90-38.24 µs against 39.17-39.33) and 0.3-1.2 less for FP8, where its warps had polled
/// in NVSHMEM's tight loop; the Rust rounds the same within 0.1 µs. 128 and 1024 ns were no
/// better; the expert warps starting 1 µs late instead took 0.5-1.5 µs more at 128 and 512
/// tokens (BENCHMARKS.md, fiftieth session). The twin uses the same (checked by a test).
pub const LOOKBACK_SLEEP_NS: u32 = 256;

/// Units of the layout's scan that place this PE's rows: one per (destination, segment), the
/// first units a launch takes. Each adds one to `signals[SIG_SLOTS]` once its rows' slots
/// are written, so that round `R` has placed every row at `R` times this.
pub const fn slot_units(tokens: u32, n_pes: u32) -> u64 {
    n_pes as u64 * layout_segments(tokens) as u64
}

/// Words of `scratch`: one count per unit of the layout ([`layout_units`]), then one per
/// (expert, segment) ([`seg_prefix_at`]).
pub const fn scratch_len(tokens: u32, n_pes: u32, experts: u32) -> usize {
    layout_units(tokens, n_pes, experts) + experts as usize * layout_segments(tokens)
}

/// The word of `scratch` that holds this PE's pairs of expert `e` in the segments before
/// segment `sg` ([`LAYOUT_SEGMENT`] chunks of tokens each), which the column's last unit of
/// the layout writes.
#[inline(always)]
pub fn seg_prefix_at(s: Shape, e: u32, sg: usize) -> usize {
    layout_units(s.tokens, s.n_pes, s.experts) + e as usize * layout_segments(s.tokens) + sg
}

/// Token `t`'s first `N` words of choices (`N`, a multiple of 4, at least `K` and at most
/// [`MAX_TOP_K`]; past the token's `K` choices the next token's, or the buffer's padding):
/// `N / 4` 16-byte loads when `4 | K` (the token's choices then start 16-byte aligned), else
/// `N` loads of a word. None depends on `K`: loads that did were issued one by one.
///
/// # Safety
/// `t < T`; `K <= N <= MAX_TOP_K`, `4 | N`.
#[inline(always)]
unsafe fn choices<const N: usize>(b: Bufs, s: Shape, t: usize) -> [i32; N] {
    let k_n = s.top_k as usize;
    let mut e = [0i32; N];
    if k_n.is_multiple_of(4) {
        let row = b.topk.as_ptr().wrapping_add(t * k_n).cast::<Chunk>();
        for q in 0..N / 4 {
            // SAFETY: `t < T`, `4 q + 3 < N <= MAX_TOP_K`: in `topk`'s `T K + MAX_TOP_K`
            // words; `topk` and the row are 16-byte aligned (`4 | K`).
            let c = unsafe { Chunk::load_global(row.add(q)) };
            for j in 0..4 {
                e[4 * q + j] = c.0[j] as i32;
            }
        }
    } else {
        for (k, v) in e.iter_mut().enumerate() {
            // SAFETY: `t < T`, `k < N <= MAX_TOP_K`: in `topk`'s `T K + MAX_TOP_K` words.
            *v = unsafe { ld(b.topk, t * k_n + k) };
        }
    }
    e
}

/// The choice among `e`'s first `K` whose expert is in `lo .. lo + width`, the last if
/// several, or -1: one range test a choice, without a branch or a division (-1, no expert,
/// is never in range), into a mask.
#[inline(always)]
fn hit_in<const N: usize>(e: &[i32; N], (lo, width): (u32, u32), k_n: usize) -> i32 {
    let mut m = 0u32;
    for (k, &v) in e.iter().enumerate() {
        m |= u32::from((v as u32).wrapping_sub(lo) < width) << k;
    }
    m &= (1u32 << k_n) - 1;
    31 - m.leading_zeros() as i32
}

/// One unit of the layout's scan ([`layout`]): column `col`'s hits among the
/// [`LAYOUT_SEGMENT`] chunks of tokens from `first`, this lane's token of each. All the
/// chunks' choices are loaded before any is tested where `N` is 8 (each lane's token clamped
/// into the tokens, so that no load waits on a branch), [`choices`]`::<N>`. Returns, per chunk, this
/// lane's token's choice plus one (0: none) in the low byte and its rank among the unit's hits
/// above it; and the unit's hits.
///
/// # Safety
/// `first < T`, `col < E + n`, `K <= N <= MAX_TOP_K`, `4 | N`; the whole warp calls it.
#[inline(always)]
unsafe fn scan_unit<const N: usize>(
    b: Bufs,
    s: Shape,
    col: u32,
    first: usize,
    lane: u32,
) -> ([u32; LAYOUT_SEGMENT], u32) {
    let (e_n, t_n, k_n) = (s.experts, s.tokens as usize, s.top_k as usize);
    let l_n = e_n / s.n_pes;
    // The column's experts, `lo .. lo + width`: itself, or the destination's `L`.
    let range = if col < e_n {
        (col, 1)
    } else {
        ((col - e_n) * l_n, l_n)
    };
    let token = |i: usize| first + i * LAYOUT_CHUNK + lane as usize;
    // Up to 8 choices a token, the unit's loads all at once (32 registers); more, a chunk's
    // at a time.
    let together = N <= 8;
    let mut e = [[0i32; N]; LAYOUT_SEGMENT];
    // SAFETY: clamped below `T` (`first < T`); the caller's `N`.
    let load = |i: usize| unsafe { choices::<N>(b, s, token(i).min(t_n - 1)) };
    if together {
        unrolled!(0 1 2 3; i => { e[i] = load(i); });
    }
    let below = (1u32 << lane) - 1;
    let (mut found, mut hits) = ([0u32; LAYOUT_SEGMENT], 0u32);
    unrolled!(0 1 2 3; i => {
        if !together {
            e[i] = load(i);
        }
        let hit = if token(i) < t_n { hit_in(&e[i], range, k_n) } else { -1 };
        let mask = ballot(hit >= 0);
        if hit >= 0 {
            found[i] = (hits + (mask & below).count_ones()) << 8 | (hit as u32 + 1);
        }
        hits += mask.count_ones();
    });
    (found, hits)
}

/// Throughput mode's layout pass (module documentation).
///
/// 1. One warp per unit, (column, [`LAYOUT_SEGMENT`] chunks of 32 tokens), in order: the
///    column's hits in each chunk (a ballot each, [`scan_unit`]), their sum published in
///    `scratch` with this launch's tag. A destination's unit then sums the hits of the
///    column's earlier units, each once it carries the tag (a warp sum), and writes its rows'
///    slots; an expert's unit leaves its pairs' ranks within the unit, and only the column's
///    last unit waits for the earlier ones: it writes each unit's prefix ([`seg_prefix_at`]),
///    which [`send`] adds. A column's last unit writes the column's total into this PE's row
///    of `counts`. (Two passes around a second grid barrier took 2.3 µs more at 128 tokens
///    on one H100.) The destinations' columns come first, and each of their units, its rows'
///    slots written, adds one to `signals[SIG_SLOTS]`: the dispatch's rows wait for that
///    count ([`slot_units`] a round), not for this grid to end.
/// 2. Each block counts itself in once its units are done; the grid's last block sends the
///    row to every other PE and waits for theirs; then its warps work out, 32 experts a
///    warp with a segmented warp scan, `base` (this PE's first pair and the capacity's end,
///    per expert) and, for this PE's own experts, `expert_offset`, `expert_count`; and
///    `recv_count`.
///
/// # Safety
/// See [`moe_layout()`].
#[inline(always)]
unsafe fn layout(b: Bufs, s: Shape) {
    // The dispatch that follows may start now: it waits for this grid before it reads
    // anything this kernel writes (module documentation).
    shmem_device::pdl::launch_dependents();
    let (me, n, e_n, k_n) = (my_pe() as u32, s.n_pes, s.experts, s.top_k as usize);
    let (t_n, l_n) = (s.tokens as usize, e_n / n);
    let (lane, gw, nw) = warps();
    let row_len = (e_n + n) as usize;
    let segs = layout_segments(s.tokens);
    let units = row_len * segs;
    let (count, generation) = (
        b.work.wrapping_add(LAYOUT_BARRIER),
        b.work.wrapping_add(LAYOUT_BARRIER + 1),
    );
    // This launch's generation; its tag, one more, tags the launch's `scratch` words (the
    // last block moves the generation on by one, so that every launch's tag is new: the words
    // need no reset). The tag and this PE's row of `counts` (from `my_pe`, a load too) are
    // worked out where they are used, through `opaque`, so that the scan's loads do not wait
    // for these two: LLVM hoisted both before the loop, where every warp waited for them
    // before its first load. On one H200 at 1 PE, held, the destinations' warps then started
    // 0.7-0.8 µs sooner at 4096 tokens, and the throughput rounds took 0.9-1.7 µs less
    // (`bf16`, 37.2-37.5 µs) and 1.2-1.8 less (FP8, 33.5-33.7) (BENCHMARKS.md, fiftieth
    // session).
    // SAFETY: `work`'s word; no block of this launch can move it before every block has
    // read it (each reads it before arriving).
    let generation_seen = unsafe { scoped::load_relaxed(Gpu, generation) };
    let tag = || u64::from(shmem_device::hint::opaque(generation_seen)) + 1;
    let mine = || shmem_device::hint::opaque(me) as usize * row_len;
    let mut u = gw as usize;
    while u < units {
        // The destinations' columns first: the dispatch's rows wait only for those
        // (`SIG_SLOTS`), and its metadata for the whole launch.
        let (c, sg) = ((u / segs) as u32, u % segs);
        let col = if c < n { e_n + c } else { c - n };
        let unit = col as usize * segs + sg;
        let first = sg * LAYOUT_SEGMENT * LAYOUT_CHUNK;
        // SAFETY: `first < T` (`sg < segs`), `col < E + n`; the whole warp; `N` covers `K`
        // (`K <= MAX_TOP_K`, the kernel's contract).
        let (found, hits) = unsafe {
            if k_n <= 8 {
                scan_unit::<8>(b, s, col, first, lane)
            } else {
                scan_unit::<MAX_TOP_K>(b, s, col, first, lane)
            }
        };
        let tag = tag();
        // SAFETY: `unit < scratch_len`: the warp's own unit, published once this launch;
        // `col * segs + c` for `c < sg` are the column's earlier units, which their warps
        // publish (a warp takes its units in order, and a column's units come in order of
        // `u`, so the lowest unpublished unit always has a warp on it: a cooperative launch,
        // every warp resident); a row `t` written below is below `T`, and a found choice (the
        // low byte less one) below `K`; `SIG_SLOTS` is this PE's word, touched atomically; a
        // column's prefix words (`seg_prefix_at`, in `scratch`'s bounds) are its last unit's
        // alone.
        unsafe {
            if lane == 0 {
                scoped::store_relaxed(
                    Gpu,
                    b.scratch.wrapping_add(unit),
                    tag << 32 | u64::from(hits),
                );
            }
            if col < e_n {
                // The pairs' ranks within the segment; the column's last unit waits for the
                // column's earlier units and writes every segment's prefix, and the column's
                // total.
                unrolled!(0 1 2 3; i => {
                    let (t, f) = (first + i * LAYOUT_CHUNK + lane as usize, found[i]);
                    if t < t_n && f != 0 {
                        st(b.send_pair, t * k_n + (f & 0xff) as usize - 1, (f >> 8) as i32);
                    }
                });
                if sg + 1 == segs {
                    let mut carry = 0u32;
                    let mut c0 = 0;
                    while c0 < segs {
                        let c = c0 + lane as usize;
                        let h = if c < sg {
                            let word = b.scratch.wrapping_add(col as usize * segs + c);
                            signal_wait_until_backoff(word, Cmp::Ge, tag << 32, LOOKBACK_SLEEP_NS)
                                as u32
                        } else if c == sg {
                            hits
                        } else {
                            0
                        };
                        // Inclusive: `x` = the hits of segments `c0 ..= c`.
                        let x = warp_prefix_sum(h, 0);
                        if c < segs {
                            st(
                                b.scratch,
                                seg_prefix_at(s, col, c),
                                u64::from(carry + x - h),
                            );
                        }
                        carry += shfl_idx(x, 31);
                        c0 += 32;
                    }
                    if lane == 0 {
                        st(b.counts, mine() + col as usize, carry);
                    }
                }
                u += nw as usize;
                continue;
            }
            // A destination's column: the hits of its earlier units, each once its warp has
            // published it this launch (earlier launches' tags are smaller), polled at once.
            let mut before = 0u32;
            let mut c = lane as usize;
            while c < sg {
                let word = b.scratch.wrapping_add(col as usize * segs + c);
                before += signal_wait_until(word, Cmp::Ge, tag << 32) as u32;
                c += 32;
            }
            let before = warp_sum(before);
            unrolled!(0 1 2 3; i => {
                let (t, f) = (first + i * LAYOUT_CHUNK + lane as usize, found[i]);
                if t < t_n {
                    let slot = if f != 0 { (before + (f >> 8)) as i32 } else { -1 };
                    st(b.send_slot, t * n as usize + (col - e_n) as usize, slot);
                }
            });
            if lane == 0 && sg + 1 == segs {
                st(b.counts, mine() + col as usize, before + hits);
            }
            // This unit's rows are placed: the warp's slot writes, then one release.
            sync_warp(u32::MAX);
            if lane == 0 {
                scoped::add_release(Gpu, b.signals.wrapping_add(SIG_SLOTS), 1u64);
            }
        }
        u += nw as usize;
    }
    // The block's units are done: its thread 0 counts it in, and the grid's last block to
    // do so goes on to the exchange; the others end. (The last block's arrival is its
    // fetch-and-add: a grid barrier, then block 0, took another load of the generation and
    // a poll for its change; BENCHMARKS.md, forty-fifth session.)
    sync_threads();
    let mut last = false;
    if thread_idx_x() == 0 {
        // SAFETY: `work`'s two words, touched only atomically; every block has read the
        // generation (the tag, above) before it arrives, so the last moves it on alone.
        unsafe {
            last = scoped::fetch_add(Gpu, count, 1u32) + 1 == grid_dim_x();
            if last {
                scoped::store_relaxed(Gpu, count, 0u32);
                scoped::store_relaxed(Gpu, generation, tag() as u32);
            }
        }
    }
    if !sync_threads_or(last) {
        return;
    }
    let tid = thread_idx_x();
    // Thread `d` sends this PE's row to PE `d`; the row stays here for this PE itself, whose
    // blocks' arrivals have ordered it already: a signal to itself (NVSHMEM's `fence`, then
    // `signal_op`, then a wait) took 1.5-2 µs of the layout's time at 1 PE on one H200
    // (BENCHMARKS.md, forty-fifth session). Round `R` waits for `R (n - 1)` rows.
    // SAFETY: row `me` of `counts` is this PE's to send; every PE's row `me` is written only
    // by this PE, and only after the PE has finished the previous round (module docs).
    unsafe {
        if tid < n && tid != me {
            let row = b.counts.as_ptr().add(mine());
            put_signal(
                Thread,
                SymSlice::from_raw_parts(row, row_len),
                DeviceSlice::from_raw_parts(row, row_len),
                b.signals.wrapping_add(SIG_COUNTS),
                1,
                SignalOp::Add,
                tid as i32,
            );
        }
        if tid == 0 && n > 1 {
            signal_wait_until(
                b.signals.wrapping_add(SIG_COUNTS),
                Cmp::Ge,
                u64::from(s.round) * u64::from(n - 1),
            );
        }
    }
    sync_threads();
    let cap = s.capacity;
    // SAFETY: every row of `counts` has arrived (the wait above, then the block barrier; this
    // PE's own before the blocks' arrivals).
    let cnt = |src: u32, e: u32| unsafe { ld_remote(b.counts, (src * (e_n + n) + e) as usize) };
    // This PE's rows from each source, loaded before the experts' sums, stored after them.
    let (w, nwb) = (warp_id(), warps_per_block());
    let rows = if w == 0 && lane < n {
        cnt(lane, e_n + me)
    } else {
        0
    };
    // The block's warps take the experts 32 at a time: expert `e`'s kept pairs (its pairs
    // from all PEs, capped), and the kept pairs of the experts before it on its PE (`seg`) by
    // a segmented warp scan, plus those of its PE's experts before the warp's 32 (`carry`,
    // a warp sum of their own loads). A count is read by its own warp and again by each
    // later warp of its PE, and no warp waits for another. One warp had carried each 32's sum
    // to the next, a chain of dependent loads a 32 under the copy's loads: on one H200 at 1
    // PE, held, the layout's exchange now ends 0.8 µs sooner at 4096 tokens, and the throughput
    // dispatch takes 0.946 of its time at 512 tokens, 0.985 at 2048 and 0.994 at 4096
    // (`bf16`), 0.971 at 4096 (FP8) (BENCHMARKS.md, seventy-second session).
    let kept_of = |e: u32| {
        let mut total = 0u32;
        for src in 0..n {
            total += cnt(src, e);
        }
        total.min(cap)
    };
    let mut c0 = 32 * w;
    while c0 < e_n {
        let e = c0 + lane;
        let live = e < e_n;
        let (mut total, mut before) = (0u32, 0u32);
        if live {
            for src in 0..n {
                let c = cnt(src, e);
                total += c;
                before += if src < me { c } else { 0 };
            }
        }
        let kept = total.min(cap);
        // The kept pairs of the experts of `c0`'s PE before `c0`.
        let mut carry = 0u32;
        let mut e2 = c0 / l_n * l_n + lane;
        while e2 < c0 {
            carry += kept_of(e2);
            e2 += 32;
        }
        let carry = warp_sum(carry);
        // The first expert of `e`'s PE; a lane past `E` makes a segment of its own.
        let first = if live { e / l_n * l_n } else { e };
        // Inclusive: `x` = the kept pairs of `max(first, c0) ..= e`.
        let mut x = warp_prefix_sum(kept, first.saturating_sub(c0));
        // The segment began before these 32: add its sum up to the last expert before them.
        x += if first < c0 { carry } else { 0 };
        let seg = x - kept;
        if live {
            // SAFETY: `e < E`; this lane alone writes entries `e` and `E + e`, and, for an
            // expert of this PE, entries `l n .. (l + 1) n` of the expert lists.
            unsafe {
                st(b.base, e as usize, seg + before);
                st(b.base, (e_n + e) as usize, seg.saturating_add(cap));
                if e / l_n == me {
                    let l = e % l_n;
                    let mut pre = 0u32;
                    for src in 0..n {
                        let c = cnt(src, e);
                        let i = (l * n + src) as usize;
                        st(b.expert_offset, i, seg + pre);
                        st(b.expert_count, i, c.min(cap.saturating_sub(pre)));
                        pre += c;
                    }
                }
            }
        }
        c0 += 32 * nwb;
    }
    if w == 0 && lane < n {
        // SAFETY: `lane < n`.
        unsafe { st(b.recv_count, lane as usize, rows) };
    }
}

/// Sends token `t`'s metadata to PE `d` if any of its experts is there (one warp): its source
/// index, weights and pairs, and each pair's slot in the expert's list. `send_slot[t][d]`
/// then holds the row's slot on `d` (-1: not sent there), which it also returns to every
/// lane; the caller sends the row. In low-latency mode the slot is `t`, and where the token
/// does not go to `d` this marks row `t` from here on `d` as empty (its source index -1);
/// with `ROWS` a row sent is counted here, else the caller counts it ([`send_bulk`]: its
/// copying warp, or its metadata warps' tally). A low-latency pair's slot comes from `slot`.
///
/// # Safety
/// `t < T`, `d < n`; the whole warp calls it; the buffers and round as in
/// [`moe_dispatch()`]; a [`PairSlot::Reserved`] `slot` is [`reserve_pairs`]'s for `t`'s block
/// and `t` its token `i`; `(e, w)` is [`pick`]`(b, s, t, lane)`.
#[inline(always)]
unsafe fn send<const ROWS: bool, R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    (t, d): (usize, u32),
    lane: u32,
    slot: PairSlot,
    (e, w): (i32, f32),
) -> i32 {
    let tp = s.mode == MODE_THROUGHPUT;
    let (me, n, e_n, cap) = (my_pe() as u32, s.n_pes, s.experts, s.capacity);
    let (k_n, t_n, l_n) = (s.top_k as usize, s.tokens as usize, e_n / n);
    let nn = n as usize;
    let mine = (lane as usize) < k_n;
    let q = t * k_n + lane as usize;
    // SAFETY: for the whole function: `t < T`, `d < n` (the caller's contract) and `q` is only
    // used by lanes `< K`; every slot index comes from an atomic or the layout and is unique
    // this round, so each word written here has one writer; every remote word is in its
    // buffer's bounds on PE `d` (module documentation).
    unsafe {
        let dest = if e >= 0 { e as u32 / l_n } else { u32::MAX };
        if d == 0 && mine && e < 0 {
            st(b.send_pair, q, -2);
        }
        if ballot(dest == d) == 0 {
            if !tp && lane == 0 {
                st(b.send_slot, t * nn + d as usize, -1);
                reach.p(b.recv_src.wrapping_add(me as usize * t_n + t), -1, d as i32);
            }
            return -1;
        }
        // Low latency: the pairs' slots from atomics; the row's is the token's own, and the
        // rows sent to `d` are counted (a reduction: nothing waits for it).
        let mut c = u32::MAX;
        if !tp {
            if lane == 0 {
                if ROWS {
                    scoped::add_relaxed(Gpu, counter(b, ROW_CURSORS + d as usize), 1u32);
                }
                st(b.send_slot, t * nn + d as usize, t as i32);
            }
            if dest == d {
                c = match slot {
                    PairSlot::Atomic => {
                        let cursor = counter(b, ROW_CURSORS + nn + e as usize);
                        scoped::fetch_add_relaxed(Gpu, cursor, 1u32)
                    }
                    PairSlot::Reserved(i) => match reserved_table(s) {
                        Some((base, rank)) => {
                            let first = base.wrapping_add(e as usize).as_ptr().read();
                            let at = i as usize * k_n + lane as usize;
                            first + u32::from(rank.wrapping_add(at).as_ptr().read())
                        }
                        None => u32::MAX,
                    },
                };
            }
        }
        let slot = if tp {
            ld(b.send_slot, t * nn + d as usize) as u32
        } else {
            t as u32
        };
        let row = me as usize * t_n + slot as usize;
        let mut pair = -1i32;
        if dest == d {
            let eu = e as u32;
            if tp {
                // The pair's rank within its segment, after the expert's pairs of the earlier
                // segments.
                let sg = t / (LAYOUT_CHUNK * LAYOUT_SEGMENT);
                let pre = ld(b.scratch, seg_prefix_at(s, eu, sg)) as u32;
                let p = ld(b.base, eu as usize) + pre + ld(b.send_pair, q) as u32;
                if p < ld(b.base, (e_n + eu) as usize) {
                    pair = p as i32;
                }
            } else if c < cap {
                pair = (((eu % l_n) * n + me) * cap + c) as i32;
            }
            if pair < 0 {
                scoped::add_relaxed(Gpu, b.dropped, 1u32);
            } else {
                reach.p(
                    b.expert_rows.wrapping_add(pair as usize),
                    row as i32,
                    d as i32,
                );
            }
            st(b.send_pair, q, pair);
        }
        if mine {
            let to = row * k_n + lane as usize;
            reach.p(b.recv_pair.wrapping_add(to), pair, d as i32);
            reach.p(b.recv_w.wrapping_add(to), w, d as i32);
        }
        if lane == 31 {
            reach.p(b.recv_src.wrapping_add(row), t as i32, d as i32);
        }
        slot as i32
    }
}

/// This lane's choice of token `t` and its weight (lanes `K` and up: -1 and 0), which
/// [`send`] takes: the dispatch's inputs, which a throughput dispatch's metadata warps load
/// for their first token before they wait for the layout, so that after it `send` waits for
/// the layout's words alone. Where the metadata ends the round (128 and 512 tokens; at 4096
/// the rows do), on one H200 at 1 PE, held, the throughput `bf16` rounds took 0.2-0.4 µs less
/// at 128 tokens and 0.3-0.6 at 512, the FP8 ones 0.1-0.2 and 0.15-0.35 (BENCHMARKS.md,
/// fifty-first session). The twin does the same.
///
/// # Safety
/// `t < T`; the buffers as in [`moe_dispatch()`].
#[inline(always)]
unsafe fn pick(b: Bufs, s: Shape, t: usize, lane: u32) -> (i32, f32) {
    let k_n = s.top_k as usize;
    if (lane as usize) < k_n {
        let q = t * k_n + lane as usize;
        // SAFETY: `t < T`, `lane < K`.
        unsafe { (ld(b.topk, q), ld(b.weights, q)) }
    } else {
        (-1, 0.0)
    }
}

/// Where a row sent from this PE into slot `slot` of a destination lands there (its row of
/// `recv_x`, the same offset on every PE); `None` for a negative slot (not sent there).
#[inline(always)]
fn row_at(b: Bufs, s: Shape, slot: i32) -> Option<Sym<u16>> {
    let (me, t_n, h) = (my_pe() as usize, s.tokens as usize, s.hidden as usize);
    (slot >= 0).then(|| b.recv_x.wrapping_add((me * t_n + slot as usize) * h))
}

/// Chunks a thread holds in registers while its block copies a row ([`send_held`]): a
/// 7168-value `bf16` row (896 chunks) is one batch of 256 threads.
const HELD: usize = 4;

/// Chunk `j` (`< HELD`) of thread `tid`'s batch at chunk `first`, in a block of `bs`
/// threads: `first + tid + j * bs`, or with `PAIRED` two adjacent chunks `j / 2` batches of
/// `bs` pairs apart (`first + 2 (tid + j / 2 * bs) + j % 2`). Either way the block's batch is
/// chunks `first .. first + HELD * bs`.
#[inline(always)]
fn held_chunk<const PAIRED: bool>(first: u32, tid: u32, j: usize, bs: u32) -> u32 {
    if PAIRED {
        first + 2 * (tid + (j / 2) as u32 * bs) + (j % 2) as u32
    } else {
        first + tid + j as u32 * bs
    }
}

/// Loads chunks [`held_chunk`]`(first, tid, j, bs)` (`j < HELD`, those below `chunks`; the
/// others are zero) of `from`, all issued before any is used, each a predicated load (under
/// an `if` each load was a branch, and the FP8 dispatch that loads ahead spilled 4-16 bytes
/// on sm_90; predicated, it fits its 80 registers). `PAIRED` (the FP8 dispatch) loads with
/// [`Chunk::load_global_once_if`]: on one H100 the FP8 dispatch took 0.97-0.99 of the time
/// at 4096 tokens (both modes), where the `bf16` one, unpaired, took 1 µs more with it.
///
/// # Safety
/// `from` is valid for `chunks` 16-byte aligned chunks of global memory.
#[inline(always)]
unsafe fn load_held<const PAIRED: bool>(
    from: *const Chunk,
    first: u32,
    chunks: u32,
    tid: u32,
    bs: u32,
) -> [Chunk; HELD] {
    let mut v = [Chunk([0; 4]); HELD];
    unrolled!(0 1 2 3; j => {
        let c = held_chunk::<PAIRED>(first, tid, j, bs);
        // SAFETY: loaded only when `c < chunks` (the caller's contract).
        v[j] = unsafe {
            if PAIRED {
                Chunk::load_global_once_if(c < chunks, from.wrapping_add(c as usize))
            } else {
                Chunk::load_global_if(c < chunks, from.wrapping_add(c as usize))
            }
        };
    });
    v
}

/// Stores what [`load_held`] (not `PAIRED`) loaded with the same `first`, `chunks`, `tid`
/// and `bs` at `to`.
///
/// # Safety
/// `to` is valid for writes of `chunks` 16-byte aligned chunks of global memory (this GPU's
/// or a mapped peer's) that no other thread writes.
#[inline(always)]
unsafe fn store_held(
    v: &[Chunk; HELD],
    to: *mut Chunk,
    first: u32,
    chunks: u32,
    tid: u32,
    bs: u32,
) {
    unrolled!(0 1 2 3; j => {
        let c = held_chunk::<false>(first, tid, j, bs);
        if c < chunks {
            // SAFETY: `c < chunks` (the caller's contract).
            unsafe { v[j].store_global(to.add(c as usize)) };
        }
    });
}

/// The largest magnitude of the `bf16` values of `chunks`, as the bits of a `bf16` (NaNs
/// count as 0, as `f32::max` leaves them out). `bf16` to `f32` is exact and keeps the order
/// of magnitudes, so this is [`crate::fp8::quantize`]'s `amax` without widening the chunks:
/// one packed max a pair of values ([`bf16x2_amax`]), then the larger half.
#[inline(always)]
fn magnitude<const N: usize>(chunks: [Chunk; N]) -> u32 {
    let mut m = 0;
    // By reference: an array's by-value iterator is not unrolled, and puts the chunks on
    // the stack.
    for c in &chunks {
        for &w in &c.0 {
            m = bf16x2_amax(m, w);
        }
    }
    (m & 0xffff).max(m >> 16)
}

/// Pairs of chunks a thread quantises in a batch: [`HELD`] chunks, `PAIRED`.
const PAIRS: usize = HELD / 2;

/// Quantises what [`load_held`] (`PAIRED`) loaded ([`crate::fp8`]): each pair of chunks (16
/// values) becomes 16 `e4m3` bytes, one 16-byte store, with its group's scale. A group of 128
/// values is 8 consecutive pairs, held by 8 lanes, whose largest magnitude their shuffles
/// find.
///
/// Every lane of the warp calls it (the shuffles), with pairs `first / 2 + tid + i * bs`,
/// where `first / 2`, `bs` and the row's pairs are multiples of 8: a group's pairs are all in
/// the row or all past it. The magnitudes are found on the `bf16` bits and the chunks widened
/// only after the shuffles: widened across them, the chunks' 32 values would not fit the
/// kernel's registers.
#[inline(always)]
fn quantize_held(v: &[Chunk; HELD]) -> ([Chunk; PAIRS], [f32; PAIRS]) {
    let mut m = [0u32; PAIRS];
    unrolled!(0 1; i => { m[i] = magnitude([v[2 * i], v[2 * i + 1]]); });
    // Lanes 8 apart hold different groups: butterflies within each group of 8 lanes.
    let mut step = 4;
    while step > 0 {
        unrolled!(0 1; i => { m[i] = m[i].max(shfl_xor(m[i], step)); });
        step /= 2;
    }
    let (mut q, mut scale) = ([Chunk([0; 4]); PAIRS], [0f32; PAIRS]);
    unrolled!(0 1; i => {
        let (s, inv) = crate::fp8::scales(f32::from_bits(m[i] << 16));
        for half in 0..2 {
            let x = widen(v[2 * i + half]);
            for k in 0..2 {
                let y = [0, 1, 2, 3].map(|e| x[4 * k + e] * inv);
                q[i].0[2 * half + k] = e4m3x4_from_f32(y);
            }
        }
        scale[i] = s;
    });
    (q, scale)
}

/// Stores what [`quantize_held`] made of the pairs at chunk `first` into the sent row at
/// `to` (`h` `e4m3` bytes, then one `f32` scale per group); the thread of a group's first
/// pair stores the scale.
///
/// # Safety
/// `to` is 16-byte aligned and valid for writes of [`Shape::sent_row`] `u16`s of global
/// memory (this GPU's or a mapped peer's) that no other thread writes.
#[inline(always)]
unsafe fn store_fp8(
    (q, scale): &([Chunk; PAIRS], [f32; PAIRS]),
    to: *mut u16,
    h: usize,
    first: u32,
    tid: u32,
    bs: u32,
) {
    let chunks = (h / 8) as u32;
    // SAFETY: the caller's contract: for a pair's first chunk `c < chunks`, bytes `8 c ..
    // 8 c + 16` and scale `c / 16` are in the sent row.
    unsafe {
        let (bytes, scales) = (to.cast::<Chunk>(), to.cast::<u8>().add(h).cast::<f32>());
        unrolled!(0 1; i => {
            let c = held_chunk::<true>(first, tid, 2 * i, bs);
            if c < chunks {
                q[i].store_global(bytes.add(c as usize / 2));
                if c.is_multiple_of(16) {
                    scales.add(c as usize / 16).write(scale[i]);
                }
            }
        });
    }
}

/// Where token `t`'s row goes on PE `d` ([`row_at`]), and that address here if `d`'s memory
/// is mapped; `None` if the row is not sent there.
///
/// # Safety
/// `t < T`, `d < n`; `send_slot[t][d]` is written (the block synchronised after [`send`]).
#[inline(always)]
unsafe fn target<R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    t: usize,
    d: u32,
) -> Option<(Sym<u16>, Option<PeerPtr<u16>>)> {
    // SAFETY: the caller's contract.
    let slot = unsafe { ld(b.send_slot, t * s.n_pes as usize + d as usize) };
    row_at(b, s, slot).map(|at| (at, reach.ptr(at, d as i32)))
}

/// This lane's choice of token `t` (its expert; -1 from lane `K` on), from which
/// [`routed`] finds the token's PEs.
///
/// # Safety
/// `t < T`; the buffers as in [`moe_dispatch()`].
#[inline(always)]
unsafe fn choice(b: Bufs, s: Shape, t: usize, lane: u32) -> i32 {
    let k_n = s.top_k as usize;
    if lane as usize >= k_n {
        -1
    } else {
        // SAFETY: `t < T` and `lane < K`.
        unsafe { ld(b.topk, t * k_n + lane as usize) }
    }
}

/// In low-latency mode, the PEs a token goes to, from its choices (each lane's [`choice`],
/// `e`): bit `d` set when one of its experts is on PE `d` (a ballot a PE, whole warps).
/// [`each_mapped`] takes it, and [`send_bulk`]'s copying warp counts the rows from it
/// ([`count_rows`]) unless its metadata warps tally them ([`early_counts`]). A copying warp
/// loads the choices when it starts a row and finds the PEs once the row's data is there:
/// found at once, the warp waited for the load (on one H200 the FP8 dispatch took 1-2 % more
/// time at 4096 tokens). PE `d`'s ballot tests `e` against its experts' range,
/// `d L .. (d + 1) L`, one compare a PE, where `e / L` had taken a division (some 18
/// instructions) a call (-1, no expert, is in no range).
#[inline(always)]
fn routed(s: Shape, e: i32) -> u32 {
    let l_n = s.experts / s.n_pes;
    let (mut mask, mut lo) = (0, 0u32);
    for d in 0..s.n_pes {
        if ballot((e as u32).wrapping_sub(lo) < l_n) != 0 {
            mask |= 1 << d;
        }
        lo += l_n;
    }
    mask
}

/// How a copying thread finds the PEs token `t`'s row goes to ([`each_mapped`]).
#[derive(Clone, Copy)]
enum Placed {
    /// From `send_slot[t]`, complete: the layout's, or `send`'s before a barrier.
    Slots,
    /// In low-latency mode, from the routing, without waiting for `send`: the PEs
    /// [`routed`] found for `t`.
    Routed(u32),
}

/// Calls `f(peer)` with the address here of token `t`'s row on each PE it goes to whose
/// memory is mapped here; returns whether it goes to some PE whose memory is not. With
/// [`Placed::Slots`], where `send_slot` says ([`target`]). With [`Placed::Routed`], in
/// low-latency mode, where a row is row `t` of its source's region on every PE it goes to:
/// the PEs follow from the routing, so the row waits for none of the metadata, whose atomics
/// other warps send meanwhile ([`send_by_role`]).
///
/// # Safety
/// As [`target`] with [`Placed::Slots`]; with [`Placed::Routed`] in low-latency mode, `t < T`
/// and the mask [`routed`]'s for `t`.
#[inline(always)]
unsafe fn each_mapped<R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    t: usize,
    by: Placed,
    mut f: impl FnMut(*mut u16),
) -> bool {
    let mut unmapped = false;
    for d in 0..s.n_pes {
        let to = match by {
            // SAFETY: the caller's contract.
            Placed::Slots => unsafe { target(b, reach, s, t, d) },
            Placed::Routed(mask) => (mask >> d & 1 != 0)
                .then(|| row_at(b, s, t as i32))
                .flatten()
                .map(|at| (at, reach.ptr(at, d as i32))),
        };
        match to {
            Some((_, Some(peer))) => f(peer.as_ptr()),
            Some((_, None)) => unmapped = true,
            None => {}
        }
    }
    unmapped
}

/// Tokens whose metadata a block sends at once, a warp per (token, destination): `W / n` in
/// throughput mode with `W` warps a block (at least one), [`LOW_LATENCY_GROUP`] in
/// low-latency mode. With the slots laid out beforehand, `send` is a few dependent loads,
/// and one barrier for the group instead of one a token is the gain. The low-latency `send`
/// waits for atomics, and a large group has the whole grid wait for its atomics at once with
/// little in flight; there the row's loads overlap them. BENCHMARKS.md (fifteenth session)
/// has the measurements.
#[inline(always)]
fn group_len(s: Shape) -> u32 {
    if s.mode == MODE_THROUGHPUT {
        (warps_per_block() / s.n_pes).max(1)
    } else {
        LOW_LATENCY_GROUP
    }
}

/// [`group_len`] in low-latency mode.
const LOW_LATENCY_GROUP: u32 = 2;

/// The `bf16` dispatches through registers (`TP`: throughput mode, a copy of the function
/// each), where the build or the launch has no bulk copies ([`send_held`]). The block takes
/// its tokens (`block_idx_x()` and on by `grid_dim_x()`) [`group_len`] at a time. In
/// low-latency mode its warps send the group's metadata ([`send`], a warp per (token,
/// destination)), while the threads load the first batch of the group's first row
/// (`fetch(t, 0, tid, bs)`; a warp that sends loads after it: held across the metadata, the
/// chunks would not fit the kernel's registers), and the block synchronises once (`send`
/// writes the slots). In throughput mode, launched as the layout's dependent, the block's
/// first warp waits for the layout to have placed the rows ([`wait_slots`]) and the block
/// meets, before its first group. (With every warp polling the one word, 32 a block and four
/// blocks an SM, the layout's adds to it came later: on one H200 at 1 PE, held, the FP8
/// rounds of this function took 18.0-18.2 µs at 512 tokens against 15.4-15.5, and 37.6-38.0
/// at 4096 against 36.5-36.9; BENCHMARKS.md, fiftieth session.) The block sends the metadata
/// of all its tokens after its last row, once the whole layout is out
/// ([`shmem_device::pdl::wait`]), each warp's first token's choices and weights ([`pick`])
/// loaded before that wait. Then it stores the group's rows batch by batch
/// (`store(t, first, v, Placed::Slots, tid, bs)` with `v = fetch(t, first, tid, bs)`,
/// [`HELD`] chunks a thread a batch) into every PE they go to whose memory is mapped here.
/// `store` returns whether some destination of `t` is not mapped; then, after a barrier, the
/// group's (token, destination) warps call `put(t, d, at)` to send the row to `at` on `d`.
///
/// # Safety
/// See [`moe_dispatch()`]; every thread of the block calls it; in throughput mode after
/// [`moe_layout()`] of the round, which wrote `send_slot`. `fetch` (with `t < T`, and
/// `first` a batch of the row) and `store` are called by every thread of the block, `put` by
/// whole warps, with `t < T` (`put` after `send_slot[t]` is complete); `store`'s result is
/// the same in every thread.
#[inline(always)]
unsafe fn send_grouped<const TP: bool, R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    mut fetch: impl FnMut(usize, u32, u32, u32) -> [Chunk; HELD],
    mut store: impl FnMut(usize, u32, &[Chunk; HELD], Placed, u32, u32) -> bool,
    mut put: impl FnMut(usize, u32, Sym<u16>),
) {
    let (n, t_n, tp) = (s.n_pes, s.tokens as usize, TP);
    let (w, nw, lane) = (warp_id(), warps_per_block(), lane_id());
    let (tid, bs) = (thread_idx_x(), block_dim_x());
    let mut fetch = |t, first| fetch(t, first, tid, bs);
    let mut store = |t, first, v: &[Chunk; HELD]| store(t, first, v, Placed::Slots, tid, bs);
    let (g_n, stride) = (group_len(s), grid_dim_x() as usize);
    let units = g_n * n;
    let batch = HELD as u32 * block_dim_x();
    let chunks = s.hidden / 8;
    let nb = chunks.div_ceil(batch);
    // The (token, destination) of unit `u`, `None` past the last token.
    let unit = |t0: usize, u: u32| {
        let t = t0 + (u / n) as usize * stride;
        (t < t_n).then_some((t, u % n))
    };
    // The metadata of the group from `t0`, a warp per (token, destination), by whole warps.
    // (The warp's index taken afresh each group: held across the group, it spilled 4 bytes
    // at 64 registers on sm_90 once the bulk path reserved its pair slots.)
    let send_group = |t0: usize| {
        let mut u = shmem_device::hint::opaque(w);
        while u < units {
            if let Some((t, d)) = unit(t0, u) {
                // SAFETY: `t < T`, `d < n`, the whole warp (the caller's contract for when).
                unsafe {
                    send::<true, _>(
                        b,
                        reach,
                        s,
                        (t, d),
                        lane,
                        PairSlot::Atomic,
                        pick(b, s, t, lane),
                    )
                };
            }
            u += nw;
        }
    };
    let mut t0 = block_idx_x() as usize;
    while t0 < t_n {
        // SAFETY: every thread of the block runs the same groups, so it calls `sync_threads`,
        // `fetch` and `store` together, and each warp `send` and `put` whole; `t < T`,
        // `d < n`; `send_slot[t]` is complete after the barrier before `put` (the caller's
        // contract in throughput mode, `send` in low-latency mode).
        unsafe {
            if !tp {
                send_group(t0);
            }
            // In throughput mode the rows' slots, once, before the first group's first batch
            // is loaded: one warp polls, the others meet it.
            if tp && t0 == block_idx_x() as usize {
                if w == 0 {
                    wait_slots(b, s);
                }
                sync_threads();
            }
            // Step `j` is batch `j % nb` of the group's row `j / nb`.
            let steps = (g_n as usize).min((t_n - t0).div_ceil(stride)) as u32 * nb;
            let at = |j: u32| (t0 + (j / nb) as usize * stride, j % nb * batch);
            let mut v = fetch(t0, 0);
            // In low-latency mode the rows wait for the group's `send`s, which write
            // `send_slot`. (Found from the routing instead, without the barrier, the `bf16`
            // dispatch took 1.02-1.03 of the time at 512 and 4096 tokens on one H100;
            // BENCHMARKS.md, twenty-fifth session.) In throughput mode the layout kernel
            // wrote them, and the rows go at once (one H100, the FP8 throughput dispatch:
            // 0.4-2.5 % less time; BENCHMARKS.md, twentieth session).
            if !tp {
                sync_threads();
            }
            let mut unmapped = false;
            let mut j = 0;
            loop {
                let (t, first) = at(j);
                unmapped |= store(t, first, &v);
                j += 1;
                if j == steps {
                    break;
                }
                let (t, first) = at(j);
                v = fetch(t, first);
            }
            if unmapped {
                sync_threads();
                let mut u = w;
                while u < units {
                    if let Some((t, d)) = unit(t0, u)
                        && let Some((at, None)) = target(b, reach, s, t, d)
                    {
                        put(t, d, at);
                    }
                    u += nw;
                }
            }
        }
        t0 += g_n as usize * stride;
    }
    // In throughput mode the metadata after all the block's rows, once the whole layout is
    // out. (Each group's after its rows, the FP8 dispatch took 1.03 of the time at 4096
    // tokens on two H200s.)
    if tp {
        // The warp's first unit's choices and weights (inputs, not the layout's) are on their
        // way while it waits. (The loop below is `send_group`'s with `ahead`: folded into
        // `send_group`, the throughput `bf16` kernel, whose code generation it also moved,
        // read 1.015-1.030 of the time at 128 tokens on one H200; docs/gpu-runs.md,
        // fifty-first session, run 16.)
        let first = unit(block_idx_x() as usize, w);
        // SAFETY: `t < T`.
        let mut ahead = first.map(|(t, _)| unsafe { pick(b, s, t, lane) });
        shmem_device::pdl::wait();
        let mut t0 = block_idx_x() as usize;
        while t0 < t_n {
            let mut u = shmem_device::hint::opaque(w);
            while u < units {
                if let Some((t, d)) = unit(t0, u) {
                    // SAFETY: `t < T`, `d < n`, the whole warp, after the layout; the first
                    // unit's `pick` is `ahead`'s.
                    unsafe {
                        let pk = ahead.take().unwrap_or_else(|| pick(b, s, t, lane));
                        send::<true, _>(b, reach, s, (t, d), lane, PairSlot::Atomic, pk);
                    }
                }
                u += nw;
            }
            t0 += g_n as usize * stride;
        }
    }
}

/// Shared-memory slots of the low-latency `bf16` dispatch's bulk copies ([`moe_dispatch()`]):
/// while its copying warp stores one piece, the next two are on their way in.
pub const BULK_SLOTS: usize = 3;

/// The most bytes of a row one of the dispatch's bulk copies moves: a whole 7168-value `bf16`
/// row, and three slots with their barriers stay under the 48 KB of shared memory a block
/// may have without the launch opting in to more. In smaller pieces, so that a piece's store
/// could start while the next one loads, the dispatches were slower: 2 and 4 pieces a row
/// took 1.05 and 1.19 times as long at 128 tokens (low latency) and up to 1.03 and 1.08 at
/// 4096 (one H200, 1 PE; BENCHMARKS.md, sixty-sixth session).
pub const BULK_PIECE: u32 = 14336;

/// Bytes before the bulk slots in the dispatch's shared memory: the slots' barriers, on a
/// 128-byte line of their own, then the block's rows towards each PE (a word a PE) on
/// another.
pub const BULK_HEADER: u32 = 256;

/// Where the low-latency `bf16` dispatch's metadata warps tally the block's rows towards
/// each PE in its shared memory ([`send_bulk`]): a word a PE, at most 32.
const ROW_TALLY: u32 = 128;

/// The most experts for which the low-latency `bf16` dispatch reserves its pair slots a block
/// at a time (one atomic an expert instead of one a pair): a word of shared memory each.
pub const RESERVE_EXPERTS: u32 = 256;

/// The most (token, choice) pairs of a block for which the low-latency `bf16` dispatch
/// reserves its pair slots at once: a `u16` of shared memory each. At
/// 4096 tokens a block of an H200's grid has 7-8 tokens, 64 pairs at top-8.
pub const RESERVE_PAIRS: u32 = 512;

/// The most pairs of a metadata block of the low-latency FP8 dispatch ([`moe_dispatch_fp8()`])
/// for which it reserves its pair slots at once.
pub const FP8_RESERVE_PAIRS: u32 = 2048;

/// One block in `ROLE_META_SHARE` of the low-latency FP8 dispatch's grid sends the metadata
/// ([`moe_dispatch_fp8()`]).
pub const ROLE_META_SHARE: u32 = 6;

/// A metadata block of the low-latency FP8 dispatch reserves its pair slots at once from
/// this many tokens ([`moe_dispatch_fp8()`]).
pub const ROLE_RESERVE_FROM: u32 = 9;

/// The word of the low-latency `bf16` dispatch's shared memory where its metadata warps
/// tally the block's rows towards PE `d` ([`ROW_TALLY`]; [`send_bulk`]), or `None` when the
/// launch did not give the header. Found afresh where it is used, as [`reserved_table`].
#[inline(always)]
fn row_tally(d: u32) -> Option<shmem_device::shared::SharedPtr<u32>> {
    let words = (ROW_TALLY / 4) as usize;
    shmem_device::shared::dynamic::<u32>(words + 32).map(|w| w.wrapping_add(words + d as usize))
}

/// Where [`send`] takes a low-latency pair's slot in its expert's list.
#[derive(Clone, Copy)]
enum PairSlot {
    /// A fetch-and-add a pair on the expert's counter.
    Atomic,
    /// Reserved already for the block's tokens ([`reserve_pairs`]) in its table
    /// ([`reserved_table`]): the block's first slot of expert `e` in `base[e]`, and the pair's
    /// place among the block's pairs of that expert in `rank[i * K + k]`, `i` (this) the
    /// token's place among the block's.
    Reserved(u32),
}

/// The table of [`reserve_pairs`] in the dispatch's shared memory: `base` (`E` words) and
/// `rank` (`RESERVE_PAIRS` entries), or `None` when the launch did not give it. Found afresh
/// where it is used: held across the metadata warps' loop, its two addresses spilled.
#[inline(always)]
fn reserved_table(
    s: Shape,
) -> Option<(
    shmem_device::shared::SharedPtr<u32>,
    shmem_device::shared::SharedPtr<u16>,
)> {
    let mem = shmem_device::shared::dynamic::<u8>(s.dispatch_shared_bytes() as usize)?;
    if s.experts > RESERVE_EXPERTS {
        return None;
    }
    // SAFETY: the table lies within the `dispatch_shared_bytes` the launch gave, after the
    // barriers' line (`bulk_slots_offset`), its words 4-byte aligned.
    let base = unsafe { mem.wrapping_add(BULK_HEADER as usize).cast::<u32>() };
    // SAFETY: as above; the ranks follow the `E` words.
    let rank = unsafe { base.wrapping_add(s.experts as usize).cast::<u16>() };
    Some((base, rank))
}

/// The low-latency dispatches' metadata warps (`meta`, all of them, this thread the
/// `thread`th of `meta.threads()`) reserve the pair slots of the block's `count` tokens
/// (`token(i)`) with one atomic an expert instead of one a pair: they count the block's
/// pairs of each expert in `base` (giving each pair its `rank` among them), then add each
/// count to the expert's counter, leaving in `base[e]` the block's first slot. What each pair
/// then takes is [`PairSlot::Reserved`]. On one H200 at 4096 tokens, the twin's dispatch
/// took 0.5 µs less with it (BENCHMARKS.md, forty-third session); a block of one token has
/// nothing to share and takes [`PairSlot::Atomic`].
///
/// # Safety
/// Every thread of `meta` calls it; `base` holds `E` words and `ranks` `count * K` entries of
/// this block's shared memory, which no other thread touches meanwhile; `token(i) < T` for
/// `i < count`; the buffers as in [`moe_dispatch()`].
#[inline(always)]
unsafe fn reserve_pairs(
    b: Bufs,
    s: Shape,
    (meta, thread): (NamedBarrier, u32),
    count: u32,
    token: impl Fn(u32) -> usize,
    base: shmem_device::shared::SharedPtr<u32>,
    ranks: shmem_device::shared::SharedPtr<u16>,
) {
    let (k_n, e_n, all) = (s.top_k, s.experts, meta.threads());
    let first = ROW_CURSORS + s.n_pes as usize;
    // SAFETY: `e < E` and `p < count * K` index the caller's tables; the barriers order each
    // step's shared accesses after the previous step's; the counters are `work`'s.
    unsafe {
        let mut e = thread;
        while e < e_n {
            scoped::store_relaxed(scoped::Cta, base.wrapping_add(e as usize), 0);
            e += all;
        }
        meta.sync();
        let mut p = thread;
        while p < count * k_n {
            let e = ld(b.topk, token(p / k_n) * k_n as usize + (p % k_n) as usize);
            if e >= 0 {
                let r = scoped::fetch_add_relaxed(scoped::Cta, base.wrapping_add(e as usize), 1);
                ranks.wrapping_add(p as usize).as_ptr().write(r as u16);
            }
            p += all;
        }
        meta.sync();
        let mut e = thread;
        while e < e_n {
            let at = base.wrapping_add(e as usize);
            let c = scoped::load_relaxed(scoped::Cta, at);
            if c != 0 {
                let start = scoped::fetch_add_relaxed(Gpu, counter(b, first + e as usize), c);
                scoped::store_relaxed(scoped::Cta, at, start);
            }
            e += all;
        }
        meta.sync();
    }
}

/// The `bf16` dispatches: unless `registers`, by bulk copies ([`send_bulk`]) where the
/// build has them ([`shmem_device::bulk::AVAILABLE`]), the launch having given the shared
/// memory ([`Shape::dispatch_shared_bytes`]) to blocks of more than one warp
/// ([`Shape::dispatch_by_registers`]); else through registers ([`send_grouped`]), the block
/// loading each row once for all its destinations. Each way is a kernel of its own from
/// sm_90, so that the kernel by bulk copies carries no code of the other. On one H200 at
/// 1 PE, held, `moe_dispatch` (5,440 instructions, 6,744 before) took 0.970 / 0.969 / 0.996
/// of its time at 128 / 512 / 4096 tokens, `moe_dispatch_throughput` 0.990 / 0.992 / 0.991;
/// a twin padded with 33 KB of code it never ran had taken about 1 % more at 4096 tokens
/// (BENCHMARKS.md, seventy-eighth session).
///
/// # Safety
/// See [`moe_dispatch()`]; every thread of the block calls it.
#[inline(always)]
unsafe fn send_held<R: Reach>(b: Bufs, reach: R, s: Shape, registers: bool) -> bool {
    let h = s.hidden as usize;
    let chunks = (h / 8) as u32;
    let row = |t: usize| b.x.as_ptr().wrapping_add(t * h);
    let put = |t: usize, d: u32, at: Sym<u16>| {
        // SAFETY: as `send_grouped` and `send_bulk` say: `t < T`, `d < n`, whole warps, after
        // `send_slot[t]` is complete; the row's slot on `d` is this token's alone; `x` stays as
        // it is until the dispatch's `quiet` (module documentation).
        unsafe {
            put_nbi(
                Warp,
                SymSlice::from_raw_parts(at.as_ptr(), h),
                DeviceSlice::from_raw_parts(row(t), h),
                d as i32,
            )
        }
    };
    if shmem_device::bulk::AVAILABLE && !registers {
        let (threads, shared) = (block_dim_x(), shmem_device::shared::dynamic_bytes());
        assert!(
            !s.dispatch_by_registers(threads, shared),
            "a bf16 dispatch by bulk copies needs more than one warp a block and its shared memory"
        );
        // SAFETY: the kernel's contract; the launch gave the shared memory, the block has a
        // copying warp and metadata warps.
        unsafe { send_bulk(b, reach, s, put) };
        return early_counts(s);
    }
    // SAFETY: as `send_grouped` says: `t < T`, and `send_slot[t]` complete at `store`; the
    // row's slot on `d` is this token's alone, and the peer address is in `recv_x`'s bounds
    // there; `x` stays as it is until the dispatch's `quiet` (module documentation).
    unsafe {
        let fetch =
            |t, first, tid, bs| load_held::<false>(row(t).cast::<Chunk>(), first, chunks, tid, bs);
        let store = |t, first, held: &_, by, tid, bs| {
            each_mapped(b, reach, s, t, by, |peer| {
                store_held(held, peer.cast(), first, chunks, tid, bs)
            })
        };
        if s.mode == MODE_THROUGHPUT {
            send_grouped::<true, _>(b, reach, s, fetch, store, put);
        } else {
            send_grouped::<false, _>(b, reach, s, fetch, store, put);
        }
    }
    false
}

/// In throughput mode, where the dispatch is its layout's dependent: waits, in one warp, until
/// this round's layout has placed every row of this PE (`send_slot`; `signals[SIG_SLOTS]` at
/// the round's [`slot_units`]), which its first units do, rather than for the whole layout
/// grid ([`shmem_device::pdl::wait`], which the metadata still takes). Lane 0 waits with
/// acquire loads ([`scoped::wait_acquire`]), where it had polled and then fenced; the warp
/// then meets, so that its lanes read `send_slot` after the layout's writes.
///
/// # Safety
/// The whole warp calls it, in a throughput dispatch that follows [`moe_layout()`] of round
/// `s.round` on the stream, with `signals` where the round found them (module
/// documentation).
#[inline(always)]
unsafe fn wait_slots(b: Bufs, s: Shape) {
    if lane_id() == 0 {
        // SAFETY: this PE's signal word, which the layout adds to this round (the caller's
        // contract) with release adds; while kernels run it is touched only atomically.
        unsafe {
            scoped::wait_acquire(
                Gpu,
                b.signals.wrapping_add(SIG_SLOTS),
                Cmp::Ge,
                u64::from(s.round) * slot_units(s.tokens, s.n_pes),
            );
        }
    }
    sync_warp(u32::MAX);
}

/// The `bf16` dispatches by bulk copies: warp 0 moves the block's rows (its
/// tokens, `block_idx_x()` and on by `grid_dim_x()`) through [`BULK_SLOTS`] slots of shared
/// memory, a piece of a row at a time ([`Shape::dispatch_shared_bytes`]): lane 0 copies a
/// piece in (`bulk::copy_to_shared`, completing on the slot's barrier) two pieces ahead, then
/// out to every PE the token goes to whose memory is mapped here (`bulk::copy_to_global`):
/// in low-latency mode to row `t` of this PE's region there, the PEs found from the routing,
/// in throughput mode where the layout placed it (`send_slot`; [`each_mapped`]).
/// No row waits for the metadata, and no thread holds a row in registers. Warp 0 also counts
/// the rows it finds towards each PE, and adds them to the PE's row counter once
/// ([`count_rows`]; low-latency mode, unless the metadata warps tally them). Meanwhile the
/// other warps send the metadata of the block's tokens, a warp per (token, destination)
/// ([`send`]); in throughput mode once the whole layout is out ([`shmem_device::pdl::wait`]),
/// each warp's first token's choices and weights ([`pick`]) loaded before that wait; in
/// low-latency mode, with several tokens a block, they first reserve the block's pair slots
/// together, one atomic an expert ([`reserve_pairs`], on a [`NamedBarrier`] that warp 0 takes
/// no part in), and where [`early_counts`] says so, after their `send`s tally the block's
/// rows towards each PE and send the block's counts on their own ([`counts_early`]). Rows to
/// PEs whose memory is not mapped go afterwards: the block learns of them from one
/// `sync_threads_or`, and its warps call `put(t, d, at)`.
///
/// # Safety
/// See [`moe_dispatch()`]; every thread of the block calls it; the block has more than one
/// warp and the launch gave it [`Shape::dispatch_shared_bytes`] of dynamic shared memory;
/// [`shmem_device::bulk::AVAILABLE`]. `put` is called by whole warps, with `t < T`, after
/// `send_slot[t]` is complete.
#[inline(always)]
unsafe fn send_bulk<R: Reach>(b: Bufs, reach: R, s: Shape, put: impl FnMut(usize, u32, Sym<u16>)) {
    use shmem_device::bulk::{self, Barrier};
    use shmem_device::shared::SharedPtr;
    let (n, h, tp) = (s.n_pes, s.hidden as usize, s.mode == MODE_THROUGHPUT);
    let (w, nw, lane) = (warp_id(), warps_per_block(), lane_id());
    let (t0, stride) = (block_idx_x() as usize, grid_dim_x() as usize);
    let count = tokens_from(s.tokens, t0 as u32, stride as u32);
    let token = |i: u32| t0 + i as usize * stride;
    let mut unmapped = false;
    // SAFETY: for the whole function: `t < T` and `d < n` for every `send`, `choice`,
    // `each_mapped` and `put`, each called by whole warps; the shared memory is this block's,
    // `dispatch_shared_bytes` of it (the caller's contract): the barriers in its first line,
    // the slots after the table, each used by lane 0 of warp 0 alone; the table, the
    // metadata warps' alone, `reserve_pairs` writes for the block's tokens (`count * K`
    // pairs fit it) before their `send`s read it; a slot is written again only after the
    // store that read it has read it (`wait_read`); a row's bytes land in `recv_x` in this
    // token's row of this PE's region, which no other thread writes.
    unsafe {
        if w == 0 {
            let Some(mem) = shmem_device::shared::dynamic::<u8>(s.dispatch_shared_bytes() as usize)
            else {
                return;
            };
            let at = |off: u32| SharedPtr::from_raw(mem.as_ptr().add(off as usize));
            let bar = |i: u32| Barrier::from_shared(at(i * 8).cast::<u64>());
            let first = s.bulk_slots_offset();
            let slot = |i: u32| at(first + i * s.bulk_slot_bytes());
            if lane == 0 {
                for i in 0..BULK_SLOTS as u32 {
                    Barrier::init(at(i * 8).cast::<u64>(), 1);
                }
            }
            sync_warp(u32::MAX);
            let (row_bytes, piece) = (s.hidden * 2, s.bulk_piece());
            let pieces = row_bytes.div_ceil(piece);
            let steps = count * pieces;
            let slots = BULK_SLOTS as u32;
            // Step `k`: piece `k % pieces` of the block's row `k / pieces`, in slot `k % slots`:
            // its offset in the row and its length.
            let part = |k: u32| {
                let off = k % pieces * piece;
                (token(k / pieces), off, piece.min(row_bytes - off))
            };
            let load = |k: u32| {
                if lane == 0 {
                    let (t, off, len) = part(k);
                    let src = b.x.as_ptr().add(t * h).cast::<u8>().add(off as usize);
                    bar(k % slots).arrive_expect_tx(len);
                    bulk::copy_to_shared(slot(k % slots), src, len, bar(k % slots));
                }
            };
            for k in 0..steps.min(slots - 1) {
                load(k);
            }
            // In throughput mode, launched as the layout's dependent: its slots from here on,
            // once the layout has placed the rows (not at its end).
            if tp {
                wait_slots(b, s);
            }
            // This lane's choice of the row being copied, and (lane `d`) the rows counted
            // towards `d` (unless the metadata warps tally them: [`early_counts`]).
            let (mut e, mut rows) = (-1, 0);
            for k in 0..steps {
                let (t, off, len) = part(k);
                if off == 0 && !tp {
                    e = choice(b, s, t, lane);
                }
                // The slot of step `k + slots - 1` held step `k - 1`, whose stores are the
                // newest group.
                if k + slots - 1 < steps {
                    if lane == 0 {
                        bulk::wait_read::<0>();
                    }
                    load(k + slots - 1);
                }
                // Every lane waits (with lane 0 alone waiting, 0.3-0.5 µs more at 128 tokens
                // on one H200), and `routed`'s ballots then keep them together: a lane still
                // polling the phase after lane 0 had armed the slot's next one would miss it
                // (the simulator's `rows_past_a_bulk_piece` hung so without a ballot each step).
                bar(k % slots).wait(k / slots % 2);
                // In throughput mode the layout placed the rows (`send_slot`); its lookups
                // have no ballot, so the warp meets here instead.
                let by = if tp {
                    sync_warp(u32::MAX);
                    Placed::Slots
                } else {
                    let mask = routed(s, e);
                    if off == 0 {
                        rows += mask >> lane & 1;
                    }
                    Placed::Routed(mask)
                };
                unmapped |= each_mapped(b, reach, s, t, by, |peer| {
                    if lane == 0 {
                        bulk::copy_to_global(
                            peer.cast::<u8>().add(off as usize),
                            slot(k % slots),
                            len,
                        );
                    }
                });
                if lane == 0 {
                    bulk::commit_group();
                }
            }
            if !early_counts(s) {
                count_rows(b, lane, rows);
            }
            if lane == 0 {
                bulk::wait_all();
            }
        } else {
            // In throughput mode the warp's first token's choices and weights (inputs, not the
            // layout's) are on their way while it waits for the layout.
            let mut ahead = (tp && w - 1 < count * n).then(|| pick(b, s, token((w - 1) / n), lane));
            if tp {
                shmem_device::pdl::wait();
            }
            let (meta, rank) = (NamedBarrier::new(1, (nw - 1) * 32), thread_idx_x() - 32);
            // With several tokens, the block's pair slots reserved at once; where the counts go
            // early, the block's rows towards PE `d` tallied here in shared memory and added to
            // the PE's row cursor once (reserve_pairs' first barrier orders the tally's zeros
            // before the adds), else warp 0 counts them as it copies.
            let early = early_counts(s);
            let reserved = match reserved_table(s) {
                Some((base, ranks)) if !tp && count > 1 && count * s.top_k <= RESERVE_PAIRS => {
                    if early
                        && rank < n
                        && let Some(at) = row_tally(rank)
                    {
                        scoped::store_relaxed(scoped::Cta, at, 0);
                    }
                    reserve_pairs(b, s, (meta, rank), count, token, base, ranks);
                    true
                }
                _ => false,
            };
            let mut u = w - 1;
            while u < count * n {
                let i = u / n;
                let slot = if reserved {
                    PairSlot::Reserved(i)
                } else {
                    PairSlot::Atomic
                };
                let pk = ahead.take().unwrap_or_else(|| pick(b, s, token(i), lane));
                let sent = send::<false, _>(b, reach, s, (token(i), u % n), lane, slot, pk);
                if early
                    && lane == 0
                    && sent >= 0
                    && let Some(at) = row_tally(u % n)
                {
                    scoped::add_relaxed(scoped::Cta, at, 1);
                }
                u += nw - 1;
            }
            if early {
                meta.sync();
                let rows = match row_tally(rank) {
                    Some(at) if rank < n => scoped::load_relaxed(scoped::Cta, at),
                    _ => 0,
                };
                count_rows(b, rank, rows);
                counts_early(b, reach, s, (rank, meta.threads()), || meta.sync());
            }
        }
        if sync_threads_or(unmapped) {
            put_unmapped(b, reach, s, (w, nw), count, token, put);
        }
    }
}

/// After a block's rows, when some went to a PE whose memory is not mapped here: its warps
/// call `put(t, d, at)` for each such (token, destination) of its `count` tokens (`token(i)`,
/// a warp per pair in turn: warp `w` of `nw`), `at` the row's place on `d`.
///
/// # Safety
/// Every warp of the block calls it whole, after a barrier that follows every `send` of the
/// block's tokens (so `send_slot` is complete); `token(i) < T` for `i < count`.
#[inline(always)]
unsafe fn put_unmapped<R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    (w, nw): (u32, u32),
    count: u32,
    token: impl Fn(u32) -> usize,
    mut put: impl FnMut(usize, u32, Sym<u16>),
) {
    let n = s.n_pes;
    let mut u = w;
    while u < count * n {
        let (t, d) = (token(u / n), u % n);
        // SAFETY: `t < T`, `d < n`, and `send_slot[t]` complete (the caller's contract).
        if let Some((at, None)) = unsafe { target(b, reach, s, t, d) } {
            put(t, d, at);
        }
        u += nw;
    }
}

/// Completes the block's puts, `p`s and AMOs, then adds the block's share of its PE's
/// arrival to `sig` on every PE ([`arrive`]): after everything the block issued before it,
/// on every PE. With `own` = `Some(k)`, only blocks `0..k` add to this PE's own copy, with
/// `None` every block ([`arrival_share`]): a block's rows and metadata for its own PE reach
/// the kernels after this one by stream order, so only what this kernel reads back after
/// its wait needs the signal. A block that has nothing to add (one PE, the block not below
/// `k`) returns at once, without the barrier. (`None` rather than `Some(G)`, so that the
/// comparison folds away: with `Some(G)` ptxas spilled 8 bytes in `moe_dispatch` on sm_90,
/// sixty-eighth session.) Every thread of the block calls it.
///
/// When every PE's memory is mapped here, those were plain loads, stores and atomics: after
/// the barrier they are the causal predecessors of warp 0's threads. Lane `d` of warp 0 then
/// fences at system scope (`quiet`) and adds the share to PE `d`'s copy of `sig` with a
/// relaxed atomic: fence and atomic are a release (PTX memory model), cumulative over what
/// the barrier ordered before it. One fence a block instead of one a warp (measured on one
/// H100 at 128 tokens: 1.4 µs off the combine, 0.5 off the dispatch), and warp 0 runs it as
/// one instruction whatever its lanes. Each lane looks its PE's copy up before the barrier:
/// after the fence, the lookup's load of NVSHMEM's table of peer addresses would miss L1,
/// which that fence invalidates, on the way to every block's arrival (at 128 and 512 tokens
/// 0.1-0.3 µs less a dispatch and a combine on one H100, 0.3-0.6 µs on two H200s;
/// BENCHMARKS.md, thirty-seventh session).
///
/// Else NVSHMEM's transports need every issuing thread's own quiet, before the barrier;
/// thread 0 then fences (an `acq_rel` count after the quiet would fence twice) and signals
/// every PE through NVSHMEM.
///
/// # Safety
/// `sig` is a signal word of [`Bufs::signals`]; `n` is the PE count, at most 32 (the
/// kernels' contract); `own` is the same in every block of the grid, and at least 1.
#[inline(always)]
unsafe fn arrive_block<R: Reach>(b: Bufs, reach: R, sig: Sym<u64>, n: u32, own: Option<u32>) {
    // SAFETY: the caller's contract; the whole block meets.
    unsafe { arrive_group(b, reach, sig, n, own, thread_idx_x(), sync_threads) };
}

/// [`arrive_block`] for a group of whole warps of the block that meet at `meet`, this
/// thread the `rank`th (the group's first warp holds ranks `0..32`): after what the group
/// issued before it.
///
/// # Safety
/// As [`arrive_block`]; every thread of the group calls it, and `meet` is the group's
/// barrier.
#[inline(always)]
unsafe fn arrive_group<R: Reach>(
    b: Bufs,
    reach: R,
    sig: Sym<u64>,
    n: u32,
    own: Option<u32>,
    rank: u32,
    meet: impl Fn(),
) {
    if n == 1 && own.is_some_and(|o| block_idx_x() >= o) {
        return;
    }
    let first = rank < 32;
    let peer = if first && rank < n {
        reach.ptr(sig, rank as i32)
    } else {
        None
    };
    let mapped = all_mapped(b, reach, n);
    if !mapped {
        reach.quiet();
    }
    meet();
    if mapped {
        if first {
            reach.quiet();
            let v = arrival_share(rank, own);
            if let Some(q) = peer.filter(|_| v != 0) {
                // SAFETY: `q` is PE `rank`'s copy of the signal word (the caller's contract),
                // after this lane's fence.
                unsafe { scoped::add_relaxed(scoped::Sys, q, v) };
            }
        }
    } else if rank == 0 {
        scoped::fence_acq_rel(Gpu);
        // SAFETY: the caller's contract.
        unsafe { arrive(sig, n, own) };
    }
}

/// Whether every PE's memory is mapped here (its signal words, and with them the whole
/// symmetric heap): the same in every thread of the grid. At one PE, without the lookup's
/// load from NVSHMEM's table.
#[inline(always)]
fn all_mapped<R: Reach>(b: Bufs, reach: R, n: u32) -> bool {
    R::ALL || n == 1 || (0..n).all(|d| reach.ptr(b.signals, d as i32).is_some())
}

/// Adds `rows`, the block's rows towards PE `d` (zero unless `d < n`), to this PE's row
/// cursor towards `d`: once a block and PE, where one add a row ([`send`]'s) put 4096 of
/// them on one word at 1 PE and 4096 tokens, 1.4 µs of the twin's time on one H200
/// (BENCHMARKS.md, forty-third session). The dispatches through [`send_grouped`] keep
/// theirs in `send`.
///
/// # Safety
/// The buffers as in [`moe_dispatch()`].
#[inline(always)]
unsafe fn count_rows(b: Bufs, d: u32, rows: u32) {
    if rows != 0 {
        // SAFETY: a counter of `work`, as `d < n` where `rows` is not zero.
        unsafe { scoped::add_relaxed(Gpu, counter(b, ROW_CURSORS + d as usize), rows) };
    }
}

/// Whether the low-latency `bf16` dispatch by bulk copies sends its counts early
/// (`counts_early`): with at least this many tokens a block, the same in every block. Where
/// a block's rows take longer than its metadata, the reading of the counts leaves the
/// kernel's last path; with few rows it adds a second fence, arrival and wait to it.
/// Measured on one H200 at 1 PE, held, against the dispatch without (BENCHMARKS.md,
/// fifty-eighth session): early at every size, 0.97-0.99 of its time at 3072 and 4096
/// tokens (6-8 a block), 0.99-1.00 at 2048 (4), 1.10-1.20 at 128-1024 (1-2).
pub const EARLY_COUNTS_TOKENS: u32 = 4;

/// [`EARLY_COUNTS_TOKENS`] for this launch, in low-latency mode, where every block reserves
/// its pair slots a block at a time ([`reserve_pairs`]: every block has at least two tokens
/// and at most [`RESERVE_PAIRS`] pairs, and the experts fit the table): the same in every
/// block of the grid, and in block 0, which then does not read the counts at the end.
#[inline(always)]
fn early_counts(s: Shape) -> bool {
    let g = grid_dim_x();
    s.mode == MODE_LOW_LATENCY
        && s.tokens >= EARLY_COUNTS_TOKENS * g
        && s.experts <= RESERVE_EXPERTS
        && s.tokens.div_ceil(g) * s.top_k <= RESERVE_PAIRS
}

/// Low latency, in a block's metadata warps (`threads` of them meeting at `meet`, this
/// thread the `rank`th) once its pair slots and rows are counted on its PE's cursors: adds
/// the block's share of its PE's arrival to `signals[SIG_RESERVED]` on every PE, when every
/// PE's memory is mapped here ([`all_mapped`]); in block 0, then waits for every PE's whole
/// grid there, and reads the counts ([`pull_counts`]) while the copying warps still move
/// rows. Before, block 0 read them after every PE's rows had arrived, on the way to the
/// kernel's end, as it still does below [`EARLY_COUNTS_TOKENS`] and when some PE is not
/// mapped (through NVSHMEM's `g` and `p`, whose code here made `moe_dispatch` spill 16 bytes
/// on sm_90).
///
/// # Safety
/// As [`moe_dispatch()`] in low-latency mode; every thread of the group calls it, after
/// every cursor of the block's pairs and rows is taken, and every block of every PE's grid
/// does so in this round.
#[inline(always)]
unsafe fn counts_early<R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    (rank, threads): (u32, u32),
    meet: impl Fn(),
) {
    let n = s.n_pes;
    let sig = b.signals.wrapping_add(SIG_RESERVED);
    // SAFETY: the signal word, which only this function touches; the caller's contract.
    unsafe {
        // Mapping is mutual: where some PE is not mapped, no PE waits here.
        if !all_mapped(b, reach, n) {
            return;
        }
        arrive_group(b, reach, sig, n, None, rank, &meet);
        if block_idx_x() == 0 {
            if rank == 0 {
                // Every PE's grid, then the word back to zero: it waits for one round's
                // arrivals whatever the round, so that kernels without this step (an older
                // build, or the twin, in `--compare`'s alternate rounds) may run between.
                // The next round's arrivals come after this kernel has ended (module
                // documentation, Completion).
                let all = u64::from(n) * ARRIVAL;
                signal_wait_until(sig, Cmp::Ge, all);
                scoped::add_relaxed(scoped::Sys, sig, all.wrapping_neg());
            }
            meet();
            pull_counts::<true, _>(b, reach, s, (rank, threads));
        }
    }
}

/// A unit of [`copy_units`]' warps, row `t` from chunk `first` (1024 values), staged in the
/// row's staging row (`comb_stage` row `t`): put by the warp to each PE of the row whose
/// memory is not mapped here (low latency: found from the routing; `TP`: the layout's
/// slots, [`target`]), its `e4m3` bytes and its scales. The block's arrival quiets the puts.
///
/// # Safety
/// The whole warp, after the unit is staged; `t < T`; with `TP`, `send_slot[t]` complete.
#[inline(always)]
unsafe fn put_unit<const TP: bool, R: Reach>(b: Bufs, reach: R, s: Shape, t: usize, first: u32) {
    let h = s.hidden as usize;
    let stage = b.comb_stage.as_ptr().wrapping_add(t * h);
    // SAFETY: row `t` of `comb_stage` is this token's alone this round, and complete for
    // this unit; the unit's bytes and scales lie within the sent row on `d` (`row_at`, or
    // with `TP` the layout's slot, `target`), which no other unit writes.
    unsafe {
        let f = first as usize;
        let bytes = (h / 2).min(4 * f + 512) - 4 * f;
        let groups = (h / 128).min(f / 16 + 8) - f / 16;
        let scales = h / 2 + 2 * (f / 16);
        let put = |at: Sym<u16>, d: u32| {
            let put = |off: usize, len: usize| {
                put_nbi_unmapped(
                    Warp,
                    SymSlice::from_raw_parts(at.as_ptr().add(off), len),
                    DeviceSlice::from_raw_parts(stage.add(off), len),
                    d as i32,
                )
            };
            put(4 * f, bytes);
            put(scales, 2 * groups);
        };
        if TP {
            for d in 0..s.n_pes {
                if let Some((at, None)) = target(b, reach, s, t, d) {
                    put(at, d);
                }
            }
            return;
        }
        let mask = routed(s, choice(b, s, t, lane_id()));
        let Some(at) = row_at(b, s, t as i32) else {
            return;
        };
        for d in 0..s.n_pes {
            if mask >> d & 1 == 0 || reach.ptr(at, d as i32).is_some() {
                continue;
            }
            put(at, d);
        }
    }
}

/// `n + 1` blocks in `TP_META_SHARE` of the throughput FP8 dispatch's grid at `n` PEs, its
/// last ones (at most half the grid, at least one block: [`tp_meta_blocks`]), send the
/// metadata (`send_units_throughput`), a warp per (token, PE); the others copy the rows. One
/// in 6 at 1 PE, one in 4 at 2 PEs. Since the layout's expert units no longer wait for each
/// other ([`moe_layout()`]), the metadata is the round's longest path at 1 PE from 2048
/// tokens: on one H200, held, one in 6 against one in 8 took 0.97 / 0.96 of the time at
/// 2048 / 4096 tokens with 64 experts and 0.93 with 256, 1.01-1.02 at 512; one in 5 and 4
/// no better at 64 experts, one in 12 1.00-1.09. At 2 PEs under MPS, one in 3 took 1.03-1.04
/// of one in 4's time at 512-4096 tokens, so `n + 1` in 12, which keeps one in 4 there
/// (BENCHMARKS.md, eighty-second session). Before, on that layout's predecessor
/// (seventy-seventh session), one in 8 against one in 6 at 1 PE took 0.97 of the time at 128
/// and 512 tokens and the same from 2048; on two H200s at 2 PEs one in 8 took 1.02 and 1.08
/// of the previous kernel's time at 512 and 2048 tokens, two in 8 0.98 and 1.01.
pub const TP_META_SHARE: u32 = 12;

/// The throughput FP8 dispatch's metadata blocks on a grid of `g` blocks at `n` PEs: `n + 1`
/// in [`TP_META_SHARE`], at most half the grid, at least one.
#[inline(always)]
pub fn tp_meta_blocks(g: u32, n: u32) -> u32 {
    (g * (n + 1) / TP_META_SHARE).min(g / 2).max(1)
}

/// The blocks of the low-latency FP8 dispatch that send the metadata ([`send_by_role`]):
/// the first of every [`ROLE_META_SHARE`], at least one.
#[inline(always)]
fn role_meta_blocks() -> u32 {
    (grid_dim_x() / ROLE_META_SHARE).max(1)
}

/// The low-latency FP8 dispatch, its blocks split by role. The first of every
/// [`ROLE_META_SHARE`] blocks of the grid (`M` of them, at least one) send the metadata:
/// block `mb` the tokens `mb, mb + M, ...`, their pair slots reserved at once
/// ([`reserve_pairs`]) from [`ROLE_RESERVE_FROM`] tokens where the launch gave the table
/// ([`FP8_RESERVE_PAIRS`] pairs; else an atomic a pair), then a warp per (token, PE)
/// ([`send`]). The other blocks copy: their warps take the rows' units of 1024 values in
/// turn, load a unit, quantise it in registers ([`quantize_held`]) and store the `e4m3`
/// values and their scales into every PE the row goes to whose memory is mapped here
/// ([`each_mapped`]): row `t` of this PE's region there, which the routing gives, so the
/// rows wait for none of the metadata. A unit towards a PE that is not mapped is staged too,
/// and put there after the warp's last unit ([`put_unit`]), out of the copying loop, whose
/// registers NVSHMEM's put would crowd. A grid of one block would send no rows: it takes
/// two at least ([`DispatchPath::min_blocks`]). (With that one block sending the metadata and
/// then copying, ptxas spilled 8-12 bytes on sm_80-sm_100 at 64 registers.)
///
/// Against the block per token it replaces (a metadata warp beside seven copying ones, 80
/// registers, three blocks an SM; from 9 tokens a block its pair slots reserved at once, in
/// a kernel of its own), Rust and twin alike, six calls in both slot orders
/// (BENCHMARKS.md, sixty-seventh session): on one H200 at 1 PE 0.94-0.98 of the time at
/// 128 tokens, 0.89-0.92 at 512, 0.90-0.91 at 2048 and 0.94 at 4096 (runs 2-3); on two
/// H200s at 2 PEs 0.98, 0.95, 0.94 and 0.96 (run 3). Its metadata in one block of 8 then,
/// against one of 4 (1.03 of the time at 4096 tokens), 6 (within 3 %), 12 and 16 (1.14 and
/// 1.33: their metadata blocks set the pace); its pair slots reserved from 2 tokens a block
/// took 1.05-1.07 of the time at 128-512 tokens, where a warp's few atomics are shorter than
/// the block's reservation (runs 1-2). In one block of 6 since the copying blocks at one PE
/// end without an arrival (module documentation, Completion): there one block in 8 took
/// 1.04-1.05 of one in 6's time at 2048 tokens and 0.99-1.01 at 128, 512 and 4096 tokens,
/// one in 5 and 7 as one in 6, one in 10 1.10-1.20; at 2 PEs on two H200s 0.999-1.004
/// (sixty-eighth session, runs 2-4).
///
/// # Safety
/// See [`moe_dispatch_fp8()`]; every thread of the block calls it.
#[inline(always)]
unsafe fn send_by_role<R: Reach>(b: Bufs, reach: R, s: Shape) {
    let n = s.n_pes;
    let lane = lane_id();
    let g = grid_dim_x();
    let meta_blocks = role_meta_blocks();
    let wpb = warps_per_block();
    // SAFETY: for the whole function: `t < T` and `d < n` for every `send`, `pick`, `choice`
    // and `put_unit`; each warp calls `send`, `routed` (whose ballots need whole warps),
    // `store_fp8` and `put_unit` whole; the reserved pair slots' table is in the launch's
    // shared memory (`reserved_table`), which only a metadata block touches here, and holds
    // its `count * K` pairs, whose tokens `token(i)` are below `T`; row `t` of `comb_stage`
    // is this token's alone until the dispatch's `quiet` (module documentation).
    unsafe {
        if block_idx_x() < meta_blocks {
            let mb = block_idx_x() as usize;
            let count = tokens_from(s.tokens, mb as u32, meta_blocks);
            let token = |i: u32| mb + i as usize * meta_blocks as usize;
            let all = NamedBarrier::new(1, block_dim_x());
            let reserved = match reserved_table(s) {
                Some((base, ranks))
                    if count >= ROLE_RESERVE_FROM && count * s.top_k <= FP8_RESERVE_PAIRS =>
                {
                    reserve_pairs(b, s, (all, thread_idx_x()), count, token, base, ranks);
                    true
                }
                _ => false,
            };
            // Lane `d` counts the block's rows towards PE `d` and adds them to its row cursor
            // once.
            let mut rows = 0;
            let mut u = warp_id();
            while u < count * n {
                let (i, d) = (u / n, u % n);
                let slot = if reserved {
                    PairSlot::Reserved(i)
                } else {
                    PairSlot::Atomic
                };
                let pk = pick(b, s, token(i), lane);
                let sent = send::<false, _>(b, reach, s, (token(i), d), lane, slot, pk);
                rows += u32::from(sent >= 0 && lane == d);
                u += wpb;
            }
            count_rows(b, lane, rows);
        } else {
            copy_units::<false, _>(
                b,
                reach,
                s,
                (block_idx_x() - meta_blocks) * wpb + warp_id(),
                (g - meta_blocks) * wpb,
                || {},
            );
        }
    }
}

/// The FP8 dispatches' copying warps, warp `gw` of `nrw`: they take the rows' units of 1024
/// values in turn, load a unit, quantise it in registers ([`quantize_held`]) and store the
/// `e4m3` values and their scales into every PE the row goes to whose memory is mapped here
/// ([`each_mapped`]): in low-latency mode row `t` of this PE's region there, which the
/// routing gives; with `TP` the layout's slot ([`Placed::Slots`]). `meet` runs once in each
/// thread, after its first unit's loads are issued (or at once, without a unit): there the
/// throughput dispatch waits for the rows' slots, its loads on their way. A unit towards a PE
/// that is not mapped is staged too, and put there after the warp's last unit
/// ([`put_unit`]), out of the copying loop, whose registers NVSHMEM's put would crowd.
///
/// # Safety
/// Whole warps; with `TP`, `send_slot` complete once `meet` has returned; the buffers as in
/// [`moe_dispatch()`]; `meet` may hold a block barrier (every thread calls it once).
#[inline(always)]
unsafe fn copy_units<const TP: bool, R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    gw: u32,
    nrw: u32,
    mut meet: impl FnMut(),
) {
    let h = s.hidden as usize;
    let chunks = (h / 8) as u32;
    let lane = lane_id();
    let per_row = chunks.div_ceil(128);
    let units = s.tokens * per_row;
    // SAFETY: `t < T` for every `choice`, `each_mapped` and `put_unit`; each warp calls
    // `routed` (whose ballots need whole warps), `store_fp8` and `put_unit` whole; row `t`
    // of `comb_stage` is this token's alone until the dispatch's `quiet` (module
    // documentation); with `TP` every store and `put_unit` reads `send_slot` after `meet`
    // has returned (the caller's contract: complete by then), and each thread calls `meet`
    // once.
    unsafe {
        let mut staged = false;
        let mut met = false;
        let mut u = gw;
        while u < units {
            let (t, first) = ((u / per_row) as usize, u % per_row * 128);
            let from = b.x.as_ptr().add(t * h).cast::<Chunk>().cast_const();
            let raw = load_held::<true>(from, first, chunks, lane, 32);
            if !met {
                meet();
                met = true;
            }
            let e = if TP { -1 } else { choice(b, s, t, lane) };
            let q = quantize_held(&raw);
            let stage = b.comb_stage.as_ptr().wrapping_add(t * h);
            let by = if TP {
                Placed::Slots
            } else {
                Placed::Routed(routed(s, e))
            };
            let unmapped = each_mapped(b, reach, s, t, by, |peer| {
                store_fp8(&q, peer, h, first, lane, 32)
            });
            if unmapped {
                store_fp8(&q, stage, h, first, lane, 32);
                staged = true;
            }
            u += nrw;
        }
        if !met {
            meet();
        }
        if staged {
            sync_warp(u32::MAX);
            let mut u = gw;
            while u < units {
                put_unit::<TP, _>(b, reach, s, (u / per_row) as usize, u % per_row * 128);
                u += nrw;
            }
        }
    }
}

/// The throughput FP8 dispatch, its blocks split by role. The grid's last `n + 1` of every
/// [`TP_META_SHARE`] blocks at `n` PEs (`M` of them, [`tp_meta_blocks`]) send the
/// metadata: block `g - M + mb` the tokens `mb, mb + M, ...`, a warp per (token, PE), once
/// the whole layout is out ([`shmem_device::pdl::wait`]), each warp's next token's choices
/// and weights ([`pick`]) loaded while it sends the one before. The other blocks' warps
/// copy the rows' units of 1024 values among theirs ([`copy_units`]), as the low-latency
/// copying warps do: each issues its first unit's loads, then the block's first warp waits
/// for the layout to have placed this PE's rows ([`wait_slots`]) and the block meets, so
/// that the loads are in flight meanwhile. The metadata blocks come last because they wait
/// for the layout: a grid's last blocks start last, where the layout's blocks held their
/// SMs.
///
/// Against every block copying and then sending its tokens' metadata (3999659), held
/// (BENCHMARKS.md, seventy-seventh session): on one H200 at 1 PE 0.87-0.89 of the time at 128
/// tokens, 0.89-0.91 at 512, 0.97-0.98 at 2048, 0.96-0.99 at 3072 and 1.00-1.01 at 4096; on two
/// H200s at 2 PEs 0.96, 0.98, 1.01 and 1.00 at 128, 512, 2048 and 4096. The same with the metadata
/// blocks first (they then take the SMs that start at once and idle there until the layout ends):
/// 1.03 at 4096 tokens; one block in 6 last, without the choices loaded ahead: 0.92-0.96 at
/// 128-2048 tokens, 1.01 at 4096; one in 12 or 24: 1.14-1.71 at 4096, the metadata then the round's
/// longest path.
///
/// # Safety
/// See [`moe_dispatch_fp8_throughput()`] (a grid of two blocks at least); every thread of the
/// block calls it.
#[inline(always)]
unsafe fn send_units_throughput<R: Reach>(b: Bufs, reach: R, s: Shape) {
    let (n, w, nw, lane) = (s.n_pes, warp_id(), warps_per_block(), lane_id());
    let g = grid_dim_x();
    let meta = tp_meta_blocks(g, n);
    let copying = g - meta;
    // SAFETY: the caller's contract; `t < T` and `d < n` for every `pick` and `send`, whole
    // warps; each thread of a copying block calls `meet` once (`copy_units`), after which
    // the layout has placed this PE's rows (`wait_slots`, then the block's barrier).
    unsafe {
        if block_idx_x() < copying {
            copy_units::<true, _>(b, reach, s, block_idx_x() * nw + w, copying * nw, || {
                if w == 0 {
                    wait_slots(b, s);
                }
                sync_threads();
            });
            return;
        }
        let mb = (block_idx_x() - copying) as usize;
        let count = tokens_from(s.tokens, mb as u32, meta);
        let token = |i: u32| mb + i as usize * meta as usize;
        let mut u = shmem_device::hint::opaque(w);
        let mut next = (u < count * n).then(|| pick(b, s, token(u / n), lane));
        shmem_device::pdl::wait();
        while u < count * n {
            let (i, d) = (u / n, u % n);
            let pk = match next.take() {
                Some(pk) => pk,
                None => pick(b, s, token(i), lane),
            };
            let later = u + nw;
            if later < count * n {
                next = Some(pick(b, s, token(later / n), lane));
            }
            send::<true, _>(b, reach, s, (token(i), d), lane, PairSlot::Atomic, pk);
            u = later;
        }
    }
}

/// The dispatch (module documentation) of `path`, which is `s.dispatch_path()`; `registers`
/// in the `bf16` paths' register kernels ([`send_held`]).
///
/// # Safety
/// See [`moe_dispatch()`].
#[inline(always)]
unsafe fn dispatch<R: Reach>(b: Bufs, reach: R, s: Shape, (path, registers): (DispatchPath, bool)) {
    // Each path fixes the mode and the type (the kernel's contract), so that every test of
    // them below folds away: the `bf16` paths, on one H200, at 1 PE, held, took 0.991-0.992
    // of the time at 128 and 4096 tokens; the twin, changed alike, 0.948 at 4096 tokens in
    // low-latency mode (BENCHMARKS.md, fortieth session).
    let (mode, dtype) = match path {
        DispatchPath::LowLatency => (MODE_LOW_LATENCY, DTYPE_BF16),
        DispatchPath::Throughput => (MODE_THROUGHPUT, DTYPE_BF16),
        DispatchPath::Fp8LowLatency => (MODE_LOW_LATENCY, DTYPE_FP8),
        DispatchPath::Fp8Throughput => (MODE_THROUGHPUT, DTYPE_FP8),
    };
    let s = Shape { mode, dtype, ..s };
    if path == DispatchPath::Fp8LowLatency {
        // SAFETY: the kernel's contract: a shape the host accepted.
        unsafe { s.assume_checked() };
    }
    let tp = s.mode == MODE_THROUGHPUT;
    let n = s.n_pes;
    // Whether the block's metadata warps sent the counts on their own ([`counts_early`]),
    // and read them in block 0 where every PE is mapped.
    // SAFETY: the kernel's contract; every thread of the block calls them.
    let early = unsafe {
        if path.fp8() && !tp {
            send_by_role(b, reach, s);
            false
        } else if path.fp8() {
            send_units_throughput(b, reach, s);
            false
        } else {
            send_held(b, reach, s, registers)
        }
    };
    // Which blocks add to this PE's own arrival ([`arrive_block`]). What this grid sends
    // its own PE reaches the kernels after this one by stream order; only what block 0
    // reads after its wait, the counts ([`pull_counts`]), needs the blocks that took this
    // PE's cursors: every block, or the FP8 dispatch's metadata blocks. Where block 0 reads
    // nothing (throughput; the counts read early), block 0 alone adds it.
    let pulls = !(tp || early && all_mapped(b, reach, n));
    let own = match path {
        _ if !pulls => Some(1),
        DispatchPath::Fp8LowLatency => Some(role_meta_blocks()),
        _ => None,
    };
    let sig = b.signals.wrapping_add(SIG_DISPATCH);
    // SAFETY: a signal word, counting rounds (module documentation); the whole block calls
    // it; the kernel's contract bounds `n`; `own` is the same in every block, at least 1.
    unsafe { arrive_block(b, reach, sig, n, own) };
    if thread_idx_x() == 0 && block_idx_x() == 0 {
        // SAFETY: as above.
        unsafe { wait_arrivals(sig, s.round, n) };
    }
    if block_idx_x() != 0 || !pulls {
        return;
    }
    // Block 0, once thread 0 has seen every PE's grid arrive.
    sync_threads();
    // SAFETY: the kernel's contract; the whole block, after every PE's grid has arrived.
    unsafe { pull_counts::<false, _>(b, reach, s, (thread_idx_x(), block_dim_x())) };
}

/// Low latency, block 0 once every PE's grid has arrived: what each source sent here, from
/// its cursors towards this PE (final), which are then reset for the next round. The source
/// touches them again only in its next dispatch, after this round's combine, which follows
/// this kernel here. A thread a counter: each reads and resets at most one when the `n L`
/// counters are fewer than the block's threads (one warp reading them two a lane was 1.3 µs
/// slower at 64 experts).
///
/// # Safety
/// As [`moe_dispatch()`]; threads `0..bs` of the block call it (this one the `tid`th),
/// after every PE's whole grid has counted its pairs and rows here ([`wait_arrivals`] of
/// `SIG_DISPATCH`, or of `SIG_RESERVED` in [`counts_early`]).
#[inline(always)]
unsafe fn pull_counts<const MAPPED: bool, R: Reach>(
    b: Bufs,
    reach: R,
    s: Shape,
    (tid, bs): (u32, u32),
) {
    let (me, n, cap) = (my_pe() as u32, s.n_pes, s.capacity);
    let l_n = s.experts / n;
    let pair_cursors = ROW_CURSORS + n as usize;
    // SAFETY: in bounds; this PE alone reads and resets the sources' cursors towards it and
    // writes its own counts.
    unsafe {
        // Whether this thread reset a counter with `p` (an unmapped source): its own `quiet`
        // then completes it; stores through mapped addresses complete with the kernel.
        let mut put = false;
        let mut i = tid;
        while i < n * l_n {
            let (src, l) = (i / l_n, i % l_n);
            let (c, by_put) = take::<MAPPED, _>(
                counter(b, pair_cursors + (me * l_n + l) as usize),
                reach,
                src,
            );
            put |= by_put;
            let at = (l * n + src) as usize;
            st(b.expert_count, at, c.min(cap));
            st(b.expert_offset, at, (l * n + src) * cap);
            i += bs;
        }
        // The row counts on the threads after the pairs' (the first ones when `n L >= bs`).
        let r = (tid + bs - (n * l_n) % bs) % bs;
        if r < n {
            let (rows, by_put) = take::<MAPPED, _>(counter(b, ROW_CURSORS + me as usize), reach, r);
            put |= by_put;
            st(b.recv_count, r as usize, rows);
        }
        if put {
            quiet();
        }
    }
}

/// `pe`'s copy of the counter `cur`, which it leaves at zero: a load and a store through the
/// mapped address, else a `g` and a `p` (then `true`: the `p` needs this thread's `quiet`).
/// (Measured on one H100: a `quiet` after mapped stores, which complete with the kernel
/// anyway, cost the low-latency dispatch 1.8 µs.)
///
/// # Safety
/// `cur` is a word of [`Bufs::work`]; nothing else touches `pe`'s copy meanwhile.
#[inline(always)]
unsafe fn take<const MAPPED: bool, R: Reach>(cur: Sym<u32>, reach: R, pe: u32) -> (u32, bool) {
    // SAFETY: the caller's contract; a mapped address is `pe`'s copy of `cur`.
    unsafe {
        match reach.ptr(cur, pe as i32) {
            Some(q) => {
                let c = q.as_ptr().read_volatile();
                q.as_ptr().write_volatile(0);
                (c, false)
            }
            None if MAPPED => (0, false),
            None => {
                let c = g(cur, pe as i32);
                p(cur, 0u32, pe as i32);
                (c, true)
            }
        }
    }
}

/// A round's arrivals at a signal word from one PE's whole grid: `SIG_*` words count up by
/// `ARRIVAL` a PE a round, whatever the PE's grid size.
pub const ARRIVAL: u64 = 1 << 32;

/// This block's share of its PE's [`ARRIVAL`] at `sig` on every PE, through NVSHMEM: one
/// thread of the block calls it once the block's puts are complete ([`arrive_block`]); no
/// block waits for another to send it.
///
/// # Safety
/// `sig` is a signal word of [`Bufs::signals`]; `own` as in [`arrive_block`].
#[inline(always)]
unsafe fn arrive(sig: Sym<u64>, n: u32, own: Option<u32>) {
    for d in 0..n {
        let v = arrival_share(d, own);
        if v != 0 {
            // SAFETY: the caller's contract; `d < n`.
            unsafe { signal_op(sig, v, SignalOp::Add, d as i32) };
        }
    }
}

/// This block's share of its PE's [`ARRIVAL`] at PE `d`'s copy of a signal word. Of the
/// `B` blocks that add to `d`'s copy, block 0 adds `ARRIVAL - (B - 1)`, every other 1, and a
/// block from `B` on nothing: `B` is the grid's `G`, or for this PE's own copy `k` where
/// `own` is `Some(k)` ([`arrive_block`]).
#[inline(always)]
fn arrival_share(d: u32, own: Option<u32>) -> u64 {
    let blocks = match own {
        Some(o) if d == my_pe() as u32 => o,
        _ => grid_dim_x(),
    };
    match block_idx_x() {
        0 => ARRIVAL - u64::from(blocks - 1),
        i if own.is_none() || i < blocks => 1,
        _ => 0,
    }
}

/// Waits until every PE's whole grid of round `round` has arrived at `sig`: `round · n ·`
/// [`ARRIVAL`]. A PE's arrivals for round `R + 1` come only after this PE has finished round
/// `R` (each dispatch follows the previous round's combine, whose completion needs every
/// PE), so the sum passes `R · n · ARRIVAL` only when all `n` grids of round `R` are done.
///
/// # Safety
/// As [`arrive`].
#[inline(always)]
unsafe fn wait_arrivals(sig: Sym<u64>, round: u32, n: u32) {
    // SAFETY: the caller's contract.
    unsafe { signal_wait_until(sig, Cmp::Ge, u64::from(round) * u64::from(n) * ARRIVAL) };
}

/// Runs `f(pair, row, local expert)` on one warp for every kept pair of this round (the
/// warps of the grid share them out): the pair's slot, its received row, and its local
/// expert `0..L`. The warps take the `q`-th pairs of every (local expert, source) before
/// the `q + 1`-th, so that the kept pairs, packed at the front of each, go to as many warps
/// as there are pairs, whatever the grid. Taken (local expert, source) after (local expert,
/// source), a grid with fewer warps than slots gave some warps several pairs, one after the
/// other, and others none: at 128 tokens (8192 slots, 1024 pairs) on 4224 warps, 528 warps
/// two pairs each (BENCHMARKS.md, eighty-first session).
///
/// # Safety
/// After [`moe_dispatch()`] of the round on this PE's stream; shape and buffers as there.
#[inline(always)]
unsafe fn for_each_pair(b: Bufs, s: Shape, mut f: impl FnMut(usize, usize, u32)) {
    let n = s.n_pes;
    let blocks = (s.experts / n * n) as usize;
    let per = s.capacity.min(s.tokens) as usize;
    let (_, gw, nw) = warps();
    let mut i = gw as usize;
    while i < blocks * per {
        let (blk, q) = (i % blocks, i / blocks);
        // SAFETY: `blk < L * n`; a kept pair's slot holds a received row of this round.
        unsafe {
            if (q as u32) < ld(b.expert_count, blk) {
                let pair = ld(b.expert_offset, blk) as usize + q;
                f(pair, ld(b.expert_rows, pair) as usize, blk as u32 / n);
            }
        }
        i += nw as usize;
    }
}

/// Chunks a lane of the stand-in expert layer (and of the front's gather) loads before it
/// converts (or stores) any (`batched`): a row is one warp's, 28 chunks a lane at hidden
/// 7168, whose loads one chunk at a time were waited for one after another. With `for_each_pair`'s order, a round's step (barrier,
/// dispatch, experts, barrier, combine) took 8.6 µs less at 128 tokens and 19 µs less at 512
/// on one H200 (low-latency `bf16`, 1 PE; BENCHMARKS.md, eighty-first session). The twin
/// uses the same (checked by a test).
pub const EXPERT_CHUNKS: usize = 4;
const _: () = assert!(
    EXPERT_CHUNKS == 4,
    "`batched`'s `unrolled!` list names its chunks"
);

/// Calls `f(c, load(c))` for `c = lane, lane + 32, ...` below `n`, in order, the loads of
/// [`EXPERT_CHUNKS`] such `c` issued before the first of their `f`.
#[inline(always)]
fn batched<T: Copy>(n: usize, lane: usize, load: impl Fn(usize) -> T, mut f: impl FnMut(usize, T)) {
    let mut c = lane;
    while c + 32 * (EXPERT_CHUNKS - 1) < n {
        let v: [T; EXPERT_CHUNKS] = core::array::from_fn(|j| load(c + 32 * j));
        unrolled!(0 1 2 3; j => { f(c + 32 * j, v[j]) });
        c += 32 * EXPERT_CHUNKS;
    }
    while c < n {
        f(c, load(c));
        c += 32;
    }
}

/// The stand-in expert layer (module documentation).
///
/// # Safety
/// See [`moe_experts()`].
#[inline(always)]
unsafe fn experts(b: Bufs, s: Shape) {
    let (me, h) = (my_pe() as u32, s.hidden as usize);
    let l_n = s.experts / s.n_pes;
    let lane = lane_id() as usize;
    // SAFETY: this kernel's contract; each pair's output row is this warp's alone; every
    // chunk `batched` passes is below the row's end (`h / 16` or `h / 8` chunks).
    unsafe {
        for_each_pair(b, s, |pair, row, l| {
            let scale = expert_scale(me * l_n + l);
            let src = b.recv_x.as_ptr().add(row * h).cast::<Chunk>();
            let dst = b.expert_y.as_ptr().add(pair * h).cast::<Chunk>();
            if s.fp8() {
                // 16 values a chunk; the group's scale after the row's `h` bytes.
                let scales = src.cast::<u8>().add(h).cast::<f32>();
                let load = |c: usize| (Chunk::load_global(src.add(c)), scales.add(c / 8).read());
                batched(h / 16, lane, load, |c, (q, g)| {
                    let v = dequantize(q);
                    for half in 0..2 {
                        let mut y = [0f32; 8];
                        for i in 0..8 {
                            y[i] = v[8 * half + i] * g * scale;
                        }
                        narrow(y).store_global(dst.add(2 * c + half));
                    }
                });
                return;
            }
            batched(
                h / 8,
                lane,
                |c| Chunk::load_global(src.add(c)),
                |c, q| {
                    let mut v = widen(q);
                    for x in &mut v {
                        *x *= scale;
                    }
                    narrow(v).store_global(dst.add(c));
                },
            );
        })
    }
}

/// Sixteen `e4m3` values of a 16-byte chunk, widened (exact).
#[inline(always)]
fn dequantize(c: Chunk) -> [f32; 16] {
    let v = c.0.map(e4m3x4_to_f32);
    core::array::from_fn(|i| v[i / 4][i % 4])
}

/// The inputs of one call of the front ([`crate::host::front`]), in any device memory of
/// the calling PE, for [`moe_stage()`] to copy into the symmetric buffers.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Stage {
    /// `tokens × H` tokens; null when they are already in `Bufs::x`.
    pub x: DevicePtr<u16>,
    /// `tokens × K` expert ids (-1: none).
    pub topk: DevicePtr<i32>,
    /// `tokens × K` routing weights.
    pub weights: DevicePtr<f32>,
    /// The call's tokens, at most the shape's; the rest of the shape's rows route nowhere.
    pub tokens: u64,
}

// SAFETY: `#[repr(C)]` of three pointers and a `u64`, no padding: one layout on the host and
// the GPU (the kernel's contract says what the pointers must be).
unsafe impl KernelParam for Stage {
    const KIND: ParamKind = ParamKind::Scalar;
}

/// Where [`moe_gather()`] writes the received tokens by local expert, in any device memory
/// of the calling PE.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Gather {
    /// One row per pair slot ([`Shape::pair_slots`]): the token of each kept pair, `H`
    /// `bf16`, or in an FP8 dispatch `H` `e4m3` bytes.
    pub x: DevicePtr<u16>,
    /// FP8: one row of `H / 128` scales per pair slot (null for `bf16`).
    pub scales: DevicePtr<f32>,
    /// `2 × L × n` words: the kept pairs of each (local expert, source), then the slot of
    /// the first.
    pub layout: DevicePtr<i32>,
}

// SAFETY: `#[repr(C)]` of three pointers: one layout on the host and the GPU.
unsafe impl KernelParam for Gather {
    const KIND: ParamKind = ParamKind::Scalar;
}

/// Copies the call's inputs into `x`, `topk`, `weights` (rows past `tokens`: no experts),
/// and restarts the signal words at zero, so that every call is round 1.
///
/// # Safety
/// See [`moe_stage()`].
#[inline(always)]
unsafe fn stage(b: Bufs, s: Shape, i: Stage) {
    let (h, k_n, t_n) = (s.hidden as usize, s.top_k as usize, s.tokens as usize);
    let tokens = (i.tokens as usize).min(t_n);
    let (gt, nt) = (
        (block_idx_x() * block_dim_x() + thread_idx_x()) as usize,
        (grid_dim_x() * block_dim_x()) as usize,
    );
    // SAFETY: every index is in bounds of the buffers (shape) and of the inputs (`tokens`
    // rows); each element is this thread's alone.
    unsafe {
        if !i.x.as_ptr().is_null() {
            let (src, dst) = (i.x.as_ptr().cast::<Chunk>(), b.x.as_ptr().cast::<Chunk>());
            let mut c = gt;
            while c < tokens * h / 8 {
                Chunk::load_global(src.add(c)).store_global(dst.add(c));
                c += nt;
            }
        }
        let mut q = gt;
        while q < t_n * k_n {
            let (e, w) = if q < tokens * k_n {
                (
                    i.topk.as_ptr().add(q).read(),
                    i.weights.as_ptr().add(q).read(),
                )
            } else {
                (-1, 0.0)
            };
            st(b.topk, q, e);
            st(b.weights, q, w);
            q += nt;
        }
        if gt < SIGNAL_WORDS {
            st(b.signals, gt, 0u64);
        }
    }
}

/// Writes each kept pair's received token into `g.x`, and the pairs' layout into `g.layout`.
/// A warp copies a pair's row, each lane [`EXPERT_CHUNKS`] chunks at a time, loads first.
/// Against a chunk at a time, the front's dispatch and combine as a CUDA graph, `bf16`, one
/// H200, 1 PE (BENCHMARKS.md, eighty-first session): 30.2 against 32.0 µs a step at 128
/// tokens in low-latency mode, 33.1 against 40.0 in throughput mode; at 4096 tokens 371.0
/// against 370.3 (throughput) and 430.4 against 415.3 (low-latency; the kernel takes 38
/// registers against 32, six blocks an SM instead of eight, and two chunks at a time took
/// 40).
///
/// # Safety
/// See [`moe_gather()`].
#[inline(always)]
unsafe fn gather(b: Bufs, s: Shape, g: Gather) {
    let h = s.hidden as usize;
    let lane = lane_id() as usize;
    let blocks = (s.experts / s.n_pes * s.n_pes) as usize;
    let gt = (block_idx_x() * block_dim_x() + thread_idx_x()) as usize;
    // SAFETY: this kernel's contract; each pair's row of `g.x` is this warp's alone, each
    // word of `g.layout` this thread's.
    unsafe {
        if gt < blocks {
            g.layout
                .as_ptr()
                .add(gt)
                .write(ld(b.expert_count, gt) as i32);
            g.layout
                .as_ptr()
                .add(blocks + gt)
                .write(ld(b.expert_offset, gt) as i32);
        }
        for_each_pair(b, s, |pair, row, _| {
            let src = b.recv_x.as_ptr().add(row * h).cast::<Chunk>();
            let load = |c: usize| Chunk::load_global(src.add(c));
            if s.fp8() {
                let dst = g.x.as_ptr().cast::<u8>().add(pair * h).cast::<Chunk>();
                batched(h / 16, lane, load, |c, q| q.store_global(dst.add(c)));
                let groups = h / crate::fp8::GROUP;
                let from = src.cast::<u8>().add(h).cast::<f32>();
                let mut i = lane;
                while i < groups {
                    g.scales
                        .as_ptr()
                        .add(pair * groups + i)
                        .write(from.add(i).read());
                    i += 32;
                }
                return;
            }
            let dst = g.x.as_ptr().add(pair * h).cast::<Chunk>();
            batched(h / 8, lane, load, |c, q| q.store_global(dst.add(c)));
        })
    }
}

/// Chunks of 16 bytes per lane and row in one unit of combine work: a warp's unit is a
/// segment of `32 * SEGMENT_CHUNKS` chunks (512 `bf16`) of one row, so that a short batch
/// still spreads over many warps.
pub const SEGMENT_CHUNKS: usize = 2; // `each_chunk!` writes out 0..2

/// Rows whose segments a lane loads together before it adds the first: with
/// [`SEGMENT_CHUNKS`], `ROW_GROUP * SEGMENT_CHUNKS` 16-byte loads in flight per lane (2 KiB
/// per warp); the adds then follow in row order. Two rows, not four, fit the combine in 64
/// registers, 4 blocks of 256 an SM instead of 3: more warps with fewer loads each keep HBM
/// and the link busier (measured in the same call: 205 against 209 µs at 4096 tokens on one
/// H100, 236.5 against 241.9 on two H200s).
pub const ROW_GROUP: usize = 2; // `each_row!` writes out 0..2

/// [`unrolled!`] over `0..SEGMENT_CHUNKS`.
macro_rules! each_chunk {
    ($j:ident => $body:block) => {
        unrolled!(0 1; $j => $body)
    };
}

/// [`unrolled!`] over `0..ROW_GROUP`.
macro_rules! each_row {
    ($i:ident => $body:block) => {
        unrolled!(0 1; $i => $body)
    };
}

const _: () = assert!(
    SEGMENT_CHUNKS == 2 && ROW_GROUP == 2 && HELD == 4,
    "each_chunk! and each_row! write out 0..2, the held chunks 0..4"
);

/// One unit's sums: `SEGMENT_CHUNKS` chunks of 8 `f32` per lane.
type Acc = [[f32; 8]; SEGMENT_CHUNKS];

/// Loads chunks `c0 + 32 j + lane` (`j < SEGMENT_CHUNKS`, those below `chunks`) of every
/// non-null row of `rows` (all loads issued first; with `ONCE`, not kept in L1:
/// [`Chunk::load_global_once_if`]), then adds them in row order, each times its weight, to
/// `acc`: `acc = acc + w * y`, or `acc = w * y` for the first row while `*fresh` (which it
/// then clears).
///
/// # Safety
/// Every non-null row is in global memory with `chunks` readable chunks.
#[inline(always)]
unsafe fn accumulate<const ONCE: bool>(
    acc: &mut Acc,
    rows: [*const Chunk; ROW_GROUP],
    w: [f32; ROW_GROUP],
    c0: u32,
    chunks: u32,
    fresh: &mut bool,
) {
    let lane = lane_id();
    let mut v = [[Chunk([0; 4]); SEGMENT_CHUNKS]; ROW_GROUP];
    // Predicated loads, no branches: all eight issue back to back.
    each_row!(i => {
        let (live, row) = (!rows[i].is_null(), rows[i].wrapping_add((c0 + lane) as usize));
        each_chunk!(j => {
            let c = c0 + 32 * j as u32 + lane;
            // SAFETY: loaded only for a row that is there and `c < chunks` (the caller's
            // contract).
            v[i][j] = unsafe {
                let (live, p) = (live && c < chunks, row.wrapping_add(32 * j));
                if ONCE {
                    Chunk::load_global_once_if(live, p)
                } else {
                    Chunk::load_global_if(live, p)
                }
            };
        });
    });
    each_row!(i => {
        if !rows[i].is_null() {
            each_chunk!(j => {
                let y = widen(v[i][j]);
                for e in 0..8 {
                    let p = w[i] * y[e];
                    acc[j][e] = if *fresh { p } else { acc[j][e] + p };
                }
            });
            *fresh = false;
        }
    });
}

/// Stores `acc` as `bf16` into chunks `c0 + 32 j + lane` below `chunks` of `row`.
///
/// # Safety
/// The row is in global memory (here or on a peer) with `chunks` writable chunks, and this
/// lane's are its own.
#[inline(always)]
unsafe fn store_segment(acc: &Acc, row: *mut Chunk, c0: u32, chunks: u32) {
    let lane = lane_id();
    each_chunk!(j => {
        let c = c0 + 32 * j as u32 + lane;
        if c < chunks {
            // SAFETY: `c < chunks` (the caller's contract).
            unsafe { narrow(acc[j]).store_global(row.add(c as usize)) };
        }
    });
}

/// `x`, or 1 where it is 0: a divisor the compiler knows is not zero, so that dividing by
/// it has no panic path. The combine divides by the PE count and its segments per row
/// (never 0 for a shape the host accepts). Each division's panic path loads its source
/// location, a global's address; where the same division is inlined twice, ptxas merged the
/// two loads and moved the one left to the kernel's entry, where every warp then waited for
/// a constant-cache miss before its first instruction of work (`ncu`, BENCHMARKS.md,
/// twenty-ninth session).
#[inline(always)]
fn divisor(x: u32) -> u32 {
    x.max(1)
}

/// A row's 16-byte chunks, the chunks a combine warp takes at a time (a segment), and the
/// segments a row has (at least 1: [`divisor`]).
#[inline(always)]
fn segments(s: Shape) -> (u32, u32, u32) {
    let chunks = s.hidden / 8;
    let per_seg = 32 * SEGMENT_CHUNKS as u32;
    (chunks, per_seg, divisor(chunks.div_ceil(per_seg)))
}

/// The combine (module documentation), its expert rows read as [`Shape::read_once`] says.
///
/// Only the first part ([`send_sums`]) depends on how the rows are read; the rest is one
/// copy. (With the whole combine written out for each, ptxas merged the two copies' loads
/// of a source location, a global's address (a bounded wait's, a division's panic), into
/// one constant load at the kernel's entry: every warp of every block then waited there for
/// a second constant-cache miss before its first instruction of work.)
///
/// # Safety
/// See [`moe_combine()`].
#[inline(always)]
unsafe fn combine<R: Reach>(b: Bufs, reach: R, s: Shape) {
    // SAFETY: the caller's contract.
    unsafe {
        if s.read_once != 0 {
            send_sums::<true, _>(b, reach, s)
        } else {
            send_sums::<false, _>(b, reach, s)
        }
        combine_rest(b, reach, s)
    }
}

/// The combine's first part: each received row's weighted sum, the expert rows read with
/// [`accumulate`]`::<ONCE>`.
///
/// # Safety
/// See [`moe_combine()`].
#[inline(always)]
unsafe fn send_sums<const ONCE: bool, R: Reach>(b: Bufs, reach: R, s: Shape) {
    let (me, n) = (my_pe() as u32, divisor(s.n_pes));
    let (k_n, t_n, h) = (s.top_k as usize, s.tokens as usize, s.hidden as usize);
    let (lane, gw, nw) = warps();
    let mine = (lane as usize) < k_n;
    let (chunks, per_seg, segs) = segments(s);
    // 1. Each received row's weighted sum, straight into its source's `comb_recv`, or for
    //    this PE's own tokens into `out`; a warp per (row, segment), `ROW_GROUP` choices'
    //    rows loaded at a time.
    // Units are numbered in `u32` (they fit: the host checks the sizes): 64-bit division is
    // a subroutine call on the GPU.
    let (t32, segs32) = (t_n as u32, segs);
    let mut u = gw;
    while u < n * t32 * segs32 {
        let (v, c0) = (u / segs32, (u % segs32) * per_seg);
        u += nw;
        // The sources' rows interleaved (row `j` of every source, from the next PE on, then
        // row `j + 1`): at any time about `(n - 1) / n` of the grid's warps store to peers and
        // the rest into `out`, so the link and the local memory are busy together.
        let (src, j) = ((me + 1 + v % n) % n, v / n);
        let r = (src * t32 + j) as usize;
        // SAFETY: for this loop: `r < n * T`, `lane < K` where indexed by lane; the received
        // rows, pairs and outputs of this round are complete (dispatch and experts came
        // before on this stream); segment `c0` of slot `(me, t)` of the source's
        // `comb_recv` (of row `t` of `out` for this PE's own rows) is this warp's.
        unsafe {
            // Whether the row is there: in throughput mode the rows are packed below the
            // count; in low-latency mode row `j` is token `j`'s, its source index -1 when it
            // did not come (`send`). The source index is loaded together with the count (it
            // is in bounds either way), not after it: both decide (a received row's source
            // index is never negative), so the compiler cannot sink the load past the test.
            let (t, count) = (ld(b.recv_src, r), ld(b.recv_count, src as usize));
            if (t < 0) | (s.mode == MODE_THROUGHPUT && j >= count) {
                continue;
            }
            let t = t as usize;
            let (pair, w) = if mine {
                (
                    ld(b.recv_pair, r * k_n + lane as usize),
                    ld(b.recv_w, r * k_n + lane as usize),
                )
            } else {
                (-1, 0.0)
            };
            let target = b.comb_recv.wrapping_add((me as usize * t_n + t) * h);
            let (out, staged) = if src == me {
                (b.out.as_ptr().add(t * h), false)
            } else {
                match reach.ptr(target, src as i32) {
                    Some(p) => (p.as_ptr(), false),
                    None => (b.comb_stage.as_ptr().add(r * h), true),
                }
            };
            let mut acc = [[0f32; 8]; SEGMENT_CHUNKS];
            let mut fresh = false; // the sum starts from +0 (module documentation)
            let mut k = 0;
            while k < k_n {
                let mut rows = [core::ptr::null::<Chunk>(); ROW_GROUP];
                let mut ws = [0f32; ROW_GROUP];
                each_row!(i => {
                    // Lanes from `K` on hold pair -1 (and `k + i < 32`: `K <= 16`).
                    let pk = shfl_idx(pair as u32, (k + i) as u32) as i32;
                    ws[i] = f32::from_bits(shfl_idx(w.to_bits(), (k + i) as u32));
                    if pk >= 0 {
                        rows[i] = b.expert_y.as_ptr().add(pk as u32 as usize * h).cast();
                    }
                });
                accumulate::<ONCE>(&mut acc, rows, ws, c0, chunks, &mut fresh);
                k += ROW_GROUP;
            }
            store_segment(&acc, out.cast(), c0, chunks);
            if staged {
                let (c0, len) = (c0 as usize, (chunks - c0).min(per_seg) as usize * 8);
                put_nbi(
                    Warp,
                    SymSlice::from_raw_parts(target.as_ptr().add(c0 * 8), len),
                    DeviceSlice::from_raw_parts(b.comb_stage.as_ptr().add(r * h + c0 * 8), len),
                    src as i32,
                );
            }
        }
    }
}

/// The combine after [`send_sums`]: the completion, then each token's sum.
///
/// # Safety
/// See [`moe_combine()`]; after [`send_sums`].
#[inline(always)]
unsafe fn combine_rest<R: Reach>(b: Bufs, reach: R, s: Shape) {
    let (me, n) = (my_pe() as u32, divisor(s.n_pes));
    let (k_n, t_n, l_n, h) = (
        s.top_k as usize,
        s.tokens as usize,
        divisor(s.experts / n),
        s.hidden as usize,
    );
    let (lane, gw, nw) = warps();
    let mine = (lane as usize) < k_n;
    let (chunks, per_seg, segs32) = segments(s);
    let t32 = t_n as u32;
    // 2. Completion: every block arrives at every PE; every block waits for all PEs' grids.
    let sig = b.signals.wrapping_add(SIG_COMBINE);
    // SAFETY: a signal word, counting rounds (module documentation); the whole block calls
    // it; the kernel's contract bounds `n`. Every block: the sums in `out` are read back
    // below.
    unsafe { arrive_block(b, reach, sig, n, None) };
    if thread_idx_x() == 0 {
        // SAFETY: as above.
        unsafe { wait_arrivals(sig, s.round, n) };
    }
    sync_threads();
    // 3. Each token: the sums of its destinations, in PE order, the first as it is (its own
    //    PE's from `out`); a warp per (token, segment). A token whose experts are all on
    //    this PE has its sum in `out` already.
    let mut u = gw;
    while u < t32 * segs32 {
        let (t, c0) = ((u / segs32) as usize, (u % segs32) * per_seg);
        u += nw;
        // SAFETY: `t < T`, `lane < K` where indexed; every destination's sum has arrived
        // (the wait above); segment `c0` of row `t` of `out` is this warp's.
        unsafe {
            let e = if mine {
                ld(b.topk, t * k_n + lane as usize)
            } else {
                -1
            };
            // The token's destinations, without a branch on `e`: a branch that depends on
            // the lane left the warp diverged at `warp_or`'s shuffles, which then ran the
            // hardware's slow path for a divergent warp on every unit. `e < 0` is no
            // destination (its quotient is ignored).
            let d = (e as u32) / l_n;
            let mask = warp_or(u32::from(e >= 0) << (d & 31));
            if mask == 1 << me {
                continue;
            }
            let out = b.out.as_ptr().add(t * h);
            let mut acc = [[0f32; 8]; SEGMENT_CHUNKS];
            let mut fresh = true;
            let mut m = mask;
            while m != 0 {
                let mut rows = [core::ptr::null::<Chunk>(); ROW_GROUP];
                each_row!(i => {
                    if m != 0 {
                        let d = m.trailing_zeros() as usize;
                        m &= m - 1;
                        rows[i] = if d == me as usize {
                            out.cast_const()
                        } else {
                            b.comb_recv.as_ptr().add((d * t_n + t) * h)
                        }
                        .cast();
                    }
                });
                accumulate::<false>(&mut acc, rows, [1.0; ROW_GROUP], c0, chunks, &mut fresh);
            }
            store_segment(&acc, out.cast(), c0, chunks);
        }
    }
}

/// Declares the kernels: each is `#[shmem_kernel] unsafe fn $name(b: Bufs, s: Shape)`
/// calling `$body(b, s)`, or `$body(b, s, $arg)`, with a [`Reach`] `$reach` as
/// `$body(b, $reach, s…)`, under its own contract.
macro_rules! kernels {
    ($($(#[$doc:meta])* $name:ident $(($($bounds:tt)*))? => $body:ident $([$reach:ident])? $(($arg:expr))?;)*) => { $(
        $(#[$doc])*
        #[shmem_kernel($($($bounds)*)?)]
        pub unsafe fn $name(b: Bufs, s: Shape) {
            // SAFETY: this kernel's contract.
            unsafe { $body(b, $($reach,)? s $(, $arg)?) }
        }
    )* };
}

kernels! {
    /// Throughput mode's layout pass: row slots, pair ranks, and the exchange of counts. An
    /// expert column's units leave their pairs' ranks within the unit, and only the column's
    /// last unit waits for the earlier ones, writing each unit's prefix, which the dispatch's
    /// metadata adds ([`seg_prefix_at`]): the layout's blocks end sooner, and the dispatch's
    /// blocks start beside its last units. Against every expert unit waiting for its column's
    /// earlier ones and leaving the whole rank, on one H200, held: the throughput `bf16`
    /// dispatch took 0.963 of the time at 512 tokens, 0.996 at 2048 and 0.982 at 4096
    /// (seventy-fourth session); the FP8 one, whose copying blocks are split from its
    /// metadata blocks since, 0.99 / 0.96 / 0.99 at 64 experts and 0.97 / 0.88 / 0.88 at 256,
    /// and at 2 PEs under MPS 0.94 / 0.97 (64 experts, 512 and 4096 tokens) and 0.91 / 0.94
    /// (256) (eighty-second session; BENCHMARKS.md).
    ///
    /// # Safety
    /// Every PE launches it with the same shape (`mode` throughput), cooperatively (grid
    /// barriers), in 1-D blocks of a multiple of 32 threads; `b` holds the symmetric buffers
    /// sized as the module documentation says, zeroed before round 1; `topk` holds distinct
    /// experts per token (or -1); rounds count up by one per dispatch.
    moe_layout => layout;

    /// Sends every token to the PEs of its experts, for shapes whose
    /// [`Shape::dispatch_path`] is [`DispatchPath::LowLatency`]. Returns once every PE's
    /// tokens for this PE are here. 64 registers from sm_90 up (four blocks of 256 threads an
    /// SM; 1-2 % faster than 72 on an H100), 72 below: at 64 ptxas spills 12 bytes for sm_80.
    /// From sm_90 it moves the rows by bulk copies (warp 0; the other warps send the
    /// metadata): on one H200 at 1 PE, held, 0.95-0.96 of the time at 128-4096 tokens
    /// against copying through registers (BENCHMARKS.md, forty-second session). It must then
    /// be launched with [`Shape::dispatch_shared_bytes`] of dynamic shared memory, in blocks
    /// of more than one warp; other launches take [`moe_dispatch_registers()`]
    /// ([`Shape::dispatch_by_registers`]), and this kernel panics if given one. Built for an
    /// older GPU it copies through registers.
    ///
    /// # Safety
    /// As [`moe_layout()`] (any grid size; block 0 waits for the rest of the grid to arrive,
    /// so one more block must be able to run beside it), `n_pes <= 32`, `top_k <= 16`,
    /// `hidden` a multiple of 8; the previous round's combine has finished on every PE; `s`
    /// takes this kernel ([`Shape::dispatch_path`]); the launch's dynamic shared memory, if
    /// any, is this kernel's alone.
    moe_dispatch(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Probed]((DispatchPath::LowLatency, false));

    /// [`moe_dispatch()`] for where every PE's memory is mapped here ([`Mapped`]; the host launches
    /// it where [`Shape::mapped`] says so).
    ///
    /// # Safety
    /// As [`moe_dispatch()`], and every PE's memory is mapped here ([`Shape::mapped`]; the
    /// simulator checks it, the GPU assumes it).
    moe_dispatch_mapped(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Mapped]((DispatchPath::LowLatency, false));

    /// [`moe_dispatch()`] through registers, on any GPU and launch: for the launches that
    /// [`Shape::dispatch_by_registers`] names.
    ///
    /// # Safety
    /// As [`moe_dispatch()`].
    moe_dispatch_registers(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Probed]((DispatchPath::LowLatency, true));

    /// [`moe_dispatch_registers()`] for where every PE's memory is mapped here ([`Mapped`]; the
    /// host launches it where [`Shape::mapped`] says so).
    ///
    /// # Safety
    /// As [`moe_dispatch_registers()`], and every PE's memory is mapped here ([`Shape::mapped`];
    /// the simulator checks it, the GPU assumes it).
    moe_dispatch_registers_mapped(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Mapped]((DispatchPath::LowLatency, true));

    /// [`moe_dispatch()`] for [`DispatchPath::Throughput`], after [`moe_layout()`] of the
    /// same round: its rows by bulk copies as there, into the layout's slots. On one H200 at
    /// 1 PE, held, the round took 0.87 of its time at 128 tokens and 0.97 at 4096 against a
    /// warp per (token, destination) through registers (BENCHMARKS.md, forty-fifth session).
    /// From sm_90 64 registers, four blocks an SM: at 72 (three) its rounds took 0.3-0.4 µs
    /// more at 512 and 4096 tokens (forty-seventh session); 72 on sm_80, where its register
    /// path spilled 4 bytes at 64.
    ///
    /// # Safety
    /// As [`moe_dispatch()`], with its launch as there (else
    /// [`moe_dispatch_throughput_registers()`]).
    moe_dispatch_throughput(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Probed]((DispatchPath::Throughput, false));

    /// [`moe_dispatch_throughput()`] for where every PE's memory is mapped here ([`Mapped`]; the
    /// host launches it where [`Shape::mapped`] says so).
    ///
    /// # Safety
    /// As [`moe_dispatch_throughput()`], and every PE's memory is mapped here ([`Shape::mapped`];
    /// the simulator checks it, the GPU assumes it).
    moe_dispatch_throughput_mapped(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Mapped]((DispatchPath::Throughput, false));

    /// [`moe_dispatch_throughput()`] through registers, on any GPU and launch: for the
    /// launches that [`Shape::dispatch_by_registers`] names.
    ///
    /// # Safety
    /// As [`moe_dispatch_throughput()`].
    moe_dispatch_throughput_registers(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Probed]((DispatchPath::Throughput, true));

    /// [`moe_dispatch_throughput_registers()`] for where every PE's memory is mapped here
    /// ([`Mapped`]; the host launches it where [`Shape::mapped`] says so).
    ///
    /// # Safety
    /// As [`moe_dispatch_throughput_registers()`], and every PE's memory is mapped here
    /// ([`Shape::mapped`]; the simulator checks it, the GPU assumes it).
    moe_dispatch_throughput_registers_mapped(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Mapped]((DispatchPath::Throughput, true));

    /// [`moe_dispatch()`] for [`DispatchPath::Fp8LowLatency`], its blocks split by role: one
    /// in [`ROLE_META_SHARE`] sends the metadata, the others quantise and store the rows, 1024
    /// values a warp at a time. 64 registers, four blocks of 256 threads an SM. Launched with
    /// [`Shape::dispatch_shared_bytes`] of dynamic shared memory, its metadata blocks reserve
    /// their pair slots at once; given less, they take an atomic a pair.
    ///
    /// # Safety
    /// As [`moe_dispatch()`], on a grid of at least two blocks
    /// ([`DispatchPath::min_blocks`]).
    moe_dispatch_fp8(max_registers = 64) => dispatch[Probed]((DispatchPath::Fp8LowLatency, false));

    /// [`moe_dispatch_fp8()`] for where every PE's memory is mapped here ([`Mapped`]; the host
    /// launches it where [`Shape::mapped`] says so).
    ///
    /// # Safety
    /// As [`moe_dispatch_fp8()`], and every PE's memory is mapped here ([`Shape::mapped`]; the
    /// simulator checks it, the GPU assumes it).
    moe_dispatch_fp8_mapped(max_registers = 64) => dispatch[Mapped]((DispatchPath::Fp8LowLatency, false));

    /// [`moe_dispatch()`] for [`DispatchPath::Fp8Throughput`], after [`moe_layout()`] of the
    /// same round, its blocks split by role: the last `n + 1` in [`TP_META_SHARE`] at `n` PEs
    /// send the metadata, the others' warps copy units of 1024 values among theirs
    /// (`send_units_throughput`). 64 registers from sm_90, four blocks of 256 threads an SM,
    /// without spills; 72 on sm_80, where at 64 ptxas spilled 4 bytes (the copying loop's
    /// bound) once the blocks were split by role (sm_80 not measured). Its units loaded one
    /// ahead, which needs 80 registers (three blocks), took 1.13 of the time at 4096 tokens on
    /// one H200 at 1 PE, held (BENCHMARKS.md, seventy-sixth session).
    ///
    /// # Safety
    /// As [`moe_dispatch()`], on a grid of at least two blocks
    /// ([`DispatchPath::min_blocks`]).
    moe_dispatch_fp8_throughput(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Probed]((DispatchPath::Fp8Throughput, false));

    /// [`moe_dispatch_fp8_throughput()`] for where every PE's memory is mapped here ([`Mapped`];
    /// the host launches it where [`Shape::mapped`] says so).
    ///
    /// # Safety
    /// As [`moe_dispatch_fp8_throughput()`], and every PE's memory is mapped here
    /// ([`Shape::mapped`]; the simulator checks it, the GPU assumes it).
    moe_dispatch_fp8_throughput_mapped(max_registers = 72, sm_90(max_registers = 64)) => dispatch[Mapped]((DispatchPath::Fp8Throughput, false));

    /// The stand-in expert layer: each kept pair's output row (local, no communication).
    ///
    /// # Safety
    /// After [`moe_dispatch()`] of the same round on this PE's stream; shape and buffers as
    /// there.
    moe_experts => experts;

    /// Sends each received token's weighted expert sum back and adds them up in token order
    /// into `out`.
    ///
    /// # Safety
    /// After [`moe_experts()`] of the same round; every PE launches it with the same shape,
    /// cooperatively (every block waits for the other PEs), in 1-D blocks of a multiple of 32
    /// threads.
    moe_combine(max_registers = 64) => combine[Probed];

    /// [`moe_combine()`] for where every PE's memory is mapped here ([`Mapped`]; the host launches
    /// it where [`Shape::mapped`] says so).
    ///
    /// # Safety
    /// As [`moe_combine()`], and every PE's memory is mapped here ([`Shape::mapped`]; the simulator
    /// checks it, the GPU assumes it).
    moe_combine_mapped(max_registers = 64) => combine[Mapped];
}

#[cfg(test)]
mod tests {
    use super::{Chunk, magnitude};
    use crate::bf16;

    /// `magnitude` on the bits is the CPU quantisation's `amax` (a fold of `f32::max` over
    /// the widened values): signs, zeros, infinities, subnormals and NaNs (left out).
    #[test]
    fn magnitude_is_the_widened_amax() {
        let specials = [
            0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x0001, 0x8001, 0x7f7f,
        ];
        let mut x = 0x9e37_79b9u32;
        for round in 0..2000 {
            let mut v = [0u16; 8];
            for (i, b) in v.iter_mut().enumerate() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = if (round + i) % 5 == 0 {
                    specials[x as usize % specials.len()]
                } else {
                    x as u16
                };
            }
            let chunk = Chunk(core::array::from_fn(|i| {
                u32::from(v[2 * i]) | u32::from(v[2 * i + 1]) << 16
            }));
            let want = v.iter().fold(0f32, |m, &b| m.max(bf16::to_f32(b).abs()));
            let got = f32::from_bits(magnitude([chunk]) << 16);
            assert_eq!(got.to_bits(), want.to_bits(), "{v:04x?}");
        }
    }
}
