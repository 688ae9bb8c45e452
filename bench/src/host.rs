//! The measurement plan, the interleaved runs and the report.
//!
//! Method (NVSHMEM's perftests, `perftest/device/`): for each point, one warm-up launch of
//! each implementation, then `reps` timed launches of each, alternating Rust and CUDA C++
//! (R C R C ...). A launch loops `iters` times over the operation inside the kernel; CUDA
//! events on the stream around the launch give its time. Each timed launch gives a figure
//! computed as the perftest of the same name computes it: bandwidth `bytes * iters / time`
//! in GB/s (1e9 B/s), latency `time / iters` in µs (a full round trip for the ping-pongs);
//! the reported figure is the mean over the timed launches, as the perftests' `mean`
//! column. One-sided tests run on PE 0 towards PE 1; ping-pongs and alltoall run on every PE
//! and PE 0 reports. While PE 0 times a one-sided launch the other PEs wait off the GPU's SMs
//! (see `IdleWait`). The ceiling is a copy-engine copy of 256 MiB from PE 0 into
//! PE 1's memory (`cuMemcpyDtoDAsync` to the address `nvshmem_ptr` gives), timed the same
//! way.

use crate::kernels::{self, BLOCK, THREAD, WARP};
use serde_json::{Value, json};
use shmem_device::kernel::Kernel;
use shmem_host::args::{HostArgs, ParamPtrs};
pub use shmem_host::measure::{CEILING_BYTES, median};
use shmem_host::{KernelFn, LaunchConfig, Module, Result, Shmem, SymBuffer};

/// The largest message of the bandwidth tests.
pub const MAX_BYTES: usize = 32 << 20;

/// A measurement: one NVSHMEM perftest (`perftest/device/...`), named by [`Test::perftest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `shmem_put_bw`: `put_nbi` of doubles by every unit of the grid.
    PutBw,
    /// `shmem_get_bw`: `get_nbi` of doubles by every unit of the grid.
    GetBw,
    /// `shmem_p_bw`: every thread `p`s 32-bit words, a grid barrier per iteration.
    PBw,
    /// `shmem_put_latency`: one unit's put of `i32`s, completed by `quiet`.
    PutLat,
    /// `shmem_get_latency`: one unit's `get_nbi` of `i32`s, then `quiet`.
    GetLat,
    /// `shmem_p_latency`: a block `p`s `i32`s, then `quiet`.
    PLat,
    /// `shmem_g_latency`: a block `g`s `i32`s.
    GLat,
    /// `shmem_signal_ping_pong_latency`: a `signal_op` round trip.
    SignalPingPong,
    /// `shmem_put_signal_ping_pong_latency`: a thread-scope `put_signal_nbi` round trip.
    PutSignalPingPong,
    /// `alltoall_latency`: block-scope `int32` alltoall on the world team.
    Alltoall,
}

impl Test {
    /// Every test, in the order of the plan.
    pub const ALL: [Test; 10] = [
        Test::PutBw,
        Test::GetBw,
        Test::PBw,
        Test::PutLat,
        Test::GetLat,
        Test::PLat,
        Test::GLat,
        Test::SignalPingPong,
        Test::PutSignalPingPong,
        Test::Alltoall,
    ];
    /// Its name in the report and in `--only`.
    pub fn name(self) -> &'static str {
        match self {
            Test::PutBw => "put_bw",
            Test::GetBw => "get_bw",
            Test::PBw => "p_bw",
            Test::PutLat => "put_lat",
            Test::GetLat => "get_lat",
            Test::PLat => "p_lat",
            Test::GLat => "g_lat",
            Test::SignalPingPong => "signal_pingpong",
            Test::PutSignalPingPong => "put_signal_pingpong",
            Test::Alltoall => "alltoall_lat",
        }
    }
    /// The NVSHMEM perftest it mirrors (`perftest/device/pt-to-pt/NAME.cu`, or `coll/` for
    /// the alltoall).
    pub fn perftest(self) -> &'static str {
        match self {
            Test::PutBw => "shmem_put_bw",
            Test::GetBw => "shmem_get_bw",
            Test::PBw => "shmem_p_bw",
            Test::PutLat => "shmem_put_latency",
            Test::GetLat => "shmem_get_latency",
            Test::PLat => "shmem_p_latency",
            Test::GLat => "shmem_g_latency",
            Test::SignalPingPong => "shmem_signal_ping_pong_latency",
            Test::PutSignalPingPong => "shmem_put_signal_ping_pong_latency",
            Test::Alltoall => "alltoall_latency",
        }
    }
    /// Bandwidth (GB/s, higher is better) rather than latency (µs, lower is better).
    pub fn is_bandwidth(self) -> bool {
        matches!(self, Test::PutBw | Test::GetBw | Test::PBw)
    }
    /// Only PE 0 launches.
    fn one_sided(self) -> bool {
        !matches!(
            self,
            Test::SignalPingPong | Test::PutSignalPingPong | Test::Alltoall
        )
    }
}

