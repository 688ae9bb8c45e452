//! The CPU simulator backend (feature `sim`, on by default): a program's PEs as threads of
//! one process, its kernels run by [`shmem_device::sim`].
//!
//! [`run`] starts `n` threads; on each, [`Shmem::init`](crate::Shmem::init) returns that thread's PE, so the
//! program's own per-PE code runs unchanged: collective allocations, buffers, modules,
//! typed launches, barriers. [`crate::launcher::run`] chooses this backend where there is no
//! GPU (or when `SHMEM_SIM=1`).
//!
//! - **Symmetric memory**: one heap per PE in a [`World`] (`NVSHMEM_SYMMETRIC_SIZE` bytes
//!   each, 1 GiB by default); a collective allocation takes the same offset in every heap,
//!   and unequal sizes are [`Error::UnequalAllocation`] on every PE, as on the GPU.
//! - **Launches** are collective: each PE's launch waits for every PE's launch of the same
//!   kernel, then the whole grid of every PE runs as one simulated launch (every thread of
//!   every block of every PE concurrently, remote writes landing late in a seeded order; see
//!   [`shmem_device::sim`]). So every PE must launch the same kernels in the same order with
//!   the same shape, as kernels that communicate are launched under NVSHMEM; anything else
//!   is an error that names both calls. A launch returns when its grid has finished.
//! - **Schedules**: launch `i` runs with a seed derived from `SHMEM_SIM_SEED` (default
//!   [`DEFAULT_SEED`]) and `i`; a failing launch (deadlock, panic) says which and how to
//!   rerun the same schedules.
//! - **Failures**: when a PE's code returns an error or panics while others wait in a
//!   collective call, the others get an error naming it, and [`run`] reports the first.
//! - **Co-residency**: a simulated GPU has [`SMS`] multiprocessors of [`THREADS_PER_SM`]
//!   threads ([`crate::KernelFn::max_coresident_blocks`] says so), so that programs which
//!   size their grids by occupancy pick grids the simulator runs quickly.
//!
//! Not available: what needs a GPU (a CUDA context or stream, device pointers, CUDA C++
//! cubins); each is an [`Error::Simulator`].

use crate::backend::{
    self as backend, Backend, Function, HostCall, LaunchArgs, PeInfo, Split, TeamColl, gpu::Gpu,
};
use crate::error::{Error, Result};
use crate::module::LaunchConfig;
use crate::nvshmem::HostSync;
use crate::runtime::Mark;
use crate::stream::{GraphExec, StreamRef};
use cudarc::driver::sys::CUmodule;
use shmem_device::sim::{Shape, World};
use std::any::Any;
use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The NVSHMEM version whose semantics the simulator follows ([`Shmem::version`](crate::Shmem::version)).
pub const NVSHMEM_VERSION: (u32, u32, u32) = (3, 4, 5);

/// The base seed when `SHMEM_SIM_SEED` is not set.
pub const DEFAULT_SEED: u64 = 0x5eed;

/// Multiprocessors of a simulated GPU.
pub const SMS: u32 = 2;

/// Threads one simulated multiprocessor holds at once.
pub const THREADS_PER_SM: u32 = 128;

/// Default symmetric heap per PE: 1 GiB (reserved lazily by the OS).
const DEFAULT_HEAP: usize = 1 << 30;

/// One simulated PE, as a [`Shmem`](crate::Shmem) holds it.
pub(crate) struct SimPe {
    pe: u32,
    shared: Arc<Shared>,
    /// The steps of the graph being captured, while a capture runs.
    capture: RefCell<Option<Vec<Step>>>,
}

/// One step of a simulated graph ([`crate::Graph`]), replayed in order.
pub(crate) enum Step {
    /// A launch: every PE's grid, as an eager launch runs it.
    Launch {
        name: &'static str,
        shape: Shape,
        call: HostCall,
    },
    /// An on-stream barrier, sync or quiet.
    Sync(HostSync),
    /// A fill of this PE's memory with zero bytes ([`Backend::fill_zero_on`]).
    Zero { ptr: *mut u8, bytes: usize },
    /// A team collective ([`Backend::team_coll`]'s arguments).
    Team {
        team: i32,
        op: TeamColl,
        dest: *mut u8,
        src: *const u8,
        bytes: usize,
    },
}

