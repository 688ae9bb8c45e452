//! NVSHMEM's device API in the CPU simulator: PEs as groups of simulated threads in one
//! process, one symmetric heap per PE, and remote writes that land late.
//!
//! - A [`World`] holds `n` heaps of the same size; [`World::alloc`] reserves the same offset
//!   in each, so a symmetric address is "this PE's heap base + offset" and is translated to
//!   another PE's by offset (`nvshmem_ptr` maps every PE: the simulated PEs share a node).
//! - **Remote writes are pending until allowed to land**: `put`, `p`, `put_signal` and
//!   `signal_op` (blocking or not) copy their source at the call and queue the write. A
//!   queued write lands when its thread calls `quiet` (or a barrier, or ends), or at a
//!   random yield point of any thread (seeded), or when nothing else can run; `fence`
//!   orders a thread's writes to the same PE; `put_signal`'s data lands before its signal,
//!   in one step. So a kernel that reads data without the quiet, fence or signal NVSHMEM
//!   requires can see stale data in the simulator, as it eventually would on hardware.
//! - Gets, `g`, atomics and waits act on the target memory at once (each is a yield point).
//! - Barriers and collectives wait for one caller per PE; a barrier that only some PEs
//!   reach is a deadlock, reported with each waiting thread's site.
//!
//! The C functions of [`crate::sys`] are defined here under the `sim` feature (the host
//! build), with NVSHMEM's names and signatures, so the typed API runs unchanged.

extern crate std;

use super::{Ctx, Engine, Run, State, ctx, next_random};
use crate::{Sym, SymSlice};
use core::ffi::c_void;
use core::marker::PhantomData;
use std::boxed::Box;
use std::panic::Location;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

/// The symmetric heaps of `n` simulated PEs.
pub struct World {
    heaps: Vec<*mut u128>,
    words: usize,
    /// Live allocations, `(offset, bytes)`, by offset (the same in every heap).
    live: Mutex<Vec<(usize, usize)>>,
    /// Teams split from others, by handle minus [`FIRST_SPLIT_TEAM`]: their members (world
    /// PE numbers, in team order) and how many members have not destroyed it yet.
    teams: Mutex<Vec<Option<SplitTeam>>>,
    /// The program-wide bound of waits in kernels on these PEs (ns, 0: none).
    wait_bound_ns: core::sync::atomic::AtomicU64,
    /// Whether `nvshmem_ptr` maps other PEs' memory (as NVLink does); without, only a PE's
    /// own, as between nodes, so that kernels take their put paths.
    peers_mapped: core::sync::atomic::AtomicBool,
}

/// A team's members (world numbers, in team order) and how many have not destroyed it.
type SplitTeam = (Arc<[u32]>, u32);

/// The first handle of a team split on the host; the handles below are NVSHMEM's
/// predefined teams, of which `WORLD` (0), `SHARED` (1) and `NODE` (2) hold every simulated
/// PE (they share one node) and the others are invalid here.
pub const FIRST_SPLIT_TEAM: i32 = 8;

// SAFETY: the heaps are plain memory owned by the `World` until it drops; simulated threads
// reach them one at a time (the simulator's turn), and the host only between runs.
unsafe impl Send for World {}
// SAFETY: as above.
unsafe impl Sync for World {}

impl Drop for World {
    fn drop(&mut self) {
        for &h in &self.heaps {
            // SAFETY: each heap came from `Box::into_raw` of a `words`-long slice.
            drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(h, self.words)) });
        }
    }
}

