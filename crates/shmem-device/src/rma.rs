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

/// Sixteen bytes moved by one vector load or store: the unit of the peer-to-peer copy, and
/// of kernels that move rows through [`crate::ptr`] themselves (eight `bf16`, four `f32`).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk(pub [u32; 4]);

/// Sixteen bytes as registers of one element type, moved by one vector load or store: CUDA's
/// `uint4` (`[u32; 4]`, [`Chunk`]'s view), `float4` (`[f32; 4]`) and `double2` (`[f64; 2]`).
///
/// A kernel that computes on the elements loads them as their own type, so that they arrive
/// in registers of that type (a plain read of an array is split by LLVM into narrower
/// loads). In the halo example's sweep, `f64` rows read as [`Chunk`]s and rebuilt took
/// more registers: three rows at a time spilled at the step kernel's 40 registers, where
/// `[f64; 2]` loads fit, and the kernel ran 1.43 M warp instructions at 1024² against
/// 1.63 M a row at a time (BENCHMARKS.md, forty-first session).
///
/// Sealed: implemented for the three types above only.
pub trait Vec16: Copy + sealed::Sealed {
    /// One 16-byte load (`ld.v4.u32`, `ld.v2.f64`, ...) through a generic address.
    ///
    /// # Safety
    /// `p` is valid and 16-byte aligned.
    unsafe fn load(p: *const Self) -> Self;
    /// One 16-byte store (`st.v4.u32`, `st.v2.f64`, ...) through a generic address.
    ///
    /// # Safety
    /// `p` is valid for writes and 16-byte aligned.
    unsafe fn store(self, p: *mut Self);
    /// [`Vec16::load`] from global memory (`ld.global.v4.u32`, ..., SASS `LDG.E.128`): what
    /// nvcc emits for a pointer it knows to be global. The generic form goes through the
    /// generic address path (`LD.E.128`).
    ///
    /// # Safety
    /// `p` is valid, 16-byte aligned, and points to global memory (device memory of this
    /// GPU, or of a peer mapped by `nvshmem_ptr` / [`crate::ptr`]), not shared or local
    /// memory.
    unsafe fn load_global(p: *const Self) -> Self;
    /// [`Vec16::store`] to global memory (`st.global.v4.u32`, ..., SASS `STG.E.128`).
    ///
    /// # Safety
    /// As [`Vec16::load_global`], and `p` is valid for writes.
    unsafe fn store_global(self, p: *mut Self);
}

mod sealed {
    pub trait Sealed {}
}

/// One of [`Vec16`]'s loads and stores: `$prelude` (PTX run first), `$space` (the state
/// space: `""` generic, `".global"`) and `$addr` (the address operand), for the vector
/// `$v` (`".v4.u32"`) of the elements `$el` in registers `$reg`, named `$l` (listed in PTX
/// as `$list`).
macro_rules! vec16_access {
    ($load:ident, $store:ident, $prelude:literal, $space:literal, $addr:literal, $v:literal, $el:ty, $reg:ident, $list:literal, [$($l:ident)+]) => {
        #[inline(always)]
        #[cfg_attr(shmem_sim, track_caller)]
        unsafe fn $load(p: *const Self) -> Self {
            #[cfg(target_arch = "nvptx64")]
            {
                $(let $l: $el;)+
                // SAFETY: the caller's contract; the asm reads the 16 bytes at `p` only.
                unsafe {
                    core::arch::asm!(
                        concat!("{{ ", $prelude, "ld", $space, $v, " {{", $list, "}}, [", $addr, "]; }}"),
                        p = in(reg64) p,
                        $($l = out($reg) $l,)+
                        options(readonly, nostack, preserves_flags)
                    )
                };
                [$($l),+]
            }
            #[cfg(not(target_arch = "nvptx64"))]
            // SAFETY: the caller's contract.
            unsafe {
                p.read()
            }
        }

        #[inline(always)]
        #[cfg_attr(shmem_sim, track_caller)]
        unsafe fn $store(self, p: *mut Self) {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: the caller's contract; the asm writes the 16 bytes at `p` only.
            unsafe {
                let [$($l),+] = self;
                core::arch::asm!(
                    concat!("{{ ", $prelude, "st", $space, $v, " [", $addr, "], {{", $list, "}}; }}"),
                    p = in(reg64) p,
                    $($l = in($reg) $l,)+
                    options(nostack, preserves_flags)
                )
            }
            #[cfg(not(target_arch = "nvptx64"))]
            // SAFETY: the caller's contract.
            unsafe {
                p.write(self)
            }
        }
    };
}

