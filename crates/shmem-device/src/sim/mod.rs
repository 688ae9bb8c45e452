//! The CPU simulator's execution engine (feature `sim`, host builds only): a grid of
//! simulated GPU threads with CUDA's execution model, one seeded schedule at a time.
//!
//! Two ways in: `shmem-host`'s simulator backend (`shmem_host::sim`, feature `sim`) runs
//! whole programs, every PE a thread of one process, their launches run here; and
//! [`World::run`] runs a kernel function directly on simulated PEs, as below. Grids and
//! blocks may have up to three dimensions ([`World::run_shape`]).
//!
//! ```
//! use shmem_device::sim::World;
//! use shmem_device::{Thread, coll::barrier_all, my_pe, n_pes, quiet, rma::p, thread::*};
//!
//! let world = World::new(4, 1 << 16); // 4 PEs, 64 KiB of symmetric heap each
//! let got = world.alloc::<i32>(1);
//! world
//!     .run(1, 32, /* seed */ 7, || {
//!         if thread_idx_x() == 0 {
//!             // SAFETY: a symmetric i32; each PE writes its successor's.
//!             unsafe { p(got.at(0), my_pe(), (my_pe() + 1) % n_pes()) };
//!             quiet();
//!             // SAFETY: one thread of every PE reaches it.
//!             unsafe { barrier_all(Thread) };
//!         }
//!     })
//!     .expect("no deadlock");
//! assert_eq!(got.read(1), [0]);
//! ```
//!
//! # Model
//! Every simulated thread is an OS thread, but only one runs at a time: it holds the
//! *turn*. At each *yield point* (a barrier, a warp operation, a scoped atomic, a poll) the
//! running thread gives the turn to a thread chosen by the seeded generator among those
//! ready, so the schedule is a function of the seed alone. Because only one thread runs,
//! plain loads and stores between yield points behave as sequentially consistent; the
//! yield points are where other threads' effects can appear, as on a GPU where nothing
//! orders two threads' accesses without a synchronising operation.
//!
//! A thread waiting at a barrier or a warp operation is *blocked* until the others arrive.
//! A thread that polls (an acquire load in a loop) stays ready; when every unfinished thread
//! is blocked or has polled [`POLL_LIMIT`] times in a row with no thread doing anything
//! else in between, the run is a deadlock: it stops with a report of each thread's block,
//! thread, what it waits for and where (the caller's source location).

extern crate std;

use std::boxed::Box;
use std::cell::RefCell;
use std::format;
use std::panic::Location;
use std::string::{String, ToString};
use std::sync::{Arc, Condvar, Mutex};
use std::vec::Vec;

/// Turns passed between simulated threads since the process started (a cost measure).
pub static SWITCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Consecutive polls by every ready thread, with nothing else happening, that count as a
/// deadlock.
pub const POLL_LIMIT: u32 = 10_000;