/// A symmetric allocation of `len` `T`s in a [`World`].
pub struct SimBuffer<T> {
    world: Arc<World>,
    offset: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl World {
    /// `n_pes` PEs with `heap_bytes` of symmetric heap each (zeroed).
    pub fn new(n_pes: u32, heap_bytes: usize) -> Arc<World> {
        let words = heap_bytes.div_ceil(16);
        let heaps = (0..n_pes)
            .map(|_| Box::into_raw(std::vec![0u128; words].into_boxed_slice()).cast::<u128>())
            .collect();
        Arc::new(World {
            heaps,
            words,
            live: Mutex::new(Vec::new()),
            teams: Mutex::new(Vec::new()),
            wait_bound_ns: Default::default(),
            peers_mapped: core::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Bytes of symmetric heap per PE.
    pub fn heap_bytes(&self) -> usize {
        self.words * 16
    }

    /// Reserves `bytes` (256-byte aligned, first fit) at the same offset in every PE's heap
    /// and returns the offset, or `None` when no gap is large enough. The memory keeps what
    /// it held (zero if never used).
    pub fn alloc_offset(&self, bytes: usize) -> Option<usize> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let mut at = 0;
        let mut slot = live.len();
        for (i, &(o, b)) in live.iter().enumerate() {
            if o >= at + bytes {
                slot = i;
                break;
            }
            at = (o + b).next_multiple_of(256);
        }
        if at + bytes > self.heap_bytes() {
            return None;
        }
        live.insert(slot, (at, bytes.max(1)));
        Some(at)
    }

    /// Releases the allocation at `offset` (from [`World::alloc_offset`]).
    pub fn free_offset(&self, offset: usize) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = live.iter().position(|&(o, _)| o == offset) {
            live.remove(i);
        }
    }

    /// The address of `offset` in PE `pe`'s heap.
    pub fn address(&self, pe: u32, offset: usize) -> *mut u8 {
        assert!(pe < self.n_pes() && offset <= self.heap_bytes());
        (self.base(pe) + offset) as *mut u8
    }

    /// PEs.
    pub fn n_pes(&self) -> u32 {
        self.heaps.len() as u32
    }

    /// Bounds every wait of the kernels run on these PEs ([`crate::bound`]); 0: none.
    pub fn set_wait_bound_ns(&self, ns: u64) {
        self.wait_bound_ns
            .store(ns, core::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`crate::ptr`] maps other PEs' memory (the default, as NVLink within a node
    /// does), or only each PE's own (as between nodes, where NVSHMEM's `nvshmem_ptr`
    /// returns null): the second runs a kernel's fallback for unmapped peers.
    pub fn set_peers_mapped(&self, mapped: bool) {
        self.peers_mapped
            .store(mapped, core::sync::atomic::Ordering::Relaxed);
    }

    /// The bound [`World::set_wait_bound_ns`] set.
    pub fn wait_bound_ns(&self) -> u64 {
        self.wait_bound_ns
            .load(core::sync::atomic::Ordering::Relaxed)
    }

    /// The members of team `team` (world PE numbers, in team order), or `None` for a handle
    /// that names no team (invalid, destroyed, or a predefined team the simulator lacks).
    pub fn team_members(&self, team: i32) -> Option<Arc<[u32]>> {
        match team {
            0..=2 => Some((0..self.n_pes()).collect()),
            t if t >= FIRST_SPLIT_TEAM => {
                let teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
                let i = (t - FIRST_SPLIT_TEAM) as usize;
                teams.get(i)?.as_ref().map(|(m, _)| m.clone())
            }
            _ => None,
        }
    }

    /// The number in team `dst` of team `src`'s PE `pe`, or -1
    /// (`nvshmem_team_translate_pe`).
    pub fn team_translate(&self, src: i32, pe: i32, dst: i32) -> i32 {
        let (Some(from), Some(to)) = (self.team_members(src), self.team_members(dst)) else {
            return -1;
        };
        usize::try_from(pe)
            .ok()
            .and_then(|i| from.get(i))
            .and_then(|world| to.iter().position(|p| p == world))
            .map_or(-1, |i| i as i32)
    }

    /// A new team of `members` (world PE numbers, in team order, non-empty); its handle.
    pub fn add_team(&self, members: Vec<u32>) -> i32 {
        assert!(
            !members.is_empty() && members.iter().all(|&p| p < self.n_pes()),
            "a team of PEs {members:?} among {}",
            self.n_pes()
        );
        let mut teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        let n = members.len() as u32;
        let slot = teams
            .iter()
            .position(Option::is_none)
            .unwrap_or(teams.len());
        let def = Some((Arc::<[u32]>::from(members), n));
        if slot == teams.len() {
            teams.push(def);
        } else {
            teams[slot] = def;
        }
        FIRST_SPLIT_TEAM + slot as i32
    }

    /// One member's `nvshmem_team_destroy`: the handle is freed when every member has
    /// destroyed it. Predefined and unknown handles are left alone.
    pub fn destroy_team(&self, team: i32) {
        if team < FIRST_SPLIT_TEAM {
            return;
        }
        let mut teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = teams.get_mut((team - FIRST_SPLIT_TEAM) as usize)
            && let Some((_, live)) = entry
        {
            *live -= 1;
            if *live == 0 {
                *entry = None;
            }
        }
    }

    /// Reserves `len` `T`s (256-byte aligned) at the same offset in every PE's heap, until
    /// the buffer drops. Panics when the heap is exhausted.
    pub fn alloc<T: Copy>(self: &Arc<Self>, len: usize) -> SimBuffer<T> {
        assert!(core::mem::align_of::<T>() <= 16, "alignment over 16 bytes");
        let bytes = len * core::mem::size_of::<T>();
        let offset = self.alloc_offset(bytes).unwrap_or_else(|| {
            panic!(
                "simulated symmetric heap exhausted: {bytes} more bytes do not fit in {}",
                self.heap_bytes()
            )
        });
        SimBuffer {
            world: self.clone(),
            offset,
            len,
            _t: PhantomData,
        }
    }

    /// Runs `kernel` on every PE: `grid_dim` blocks of `block_dim` threads each, schedule
    /// from `seed` (see [`super::run`]).
    pub fn run<F: Fn() + Sync>(
        self: &Arc<Self>,
        grid_dim: u32,
        block_dim: u32,
        seed: u64,
        kernel: F,
    ) -> Result<(), super::SimError> {
        self.run_shape(super::Shape::linear(grid_dim, block_dim), seed, kernel)
    }

    /// [`World::run`] with a grid and blocks in up to three dimensions.
    pub fn run_shape<F: Fn() + Sync>(
        self: &Arc<Self>,
        shape: super::Shape,
        seed: u64,
        kernel: F,
    ) -> Result<(), super::SimError> {
        super::run_pes(Some(self.clone()), shape, seed, kernel)
    }

    fn base(&self, pe: u32) -> usize {
        self.heaps[pe as usize] as usize
    }

    /// `addr` (in `from`'s heap) as an address in `to`'s heap.
    #[track_caller]
    fn translate(&self, addr: usize, from: u32, to: u32) -> usize {
        let base = self.base(from);
        assert!(
            addr >= base && addr < base + self.words * 16,
            "{addr:#x} is not a symmetric address of PE {from}"
        );
        self.base(to) + (addr - base)
    }
}

impl<T: Copy> SimBuffer<T> {
    /// The buffer on the calling simulated thread's PE.
    #[track_caller]
    pub fn sym(&self) -> SymSlice<T> {
        let pe = ctx().expect("SimBuffer::sym outside a simulated kernel").pe;
        // SAFETY: `len` `T`s at this offset lie in every PE's heap (`alloc`).
        unsafe { SymSlice::from_raw_parts(self.ptr(pe), self.len) }
    }

    /// Element `i` on the calling simulated thread's PE.
    #[track_caller]
    pub fn at(&self, i: usize) -> Sym<T> {
        self.sym().at(i)
    }

    fn ptr(&self, pe: u32) -> *mut T {
        (self.world.base(pe) + self.offset) as *mut T
    }

    /// PE `pe`'s copy (host side, between runs).
    pub fn read(&self, pe: u32) -> Vec<T> {
        // SAFETY: `len` `T`s lie there; no run is in progress (the caller holds no kernel).
        unsafe { core::slice::from_raw_parts(self.ptr(pe), self.len).to_vec() }
    }

    /// Writes PE `pe`'s copy (host side, between runs).
    pub fn write(&self, pe: u32, v: &[T]) {
        assert_eq!(v.len(), self.len, "SimBuffer::write: length");
        // SAFETY: as in `read`.
        unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), self.ptr(pe), self.len) }
    }
}