/// Implements [`Vec16`] for `[$el; $n]` (`$v`: the PTX vector type, `".v4.u32"`).
macro_rules! vec16 {
    ($el:ty, $n:literal, $v:literal, $reg:ident, $list:literal, [$($l:ident)+]) => {
        impl sealed::Sealed for [$el; $n] {}
        impl Vec16 for [$el; $n] {
            vec16_access!(load, store, "", "", "{p}", $v, $el, $reg, $list, [$($l)+]);
            vec16_access!(
                load_global,
                store_global,
                ".reg .u64 g; cvta.to.global.u64 g, {p}; ",
                ".global",
                "g",
                $v,
                $el,
                $reg,
                $list,
                [$($l)+]
            );
        }
    };
}

vec16!(u32, 4, ".v4.u32", reg32, "{a}, {b}, {c}, {d}", [a b c d]);
vec16!(f32, 4, ".v4.f32", reg32, "{a}, {b}, {c}, {d}", [a b c d]);
vec16!(f64, 2, ".v2.f64", reg64, "{a}, {b}", [a b]);

impl Chunk {
    /// One 16-byte load (`ld.v4.u32`; LLVM would split a plain read into two 8-byte ones):
    /// [`Vec16::load`] of the `[u32; 4]`.
    ///
    /// # Safety
    /// `p` is valid and 16-byte aligned.
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    pub unsafe fn load(p: *const Chunk) -> Chunk {
        // SAFETY: the caller's contract; `Chunk` is a `[u32; 4]` (`repr(C)`).
        Chunk(unsafe { Vec16::load(p.cast::<[u32; 4]>()) })
    }

    /// One 16-byte store (`st.v4.u32`).
    ///
    /// # Safety
    /// `p` is valid for writes and 16-byte aligned.
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    pub unsafe fn store(self, p: *mut Chunk) {
        // SAFETY: as for `load`.
        unsafe { self.0.store(p.cast::<[u32; 4]>()) }
    }

    /// [`Chunk::load`] from global memory (`ld.global.v4.u32`, SASS `LDG.E.128`): what nvcc
    /// emits for a pointer it knows to be global. The generic form goes through the generic
    /// address path (`LD.E.128`).
    ///
    /// # Safety
    /// `p` is valid, 16-byte aligned, and points to global memory (device memory of this
    /// GPU, or of a peer mapped by `nvshmem_ptr` / [`crate::ptr`]), not shared or local
    /// memory.
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    pub unsafe fn load_global(p: *const Chunk) -> Chunk {
        // SAFETY: as for `load`.
        Chunk(unsafe { Vec16::load_global(p.cast::<[u32; 4]>()) })
    }

    /// [`Chunk::store`] to global memory (`st.global.v4.u32`, SASS `STG.E.128`).
    ///
    /// # Safety
    /// As [`Chunk::load_global`], and `p` is valid for writes.
    #[inline(always)]
    #[cfg_attr(shmem_sim, track_caller)]
    pub unsafe fn store_global(self, p: *mut Chunk) {
        // SAFETY: as for `load`.
        unsafe { self.0.store_global(p.cast::<[u32; 4]>()) }
    }
}