/// What the PEs of one [`run`] share.
struct Shared {
    world: Arc<World>,
    n: u32,
    seed: u64,
    launches: AtomicU64,
    state: Mutex<Meetings>,
    changed: Condvar,
    /// Failures in the order they happened: `(pe, what)`.
    failures: Mutex<Vec<(u32, String)>>,
}

/// The collective calls being gathered, one per team, and how each PE's code ended.
struct Meetings {
    /// By team handle (the world team is 0).
    by_team: std::collections::HashMap<i32, Meeting>,
    /// Per PE: how its code ended, once it has.
    ended: Vec<Option<String>>,
}

/// The collective call being gathered among the members of one team.
#[derive(Default)]
struct Meeting {
    /// Per member (in team order): the call it waits in and what it brought.
    waiting: Vec<Option<(String, Box<dyn Any + Send>)>>,
    /// Completed calls.
    generation: u64,
    /// The last completed call's result: `R`, or what went wrong (for every PE, whatever
    /// type its call expected).
    result: Option<std::result::Result<Box<dyn Any + Send>, String>>,
}

std::thread_local! {
    static THREAD_PE: RefCell<Option<SimPe>> = const { RefCell::new(None) };
    /// Which PE [`run`] started this thread as, whether or not its runtime was taken.
    static THREAD_PE_INDEX: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// The simulated PE of this thread if [`run`] started it: `Ok(None)` on any other thread,
/// an error when [`Shmem::init`](crate::Shmem::init) has taken it already.
pub(crate) fn take_thread_pe() -> Result<Option<SimPe>> {
    let Some(i) = THREAD_PE_INDEX.with(|c| c.get()) else {
        return Ok(None);
    };
    match THREAD_PE.with(|p| p.borrow_mut().take()) {
        Some(pe) => Ok(Some(pe)),
        None => Err(Error::Bootstrap(format!(
            "simulated PE {i} has started its runtime already (one Shmem per PE)"
        ))),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes from `NVSHMEM_SYMMETRIC_SIZE` (`1073741824`, `512M`, `2G`, `64K`).
fn heap_bytes(v: Option<String>) -> Result<usize> {
    let Some(v) = v else { return Ok(DEFAULT_HEAP) };
    let t = v.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "NVSHMEM_SYMMETRIC_SIZE={v:?} is not a size (a number, optionally K, M or G)"
            ))
        })
}

/// The base seed from `SHMEM_SIM_SEED` (decimal or `0x` hex).
fn base_seed(v: Option<String>) -> Result<u64> {
    let Some(v) = v else { return Ok(DEFAULT_SEED) };
    let t = v.trim();
    match t.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
    .ok_or_else(|| Error::Invalid(format!("SHMEM_SIM_SEED={v:?} is not a number")))
}