/// What a simulated thread is doing, as the scheduler sees it.
#[derive(Clone, Debug)]
enum Run {
    Ready,
    /// Ready, but its last step was a poll; `polls` in a row.
    Polling(u32, &'static Location<'static>),
    Blocked(&'static str, &'static Location<'static>),
    Done,
}

/// A warp collective: each lane's result from every lane's `(value, argument)`.
type WarpFn = fn(&[(u64, u32)], usize) -> u64;

/// One warp's pending collective operation.
#[derive(Default)]
struct WarpOp {
    /// The operation in progress (set by the first lane to arrive).
    op: Option<WarpFn>,
    /// `(value, argument)` per lane that has arrived.
    args: Vec<Option<(u64, u32)>>,
    /// Results of the last completed operation, per lane.
    results: Vec<u64>,
    /// Completed operations (a lane waits for this to move).
    generation: u64,
}

struct State {
    turn: usize,
    /// Remote operations issued and not yet delivered (see [`shmem`]).
    pending: Vec<shmem::Pending>,
    /// Per team handle: the threads waiting in a barrier of that team.
    pe_barrier: Vec<(i32, Vec<usize>)>,
    /// Per thread: fences issued (orders its pending operations to one PE).
    fences: Vec<u32>,
    threads: Vec<Run>,
    rng: u64,
    grid_dim: u32,
    block_dim: u32,
    n_pes: u32,
    arrived: Vec<u32>,
    /// Per block: the threads at its barrier that voted `true` ([`sync_threads_vote`]).
    votes: Vec<u32>,
    /// Per block: `(true, calling)` of its last completed barrier.
    tally: Vec<(u32, u32)>,
    barrier_generation: Vec<u64>,
    /// Per (block, id): the generation of that named barrier in progress.
    named: std::collections::BTreeMap<(usize, u32), Named>,
    warps: Vec<WarpOp>,
    abort: Option<String>,
}

/// A launch being simulated.
struct Engine {
    state: Mutex<State>,
    /// One per thread: a thread sleeps on its own, woken only when the turn is its (or the
    /// run ends), so a switch costs one wake-up, not one per thread.
    turn_changed: Vec<Condvar>,
    seed: u64,
    world: Option<Arc<shmem::World>>,
    /// Every block's dynamic shared memory, `shape.shared_bytes` each (rounded up to 16).
    shared: SharedMemory,
}

/// The blocks' dynamic shared memory: written through raw pointers by the simulated threads,
/// of which only one runs at a time.
struct SharedMemory {
    words: Box<[core::cell::UnsafeCell<u128>]>,
    per_block: usize,
}

// SAFETY: the cells are only accessed by simulated threads through the pointers `block`
// returns, and only the thread holding the turn runs (the module's model), so no two
// threads access them at once.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// `blocks` blocks of `bytes` each, every byte `0xa5` (a read before a write shows).
    fn new(blocks: usize, bytes: u32) -> Self {
        let per_block = (bytes as usize).div_ceil(16);
        let fill = u128::from_ne_bytes([0xa5; 16]);
        SharedMemory {
            words: (0..blocks * per_block)
                .map(|_| core::cell::UnsafeCell::new(fill))
                .collect(),
            per_block,
        }
    }

    /// The first byte of global block `b`'s memory.
    fn block(&self, b: usize) -> *mut u8 {
        self.words
            .get(b * self.per_block)
            .map_or(core::ptr::NonNull::<u128>::dangling().as_ptr(), |c| c.get())
            .cast()
    }
}

/// What [`run`] reports when a simulated launch fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError {
    /// The seed of the schedule (run again with it to reproduce).
    pub seed: u64,
    /// What went wrong: a deadlock report, or a thread's panic message.
    pub message: String,
}

impl core::fmt::Display for SimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} (simulator seed {:#x})", self.message, self.seed)
    }
}

/// The running thread's place in the launch.
#[derive(Clone)]
struct Ctx {
    engine: Arc<Engine>,
    id: usize,
    pe: u32,
    block: u32,
    thread: u32,
    grid_dim: u32,
    block_dim: u32,
    /// The launch's shape in three dimensions (`grid_dim`, `block_dim` are their products).
    shape: Shape,
}

/// A launch's grid and block extents, `(x, y, z)` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Blocks per grid.
    pub grid: (u32, u32, u32),
    /// Threads per block.
    pub block: (u32, u32, u32),
    /// Bytes of dynamic shared memory per block ([`crate::shared::dynamic`]).
    pub shared_bytes: u32,
}

impl Shape {
    /// `blocks` blocks of `threads` threads, in `x` only, without dynamic shared memory.
    pub fn linear(blocks: u32, threads: u32) -> Shape {
        Shape {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_bytes: 0,
        }
    }

    /// The same shape with `bytes` of dynamic shared memory per block.
    pub fn with_shared(self, bytes: u32) -> Shape {
        Shape {
            shared_bytes: bytes,
            ..self
        }
    }
    fn volume(d: (u32, u32, u32)) -> u32 {
        d.0 * d.1 * d.2
    }
}