impl<T> Drop for SimBuffer<T> {
    fn drop(&mut self) {
        self.world.free_offset(self.offset);
    }
}

/// A remote write not yet delivered.
pub(super) struct Pending {
    issuer: usize,
    pe: u32,
    epoch: u32,
    dst: usize,
    data: Vec<u8>,
    signal: Option<(usize, u64, i32)>,
}

fn land(p: &Pending) {
    // SAFETY: `dst` and the signal address were translated into the target's heap when
    // the operation was issued; only the running thread touches memory.
    unsafe {
        core::ptr::copy_nonoverlapping(p.data.as_ptr(), p.dst as *mut u8, p.data.len());
        if let Some((sig, v, op)) = p.signal {
            let s = sig as *mut u64;
            s.write_volatile(if op == SIGNAL_ADD {
                s.read_volatile().wrapping_add(v)
            } else {
                v
            });
        }
    }
}

/// Delivers one pending write that nothing orders after another (seeded choice); false if
/// none can be.
pub(super) fn deliver_one(st: &mut State) -> bool {
    deliver_one_of(st, None)
}

/// [`deliver_one`] among the writes of thread `only` (all threads' when `None`).
fn deliver_one_of(st: &mut State, only: Option<usize>) -> bool {
    // A write may land when no write of its thread to its PE from before a fence is still
    // pending: its epoch is the lowest pending for (issuer, PE).
    let mut lowest: std::collections::HashMap<(usize, u32), u32> = std::collections::HashMap::new();
    for p in &st.pending {
        let e = lowest.entry((p.issuer, p.pe)).or_insert(p.epoch);
        *e = (*e).min(p.epoch);
    }
    let eligible: Vec<usize> = (0..st.pending.len())
        .filter(|&i| {
            let p = &st.pending[i];
            lowest[&(p.issuer, p.pe)] == p.epoch && only.is_none_or(|id| p.issuer == id)
        })
        .collect();
    if eligible.is_empty() {
        return false;
    }
    let i = eligible[next_random(&mut st.rng) as usize % eligible.len()];
    let p = st.pending.remove(i);
    land(&p);
    true
}