/// One point of a curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// What is measured.
    pub test: Test,
    /// `kernels::THREAD`, `WARP` or `BLOCK`.
    pub scope: u32,
    /// Blocks of the launch.
    pub ctas: u32,
    /// Threads per block.
    pub threads: u32,
    /// A grid barrier after every iteration (bandwidth tests).
    pub sync_each: bool,
    /// Message size (for the alltoall what one PE sends in all, the perftest's size).
    pub bytes: usize,
    /// Iterations inside the launch.
    pub iters: u32,
}

/// `thread`, `warp` or `block`: how the table and `--scope` name a point's scope.
pub fn scope_name(scope: u32) -> &'static str {
    match scope {
        THREAD => "thread",
        WARP => "warp",
        _ => "block",
    }
}

fn pow2(from: usize, to: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(from), |b| Some(b * 2)).take_while(move |b| *b <= to)
}

/// The measurements, in order. `quick` keeps a few points per curve (for a smoke test).
pub fn plan(quick: bool) -> Vec<Point> {
    let sizes = |from: usize, to: usize| -> Vec<usize> {
        let all: Vec<usize> = pow2(from, to).collect();
        if quick {
            vec![all[0], all[all.len() / 2], *all.last().unwrap()]
        } else {
            all
        }
    };
    let mut v = Vec::new();
    for test in [Test::PutBw, Test::GetBw] {
        for scope in [THREAD, WARP, BLOCK] {
            for ctas in [4u32, 8, 16, 32] {
                for sync_each in [false, true] {
                    for bytes in sizes(8, MAX_BYTES) {
                        // Every unit moves at least one double.
                        let units = ctas as usize
                            * match scope {
                                THREAD => 1024,
                                WARP => 32,
                                _ => 1,
                            };
                        if bytes / 8 < units {
                            continue;
                        }
                        let iters = (256 << 20) / bytes;
                        v.push(Point {
                            test,
                            scope,
                            ctas,
                            threads: 1024,
                            sync_each,
                            bytes,
                            iters: iters.clamp(10, 200) as u32,
                        });
                    }
                }
            }
        }
    }
    for bytes in sizes(4, 1 << 20) {
        v.push(Point {
            test: Test::PBw,
            scope: THREAD,
            ctas: 32,
            threads: 1024,
            sync_each: false,
            bytes,
            iters: 50,
        });
    }
    for test in [Test::PutLat, Test::GetLat] {
        for scope in [THREAD, WARP, BLOCK] {
            for bytes in sizes(4, 64 << 10) {
                v.push(Point {
                    test,
                    scope,
                    ctas: 1,
                    threads: [1, 32, 1024][scope as usize],
                    sync_each: false,
                    bytes,
                    iters: 200,
                });
            }
        }
    }
    for test in [Test::PLat, Test::GLat] {
        for bytes in sizes(4, 64 << 10) {
            v.push(Point {
                test,
                scope: BLOCK,
                ctas: 1,
                threads: 1024,
                sync_each: false,
                bytes,
                iters: 200,
            });
        }
    }
    v.push(Point {
        test: Test::SignalPingPong,
        scope: THREAD,
        ctas: 1,
        threads: 1,
        sync_each: false,
        bytes: 8,
        iters: 500,
    });
    for bytes in sizes(4, 64 << 10) {
        v.push(Point {
            test: Test::PutSignalPingPong,
            scope: THREAD,
            ctas: 1,
            threads: 1,
            sync_each: false,
            bytes,
            iters: 200,
        });
    }
    // The alltoall's size is, as the perftest's, what one PE sends in all: `n_pes` blocks of
    // `max(1, bytes / (4 n_pes))` `i32`s.
    for bytes in sizes(8, 128 << 10) {
        v.push(Point {
            test: Test::Alltoall,
            scope: BLOCK,
            ctas: 1,
            threads: 1024,
            sync_each: false,
            bytes,
            iters: 100,
        });
    }
    v
}