/// Runs `pe` on `n_pes` simulated PEs, each a thread of this process on which
/// [`Shmem::init`](crate::Shmem::init) returns its PE. Returns every PE's value, in PE order, or the first
/// failure: an error or panic of a PE (named), which stops the others at their next
/// collective call.
///
/// ```
/// use shmem_host::{Shmem, sim};
/// let got = sim::run(3, || {
///     let rt = Shmem::init()?;
///     let x = rt.alloc::<i32>(4)?; // collective: same offset in every PE's heap
///     x.copy_from(&[rt.my_pe(); 4])?;
///     rt.barrier_all()?;
///     Ok((rt.my_pe(), rt.n_pes(), x.to_vec()?))
/// })
/// .unwrap();
/// assert_eq!(got[2], (2, 3, vec![2; 4]));
/// ```
pub fn run<R: Send>(n_pes: u32, pe: impl Fn() -> Result<R> + Sync) -> Result<Vec<R>> {
    if n_pes == 0 {
        return Err(Error::Launch("cannot run 0 PEs".into()));
    }
    let env = |k: &str| std::env::var(k).ok();
    let heap = heap_bytes(env("NVSHMEM_SYMMETRIC_SIZE"))?;
    let shared = Arc::new(Shared {
        world: World::new(n_pes, heap),
        n: n_pes,
        seed: base_seed(env("SHMEM_SIM_SEED"))?,
        launches: AtomicU64::new(0),
        state: Mutex::new(Meetings {
            by_team: Default::default(),
            ended: vec![None; n_pes as usize],
        }),
        changed: Condvar::new(),
        failures: Mutex::new(Vec::new()),
    });
    let pe = &pe;
    let outcomes: Vec<Option<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n_pes)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("pe {i}"))
                    .spawn_scoped(scope, move || {
                        THREAD_PE_INDEX.with(|c| c.set(Some(i)));
                        THREAD_PE.with(|p| {
                            *p.borrow_mut() = Some(SimPe {
                                pe: i,
                                shared: shared.clone(),
                                capture: RefCell::new(None),
                            })
                        });
                        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(pe));
                        THREAD_PE.with(|p| p.borrow_mut().take());
                        let (value, how) = match out {
                            Ok(Ok(v)) => (Some(v), None),
                            Ok(Err(e)) => (None, Some(format!("failed: {e}"))),
                            Err(p) => (None, Some(format!("panicked: {}", panic_text(&*p)))),
                        };
                        if let Some(how) = &how {
                            lock(&shared.failures).push((i, how.clone()));
                        }
                        let mut st = lock(&shared.state);
                        st.ended[i as usize] = Some(how.unwrap_or_else(|| "returned".into()));
                        shared.changed.notify_all();
                        value
                    })
                    .expect("spawning a PE thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(None))
            .collect()
    });
    let failures = lock(&shared.failures);
    if let Some((first, how)) = failures.first() {
        let others = failures.len() - 1;
        return Err(Error::Launch(format!(
            "PE {first} {how}{}",
            if others > 0 {
                format!(" (and {others} other PE(s) stopped after it)")
            } else {
                String::new()
            }
        )));
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.expect("no failure"))
        .collect())
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

impl SimPe {
    fn world(&self) -> &Arc<World> {
        &self.shared.world
    }

    /// The offset of this PE's address `p` in its heap.
    fn offset(&self, p: *const u8) -> usize {
        p as usize - self.world().address(self.pe, 0) as usize
    }

    /// A member of the meeting (`members`, world PE numbers) has ended while this PE waits
    /// in `what`.
    fn ended_error(&self, st: &Meetings, members: &[u32], what: &str) -> Option<Error> {
        let (k, how) = members
            .iter()
            .find_map(|&k| st.ended[k as usize].as_ref().map(|h| (k, h)))?;
        Some(Error::Simulator(format!(
            "PE {k} {how} while PE {} waits for every PE in {what}",
            self.pe
        )))
    }

    /// A collective call of every PE: see [`SimPe::collective_in`].
    fn collective<T: Send + 'static, R: Clone + Send + 'static>(
        &self,
        what: &str,
        value: T,
        f: impl FnOnce(Vec<T>) -> std::result::Result<R, String>,
    ) -> Result<R> {
        let all: Vec<u32> = (0..self.shared.n).collect();
        self.collective_in(0, &all, what, value, f)
    }

