//! What the API-suite kernels and their host checks share: the test patterns, the buffer
//! layouts, and the expected results (in [`expect`]). No kernels live here, so both kernel
//! crates and host tests can depend on it.

#![no_std]

pub mod expect;

/// The value source element `i` of PE `pe` holds: small enough for every type (< 100).
pub fn pattern(pe: i32, i: usize) -> u64 {
    (pe as u64 * 31 + i as u64 * 7 + 3) % 100
}

/// Conversion between test values and raw bits, for every type the suite uses.
pub trait Val: Copy {
    /// The value `x` (< 100) as `Self`.
    fn from_u64(x: u64) -> Self;
    /// Raw bits, zero-extended to 64 (how the host reads it back from a `u64` word).
    fn bits(self) -> u64;
}

macro_rules! val_int {
    ($($t:ty => $u:ty),*) => { $(
        impl Val for $t {
            fn from_u64(x: u64) -> Self { x as $t }
            fn bits(self) -> u64 { self as $u as u64 }
        }
    )* };
}
val_int!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, u8 => u8, u16 => u16, u32 => u32, u64 => u64);
impl Val for f32 {
    fn from_u64(x: u64) -> Self {
        x as f32
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}
impl Val for f64 {
    fn from_u64(x: u64) -> Self {
        x as f64
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

/// `(next, prev)` on the ring of all PEs.
pub fn neighbours(me: i32, n: i32) -> (i32, i32) {
    ((me + 1) % n, (me + n - 1) % n)
}

/// Elements per case in `rma_bulk`.
pub const BULK_CASE: usize = 256;
/// Cases in `rma_bulk`: `[put, put_nbi, get, get_nbi] × [Thread, Warp, Block]`, in that order.
pub const BULK_CASES: usize = 12;
/// Chunks (a thread each) in each of `vec16`'s six regions.
pub const VEC16_CHUNKS: usize = 64;
/// `bulk_copies`: bytes of each full piece, the pieces (the last one `BULK_TAIL` bytes), and
/// the shared slots they go through.
pub const BULK_COPY_PIECE: usize = 4096;
/// See [`BULK_COPY_PIECE`].
pub const BULK_COPY_PIECES: usize = 8;
/// See [`BULK_COPY_PIECE`].
pub const BULK_TAIL: usize = 1040;
/// See [`BULK_COPY_PIECE`].
pub const BULK_COPY_SLOTS: usize = 3;
/// Bytes `bulk_copies` moves: seven full pieces and the tail.
pub const BULK_COPY_BYTES: usize = (BULK_COPY_PIECES - 1) * BULK_COPY_PIECE + BULK_TAIL;

/// Threads of `group_entry`'s block.
pub const ENTRY_THREADS: usize = 128;
/// Elements of each of `group_entry`'s warp regions: a chunk of 16 bytes a lane.
pub const ENTRY_WARP: usize = 128;
/// Added by `group_entry` to what its put regions' source held.
pub const ENTRY_MARK: u32 = 1000;
/// What the host writes to `group_entry`'s `dst[i]` before the launch: `ENTRY_OLD + i`.
pub const ENTRY_OLD: u32 = 5000;
/// Rounds of `group_entry`'s wait a warp (a lane: an eighth of it).
pub const ENTRY_SPIN: u32 = 20_000;
/// Elements of `group_entry`'s `src` and `dst` with `b` threads: regions of one chunk a
/// thread (block put, block get), two of [`ENTRY_WARP`] (warp put, warp get), then one of
/// each for the put-signals (block, warp).
pub const fn entry_len(b: usize) -> usize {
    12 * b + 3 * ENTRY_WARP
}
/// Elements of `group_entry`'s `got` with `b` threads: the old contents of the two get
/// regions, then the waits' results.
pub const fn entry_got_len(b: usize) -> usize {
    4 * b + ENTRY_WARP + 3 * b + 96
}
/// `group_entry`'s signal words: the block's put-signal sets word 0 to this, the warp's word 1
/// to this plus one.
pub const ENTRY_SIGNAL: u64 = 7;

/// Longest message of `rma_small`, in `u32`s (4 to 160 bytes: one to ten 16-byte chunks,
/// with and without a tail of words).
pub const SMALL_MAX: usize = 40;
/// `u32`s from one `rma_small` case to the next: at least [`SMALL_MAX`], and 16-byte aligned.
pub const SMALL_SLOT: usize = 48;
/// Cases of `rma_small`: `[put, put_nbi, get, get_nbi]` (thread scope) × lengths
/// `1..=SMALL_MAX`, case `op * SMALL_MAX + len - 1` at `u32` `case * SMALL_SLOT`.
pub const SMALL_CASES: usize = 4 * SMALL_MAX;
/// Lengths of `rma_warp`'s messages, in `u32`s: under 32 chunks of 16 bytes (lanes left
/// idle), with and without a tail of words; one chunk a lane (32 chunks); between one and
/// four a lane; a full round of four a lane from 128 chunks (2 KiB), with chunks and tails
/// after rounds.
pub const WARP_LENS: [u32; 28] = [
    1, 3, 4, 5, 8, 16, 17, 31, 64, 100, 127, 128, 129, 131, 132, 256, 388, 508, 511, 512, 513, 516,
    520, 1024, 1536, 2052, 2063, 4100,
];
/// `u32`s from one `rma_warp` case to the next: at least the longest of [`WARP_LENS`], and
/// 16-byte aligned.
pub const WARP_SLOT: usize = 4104;
/// Cases of `rma_warp`: `[put, put_nbi, get, get_nbi, put_nbi_unmapped]` (warp scope) ×
/// [`WARP_LENS`], case `op * WARP_LENS.len() + k` at `u32` `case * WARP_SLOT`.
pub const WARP_CASES: usize = 5 * WARP_LENS.len();
/// Elements per case in `signals`.
pub const SIGNAL_CASE: usize = 64;
/// `put_signal` cases in `signals`: `[blocking, nbi] × [Set, Add] × [Thread, Warp, Block]`.
pub const SIGNAL_CASES: usize = 12;
/// Elements per phase in `ordering`.
pub const ORDER_LEN: usize = 512;
/// Phases in `barriers`: `[barrier_all, sync_all, barrier(WORLD), team_sync(WORLD)] × [Thread, Warp, Block]`.
pub const BARRIER_PHASES: usize = 12;
/// Elements of `peer_memory`'s data.
pub const PEER_LEN: usize = 1024;

/// The ten standard types in `rma_p_g`'s slot order.
pub const P_G_TYPES: [&str; 10] = [
    "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64",
];

/// Results per type in `waits`.
pub const WAIT_RESULTS: usize = 8;
/// Results per integer type in `atomics`.
pub const AMO_INT_RESULTS: usize = 11;
/// Results per float type in `atomics`.
pub const AMO_FLOAT_RESULTS: usize = 3;
/// Layout of the `collectives` kernel's' `u64` buffers (element offsets).
pub mod coll_layout {
    /// Broadcast: 16 elements at 0, root 0.
    pub const BCAST: usize = 0;
    /// Broadcast length.
    pub const BCAST_LEN: usize = 16;
    /// fcollect source: 4 elements at 16 in `src`; destination at 64 in `dst` (4·n).
    pub const FCOLLECT_SRC: usize = 16;
    /// fcollect destination.
    pub const FCOLLECT_DST: usize = 64;
    /// Elements each PE contributes to fcollect.
    pub const FCOLLECT_LEN: usize = 4;
    /// alltoall source at 128 in `src`, destination at 128 in `dst`; 2 elements per PE.
    pub const ALLTOALL: usize = 128;
    /// Elements per PE pair in alltoall.
    pub const ALLTOALL_LEN: usize = 2;
    /// Reductions: 7 ops × 4 `i32`s in `isrc`/`idst`, order sum, prod, min, max, and, or, xor.
    pub const REDUCE_LEN: usize = 4;
    /// `f64` sum: 1 op × 4 in `fsrc`/`fdst`.
    pub const FREDUCE_OPS: usize = 1;
}