/// Which implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Imp {
    /// The Rust kernels.
    Rust,
    /// The CUDA C++ kernels.
    Cuda,
}

/// A point's launch times, in milliseconds.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The point.
    pub point: Point,
    /// Rust launches (after the warm-up).
    pub rust_ms: Vec<f64>,
    /// CUDA C++ launches.
    pub cuda_ms: Vec<f64>,
}

impl Measured {
    /// The figure of one launch that took `ms`, as the perftest computes it: GB/s for
    /// bandwidth tests, µs per iteration otherwise (a round trip for the ping-pongs).
    fn figure(&self, ms: f64) -> f64 {
        let p = self.point;
        if p.test.is_bandwidth() {
            (p.bytes as f64 * f64::from(p.iters)) / (ms * 1e-3) / 1e9
        } else {
            ms * 1e3 / f64::from(p.iters)
        }
    }
    /// The reported figure of `imp`: the mean of its launches' figures (the perftests'
    /// `mean`).
    pub fn metric(&self, imp: Imp) -> f64 {
        let ms = match imp {
            Imp::Rust => &self.rust_ms,
            Imp::Cuda => &self.cuda_ms,
        };
        ms.iter().map(|&t| self.figure(t)).sum::<f64>() / ms.len().max(1) as f64
    }
    /// Rust over C++: bandwidth ratio (≥ 1 is Rust faster) or latency ratio (≤ 1 is Rust
    /// faster).
    pub fn ratio(&self) -> f64 {
        self.metric(Imp::Rust) / self.metric(Imp::Cuda)
    }
}

/// The symmetric buffers of the measurements.
struct Buffers<'rt> {
    doubles: SymBuffer<'rt, f64>,
    ints: SymBuffer<'rt, i32>,
    words: SymBuffer<'rt, u32>,
    counter: SymBuffer<'rt, u32>,
    sig: SymBuffer<'rt, u64>,
    /// The number of the last one-sided launch PE 0 has finished ([`IdleWait`]).
    done: SymBuffer<'rt, u32>,
}

/// How the PEs that a one-sided test leaves idle wait for PE 0's timed launch.
///
/// NVSHMEM's perftests send them straight into `nvshmem_barrier_all`, whose kernel then polls
/// on their GPU while PE 0's launch runs. On two GPUs that is another GPU. With several PEs
/// on one GPU (CUDA MPS) it is the GPU of the launch being timed, and the launch's figure
/// then depended on its kernel's registers, not on its code: a thread's put of 64 bytes by
/// 16 blocks of 1024 threads read 255-322 GB/s from process to process as nvcc built it (58
/// registers a thread, allocated 64), 255-260 as Rust built it (56) and 255-260 as nvcc built
/// it at 56 (`__maxnreg__`); with the idle PE waiting on the host, 252-259 in both builds
/// (one H200, 2 PEs; BENCHMARKS.md, sixty-fifth session). So the idle PEs wait on the host:
/// each polls the word `done` of its own copy by copy-engine reads until PE 0, its launch
/// over, has written the launch's number there through its mapping of that PE's memory;
/// then every PE enters the barrier. Where PE 0 cannot map a PE's memory (another node),
/// that PE waits in the barrier as the perftests' do.
struct IdleWait {
    /// The launches counted so far (the same on every PE: every PE runs every point).
    count: std::cell::Cell<u32>,
    /// PE 0: the address of each other PE's `done` word, `None` where it is not mapped.
    /// Other PEs: whether PE 0 maps this PE's memory (it maps PE 0's, the mapping is
    /// mutual), in the one entry.
    peers: Vec<Option<u64>>,
}

/// How long an idle PE waits for PE 0's launch before it reports PE 0 as stuck.
const IDLE_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