/// Delivers every pending write of thread `id`, in issue order.
pub(super) fn deliver_issued_by(st: &mut State, id: usize) {
    let (mine, rest): (Vec<Pending>, Vec<Pending>) = core::mem::take(&mut st.pending)
        .into_iter()
        .partition(|p| p.issuer == id);
    st.pending = rest;
    mine.iter().for_each(land);
}

/// NVSHMEM's `NVSHMEM_SIGNAL_ADD` (`crate::signal::SignalOp::Add`; anything else sets).
const SIGNAL_ADD: i32 = crate::signal::SignalOp::Add as i32;

/// The calling thread's context and world.
#[track_caller]
fn here() -> (Ctx, Arc<World>) {
    let c = ctx().expect("an NVSHMEM operation outside a simulated kernel");
    let w = c
        .engine
        .world
        .clone()
        .expect("an NVSHMEM operation in a simulated launch without PEs: use sim::World::run");
    (c, w)
}

/// Runs `f` on the simulator's state as one step of the calling thread (a yield point
/// after it).
#[track_caller]
fn with_state<R>(f: impl FnOnce(&mut State, &Ctx, &World) -> R) -> R {
    let r = on_state(f);
    super::step(false);
    r
}

/// Runs `f` on the simulator's state without yielding: for queueing a remote write, which
/// has no effect anyone can see until it lands (so no other thread needs to run first).
#[track_caller]
fn on_state<R>(f: impl FnOnce(&mut State, &Ctx, &World) -> R) -> R {
    let (c, w) = here();
    let mut st = c.engine.state.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut st, &c, &w)
}

/// Which threads make a call together.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Group {
    Thread,
    Warp,
    Block,
}

#[track_caller]
fn group_sync(g: Group) {
    match g {
        Group::Thread => {}
        Group::Warp => {
            super::warp_collective("a warp-scoped NVSHMEM call", 0, 0, |_, _| 0);
        }
        Group::Block => super::sync_threads(),
    }
}

/// Runs `f` in the group's first thread, with the group meeting before and after.
#[track_caller]
fn as_group<R: Default>(g: Group, f: impl FnOnce() -> R) -> R {
    let (c, _) = here();
    group_sync(g);
    let leader = match g {
        Group::Thread => true,
        Group::Warp => c.thread % 32 == 0,
        Group::Block => c.thread == 0,
    };
    let r = if leader { f() } else { R::default() };
    group_sync(g);
    r
}

#[track_caller]
fn queue(dest: *mut c_void, data: Vec<u8>, pe: i32, signal: Option<(*mut u64, u64, i32)>) {
    on_state(|st, c, w| {
        let pe = check_pe(w, pe);
        let dst = w.translate(dest as usize, c.pe, pe);
        let signal = signal.map(|(s, v, op)| (w.translate(s as usize, c.pe, pe), v, op));
        st.pending.push(Pending {
            issuer: c.id,
            pe,
            epoch: st.fences[c.id],
            dst,
            data,
            signal,
        });
    });
}