/// `(x, y, z)` of linear index `i` in extents `d` (`x` fastest, as CUDA numbers threads).
fn unflatten(i: u32, d: (u32, u32, u32)) -> (u32, u32, u32) {
    (i % d.0, i / d.0 % d.1, i / (d.0 * d.1))
}

impl Ctx {
    /// The block's index among every PE's blocks (PE-major).
    fn global_block(&self) -> u32 {
        self.pe * self.grid_dim + self.block
    }
}

std::thread_local! {
    static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
}

fn ctx() -> Option<Ctx> {
    CTX.with(|c| c.borrow().clone())
}

/// Raised (as a panic payload) in threads stopped because the launch was aborted.
struct Aborted;

/// The seed of run `index` of a sequence run under seed `base` (how `shmem-host` seeds a
/// program's successive launches from one `SHMEM_SIM_SEED`).
pub fn derive_seed(base: u64, index: u64) -> u64 {
    let mut rng = base ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    next_random(&mut rng)
}

fn next_random(rng: &mut u64) -> u64 {
    *rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *rng;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Engine {
    /// Gives the turn to a ready thread (seeded choice), or ends the run: all done, or a
    /// deadlock (with a report). Called with the lock held, after updating `threads[me]`.
    fn pass_turn(&self, st: &mut State) {
        SWITCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if st.abort.is_some() {
            // Every thread, running or waiting, wakes and stops.
            st.turn = usize::MAX;
            self.turn_changed.iter().for_each(Condvar::notify_all);
            return;
        }
        let ready_of = |st: &State| -> Vec<usize> {
            (0..st.threads.len())
                .filter(|&i| matches!(st.threads[i], Run::Ready | Run::Polling(..)))
                .collect()
        };
        let mut ready = ready_of(st);
        let stuck = ready.is_empty()
            || ready
                .iter()
                .all(|&i| matches!(st.threads[i], Run::Polling(n, _) if n >= POLL_LIMIT));
        // Late delivery: now and then at random, and always before a deadlock would be
        // declared, one deliverable remote operation lands (it may be what a poller awaits).
        if !st.pending.is_empty()
            && (stuck || next_random(&mut st.rng).is_multiple_of(8))
            && shmem::deliver_one(st)
        {
            for r in st.threads.iter_mut() {
                if let Run::Polling(_, l) = *r {
                    *r = Run::Polling(0, l);
                }
            }
            ready = ready_of(st);
        }
        if ready.is_empty() {
            if st.threads.iter().any(|r| !matches!(r, Run::Done)) && st.abort.is_none() {
                st.abort = Some(report("every thread is waiting", st));
            }
            st.turn = usize::MAX;
        } else if ready
            .iter()
            .all(|&i| matches!(st.threads[i], Run::Polling(n, _) if n >= POLL_LIMIT))
        {
            if st.abort.is_none() {
                st.abort = Some(report(
                    "no thread makes progress (every ready thread keeps polling)",
                    st,
                ));
            }
            st.turn = usize::MAX;
        } else {
            let pick = next_random(&mut st.rng) as usize % ready.len();
            st.turn = ready[pick];
        }
        if st.turn == usize::MAX {
            self.turn_changed.iter().for_each(Condvar::notify_all);
        } else {
            self.turn_changed[st.turn].notify_all();
        }
    }

    /// Waits for `me`'s turn; unwinds with [`Aborted`] if the run was aborted.
    fn wait_turn<'a>(
        &self,
        mut st: std::sync::MutexGuard<'a, State>,
        me: usize,
    ) -> std::sync::MutexGuard<'a, State> {
        while st.turn != me && st.abort.is_none() {
            st = self.turn_changed[me]
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
        if st.abort.is_some() {
            drop(st);
            std::panic::resume_unwind(Box::new(Aborted));
        }
        st
    }
}