impl IdleWait {
    fn new(rt: &Shmem, done: &SymBuffer<'_, u32>) -> Result<IdleWait> {
        // (The simulator has no SMs to share, nor copy engines.)
        let peers = if rt.is_simulated() {
            vec![None; rt.n_pes().max(1) as usize - 1]
        } else if rt.my_pe() == 0 {
            (1..rt.n_pes())
                .map(|pe| done.peer_device_ptr(pe))
                .collect::<Result<_>>()?
        } else {
            vec![done.peer_device_ptr(0)?]
        };
        Ok(IdleWait {
            count: std::cell::Cell::new(0),
            peers,
        })
    }

    /// PE 0, after a timed one-sided launch: tells every mapped PE that it has finished.
    fn release(&self, n: u32) -> Result<()> {
        for &p in self.peers.iter().flatten() {
            // SAFETY: `p` is where this process maps a peer's `done` word (one `u32` of its
            // symmetric heap, `nvshmem_ptr`); the write is a copy-engine copy of 4 bytes,
            // after this PE's launch has finished (`time` synchronises on its end event).
            unsafe { shmem_host::cudarc::driver::result::memcpy_htod_sync(p, &[n])? };
        }
        Ok(())
    }

    /// An idle PE: waits until PE 0 has written `n` to this PE's `done` word (copy-engine
    /// reads, none of the SMs'), or returns at once where PE 0 does not map this PE.
    fn wait(&self, done: &SymBuffer<'_, u32>, n: u32) -> Result<()> {
        if self.peers.first().copied().flatten().is_none() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut word = [0u32];
        loop {
            done.copy_to(&mut word)?;
            if word[0] == n {
                return Ok(());
            }
            if started.elapsed() > IDLE_WAIT_LIMIT {
                return Err(shmem_host::Error::Invalid(format!(
                    "PE 0 has not finished its launch {n} after {} s (this PE read {} in its \
                     `done` word): it stopped or hangs",
                    IDLE_WAIT_LIMIT.as_secs(),
                    word[0]
                )));
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
}

/// One kernel in both implementations, and whether it is launched cooperatively (it waits
/// on other PEs).
struct Pair<'m, K> {
    k: [KernelFn<'m, K>; 2],
    cooperative: bool,
}

/// Both implementations' kernels.
struct Kernels<'m> {
    put_bw_thread: Pair<'m, kernels::put_bw_thread>,
    put_bw_warp: Pair<'m, kernels::put_bw_warp>,
    put_bw_block: Pair<'m, kernels::put_bw_block>,
    get_bw_thread: Pair<'m, kernels::get_bw_thread>,
    get_bw_warp: Pair<'m, kernels::get_bw_warp>,
    get_bw_block: Pair<'m, kernels::get_bw_block>,
    p_bw: Pair<'m, kernels::p_bw>,
    put_latency_thread: Pair<'m, kernels::put_latency_thread>,
    put_latency_warp: Pair<'m, kernels::put_latency_warp>,
    put_latency_block: Pair<'m, kernels::put_latency_block>,
    get_latency_thread: Pair<'m, kernels::get_latency_thread>,
    get_latency_warp: Pair<'m, kernels::get_latency_warp>,
    get_latency_block: Pair<'m, kernels::get_latency_block>,
    p_latency: Pair<'m, kernels::p_latency>,
    g_latency: Pair<'m, kernels::g_latency>,
    signal_ping_pong: Pair<'m, kernels::signal_ping_pong>,
    put_signal_ping_pong: Pair<'m, kernels::put_signal_ping_pong>,
    alltoall: Pair<'m, kernels::alltoall_latency>,
}

fn pair<'m, K: Kernel>(
    rust: &'m Module<'m>,
    cuda: &'m Module<'m>,
    cooperative: bool,
) -> Result<Pair<'m, K>>
where
    K::Params: ParamPtrs,
{
    Ok(Pair {
        k: [rust.kernel::<K>()?, cuda.kernel::<K>()?],
        cooperative,
    })
}

/// Times one launch of implementation `i` of `k` on the runtime's stream, in milliseconds.
///
/// # Safety
/// The kernel's contract for these arguments.
unsafe fn time<K: Kernel>(
    rt: &Shmem,
    k: &Pair<'_, K>,
    i: usize,
    cfg: LaunchConfig,
    args: impl HostArgs<K::Params>,
) -> Result<f64>
where
    K::Params: ParamPtrs,
{
    let start = rt.mark()?;
    // SAFETY: the caller's contract.
    unsafe { k.k[i].launch(cfg.with_cooperative(k.cooperative), args)? };
    let end = rt.mark()?;
    end.synchronize()?;
    Ok(end.seconds_since(&start)? * 1e3)
}

struct Bench<'a, 'm> {
    rt: &'a Shmem,
    bufs: &'a Buffers<'a>,
    k: &'a Kernels<'m>,
    idle: IdleWait,
}

impl Bench<'_, '_> {
    /// One launch of `imp` at `p` (collective); `Some(ms)` on the PEs that launched.
    fn once(&self, p: &Point, imp: Imp) -> Result<Option<f64>> {
        let (rt, b, k) = (self.rt, self.bufs, self.k);
        let i = imp as usize;
        let (me, n) = (rt.my_pe(), rt.n_pes());
        let peer = (me + 1) % n;
        b.counter.zero()?;
        b.sig.zero()?;
        rt.barrier_all()?;
        let cfg = LaunchConfig::linear(p.ctas, p.threads);
        let (it, ints) = (p.iters, p.bytes / 4);
        let one_sided = p.test.one_sided();
        let launch = self.idle.count.get() + u32::from(one_sided);
        self.idle.count.set(launch);
        let ms = if one_sided && me != 0 {
            self.idle.wait(&b.done, launch)?;
            None
        } else {
            // SAFETY: each kernel's contract: the buffers are symmetric and hold `MAX_BYTES`
            // (`words`: 1 MiB, the largest `p_bw`), sizes bounded by `plan`; `counter` and
            // `sig` were zeroed before the barrier; `peer` is another PE; every PE runs the
            // same points in the same order (the two-sided tests launch on every PE).
            Some(unsafe {
                match p.test {
                    Test::PutBw | Test::GetBw => {
                        let sync = u32::from(p.sync_each);
                        let args = (&b.doubles, p.bytes / 8, it, sync, &b.counter, peer);
                        match (p.test, p.scope) {
                            (Test::PutBw, THREAD) => time(rt, &k.put_bw_thread, i, cfg, args)?,
                            (Test::PutBw, WARP) => time(rt, &k.put_bw_warp, i, cfg, args)?,
                            (Test::PutBw, _) => time(rt, &k.put_bw_block, i, cfg, args)?,
                            (_, THREAD) => time(rt, &k.get_bw_thread, i, cfg, args)?,
                            (_, WARP) => time(rt, &k.get_bw_warp, i, cfg, args)?,
                            (_, _) => time(rt, &k.get_bw_block, i, cfg, args)?,
                        }
                    }
                    Test::PBw => time(rt, &k.p_bw, i, cfg, (&b.words, ints, it, &b.counter, peer))?,
                    Test::PutLat | Test::GetLat => {
                        let args = (&b.ints, ints, it, peer);
                        match (p.test, p.scope) {
                            (Test::PutLat, THREAD) => {
                                time(rt, &k.put_latency_thread, i, cfg, args)?
                            }
                            (Test::PutLat, WARP) => time(rt, &k.put_latency_warp, i, cfg, args)?,
                            (Test::PutLat, _) => time(rt, &k.put_latency_block, i, cfg, args)?,
                            (_, THREAD) => time(rt, &k.get_latency_thread, i, cfg, args)?,
                            (_, WARP) => time(rt, &k.get_latency_warp, i, cfg, args)?,
                            (_, _) => time(rt, &k.get_latency_block, i, cfg, args)?,
                        }
                    }
                    Test::PLat => time(rt, &k.p_latency, i, cfg, (&b.ints, ints, it, peer))?,
                    Test::GLat => time(rt, &k.g_latency, i, cfg, (&b.ints, ints, it, peer))?,
                    Test::SignalPingPong => {
                        time(rt, &k.signal_ping_pong, i, cfg, (&b.sig, it, peer))?
                    }
                    Test::PutSignalPingPong => {
                        let args = (&b.ints, &b.sig, ints, it, peer);
                        time(rt, &k.put_signal_ping_pong, i, cfg, args)?
                    }
                    Test::Alltoall => unreachable!("alltoall runs in `alltoall_point`"),
                }
            })
        };
        if one_sided && me == 0 {
            self.idle.release(launch)?;
        }
        rt.barrier_all()?;
        Ok(ms)
    }