/// A predicated 16-byte load from global memory with the load qualifiers `$qual` (after
/// `ld.global`): `@p ld.global$qual.v4.u32`, zeros when the predicate is false.
macro_rules! load_global_if {
    ($(#[$doc:meta])* $name:ident, $qual:literal) => {
        $(#[$doc])*
        #[inline(always)]
        #[cfg_attr(shmem_sim, track_caller)]
        pub unsafe fn $name(live: bool, p: *const Chunk) -> Chunk {
            #[cfg(target_arch = "nvptx64")]
            {
                let (a, b, c, d): (u32, u32, u32, u32);
                // SAFETY: the caller's contract; the asm reads the 16 bytes at `p` only when
                // `live`.
                unsafe {
                    core::arch::asm!(
                        concat!(
                            "{{ .reg .pred q; .reg .u64 g; setp.ne.u32 q, {live}, 0; cvta.to.global.u64 g, {p}; \
                             mov.b32 {a}, 0; mov.b32 {b}, 0; mov.b32 {c}, 0; mov.b32 {d}, 0; \
                             @q ld.global", $qual, ".v4.u32 {{{a}, {b}, {c}, {d}}}, [g]; }}"
                        ),
                        live = in(reg32) u32::from(live),
                        p = in(reg64) p,
                        a = out(reg32) a,
                        b = out(reg32) b,
                        c = out(reg32) c,
                        d = out(reg32) d,
                        options(readonly, nostack, preserves_flags)
                    )
                };
                Chunk([a, b, c, d])
            }
            #[cfg(not(target_arch = "nvptx64"))]
            if live {
                // SAFETY: the caller's contract.
                unsafe { p.read() }
            } else {
                Chunk([0; 4])
            }
        }
    };
}

impl Chunk {
    load_global_if!(
        /// [`Chunk::load_global`] if `live`, else zeros without touching `p`: one predicated
        /// load (`@p ld.global.v4.u32`), as nvcc emits for `live ? *p : zero`. Loads under an
        /// `if` compile to a branch around each (the asm cannot be speculated), which keeps
        /// ptxas from issuing a group of them back to back.
        ///
        /// # Safety
        /// If `live`: as [`Chunk::load_global`].
        load_global_if,
        ""
    );
    load_global_if!(
        /// [`Chunk::load_global_if`] for data read once: the line is not allocated in L1
        /// (`ld.global.L1::no_allocate`, SASS `LDG.E.NA.128`). Measured on one H100
        /// (BENCHMARKS.md, twenty-third session): the MoE combine took 0.84-0.86 of the
        /// time with it at 512 tokens, where its 59 MB of rows are about the L2's size; the
        /// FP8 dispatch 0.97-0.99 at 4096 tokens. But in the `bf16` dispatch it took 1 µs
        /// more, and the kernel after a combine that read 470 MB this way took 4 µs more:
        /// measure before using it. (`.cs` and `.lu` loads did the same; `.cg`, which
        /// skips L1 as well, did nothing.)
        ///
        /// # Safety
        /// If `live`: as [`Chunk::load_global`].
        load_global_once_if,
        ".L1::no_allocate"
    );
}

/// Copies `bytes` between the local `local` and the peer's end that `peer` returns (null if
/// unmapped; `TO_PEER`: local to peer) with the threads of scope `S` when both are 16-byte
/// aligned and `bytes >= 16` (16 bytes per load and store, four in flight per thread at
/// warp scope beyond four chunks a lane and at thread scope beyond 64 bytes, but two at a
/// time for a thread of a whole warp copying at most 128 bytes and for a block's put of at
/// most two chunks a thread; the tail in words or bytes); returns `false`, copying nothing, otherwise. A warp or block meets before the
/// copy and after it, as NVSHMEM's warp and block forms do (`nvshmemi_threadgroup_sync`
/// on entry and exit): every thread's writes to the source and reads of the destination
/// before the call come before any thread's copy, and the copy is complete in every thread
/// of the group when it returns. The local end is accessed as global memory
/// (`ld.global`/`st.global`: a [`LocalSlice`](crate::mem::LocalSlice) is global memory), the
/// peer's end through generic addresses: what nvcc emits for NVSHMEM's copy in a kernel.
/// With both ends in the same state space (both generic, or both global) a warp's put or get
/// of 64-512 bytes took 1.3x as long per call when source and destination sit at the same
/// symmetric offset.
///
/// This is the transfer of `put`/`get` when the peer's memory is mapped (`nvshmem_ptr`): the
/// loop NVSHMEM's LLVM bitcode provides moves data 4 bytes per load (its 16-byte vector type
/// has 4-byte alignment in the bitcode), where NVSHMEM's nvcc-built library moves 16; on
/// H200 that made Rust's bulk puts and gets up to 2x slower than CUDA C++'s (BENCHMARKS.md).
/// Stores are plain (weak) stores, as in NVSHMEM's library: `quiet`, `fence` and barriers
/// order them as they order NVSHMEM's own.
///
/// `peer` (`nvshmem_ptr`) is called once: by a block's get before it meets, so that its load
/// runs under the barrier; by a warp's or a block's put after it has loaded its first round
/// of local chunks, so that the lookup runs under the loads' latency; a warp with at most a
/// chunk a lane then returns right after its store, as does a warp's get of at most a chunk
/// a lane, and a block's put of at most two chunks a thread. Measured against the perftest twin (BENCHMARKS.md, thirty-third and thirty-fourth
/// sessions): warp puts of 16-512 bytes from 1.02x to 0.86-0.89x the twin's latency; the
/// warp-scope bandwidth points below 0.98x the twin from 15 to 0-1 (2 PEs on one H200 under
/// MPS) and from 7 to 0 (two H200s). A block's put so (forty-fourth session, two H200s):
/// latency 0.87-0.93x the twin's at 4 B-64 KiB (was 1.00-1.01x), bandwidth behind the
/// perftest's grid barrier 1.00-1.12x (was 0.98-1.01x).
///
/// # Safety
/// `local` is valid for `bytes`; `peer` returns null or the peer's copy of the same `bytes`,
/// not overlapping `local`; every thread of the scope calls it with the same arguments (the
/// scope's convergence rule).
#[inline(always)]
#[cfg_attr(shmem_sim, allow(dead_code))]
unsafe fn copy_p2p<S: Scope, const TO_PEER: bool>(
    local: *mut u8,
    bytes: usize,
    peer: impl FnOnce() -> *mut u8,
) -> bool {
    use crate::scope::ScopeKind;
    use crate::thread::{
        WARP_SIZE, block_size, lane_id, sync_threads, sync_warp, thread_rank_in_block,
        whole_warp_active,
    };
    // Under 16 bytes NVSHMEM's own copy (4- and 8-byte accesses) does better.
    // Chunk indices are 32-bit (one instruction an address) and stay below 2^31, so that
    // `i + 3 * n` cannot wrap: 32 GiB and more go to NVSHMEM.
    if !(16..1 << 35).contains(&bytes) || !(local as usize).is_multiple_of(16) {
        return false;
    }
    let (me, n) = match S::KIND {
        ScopeKind::Thread => (0, 1),
        ScopeKind::Warp => (lane_id(), WARP_SIZE),
        ScopeKind::Block => (thread_rank_in_block(), block_size()),
    };
    // The group meets before the copy: a thread's chunks may be another's writes (a put's
    // source) or another's reads still to come (a get's destination). Without it a block's
    // put sent what its slower warps had not yet written (the API suite's `group_entry`).
    // A block's get looks the peer's address up first, so that the lookup's load runs while
    // the block meets, as in NVSHMEM's library (its `__ldg` of the peer's base comes before
    // the barrier). With the lookup after the meeting, 13-14 of the 80 block-scope put
    // bandwidth points read under 0.98 of the perftest twin's (0.958-0.979, most at 64-256
    // KiB, on two H100s and on two H200s), and 3 with it first (two H200s; BENCHMARKS.md,
    // thirty-ninth session). Looked up first, though, the address's arithmetic came before
    // the barrier in the SASS, so every thread waited for the load before it met: a block's
    // put now loads its local chunk after the meeting and looks up under that load, as a
    // warp's does (ptxas still issues the lookup's load before the barrier). A warp's meeting
    // costs next to nothing, and a warp looks up where it did before (held across the
    // meeting, the address made `moe_dispatch` spill 24 bytes).
    let (early, later) = if matches!(S::KIND, ScopeKind::Block) && !TO_PEER {
        (Some(peer()), None)
    } else {
        (None, Some(peer))
    };
    let meet = || match S::KIND {
        ScopeKind::Thread => {}
        ScopeKind::Warp => sync_warp(u32::MAX),
        ScopeKind::Block => sync_threads(),
    };
    meet();
    let chunks = (bytes / 16) as u32;
    let at = |i: u32| i as usize;
    // The tail (under 16 bytes: in 4-byte words when it is made of them, else bytes), then
    // the group's synchronisation.
    let finish = |dst: *mut u8, src: *const u8| {
        let (tail, done) = (bytes % 16, bytes - bytes % 16);
        if tail != 0 {
            let (me, n) = (at(me), at(n));
            // SAFETY: the bytes from `done` to `bytes` lie in both ends (the caller's
            // contract, and `resolve` for the peer's).
            unsafe {
                if tail.is_multiple_of(4) {
                    let (dw, sw) = (dst.add(done).cast::<u32>(), src.add(done).cast::<u32>());
                    let mut j = me;
                    while j < tail / 4 {
                        dw.add(j).write(sw.add(j).read());
                        j += n;
                    }
                } else {
                    let mut j = done + me;
                    while j < bytes {
                        dst.add(j).write(src.add(j).read());
                        j += n;
                    }
                }
            }
        }
        meet();
        true
    };
    let resolve = || {
        let p = match (early, later) {
            (Some(p), _) => p,
            (None, Some(peer)) => peer(),
            (None, None) => core::ptr::null_mut(),
        };
        (!p.is_null() && (p as usize).is_multiple_of(16)).then_some(p)
    };
    // A warp's or a block's put loads its first round from the local end before it checks
    // the peer's address, so that the lookup and the checks run under the loads' latency:
    // for a warp four chunks a lane when the copy has more than four a lane; for a block
    // whose threads have at most two chunks, all of them (then it returns); else the
    // thread's one chunk, if any. `i` is then the thread's first chunk after that round.
    // Every load of that round is predicated (`load_global_if`), even where its predicate is
    // always true: ptxas sinks a plain load below the branch on the lookup's result when only
    // the path after it uses the value, so that the load started only after the lookup had
    // returned (the SASS of the warp's four loads and the block's first, up to the sixty-third
    // session); it leaves a predicated load where it is.
    let mut i = me;
    let remote = if TO_PEER && matches!(S::KIND, ScopeKind::Warp | ScopeKind::Block) {
        let l = local.cast::<Chunk>().cast_const();
        // SAFETY: the chunks loaded lie within the local end's `bytes` (a full round, a
        // block thread's chunk `me < n < chunks`, or the lane's chunk below `chunks`), 16-byte
        // aligned (checked above); the local end is global memory (the `LocalSlice`
        // contract); `wrapping_add`: a lane past the end computes an address it does not
        // read. The stores go to the same chunks of the
        // peer's copy, valid and aligned as `resolve` checked (the caller's contract).
        unsafe {
            if matches!(S::KIND, ScopeKind::Warp) && chunks > 4 * n {
                let live = me < chunks;
                let (a, b, c, e) = (
                    Chunk::load_global_if(live, l.add(at(me))),
                    Chunk::load_global_if(live, l.add(at(me + n))),
                    Chunk::load_global_if(live, l.add(at(me + 2 * n))),
                    Chunk::load_global_if(live, l.add(at(me + 3 * n))),
                );
                let Some(r) = resolve() else { return false };
                let d = r.cast::<Chunk>();
                a.store(d.add(at(me)));
                b.store(d.add(at(me + n)));
                c.store(d.add(at(me + 2 * n)));
                e.store(d.add(at(me + 3 * n)));
                i += 4 * n;
                r
            } else if matches!(S::KIND, ScopeKind::Block) && chunks > n && chunks <= 2 * n {
                // A block whose threads have two chunks (some of them one): both loads in
                // flight before the lookup, then both stores. (NVSHMEM's copy, in nvcc's
                // SASS, moves a chunk at a time.) One after the other, free-running puts of
                // 32 KiB a block over 8 blocks read 0.943-0.959 of the perftest twin's
                // bandwidth on two H200s; so, 0.981-0.990; a block's put latency at 32 KiB
                // 0.96 of the twin's, was 0.90 (BENCHMARKS.md, sixtieth session). Against
                // the twin's block-scope kernel of its own (sixty-fourth session), 5 % faster
                // there than the one kernel of every scope: 0.94, 0.88 with `a` sunk below
                // the lookup.
                let a = Chunk::load_global_if(me < chunks, l.wrapping_add(at(me)));
                let b = Chunk::load_global_if(me + n < chunks, l.wrapping_add(at(me + n)));
                let Some(r) = resolve() else { return false };
                let d = r.cast::<Chunk>();
                a.store(d.add(at(me)));
                if me + n < chunks {
                    b.store(d.add(at(me + n)));
                }
                return finish(r, local);
            } else {
                let a = Chunk::load_global_if(me < chunks, l.wrapping_add(at(me)));
                let Some(r) = resolve() else { return false };
                if me < chunks {
                    a.store(r.cast::<Chunk>().add(at(me)));
                }
                if chunks <= n {
                    // At most a chunk a lane: no loop to enter.
                    return finish(r, local);
                }
                i += n;
                r
            }
        }
    } else {
        let Some(r) = resolve() else { return false };
        if matches!(S::KIND, ScopeKind::Warp) && chunks <= n {
            // A warp's get of at most a chunk a lane: no loop to enter.
            if me < chunks {
                // SAFETY: the lane's chunk lies in both ends, aligned (checked above and by
                // `resolve`); the local end is global memory, the peer's addressed
                // generically.
                unsafe {
                    let (d, s) = (local.cast::<Chunk>(), r.cast::<Chunk>().cast_const());
                    Chunk::load(s.add(at(me))).store_global(d.add(at(me)));
                }
            }
            return finish(local, r);
        }
        r
    };
    let (dst, src) = if TO_PEER {
        (remote, local.cast_const())
    } else {
        (local, remote.cast_const())
    };
    let (d, s) = (dst.cast::<Chunk>(), src.cast::<Chunk>());
    let load = |p: *const Chunk| {
        // SAFETY: `p` is one of the chunks below, valid and aligned; the local end is global
        // memory (the `LocalSlice` contract), the peer's is addressed generically.
        unsafe {
            if TO_PEER {
                Chunk::load_global(p)
            } else {
                Chunk::load(p)
            }
        }
    };
    let store = |c: Chunk, p: *mut Chunk| {
        // SAFETY: as for `load`.
        unsafe {
            if TO_PEER {
                c.store(p)
            } else {
                c.store_global(p)
            }
        }
    };
    // Threads (beyond 64 bytes) and warps keep four loads in flight; a block moves one chunk
    // per thread at a time, as NVSHMEM's copy does, so that its warps' loads and stores
    // overlap (four loads then four stores by every thread measured up to 1.3x slower, at
    // 64 KiB per block).
    let unroll = !matches!(S::KIND, ScopeKind::Block);
    // SAFETY: every index is below `chunks` (or `bytes` for the tail): inside both ranges,
    // aligned by the check above (the caller's contract for validity).
    unsafe {
        let copy = |i: u32| store(load(s.add(at(i))), d.add(at(i)));
        // Two or three chunks from `i`: loaded together, then stored.
        let few = |i: u32, left: u32| {
            let (a, b) = (load(s.add(at(i))), load(s.add(at(i + 1))));
            let c = (left > 2).then(|| load(s.add(at(i + 2))));
            store(a, d.add(at(i)));
            store(b, d.add(at(i + 1)));
            if let Some(c) = c {
                store(c, d.add(at(i + 2)));
            }
        };
        if matches!(S::KIND, ScopeKind::Thread) && chunks <= 4 {
            // A thread's 16 to 64 bytes, without a loop. Up to three chunks are loaded
            // together, then stored; four are copied one after the other. Measured against
            // the perftest twin (one H200, 2 PEs under MPS; BENCHMARKS.md, twenty-seventh
            // session): with four loads in flight, 64-byte puts and gets by every thread of
            // 4-32 blocks took 1.11x the twin's time a call (alone, 0.86x); one after the
            // other, 0.99-1.01x (alone, 0.96-0.98x). Two chunks loaded together took
            // 0.98-1.00x the twin's time in those loops and alone 0.94-0.96x (in turn, 1.04x
            // alone). The shape of this code moved those loops' figures by up to 0.1 at 16
            // and 32 bytes: the form here is the measured one.
            if chunks < 4 {
                if chunks == 1 {
                    copy(0);
                } else {
                    few(0, chunks);
                }
            } else {
                copy(0);
                copy(1);
                copy(2);
                copy(3);
            }
            i = chunks;
        } else if matches!(S::KIND, ScopeKind::Thread) && chunks <= 8 && whole_warp_active() {
            // A thread of a whole warp copying 80 to 128 bytes: two chunks in flight at a
            // time, as its 32 lanes keep enough in flight. With four a lane, 128-byte puts
            // and gets by every thread of 16 and 32 blocks of 1024, behind the perftest's
            // barrier, read 0.89-0.92 of the twin's bandwidth on two H200s (two at a time:
            // 1.00-1.09), and every 128-byte point 0.98-1.00 on one H200 under MPS (two at a
            // time: 1.01-1.02). A thread alone keeps four in flight, for its latency: its
            // 128-byte get took 2.6 us on two H200s with four, 4.3 with two (BENCHMARKS.md,
            // thirty-sixth session).
            while i + 1 < chunks {
                few(i, 2);
                i += 2;
            }
            if i < chunks {
                copy(i);
                i = chunks;
            }
        } else if unroll && (!matches!(S::KIND, ScopeKind::Warp) || chunks > 4 * n) {
            // A warp with at most four chunks a lane copies one a lane at a time. With a round
            // of four in flight, gets of 2 KiB a warp read 0.94-1.08 of the twin's bandwidth
            // in single runs (one H200, 2 PEs under MPS; two H200s: from 0.94); without, 0.97-1.04
            // (two H200s: 0.99-1.01; BENCHMARKS.md, thirty-fourth session). Before the early
            // returns above, the same test had cost copies of 64-512 bytes a warp more than it
            // saved (twenty-seventh session).
            while i + 3 * n < chunks {
                let (a, b, c, e) = (
                    load(s.add(at(i))),
                    load(s.add(at(i + n))),
                    load(s.add(at(i + 2 * n))),
                    load(s.add(at(i + 3 * n))),
                );
                store(a, d.add(at(i)));
                store(b, d.add(at(i + n)));
                store(c, d.add(at(i + 2 * n)));
                store(e, d.add(at(i + 3 * n)));
                i += 4 * n;
            }
            if matches!(S::KIND, ScopeKind::Thread) {
                // At most three chunks are left: no loop (measured: a thread's 16-byte put
                // 0.38 against 0.48 us a call; the same at warp scope cost latency).
                let left = chunks - i;
                if left == 1 {
                    copy(i);
                } else if left > 1 {
                    few(i, left);
                }
                i = chunks;
            }
        }
        while i < chunks {
            store(load(s.add(at(i))), d.add(at(i)));
            i += n;
        }
    }
    finish(dst, src)
}

/// `put`'s and `get`'s peer-to-peer path: copies between the local `local` and `pe`'s copy
/// of `sym` (`to_peer`: local to peer) if `pe`'s memory is mapped here and both ends are
/// 16-byte aligned; `false` if the caller must go through NVSHMEM.
///
/// # Safety
/// As [`copy_p2p`], for `bytes` at `sym` (symmetric) and `local`.
#[inline(always)]
pub(crate) unsafe fn try_p2p<S: Scope>(
    sym: *mut core::ffi::c_void,
    local: *mut core::ffi::c_void,
    bytes: usize,
    pe: i32,
    to_peer: bool,
) -> bool {
    // The CPU simulator queues remote writes to land late; a direct copy would skip that.
    if cfg!(shmem_sim) {
        return false;
    }
    // SAFETY: `nvshmem_ptr` only translates a symmetric address (caller's contract).
    let peer = || unsafe { sys::nvshmem_ptr(sym, pe) }.cast::<u8>();
    let local = local.cast::<u8>();
    // SAFETY: the caller's contract; `peer()` maps `pe`'s copy of the same `bytes`, or is
    // null.
    unsafe {
        if to_peer {
            copy_p2p::<S, true>(local, bytes, peer)
        } else {
            copy_p2p::<S, false>(local, bytes, peer)
        }
    }
}

/// Writes `value` into `pe`'s copy of `dest`. NVSHMEM: `nvshmem_TYPE_p`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub unsafe fn p<T: RmaElem>(dest: Sym<T>, value: T, pe: i32) {
    // SAFETY: the caller upholds the module's contract.
    unsafe { T::raw_p(dest.as_ptr(), value, pe) }
}

/// Reads `pe`'s copy of `src`. Blocking. NVSHMEM: `nvshmem_TYPE_g`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
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
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    if unsafe { try_p2p::<S>(o.sym, o.local, o.bytes, pe, true) } {
        return;
    }
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
    // SAFETY: the caller upholds the module's contract; lengths were checked above. A copy
    // that completes before returning is a valid non-blocking put.
    if unsafe { try_p2p::<S>(o.sym, o.local, o.bytes, pe, true) } {
        return;
    }
    // SAFETY: as above.
    unsafe { nvshmem_put_nbi::<S>(o, pe) }
}