#[track_caller]
fn check_pe(w: &World, pe: i32) -> u32 {
    assert!(
        pe >= 0 && (pe as u32) < w.n_pes(),
        "PE {pe} out of range (0..{})",
        w.n_pes()
    );
    pe as u32
}

/// Reads `bytes` at `addr` (local).
unsafe fn bytes_at(addr: *const c_void, bytes: usize) -> Vec<u8> {
    // SAFETY: the caller's contract (NVSHMEM's: a valid source).
    unsafe { core::slice::from_raw_parts(addr.cast::<u8>(), bytes).to_vec() }
}

pub(crate) unsafe fn put(g: Group, dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32) {
    as_group(g, || {
        // SAFETY: NVSHMEM's contract on `src`.
        let data = unsafe { bytes_at(src, bytes) };
        queue(dest, data, pe, None);
    })
}

#[allow(clippy::too_many_arguments)] // NVSHMEM's signature, and the group
pub(crate) unsafe fn put_signal(
    g: Group,
    dest: *mut c_void,
    src: *const c_void,
    bytes: usize,
    sig: *mut u64,
    value: u64,
    op: i32,
    pe: i32,
) {
    as_group(g, || {
        // SAFETY: NVSHMEM's contract on `src`.
        let data = unsafe { bytes_at(src, bytes) };
        queue(dest, data, pe, Some((sig, value, op)));
    })
}

pub(crate) unsafe fn get(g: Group, dest: *mut c_void, src: *const c_void, bytes: usize, pe: i32) {
    as_group(g, || {
        with_state(|_, c, w| {
            let from = w.translate(src as usize, c.pe, check_pe(w, pe));
            // SAFETY: NVSHMEM's contract: `dest` is valid local memory, `src` symmetric.
            unsafe { core::ptr::copy(from as *const u8, dest.cast::<u8>(), bytes) };
        })
    })
}

pub(crate) fn signal_op(sig: *mut u64, value: u64, op: i32, pe: i32) {
    queue(sig.cast(), Vec::new(), pe, Some((sig, value, op)));
}

pub(crate) fn fence() {
    with_state(|st, c, _| st.fences[c.id] += 1);
}

/// Completes the calling thread's writes: they land one at a time, in a seeded order that
/// respects its fences, with a yield point after each, so other threads may observe any
/// prefix of them (as on hardware, where they complete in no particular order until `quiet`
/// returns).
#[track_caller]
pub(crate) fn quiet() {
    while with_state(|st, c, _| deliver_one_of(st, Some(c.id))) {}
}

pub(crate) fn my_pe() -> i32 {
    here().0.pe as i32
}

pub(crate) fn n_pes() -> i32 {
    here().1.n_pes() as i32
}

pub(crate) fn ptr(addr: *const c_void, pe: i32) -> *mut c_void {
    let (c, w) = here();
    let unmapped = pe as u32 != c.pe && !w.peers_mapped.load(core::sync::atomic::Ordering::Relaxed);
    if pe < 0 || pe as u32 >= w.n_pes() || unmapped {
        return core::ptr::null_mut();
    }
    w.translate(addr as usize, c.pe, pe as u32) as *mut c_void
}

/// NVSHMEM's comparison codes (`NVSHMEM_CMP_*`, [`crate::p2p::Cmp`]).
pub(crate) fn compare<T: PartialOrd>(v: T, cmp: i32, x: T) -> bool {
    use crate::p2p::Cmp;
    match cmp {
        c if c == Cmp::Eq as i32 => v == x,
        c if c == Cmp::Ne as i32 => v != x,
        c if c == Cmp::Gt as i32 => v > x,
        c if c == Cmp::Le as i32 => v <= x,
        c if c == Cmp::Lt as i32 => v < x,
        c if c == Cmp::Ge as i32 => v >= x,
        _ => panic!("unknown NVSHMEM comparison {cmp}"),
    }
}

/// Polls `*addr` until `cmp(value)` holds; returns the value seen.
#[track_caller]
pub(crate) unsafe fn wait_until<T: Copy + PartialOrd>(addr: *const T, cmp: i32, value: T) -> T {
    loop {
        // SAFETY: NVSHMEM's contract: a valid local symmetric word.
        let v = unsafe { addr.read_volatile() };
        if compare(v, cmp, value) {
            return v;
        }
        super::step(true);
    }
}