/// "block B thread T" (with "PE P " first when there are several PEs).
fn who(id: usize, grid_dim: u32, block_dim: u32, n_pes: u32) -> String {
    let global_block = id as u32 / block_dim;
    let bt = format!(
        "block {} thread {}",
        global_block % grid_dim,
        id as u32 % block_dim
    );
    if n_pes > 1 {
        format!("PE {} {bt}", global_block / grid_dim)
    } else {
        bt
    }
}

fn report(what: &str, st: &State) -> String {
    let mut s = format!("deadlock: {what}; the threads that have not finished:");
    // One line per run of threads of one block waiting for the same thing at the same place.
    let mut lines: Vec<(usize, usize, &'static str, &'static Location<'static>)> = Vec::new();
    for (i, r) in st.threads.iter().enumerate() {
        let (w, loc) = match r {
            Run::Blocked(w, loc) => (*w, *loc),
            Run::Polling(_, loc) => ("polls memory", *loc),
            _ => continue,
        };
        let bd = st.block_dim as usize;
        match lines.last_mut() {
            Some((_, last, lw, ll))
                if *last + 1 == i && *lw == w && **ll == *loc && *last / bd == i / bd =>
            {
                *last = i;
            }
            _ => lines.push((i, i, w, loc)),
        }
    }
    for (first, last, w, loc) in lines {
        let who = who(first, st.grid_dim, st.block_dim, st.n_pes);
        let who = if last > first {
            format!("{who}-{}", last as u32 % st.block_dim)
        } else {
            who
        };
        s += &format!(
            "\n  {who}: {w} at {}:{}:{}",
            loc.file(),
            loc.line(),
            loc.column()
        );
    }
    s
}

/// Runs `kernel` on a simulated grid of `grid_dim` blocks of `block_dim` threads, with the
/// schedule chosen by `seed`. Returns when every thread has returned, or the first failure:
/// a deadlock (every thread waiting) or a panic in a thread.
pub fn run<F: Fn() + Sync>(
    grid_dim: u32,
    block_dim: u32,
    seed: u64,
    kernel: F,
) -> Result<(), SimError> {
    run_pes(None, Shape::linear(grid_dim, block_dim), seed, kernel)
}

/// [`run`] on every PE of `world` (each PE runs the same grid), or on one PE without a
/// symmetric heap when `world` is `None`.
pub(crate) fn run_pes<F: Fn() + Sync>(
    world: Option<Arc<shmem::World>>,
    shape: Shape,
    seed: u64,
    kernel: F,
) -> Result<(), SimError> {
    let (grid_dim, block_dim) = (Shape::volume(shape.grid), Shape::volume(shape.block));
    if grid_dim == 0 || block_dim == 0 {
        return Err(SimError {
            seed,
            message: format!("a launch with an empty grid or block: {shape:?}"),
        });
    }
    let n_pes = world.as_ref().map_or(1, |w| w.n_pes());
    let blocks = n_pes * grid_dim;
    let n = (blocks * block_dim) as usize;
    let warps_per_block = block_dim.div_ceil(32) as usize;
    let engine = Arc::new(Engine {
        state: Mutex::new(State {
            turn: usize::MAX,
            pending: Vec::new(),
            pe_barrier: Vec::new(),
            fences: std::vec![0; n],
            threads: std::vec![Run::Ready; n],
            rng: seed,
            grid_dim,
            block_dim,
            n_pes,
            arrived: std::vec![0; blocks as usize],
            votes: std::vec![0; blocks as usize],
            tally: std::vec![(0, 0); blocks as usize],
            barrier_generation: std::vec![0; blocks as usize],
            named: std::collections::BTreeMap::new(),
            warps: (0..blocks as usize * warps_per_block)
                .map(|_| WarpOp::default())
                .collect(),
            abort: None,
        }),
        turn_changed: (0..n).map(|_| Condvar::new()).collect(),
        seed,
        world,
        shared: SharedMemory::new(blocks as usize, shape.shared_bytes),
    });
    {
        let mut st = engine.state.lock().unwrap_or_else(|e| e.into_inner());
        engine.pass_turn(&mut st);
    }
    let kernel = &kernel;
    std::thread::scope(|scope| {
        for id in 0..n {
            let engine = engine.clone();
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn_scoped(scope, move || {
                    let global_block = id as u32 / block_dim;
                    let c = Ctx {
                        engine: engine.clone(),
                        id,
                        pe: global_block / grid_dim,
                        block: global_block % grid_dim,
                        thread: id as u32 % block_dim,
                        grid_dim,
                        block_dim,
                        shape,
                    };
                    CTX.with(|x| *x.borrow_mut() = Some(c));
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let st = engine.state.lock().unwrap_or_else(|e| e.into_inner());
                        drop(engine.wait_turn(st, id));
                        kernel();
                    }));
                    let mut st = engine.state.lock().unwrap_or_else(|e| e.into_inner());
                    if let Err(p) = result
                        && !p.is::<Aborted>()
                        && st.abort.is_none()
                    {
                        let msg = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a panic".into());
                        st.abort = Some(format!(
                            "{} panicked: {msg}",
                            who(id, grid_dim, block_dim, n_pes)
                        ));
                    }
                    // A kernel's remote operations complete by its end.
                    shmem::deliver_issued_by(&mut st, id);
                    st.threads[id] = Run::Done;
                    // A finished thread counts as arrived at its block's barrier and its
                    // warp's collectives (as exited threads do on the GPU).
                    let block = id / block_dim as usize;
                    release_barrier_if_complete(&mut st, block);
                    let warp = (id as u32 / block_dim * block_dim.div_ceil(32)
                        + id as u32 % block_dim / 32) as usize;
                    complete_warp_if_ready(&mut st, warp, id - id % block_dim as usize % 32);
                    if st.turn == id || st.turn == usize::MAX {
                        engine.pass_turn(&mut st);
                    }
                    CTX.with(|x| *x.borrow_mut() = None);
                })
                .expect("spawning a simulated thread");
        }
    });
    let st = engine.state.lock().unwrap_or_else(|e| e.into_inner());
    match &st.abort {
        Some(m) => Err(SimError {
            seed: engine.seed,
            message: m.clone(),
        }),
        None => Ok(()),
    }
}