    /// Alltoall needs buffers of exactly `n_pes` blocks: allocated for the point
    /// (collective). A block is `max(1, bytes / (4 n_pes))` `i32`s, as the perftest's.
    fn alltoall_point(&self, p: &Point, imp: Imp) -> Result<Option<f64>> {
        let rt = self.rt;
        let n = rt.n_pes() as usize;
        let len = (p.bytes / (4 * n)).max(1) * n;
        let src = rt.alloc::<i32>(len)?;
        let dest = rt.alloc::<i32>(len)?;
        src.copy_from(&(0..len).map(|i| (i * 7 + 1) as i32).collect::<Vec<_>>())?;
        rt.barrier_all()?;
        // SAFETY: every PE launches it with the same symmetric, equal, divisible slices.
        let ms = unsafe {
            time(
                rt,
                &self.k.alltoall,
                imp as usize,
                LaunchConfig::linear(p.ctas, p.threads),
                (&dest, &src, p.iters),
            )?
        };
        rt.barrier_all()?;
        Ok(Some(ms))
    }

    fn run_point(&self, p: &Point, imp: Imp) -> Result<Option<f64>> {
        if p.test == Test::Alltoall {
            self.alltoall_point(p, imp)
        } else {
            self.once(p, imp)
        }
    }
}

/// Runs the whole plan, interleaving the implementations; returns what PE 0 measured
/// (other PEs get empty time lists). Collective.
pub fn run(
    rt: &Shmem,
    rust: &Module<'_>,
    cuda: &Module<'_>,
    points: &[Point],
    reps: usize,
    mut progress: impl FnMut(usize, &Measured),
) -> Result<Vec<Measured>> {
    let bufs = Buffers {
        doubles: rt.alloc::<f64>(MAX_BYTES / 8)?,
        ints: rt.alloc::<i32>(MAX_BYTES / 4)?,
        words: rt.alloc::<u32>((1 << 20) / 4)?,
        counter: rt.alloc::<u32>(2)?,
        sig: rt.alloc::<u64>(1)?,
        done: rt.alloc::<u32>(1)?,
    };
    bufs.doubles.copy_from(
        &(0..MAX_BYTES / 8)
            .map(|i| (i % 251) as f64)
            .collect::<Vec<_>>(),
    )?;
    bufs.ints.copy_from(
        &(0..MAX_BYTES / 4)
            .map(|i| (i % 251) as i32)
            .collect::<Vec<_>>(),
    )?;
    bufs.words.zero()?;
    let k = Kernels {
        put_bw_thread: pair(rust, cuda, false)?,
        put_bw_warp: pair(rust, cuda, false)?,
        put_bw_block: pair(rust, cuda, false)?,
        get_bw_thread: pair(rust, cuda, false)?,
        get_bw_warp: pair(rust, cuda, false)?,
        get_bw_block: pair(rust, cuda, false)?,
        p_bw: pair(rust, cuda, false)?,
        put_latency_thread: pair(rust, cuda, false)?,
        put_latency_warp: pair(rust, cuda, false)?,
        put_latency_block: pair(rust, cuda, false)?,
        get_latency_thread: pair(rust, cuda, false)?,
        get_latency_warp: pair(rust, cuda, false)?,
        get_latency_block: pair(rust, cuda, false)?,
        p_latency: pair(rust, cuda, false)?,
        g_latency: pair(rust, cuda, false)?,
        signal_ping_pong: pair(rust, cuda, true)?,
        put_signal_ping_pong: pair(rust, cuda, true)?,
        alltoall: pair(rust, cuda, true)?,
    };
    let bench = Bench {
        rt,
        bufs: &bufs,
        k: &k,
        idle: IdleWait::new(rt, &bufs.done)?,
    };
    let mut out = Vec::with_capacity(points.len());
    for (i, p) in points.iter().enumerate() {
        let mut m = Measured {
            point: *p,
            rust_ms: Vec::new(),
            cuda_ms: Vec::new(),
        };
        bench.run_point(p, Imp::Rust)?;
        bench.run_point(p, Imp::Cuda)?;
        for _ in 0..reps {
            if let Some(ms) = bench.run_point(p, Imp::Rust)? {
                m.rust_ms.push(ms);
            }
            if let Some(ms) = bench.run_point(p, Imp::Cuda)? {
                m.cuda_ms.push(ms);
            }
        }
        progress(i, &m);
        out.push(m);
    }
    Ok(out)
}

fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

/// One line of the table.
pub fn line(m: &Measured, ceiling: f64) -> String {
    let p = m.point;
    let unit = if p.test.is_bandwidth() { "GB/s" } else { "us" };
    let mut s = format!(
        "{:<20} {:<6} ctas {:>2} x {:<4} {:<7} {:>7}  rust {:>9.3} {unit:<4}  cuda {:>9.3} {unit:<4}  ratio {:.3}",
        p.test.name(),
        scope_name(p.scope),
        p.ctas,
        p.threads,
        if p.sync_each { "sync" } else { "nosync" },
        size(p.bytes),
        m.metric(Imp::Rust),
        m.metric(Imp::Cuda),
        m.ratio(),
    );
    if p.test.is_bandwidth() && ceiling > 0.0 {
        s += &format!("  {:>5.1}% of CE", 100.0 * m.metric(Imp::Rust) / ceiling);
    }
    s
}

/// The targets of the benchmark issue, evaluated on the measurements: lines of text.
pub fn verdict(ms: &[Measured], ceiling: f64) -> Vec<String> {
    let mut v = Vec::new();
    let bw: Vec<&Measured> = ms
        .iter()
        .filter(|m| m.point.test.is_bandwidth() && m.point.bytes >= 64 << 10)
        .collect();
    if let Some(worst) = bw.iter().min_by(|a, b| a.ratio().total_cmp(&b.ratio())) {
        let below = bw.iter().filter(|m| m.ratio() < 0.98).count();
        v.push(format!(
            "bandwidth >= 64 KiB: Rust/C++ min {:.3} ({}), {below} of {} points below 0.98",
            worst.ratio(),
            line(worst, ceiling)
                .split_whitespace()
                .take(6)
                .collect::<Vec<_>>()
                .join(" "),
            bw.len()
        ));
    }
    let lat: Vec<&Measured> = ms.iter().filter(|m| !m.point.test.is_bandwidth()).collect();
    if let Some(worst) = lat.iter().max_by(|a, b| a.ratio().total_cmp(&b.ratio())) {
        let above = lat.iter().filter(|m| m.ratio() > 1.03).count();
        v.push(format!(
            "latency: Rust/C++ max {:.3} ({}), {above} of {} points above 1.03",
            worst.ratio(),
            line(worst, ceiling)
                .split_whitespace()
                .take(6)
                .collect::<Vec<_>>()
                .join(" "),
            lat.len()
        ));
    }
    let big: Vec<&Measured> = ms
        .iter()
        .filter(|m| m.point.test == Test::PutBw && m.point.bytes >= 8 << 20 && m.point.ctas >= 16)
        .collect();
    if ceiling > 0.0 && !big.is_empty() {
        let pct = |m: &&Measured| 100.0 * m.metric(Imp::Rust) / ceiling;
        let best = big.iter().map(pct).fold(0.0, f64::max);
        let worst = big.iter().map(pct).fold(f64::INFINITY, f64::min);
        v.push(format!(
            "put bandwidth >= 8 MiB, >= 16 CTAs (Rust): {worst:.1}% to {best:.1}% of the copy-engine ceiling {ceiling:.1} GB/s"
        ));
    }
    v
}

/// The machine-readable record of a run.
pub fn to_json(ms: &[Measured], ceiling: f64, meta: Value) -> Value {
    let points: Vec<Value> = ms
        .iter()
        .map(|m| {
            let p = m.point;
            json!({
                "test": p.test.name(),
                "perftest": p.test.perftest(),
                "scope": scope_name(p.scope),
                "ctas": p.ctas,
                "threads": p.threads,
                "sync_each": p.sync_each,
                "bytes": p.bytes,
                "iters": p.iters,
                "unit": if p.test.is_bandwidth() { "GB/s" } else { "us" },
                "rust": m.metric(Imp::Rust),
                "cuda": m.metric(Imp::Cuda),
                "ratio": m.ratio(),
                "rust_ms": m.rust_ms,
                "cuda_ms": m.cuda_ms,
            })
        })
        .collect();
    json!({ "meta": meta, "ceiling_gbps": ceiling, "points": points })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_covers_the_issue() {
        let p = plan(false);
        let bw = |t: Test| p.iter().filter(|x| x.test == t).count();
        // put/get: 3 scopes x 4 CTA counts x 2 sync modes, 8 B .. 32 MiB where every unit
        // moves at least a double.
        assert_eq!(bw(Test::PutBw), 348);
        assert_eq!(bw(Test::GetBw), 348);
        assert!(
            p.iter()
                .any(|x| x.test == Test::PutBw && x.bytes == 32 && x.scope == BLOCK)
        );
        assert!(
            p.iter()
                .any(|x| x.test == Test::PutBw && x.bytes == MAX_BYTES && x.ctas == 32)
        );
        assert!(p.iter().all(|x| x.bytes <= MAX_BYTES && x.iters >= 10));
        for t in [Test::PutLat, Test::GetLat] {
            assert_eq!(bw(t), 3 * 15, "{t:?}: 3 scopes x 4 B .. 64 KiB");
        }
        assert_eq!(bw(Test::PBw), 19);
        for t in [Test::PLat, Test::GLat, Test::PutSignalPingPong] {
            assert_eq!(bw(t), 15, "{t:?}: 4 B .. 64 KiB");
        }
        assert_eq!(bw(Test::SignalPingPong), 1);
        assert_eq!(bw(Test::Alltoall), 15, "8 B .. 128 KiB per PE in all");
        // Every unit of a put/get bandwidth point moves at least one double.
        assert!(
            p.iter()
                .filter(|x| x.test.is_bandwidth() && x.test != Test::PBw)
                .all(|x| {
                    let units = x.ctas as usize * [1024, 32, 1][x.scope as usize];
                    x.bytes / 8 >= units
                })
        );
        // The ping-pongs are the perftests' one-thread launches.
        assert!(
            p.iter()
                .filter(|x| matches!(x.test, Test::SignalPingPong | Test::PutSignalPingPong))
                .all(|x| x.ctas == 1 && x.threads == 1)
        );
        for t in Test::ALL {
            assert!(p.iter().any(|x| x.test == t), "{t:?} in the plan");
            assert!(t.perftest().contains(t.name().split('_').next().unwrap()));
        }
        assert!(plan(true).len() < p.len() / 5);
    }

    #[test]
    fn metrics_and_ratio() {
        let point = Point {
            test: Test::PutBw,
            scope: BLOCK,
            ctas: 16,
            threads: 1024,
            sync_each: false,
            bytes: 1 << 20,
            iters: 100,
        };
        let m = Measured {
            point,
            rust_ms: vec![1.0, 0.5, 2.0],
            cuda_ms: vec![0.5, 0.5, 0.5, 0.5],
        };
        // Per launch `bytes * iters / time`, then the mean, as the perftests do.
        let gbps = |ms: f64| 1048576.0 * 100.0 / (ms * 1e-3) / 1e9;
        let want = (gbps(1.0) + gbps(0.5) + gbps(2.0)) / 3.0;
        assert!((m.metric(Imp::Rust) - want).abs() < 1e-9);
        assert!((m.ratio() - want / gbps(0.5)).abs() < 1e-12);
        let lat = Measured {
            point: Point {
                test: Test::PutLat,
                ..point
            },
            ..m
        };
        assert!(
            (lat.metric(Imp::Rust) - 3.5 / 3.0 * 10.0).abs() < 1e-9,
            "mean of 10, 5 and 20 us (1, 0.5 and 2 ms over 100 iterations)"
        );
        assert!((lat.metric(Imp::Cuda) - 5.0).abs() < 1e-9);
        assert!(line(&lat, 0.0).contains("put_lat"));
    }
}