/// The members of `team` and the calling PE's number in it; a kernel bug (an invalid team,
/// or a PE outside it) panics with the operation's name.
#[track_caller]
fn team_of(w: &World, pe: u32, team: i32, what: &str) -> (Arc<[u32]>, usize) {
    let members = w
        .team_members(team)
        .unwrap_or_else(|| panic!("{what} on team {team}, which is not a valid team"));
    let me = members.iter().position(|&m| m == pe).unwrap_or_else(|| {
        panic!("PE {pe} calls {what} on team {team}, of which it is not a member")
    });
    (members, me)
}

/// A barrier of the PEs of `team`, one caller per PE (the group's leader); `quiet_first`
/// completes the PE's writes first (`barrier` as against `sync`).
#[track_caller]
pub(crate) fn pe_barrier(g: Group, team: i32, quiet_first: bool, what: &'static str) {
    let loc = Location::caller();
    as_group(g, || {
        let (c, w) = here();
        let (members, _) = team_of(&w, c.pe, team, what);
        let e: &Engine = &c.engine;
        let mut st = e.state.lock().unwrap_or_else(|x| x.into_inner());
        if quiet_first {
            let per_pe = st.threads.len() / w.n_pes() as usize;
            let mine: Vec<usize> = (0..st.threads.len())
                .filter(|i| i / per_pe == c.pe as usize)
                .collect();
            for id in mine {
                deliver_issued_by(&mut st, id);
            }
        }
        let slot = match st.pe_barrier.iter().position(|(t, _)| *t == team) {
            Some(i) => i,
            None => {
                st.pe_barrier.push((team, Vec::new()));
                st.pe_barrier.len() - 1
            }
        };
        st.pe_barrier[slot].1.push(c.id);
        st.threads[c.id] = Run::Blocked(what, loc);
        if st.pe_barrier[slot].1.len() == members.len() {
            for id in st.pe_barrier.remove(slot).1 {
                st.threads[id] = Run::Ready;
            }
        }
        e.pass_turn(&mut st);
        drop(e.wait_turn(st, c.id));
    });
}

/// The element operations of atomics, waits and reductions.
#[doc(hidden)]
pub trait Word: Copy + PartialOrd + Default {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn bits(self, o: Self, op: u8) -> Self;
    fn same(self, o: Self) -> bool;
}
macro_rules! words {
    (int: $($t:ty),*; float: $($f:ty),*) => {
        $(impl Word for $t {
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn bits(self, o: Self, op: u8) -> Self { match op { b'&' => self & o, b'|' => self | o, _ => self ^ o } }
            fn same(self, o: Self) -> bool { self == o }
        })*
        $(impl Word for $f {
            fn add(self, o: Self) -> Self { self + o }
            fn mul(self, o: Self) -> Self { self * o }
            fn bits(self, _: Self, _: u8) -> Self { unreachable!("no bitwise operation on floats") }
            fn same(self, o: Self) -> bool { self.to_bits() == o.to_bits() }
        })*
    };
}
words!(int: i8, i16, i32, i64, u8, u16, u32, u64; float: f32, f64);

/// `f(old)` on `pe`'s copy of `dest`, at once; returns the old value.
#[track_caller]
pub(crate) unsafe fn atomic<T: Word>(dest: *const T, pe: i32, f: impl FnOnce(T) -> Option<T>) -> T {
    with_state(|_, c, w| {
        let at = w.translate(dest as usize, c.pe, check_pe(w, pe)) as *mut T;
        // SAFETY: a symmetric word of `T` (NVSHMEM's contract), touched by this thread only
        // during its step.
        unsafe {
            let old = at.read_volatile();
            if let Some(new) = f(old) {
                at.write_volatile(new);
            }
            old
        }
    })
}