    /// A collective call of the members of team `team` (`members`, world PE numbers in team
    /// order, this PE among them): every member brings `value` to the call named `what`;
    /// when all have, the last to arrive computes `f(values in team order)` and every member
    /// gets the result. Different calls on different members, or a member that has ended,
    /// are errors. Calls of different teams meet apart.
    fn collective_in<T: Send + 'static, R: Clone + Send + 'static>(
        &self,
        team: i32,
        members: &[u32],
        what: &str,
        value: T,
        f: impl FnOnce(Vec<T>) -> std::result::Result<R, String>,
    ) -> Result<R> {
        let me = members.iter().position(|&p| p == self.pe).ok_or_else(|| {
            Error::Invalid(format!("PE {} is not a member of team {team}", self.pe))
        })?;
        let sh = &self.shared;
        let mut st = lock(&sh.state);
        if let Some(e) = self.ended_error(&st, members, what) {
            return Err(e);
        }
        let m = st.by_team.entry(team).or_default();
        if m.waiting.len() != members.len() {
            m.waiting = members.iter().map(|_| None).collect();
        }
        let generation = m.generation;
        m.waiting[me] = Some((what.to_string(), Box::new(value)));
        if m.waiting.iter().all(Option::is_some) {
            let brought: Vec<(String, Box<dyn Any + Send>)> = m
                .waiting
                .iter_mut()
                .map(|w| w.take().expect("all"))
                .collect();
            let result = if brought.iter().any(|(w, _)| w != what) {
                Err(format!(
                    "the PEs are in different collective calls: {}; every PE makes the same \
                     collective calls (allocations, launches, barriers) in the same order",
                    brought
                        .iter()
                        .zip(members)
                        .map(|((w, _), pe)| format!("PE {pe} in {w}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            } else {
                let values: Option<Vec<T>> = brought
                    .into_iter()
                    .map(|(_, v)| v.downcast::<T>().ok().map(|b| *b))
                    .collect();
                match values {
                    Some(v) => f(v).map(|r| Box::new(r) as Box<dyn Any + Send>),
                    None => Err(format!("the PEs brought different things to {what}")),
                }
            };
            m.result = Some(result);
            m.generation += 1;
            sh.changed.notify_all();
        } else {
            loop {
                let m = st.by_team.get_mut(&team).expect("the meeting stays");
                if m.generation != generation {
                    break;
                }
                if let Some(e) = self.ended_error(&st, members, what) {
                    st.by_team
                        .get_mut(&team)
                        .expect("the meeting stays")
                        .waiting[me] = None;
                    return Err(e);
                }
                st = sh.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
        match &st.by_team[&team].result {
            Some(Ok(r)) => r
                .downcast_ref::<R>()
                .cloned()
                .ok_or_else(|| Error::Simulator(format!("the result of {what} has another type"))),
            Some(Err(e)) => Err(Error::Simulator(e.clone())),
            None => Err(Error::Simulator(format!("the result of {what} was lost"))),
        }
    }
}

impl Backend for SimPe {
    fn pe(&self) -> PeInfo {
        PeInfo {
            my_pe: self.pe as i32,
            n_pes: self.shared.n as i32,
            // Every simulated PE is on one node.
            node_pe: self.pe as i32,
            node_n_pes: self.shared.n as i32,
            version: NVSHMEM_VERSION,
            kind: crate::runtime::BackendKind::Simulator,
        }
    }

    fn gpu(&self) -> Result<&Gpu> {
        Err(Error::Simulator(
            "this needs a GPU, and this PE runs on the CPU simulator".into(),
        ))
    }

    /// A launch returns when its grid has finished: nothing is pending.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn mark_on(&self, stream: StreamRef<'_>) -> Result<Mark> {
        only_runtime_stream(stream, "an event")?;
        Ok(Mark::clock())
    }

    /// Work on the runtime's stream is done when its call returns: nothing to wait for.
    fn wait_for(&self, stream: StreamRef<'_>, _mark: &Mark) -> Result<()> {
        only_runtime_stream(stream, "a wait for an event")
    }

    /// Work on the runtime's stream runs when it is enqueued: nothing to hold.
    fn hold(&self, stream: StreamRef<'_>) -> Result<Option<u32>> {
        only_runtime_stream(stream, "holding a stream")?;
        Ok(None)
    }

    fn release(&self, _ticket: u32) {}

    fn begin_capture(&self, stream: StreamRef<'_>) -> Result<()> {
        only_runtime_stream(stream, "a capture")?;
        let mut c = self.capture.borrow_mut();
        if c.is_some() {
            return Err(Error::Capture(
                "a capture is already running on this PE".into(),
            ));
        }
        *c = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&self, _stream: StreamRef<'_>) -> Result<GraphExec> {
        let steps = self.capture.borrow_mut().take();
        steps
            .map(GraphExec::Sim)
            .ok_or_else(|| Error::Capture("no capture is running on this PE".into()))
    }

    fn launch_graph(&self, graph: &GraphExec, stream: StreamRef<'_>) -> Result<()> {
        only_runtime_stream(stream, "a graph launch")?;
        let GraphExec::Sim(steps) = graph else {
            return Err(Error::Invalid(
                "a CUDA graph cannot run on the simulator".into(),
            ));
        };
        for step in steps {
            match step {
                Step::Launch { name, shape, call } => {
                    self.run_launch(name, *shape, call.clone())?
                }
                Step::Sync(op) => self.sync(*op, StreamRef::Runtime)?,
                &Step::Zero { ptr, bytes } => {
                    // SAFETY: the arguments of a call whose contract the capture's caller
                    // upheld; the graph borrows the buffer (`Capture`'s lifetime).
                    unsafe { self.fill_zero_on(ptr, bytes, StreamRef::Runtime)? }
                }
                &Step::Team {
                    team,
                    op,
                    dest,
                    src,
                    bytes,
                } => {
                    // SAFETY: the arguments of a call whose contract the capture's caller
                    // upheld; the graph borrows the buffers (`Capture`'s lifetime).
                    unsafe { self.team_coll(team, op, dest, src, bytes, StreamRef::Runtime)? }
                }
            }
        }
        Ok(())
    }

    /// Barriers meet every PE's host code; quiet has nothing to complete (launches complete
    /// their operations before they return).
    fn sync(&self, op: HostSync, stream: StreamRef<'_>) -> Result<()> {
        only_runtime_stream(stream, op.name())?;
        if let Some(steps) = self.capture.borrow_mut().as_mut() {
            if !op.on_stream() {
                return Err(backend::capture_refuses(&format!("a host {}", op.name())));
            }
            steps.push(Step::Sync(op));
            return Ok(());
        }
        if op.is_collective() {
            self.collective(op.name(), (), |_| Ok(()))
        } else {
            Ok(())
        }
    }

    fn min_max(&self, value: i64) -> Result<(i64, i64)> {
        self.not_capturing("an agreement between PEs")?;
        self.collective("min_max", value, |v| {
            Ok((
                v.iter().copied().min().unwrap_or(0),
                v.iter().copied().max().unwrap_or(0),
            ))
        })
    }

    /// One offset in every PE's heap, or the error that the heap is full.
    fn alloc(&self, bytes: usize) -> Result<*mut u8> {
        self.not_capturing("an allocation")?;
        let world = self.shared.world.clone();
        let offset = self.collective("alloc", bytes, move |sizes| {
            let range = (
                sizes.iter().copied().min().unwrap_or(0),
                sizes.iter().copied().max().unwrap_or(0),
            );
            if range.0 != range.1 {
                return Ok(Err(range));
            }
            world.alloc_offset(bytes).map(Ok).ok_or_else(|| {
                format!(
                    "simulated symmetric heap exhausted: {bytes} more bytes do not fit in {} \
                     per PE (set NVSHMEM_SYMMETRIC_SIZE)",
                    world.heap_bytes()
                )
            })
        })?;
        backend::unequal(bytes, offset.err().unwrap_or((bytes, bytes)))?;
        let p = self.world().address(self.pe, offset.unwrap_or(0));
        // SAFETY: `bytes` bytes of this PE's simulated heap, which only this thread touches
        // while no launch runs.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        Ok(p)
    }

    /// The first PE to free it frees the offset in every heap; no PE can allocate again
    /// before every PE has freed it (allocation is collective, frees come in the same order
    /// on every PE).
    unsafe fn free(&self, p: *mut u8) {
        self.world().free_offset(self.offset(p));
    }

    unsafe fn write(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        self.not_capturing("a copy to symmetric memory")?;
        // SAFETY: the caller's contract; no kernel runs while a PE's host code does
        // (launches are collective and return when the grid has finished).
        unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) };
        Ok(())
    }

    unsafe fn read(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        self.not_capturing("a copy from symmetric memory")?;
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) };
        Ok(())
    }

    unsafe fn fill_zero(&self, p: *mut u8, bytes: usize) -> Result<()> {
        self.not_capturing("a fill of symmetric memory")?;
        // SAFETY: as in `write`.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        Ok(())
    }

    unsafe fn fill_zero_on(&self, p: *mut u8, bytes: usize, stream: StreamRef<'_>) -> Result<()> {
        only_runtime_stream(stream, "a fill of symmetric memory")?;
        if let Some(steps) = self.capture.borrow_mut().as_mut() {
            steps.push(Step::Zero { ptr: p, bytes });
            return Ok(());
        }
        // SAFETY: as in `write`.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        Ok(())
    }

    fn peer_ptr(&self, p: *const u8, pe: i32) -> Option<u64> {
        Some(self.world().address(pe as u32, self.offset(p)) as u64)
    }

    /// The last member to arrive makes every team of the split (identical on every member).
    fn team_split(&self, parent: i32, how: Split) -> Result<(i32, i32)> {
        self.not_capturing("a team split")?;
        let parents = self.team_members(parent)?;
        let world = self.shared.world.clone();
        let p = parents.clone();
        let all = self.collective_in(parent, &parents, "a team split", how, move |hows| {
            if hows.iter().any(|h| *h != how) {
                return Err(format!(
                    "the PEs of team {parent} split it differently: {hows:?}"
                ));
            }
            split(&p, how).map(|teams| {
                teams
                    .into_iter()
                    .map(|m| world.add_team(m))
                    .collect::<Vec<i32>>()
            })
        })?;
        // Which of the new teams hold this PE: the one of a strided split, or the row and
        // column of a 2D split (rows come first in `split`'s order).
        let world = self.world();
        let mine = |hs: &[i32]| {
            hs.iter()
                .copied()
                .find(|&h| world.team_members(h).is_some_and(|m| m.contains(&self.pe)))
                .unwrap_or(-1)
        };
        Ok(match how {
            Split::Strided { .. } => (mine(&all), -1),
            Split::TwoD { xrange } => {
                let rows = parents
                    .len()
                    .div_ceil(xrange.clamp(1, parents.len() as i32) as usize);
                (mine(&all[..rows]), mine(&all[rows..]))
            }
        })
    }

    fn team_n_pes(&self, team: i32) -> i32 {
        self.world()
            .team_members(team)
            .map_or(-1, |m| m.len() as i32)
    }

    fn team_translate(&self, src: i32, pe: i32, dst: i32) -> i32 {
        self.world().team_translate(src, pe, dst)
    }

    unsafe fn team_destroy(&self, team: i32) {
        self.world().destroy_team(team);
    }

    /// The last member to arrive does the whole collective, from every member's heap.
    unsafe fn team_coll(
        &self,
        team: i32,
        op: TeamColl,
        dest: *mut u8,
        src: *const u8,
        bytes: usize,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        only_runtime_stream(stream, op.name())?;
        if let Some(steps) = self.capture.borrow_mut().as_mut() {
            steps.push(Step::Team {
                team,
                op,
                dest,
                src,
                bytes,
            });
            return Ok(());
        }
        let members = self.team_members(team)?;
        let world = self.shared.world.clone();
        let off = |p: *const u8| if p.is_null() { 0 } else { self.offset(p) };
        let (d, s) = (off(dest), off(src));
        let m = members.clone();
        self.collective_in(team, &members, op.name(), (), move |_| {
            let at = |pe: u32, off: usize| world.address(pe, off);
            let n = m.len();
            // SAFETY: symmetric buffers of the sizes `op` needs (the caller's contract), in
            // heaps no other thread touches during the call (every member waits in it).
            unsafe {
                match op {
                    TeamColl::Barrier | TeamColl::Sync => {}
                    TeamColl::Broadcast { root } => {
                        let from = at(m[root as usize], s);
                        for &pe in m.iter() {
                            std::ptr::copy(from, at(pe, d), bytes);
                        }
                    }
                    TeamColl::Fcollect => {
                        for &to in m.iter() {
                            for (j, &from) in m.iter().enumerate() {
                                std::ptr::copy(at(from, s), at(to, d + j * bytes), bytes);
                            }
                        }
                    }
                    TeamColl::Alltoall => {
                        for (i, &to) in m.iter().enumerate() {
                            for (j, &from) in m.iter().enumerate() {
                                std::ptr::copy(
                                    at(from, s + i * bytes),
                                    at(to, d + j * bytes),
                                    bytes,
                                );
                            }
                        }
                    }
                    TeamColl::Reduce(r) => {
                        let mut acc = std::slice::from_raw_parts(at(m[0], s), bytes).to_vec();
                        for &pe in &m[1..n] {
                            (r.fold)(&mut acc, std::slice::from_raw_parts(at(pe, s), bytes));
                        }
                        for &pe in m.iter() {
                            std::ptr::copy_nonoverlapping(acc.as_ptr(), at(pe, d), bytes);
                        }
                    }
                }
            }
            Ok(())
        })
    }

    /// For every PE of this run (they share one world), from their next launch.
    fn set_wait_bound(&self, ns: u64) {
        self.world().set_wait_bound_ns(ns);
    }

    /// Nothing is loaded: the kernels run from the program's own host build.
    fn load(&self, _image: Vec<u8>, _origin: &Path) -> Result<Option<CUmodule>> {
        Ok(None)
    }

    unsafe fn unload(&self, _m: CUmodule) {}

    fn function(&self, _m: CUmodule, _name: &str, _origin: &Path) -> Result<Function> {
        Ok(std::ptr::null_mut())
    }

    fn coresident_blocks(&self, _f: Function, cfg: &LaunchConfig) -> Result<u32> {
        Ok(coresident_blocks(cfg.threads()))
    }

    fn multiprocessors(&self) -> Result<u32> {
        Ok(SMS)
    }

    /// Runs the kernel on every PE's grid once every PE has launched it with the same
    /// shape.
    unsafe fn launch(
        &self,
        _f: Function,
        name: &'static str,
        cfg: &LaunchConfig<'_>,
        _cooperative: bool,
        args: &mut dyn LaunchArgs,
    ) -> Result<()> {
        only_runtime_stream(cfg.stream, &format!("a launch of `{name}`"))?;
        let shape = Shape {
            grid: cfg.grid,
            block: cfg.block,
            shared_bytes: cfg.shared_mem_bytes,
        };
        let call = args.host_call();
        if let Some(steps) = self.capture.borrow_mut().as_mut() {
            steps.push(Step::Launch { name, shape, call });
            return Ok(());
        }
        self.run_launch(name, shape, call)
    }
}

/// The simulator's one stream is the runtime's.
fn only_runtime_stream(stream: StreamRef<'_>, what: &str) -> Result<()> {
    match stream {
        StreamRef::Runtime => Ok(()),
        _ => Err(Error::Simulator(format!(
            "{what} on a CUDA stream: the simulator has only the runtime's stream"
        ))),
    }
}

/// The member lists (parent team numbers mapped to world PEs) of the teams `how` splits
/// `parent` into: one for a strided split; rows then columns for a 2D one. Bad arguments
/// are the error NVSHMEM would return, in words.
fn split(parent: &[u32], how: Split) -> std::result::Result<Vec<Vec<u32>>, String> {
    let n = parent.len() as i32;
    match how {
        Split::Strided {
            start,
            stride,
            size,
        } => {
            let last = start as i64 + stride as i64 * (size as i64 - 1);
            if size < 1 || start < 0 || start >= n || last < 0 || last >= n as i64 {
                return Err(format!(
                    "a strided split (start {start}, stride {stride}, size {size}) of a team \
                     of {n} PEs reaches outside it"
                ));
            }
            Ok(vec![
                (0..size)
                    .map(|k| parent[(start + k * stride) as usize])
                    .collect(),
            ])
        }
        Split::TwoD { xrange } => {
            if xrange < 1 {
                return Err(format!(
                    "a 2D split with xrange {xrange}: it must be at least 1"
                ));
            }
            let x = xrange.min(n) as usize;
            let rows = parent.chunks(x).map(<[u32]>::to_vec);
            let cols = (0..x).map(|c| parent.iter().skip(c).step_by(x).copied().collect());
            Ok(rows.chain(cols).collect())
        }
    }
}

impl SimPe {
    /// The members of `team`, or the error that it is no team.
    fn team_members(&self, team: i32) -> Result<Arc<[u32]>> {
        self.world()
            .team_members(team)
            .ok_or_else(|| Error::Invalid(format!("team {team} is not a valid team")))
    }