fn release_barrier_if_complete(st: &mut State, block: usize) {
    let bd = st.block_dim as usize;
    let done = (block * bd..(block + 1) * bd)
        .filter(|&i| matches!(st.threads[i], Run::Done))
        .count() as u32;
    if st.arrived[block] > 0 && st.arrived[block] + done == st.block_dim {
        st.tally[block] = (st.votes[block], st.arrived[block]);
        st.votes[block] = 0;
        st.arrived[block] = 0;
        st.barrier_generation[block] += 1;
        for i in block * bd..(block + 1) * bd {
            if matches!(st.threads[i], Run::Blocked("sync_threads", _)) {
                st.threads[i] = Run::Ready;
            }
        }
    }
}

/// Special register `name` (`thread_idx_x`, `block_dim_y`, `lane_id`, ...) of the calling
/// simulated thread, if any.
pub(crate) fn register(name: &str) -> Option<u32> {
    let c = ctx()?;
    let (t, b) = (
        unflatten(c.thread, c.shape.block),
        unflatten(c.block, c.shape.grid),
    );
    let pick = |v: (u32, u32, u32)| match name.as_bytes()[name.len() - 1] {
        b'x' => v.0,
        b'y' => v.1,
        _ => v.2,
    };
    Some(match name {
        "lane_id" => c.thread % 32,
        n if n.starts_with("thread_idx") => pick(t),
        n if n.starts_with("block_idx") => pick(b),
        n if n.starts_with("block_dim") => pick(c.shape.block),
        n if n.starts_with("grid_dim") => pick(c.shape.grid),
        n => panic!("the simulator has no special register `{n}`"),
    })
}