/// NVSHMEM's non-blocking put of `o` to `pe`, in scope `S`.
///
/// # Safety
/// The module's contract, for operands checked by [`operands`].
#[inline(always)]
unsafe fn nvshmem_put_nbi<S: Scope>(o: crate::mem::Operands, pe: i32) {
    let (d, s, bytes) = (o.sym, o.local.cast_const(), o.bytes);
    // SAFETY: the caller's contract.
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

/// [`put_nbi`] through NVSHMEM's own put, without this crate's peer-to-peer copy: for a PE
/// whose memory the caller already knows is not mapped here ([`crate::ptr`] returned
/// `None`), where NVSHMEM's transport (the proxy) moves the data anyway. Correct for any PE:
/// to a mapped one NVSHMEM copies itself (4 bytes a load from its LLVM bitcode, slower than
/// [`put_nbi`]'s copy).
///
/// What it saves is code, not time: [`put_nbi`] inlines the peer copy into the kernel, and
/// a kernel that keeps a put for unmapped PEs on a cold path carries that copy's registers
/// for nothing. `moe_dispatch_fp8` (examples/moe-dispatch) spilled 4 bytes on sm_90 with a
/// warp's copy that loads before it looks the peer up (BENCHMARKS.md, thirty-fourth
/// session); its put for unmapped PEs is this one.
///
/// # Panics
/// If `dest.len() != src.local_len()`.
///
/// # Safety
/// See the [module documentation](self#safety-common-to-every-function-of-this-module).
#[inline(always)]
#[track_caller]
pub unsafe fn put_nbi_unmapped<S: Scope, T: Copy>(
    _scope: S,
    dest: SymSlice<T>,
    src: impl LocalSlice<T>,
    pe: i32,
) {
    let o = operands(dest, src);
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    unsafe { nvshmem_put_nbi::<S>(o, pe) }
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
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    if unsafe { try_p2p::<S>(o.sym, o.local, o.bytes, pe, false) } {
        return;
    }
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
    // SAFETY: the caller upholds the module's contract; lengths were checked above.
    if unsafe { try_p2p::<S>(o.sym, o.local, o.bytes, pe, false) } {
        return;
    }
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