    fn not_capturing(&self, what: &str) -> Result<()> {
        match *self.capture.borrow() {
            Some(_) => Err(backend::capture_refuses(what)),
            None => Ok(()),
        }
    }

    /// Runs every PE's grid of one launch (collective).
    fn run_launch(&self, name: &'static str, shape: Shape, call: HostCall) -> Result<()> {
        let what = format!("a launch of `{name}`");
        let sh = self.shared.clone();
        self.collective(&what, (shape, call), move |all| {
            if let Some((pe, (other, _))) = all.iter().enumerate().find(|(_, (s, _))| *s != shape) {
                return Err(format!(
                    "PE {pe} launched `{name}` with {other:?} and another PE with {shape:?}: the \
                     simulator runs every PE's grid with one shape"
                ));
            }
            let calls: Vec<HostCall> = all.into_iter().map(|(_, c)| c).collect();
            let index = sh.launches.fetch_add(1, Ordering::Relaxed);
            let seed = shmem_device::sim::derive_seed(sh.seed, index);
            let calls = &calls;
            sh.world
                .run_shape(shape, seed, move || {
                    let pe = shmem_device::sim::current_pe().expect("on a simulated thread");
                    calls[pe as usize]()
                })
                .map_err(|e| {
                    format!(
                        "simulated launch {index} of `{name}` failed: {}; rerun with \
                         SHMEM_SIM_SEED={:#x} for the same schedules (launch {index} runs with \
                         seed {:#x}, derived from it)",
                        e.message, sh.seed, e.seed
                    )
                })
        })
    }
}

/// Blocks of `threads` threads that fit on a simulated GPU at once.
pub(crate) fn coresident_blocks(threads: u32) -> u32 {
    (THREADS_PER_SM / threads.max(1)).max(1) * SMS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_seeds_from_the_environment() {
        assert_eq!(heap_bytes(None).unwrap(), DEFAULT_HEAP);
        assert_eq!(heap_bytes(Some("64K".into())).unwrap(), 65536);
        assert_eq!(heap_bytes(Some("2g".into())).unwrap(), 2 << 30);
        assert_eq!(heap_bytes(Some("1000".into())).unwrap(), 1000);
        assert!(heap_bytes(Some("lots".into())).is_err());
        assert_eq!(base_seed(Some("0x10".into())).unwrap(), 16);
        assert_eq!(base_seed(Some("17".into())).unwrap(), 17);
        assert!(base_seed(Some("x".into())).is_err());
        let seed = shmem_device::sim::derive_seed;
        assert_ne!(seed(1, 0), seed(1, 1));
    }
}