/// The calling simulated thread's block's dynamic shared memory and its size, if any.
pub(crate) fn dynamic_shared() -> Option<(*mut u8, u32)> {
    let c = ctx()?;
    let block = c.global_block() as usize;
    Some((c.engine.shared.block(block), c.shape.shared_bytes))
}

/// The PE of the calling simulated thread, if any (`my_pe()` without a `World`).
pub fn current_pe() -> Option<u32> {
    ctx().map(|c| c.pe)
}

pub(crate) mod bulk;
pub(crate) mod device;
pub mod shmem;
pub mod sys;
pub use shmem::{SimBuffer, World};

/// The program-wide wait bound of the running launch's world (ns, 0: none).
pub(crate) fn wait_bound_ns() -> u64 {
    ctx()
        .and_then(|c| c.engine.world.clone())
        .map_or(0, |w| w.wait_bound_ns())
}

/// Nanoseconds since the simulator first read its clock (the clock of bounded waits).
pub(crate) fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// A yield point: gives the turn away and waits for it back. `poll` marks a step that only
/// looked at memory (see the module documentation).
#[track_caller]
pub(crate) fn step(poll: bool) {
    let Some(c) = ctx() else { return };
    let loc = Location::caller();
    let e = &c.engine;
    let mut st = e.state.lock().unwrap_or_else(|x| x.into_inner());
    st.threads[c.id] = if poll {
        match st.threads[c.id] {
            Run::Polling(k, _) => Run::Polling(k + 1, loc),
            _ => Run::Polling(1, loc),
        }
    } else {
        // Progress: everyone's poll count starts again.
        for r in st.threads.iter_mut() {
            if let Run::Polling(_, l) = *r {
                *r = Run::Polling(0, l);
            }
        }
        Run::Ready
    };
    e.pass_turn(&mut st);
    drop(e.wait_turn(st, c.id));
}

/// `__syncthreads()` in the simulator.
#[track_caller]
pub(crate) fn sync_threads() {
    sync_threads_vote(false);
}

/// `__syncthreads()` in the simulator, counting the threads that reach it with `pred` true:
/// returns `(true, calling)` for the barrier (threads that have finished take no part, as
/// exited threads on a GPU). A thread reads the tally before it can reach the block's next
/// barrier, which needs every thread of the block, so no later barrier overwrites it first.
#[track_caller]
pub(crate) fn sync_threads_vote(pred: bool) -> (u32, u32) {
    let Some(c) = ctx() else { return (0, 0) };
    let loc = Location::caller();
    let e = &c.engine;
    let block = c.global_block() as usize;
    let mut st = e.state.lock().unwrap_or_else(|x| x.into_inner());
    let generation = st.barrier_generation[block];
    st.arrived[block] += 1;
    st.votes[block] += u32::from(pred);
    st.threads[c.id] = Run::Blocked("sync_threads", loc);
    release_barrier_if_complete(&mut st, block);
    e.pass_turn(&mut st);
    let st = e.wait_turn(st, c.id);
    debug_assert!(st.barrier_generation[block] > generation);
    st.tally[block]
}

/// A named barrier's generation in progress ([`named_barrier`]).
struct Named {
    /// The threads that complete it, as its first arrival named them.
    threads: u32,
    arrived: u32,
    /// The threads waiting in `sync`.
    waiting: Vec<usize>,
}