/// A reduction over the PEs of `team`: `dest[k] = op(src[k] of every member)` in team
/// order.
#[track_caller]
pub(crate) unsafe fn reduce<T: Word>(
    g: Group,
    team: i32,
    op: &str,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> i32 {
    pe_barrier(g, team, false, "a reduction");
    as_group(g, || {
        let (c, w) = here();
        let (members, _) = team_of(&w, c.pe, team, "a reduction");
        for k in 0..n {
            // SAFETY: `src` and `dest` are symmetric arrays of `n` (NVSHMEM's contract).
            unsafe {
                let at = |pe: u32| *(w.translate(src.add(k) as usize, c.pe, pe) as *const T);
                let mut acc = at(members[0]);
                for &pe in &members[1..] {
                    let v = at(pe);
                    acc = match op {
                        "sum" => acc.add(v),
                        "prod" => acc.mul(v),
                        "min" if v < acc => v,
                        "max" if v > acc => v,
                        "min" | "max" => acc,
                        "and" => acc.bits(v, b'&'),
                        "or" => acc.bits(v, b'|'),
                        _ => acc.bits(v, b'^'),
                    };
                }
                dest.add(k).write(acc);
            }
        }
    });
    pe_barrier(g, team, false, "a reduction");
    0
}

/// Byte collectives over the PEs of `team`: `kind` b'b' broadcast (from `root`, numbered in
/// the team), b'f' fcollect, b'a' alltoall; `bytes` per PE.
#[track_caller]
#[allow(clippy::too_many_arguments)] // NVSHMEM's signature, and the group and kind
pub(crate) unsafe fn collect(
    g: Group,
    team: i32,
    kind: u8,
    dest: *mut c_void,
    src: *const c_void,
    bytes: usize,
    root: i32,
) -> i32 {
    pe_barrier(g, team, false, "a collective");
    as_group(g, || {
        let (c, w) = here();
        let (members, me) = team_of(&w, c.pe, team, "a collective");
        let from =
            |j: usize, off: usize| (w.translate(src as usize, c.pe, members[j]) + off) as *const u8;
        let to = dest.cast::<u8>();
        // SAFETY: symmetric buffers of the sizes NVSHMEM's contract gives.
        unsafe {
            match kind {
                b'b' => core::ptr::copy(from(root as usize, 0), to, bytes),
                b'f' => (0..members.len())
                    .for_each(|j| core::ptr::copy(from(j, 0), to.add(j * bytes), bytes)),
                _ => (0..members.len())
                    .for_each(|j| core::ptr::copy(from(j, me * bytes), to.add(j * bytes), bytes)),
            }
        }
    });
    pe_barrier(g, team, false, "a collective");
    0
}

/// This PE's number in `team`, or -1 (not a member, or not a team).
pub(crate) fn team_my_pe(team: i32) -> i32 {
    let (c, w) = here();
    w.team_members(team)
        .and_then(|m| m.iter().position(|&p| p == c.pe))
        .map_or(-1, |i| i as i32)
}

/// The number of PEs in `team`, or -1.
pub(crate) fn team_n_pes(team: i32) -> i32 {
    here().1.team_members(team).map_or(-1, |m| m.len() as i32)
}

/// The number in `dst` of the PE numbered `pe` in `src`, or -1.
pub(crate) fn team_translate(src: i32, pe: i32, dst: i32) -> i32 {
    here().1.team_translate(src, pe, dst)
}

/// The typed C functions (`nvshmem_TYPE_OP`), generic over the element type.
#[doc(hidden)]
pub mod typed {
    use super::{Word, atomic, compare};

    #[track_caller]
    pub unsafe fn p<T: Word>(dest: *mut T, value: T, pe: i32) {
        // SAFETY: one `T` read from a local.
        let data = unsafe { super::bytes_at((&raw const value).cast(), core::mem::size_of::<T>()) };
        super::queue(dest.cast(), data, pe, None);
    }
    #[track_caller]
    pub unsafe fn g<T: Word>(src: *const T, pe: i32) -> T {
        // SAFETY: the caller's contract.
        unsafe { atomic(src, pe, |_| None) }
    }
    #[track_caller]
    pub unsafe fn fetch<T: Word>(src: *const T, pe: i32) -> T {
        // SAFETY: the caller's contract.
        unsafe { atomic(src, pe, |_| None) }
    }
    #[track_caller]
    pub unsafe fn set<T: Word>(dest: *mut T, value: T, pe: i32) {
        // SAFETY: the caller's contract.
        unsafe { atomic(dest, pe, |_| Some(value)) };
    }
    #[track_caller]
    pub unsafe fn swap<T: Word>(dest: *mut T, value: T, pe: i32) -> T {
        // SAFETY: the caller's contract.
        unsafe { atomic(dest, pe, |_| Some(value)) }
    }
    #[track_caller]
    pub unsafe fn compare_swap<T: Word>(dest: *mut T, cond: T, value: T, pe: i32) -> T {
        // SAFETY: the caller's contract.
        unsafe { atomic(dest, pe, |old| old.same(cond).then_some(value)) }
    }
    #[track_caller]
    pub unsafe fn fetch_add<T: Word>(dest: *mut T, value: T, pe: i32) -> T {
        // SAFETY: the caller's contract.
        unsafe { atomic(dest, pe, |old| Some(old.add(value))) }
    }
    #[track_caller]
    pub unsafe fn add<T: Word>(dest: *mut T, value: T, pe: i32) {
        // SAFETY: the caller's contract.
        unsafe { fetch_add(dest, value, pe) };
    }
    #[track_caller]
    pub unsafe fn fetch_inc<T: Word + From<u8>>(dest: *mut T, pe: i32) -> T {
        // SAFETY: the caller's contract.
        unsafe { fetch_add(dest, T::from(1), pe) }
    }
    #[track_caller]
    pub unsafe fn inc<T: Word + From<u8>>(dest: *mut T, pe: i32) {
        // SAFETY: the caller's contract.
        unsafe { fetch_inc(dest, pe) };
    }
    macro_rules! bitwise {
        ($($fetch:ident, $plain:ident: $op:literal;)*) => { $(
            #[track_caller]
            pub unsafe fn $fetch<T: Word>(dest: *mut T, value: T, pe: i32) -> T {
                // SAFETY: the caller's contract.
                unsafe { atomic(dest, pe, |old| Some(old.bits(value, $op))) }
            }
            #[track_caller]
            pub unsafe fn $plain<T: Word>(dest: *mut T, value: T, pe: i32) {
                // SAFETY: the caller's contract.
                unsafe { $fetch(dest, value, pe) };
            }
        )* };
    }
    bitwise! { fetch_and, and: b'&'; fetch_or, or: b'|'; fetch_xor, xor: b'^'; }

    #[track_caller]
    pub unsafe fn wait_until<T: Word>(ivar: *mut T, cmp: i32, value: T) {
        // SAFETY: the caller's contract.
        unsafe { super::wait_until(ivar, cmp, value) };
    }
    #[track_caller]
    pub unsafe fn test<T: Word>(ivar: *mut T, cmp: i32, value: T) -> i32 {
        super::super::step(true);
        // SAFETY: the caller's contract.
        i32::from(compare(unsafe { ivar.read_volatile() }, cmp, value))
    }
    /// Indexes of the words not excluded by `status` that satisfy the comparison.
    unsafe fn satisfied<T: Word>(
        ivars: *mut T,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: T,
    ) -> impl Iterator<Item = (usize, bool)> {
        (0..n)
            .filter(move |&i| {
                status.is_null() || {
                    // SAFETY: `status` has `n` entries when not null (the caller's contract).
                    unsafe { *status.add(i) == 0 }
                }
            })
            .map(move |i| {
                // SAFETY: `ivars` has `n` words.
                (
                    i,
                    compare(unsafe { ivars.add(i).read_volatile() }, cmp, value),
                )
            })
    }
    #[track_caller]
    pub unsafe fn test_all<T: Word>(
        ivars: *mut T,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: T,
    ) -> i32 {
        super::super::step(true);
        // SAFETY: the caller's contract.
        i32::from(unsafe { satisfied(ivars, n, status, cmp, value) }.all(|(_, ok)| ok))
    }
    #[track_caller]
    pub unsafe fn test_any<T: Word>(
        ivars: *mut T,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: T,
    ) -> usize {
        super::super::step(true);
        // SAFETY: the caller's contract.
        unsafe { satisfied(ivars, n, status, cmp, value) }
            .find(|(_, ok)| *ok)
            .map_or(usize::MAX, |(i, _)| i)
    }
    #[track_caller]
    pub unsafe fn wait_until_all<T: Word>(
        ivars: *mut T,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: T,
    ) {
        // SAFETY: the caller's contract.
        while unsafe { test_all(ivars, n, status, cmp, value) } == 0 {}
    }
    #[track_caller]
    pub unsafe fn wait_until_any<T: Word>(
        ivars: *mut T,
        n: usize,
        status: *const i32,
        cmp: i32,
        value: T,
    ) -> usize {
        loop {
            // SAFETY: the caller's contract.
            let i = unsafe { test_any(ivars, n, status, cmp, value) };
            if i != usize::MAX {
                return i;
            }
        }
    }
}