/// `bar.sync id, threads` (`wait`) or `bar.arrive id, threads` in the simulator: counts the
/// calling thread's arrival at its block's barrier `id`; when `threads` have arrived the
/// generation completes and its waiters go on. Every arrival of a generation must name the
/// same `threads` (a different count panics, naming both).
#[track_caller]
pub(crate) fn named_barrier(id: u32, threads: u32, wait: bool) {
    let Some(c) = ctx() else { return };
    let loc = Location::caller();
    let e = &c.engine;
    let block = c.global_block() as usize;
    let mut st = e.state.lock().unwrap_or_else(|x| x.into_inner());
    let g = st.named.entry((block, id)).or_insert(Named {
        threads,
        arrived: 0,
        waiting: Vec::new(),
    });
    if g.threads != threads {
        let first = g.threads;
        drop(st);
        panic!(
            "NamedBarrier {id}: this thread arrives for {threads} threads, an earlier arrival of the same generation for {first}"
        );
    }
    g.arrived += 1;
    let complete = g.arrived == threads;
    st.threads[c.id] = if wait && !complete {
        g.waiting.push(c.id);
        Run::Blocked("NamedBarrier::sync", loc)
    } else {
        Run::Ready
    };
    if complete {
        let g = st
            .named
            .remove(&(block, id))
            .expect("the generation in progress");
        for i in g.waiting {
            st.threads[i] = Run::Ready;
        }
    }
    e.pass_turn(&mut st);
    drop(e.wait_turn(st, c.id));
}

/// A warp collective in the simulator: every live lane of the warp contributes
/// `(value, arg)`; when all have, `op(all, lane)` gives each lane its result.
#[track_caller]
pub(crate) fn warp_collective(
    what: &'static str,
    value: u64,
    arg: u32,
    op: fn(&[(u64, u32)], usize) -> u64,
) -> u64 {
    let Some(c) = ctx() else {
        crate::host::device_only(what)
    };
    let loc = Location::caller();
    let e = &c.engine;
    let lane = (c.thread % 32) as usize;
    let warp_index = (c.global_block() * c.block_dim.div_ceil(32) + c.thread / 32) as usize;
    let first = (c.global_block() * c.block_dim + c.thread / 32 * 32) as usize;
    let lanes = warp_lanes(c.block_dim, c.thread);
    let mut st = e.state.lock().unwrap_or_else(|x| x.into_inner());
    let generation = st.warps[warp_index].generation;
    {
        let w = &mut st.warps[warp_index];
        if w.args.len() < lanes {
            w.args = std::vec![None; lanes];
        }
        w.op.get_or_insert(op);
        w.args[lane] = Some((value, arg));
    }
    st.threads[c.id] = Run::Blocked(what, loc);
    complete_warp_if_ready(&mut st, warp_index, first);
    e.pass_turn(&mut st);
    let st = e.wait_turn(st, c.id);
    debug_assert!(st.warps[warp_index].generation > generation);
    st.warps[warp_index].results[lane]
}

/// Lanes of the warp of thread `thread` in a block of `block_dim` (the last may be partial).
fn warp_lanes(block_dim: u32, thread: u32) -> usize {
    (block_dim - thread / 32 * 32).min(32) as usize
}

/// Completes warp `warp` (first thread `first`) if every live lane has arrived: computes
/// every lane's result and readies the lanes.
fn complete_warp_if_ready(st: &mut State, warp: usize, first: usize) {
    let bd = st.block_dim;
    let lanes = warp_lanes(bd, first as u32 % bd);
    let w = &st.warps[warp];
    let Some(op) = w.op else { return };
    let arrived = |l: usize| w.args.get(l).is_some_and(|a| a.is_some());
    if !(0..lanes).all(|l| arrived(l) || matches!(st.threads[first + l], Run::Done)) {
        return;
    }
    let waiting: Vec<usize> = (0..lanes).filter(|&l| arrived(l)).collect();
    let all: Vec<(u64, u32)> = (0..lanes)
        .map(|l| w.args.get(l).copied().flatten().unwrap_or((0, 0)))
        .collect();
    let w = &mut st.warps[warp];
    w.results = (0..lanes).map(|l| op(&all, l)).collect();
    w.args = std::vec![None; lanes];
    w.op = None;
    w.generation += 1;
    for l in waiting {
        st.threads[first + l] = Run::Ready;
    }
}
