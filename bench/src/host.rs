//! The measurement plan, the interleaved runs and the report.
//!
//! Method (NVSHMEM's perftests): for each point, one warm-up launch of each implementation,
//! then `reps` launches of each, alternating Rust and CUDA C++ (R C R C ...). A launch loops
//! `iters` times over the operation inside the kernel; CUDA events on the stream around the
//! launch give its time. Medians over the `reps` launches are reported, and their ratio.
//! One-sided tests run on PE 0 towards PE 1 (PE 1 idle); ping-pong and alltoall run on all
//! PEs. GB = 1e9 B. The ceiling is a copy-engine copy of 256 MiB from PE 0 into PE 1's
//! memory (`cuMemcpyDtoDAsync` to the address `nvshmem_ptr` gives), timed the same way.

use crate::kernels::{self, BLOCK, GET, LAT_G, LAT_GET, LAT_P, LAT_PUT, PUT, THREAD, WARP};
use serde_json::{Value, json};
use shmem_device::kernel::Kernel;
use shmem_host::args::{HostArgs, ParamPtrs};
pub use shmem_host::measure::{CEILING_BYTES, median};
use shmem_host::{KernelFn, LaunchConfig, Module, Result, Shmem, SymBuffer};

/// The largest message of the bandwidth tests.
pub const MAX_BYTES: usize = 32 << 20;

/// A measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `put_nbi` bandwidth.
    PutBw,
    /// `get_nbi` bandwidth.
    GetBw,
    /// Many threads each `p` a word.
    PBw,
    /// Blocking `put` + `quiet`, one unit.
    PutLat,
    /// Blocking `get`, one unit.
    GetLat,
    /// `p` + `quiet`, one thread.
    PLat,
    /// `g`, one thread.
    GLat,
    /// `signal_op` round trip.
    SignalPingPong,
    /// `put_signal` (block scope) round trip.
    PutSignalPingPong,
    /// Block-scope `alltoall` on the world team.
    Alltoall,
}

impl Test {
    /// Its name in the report.
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
    /// Message size (per PE pair for alltoall).
    pub bytes: usize,
    /// Iterations inside the launch.
    pub iters: u32,
}

fn scope_name(scope: u32) -> &'static str {
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
                        // Every unit moves at least one byte.
                        let units = ctas as usize
                            * match scope {
                                THREAD => 1024,
                                WARP => 32,
                                _ => 1,
                            };
                        if bytes < units {
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
    for test in [Test::PLat, Test::GLat, Test::SignalPingPong] {
        let bytes = if test == Test::SignalPingPong { 8 } else { 4 };
        v.push(Point {
            test,
            scope: THREAD,
            ctas: 1,
            threads: 1,
            sync_each: false,
            bytes,
            iters: 500,
        });
    }
    for bytes in sizes(8, 64 << 10) {
        v.push(Point {
            test: Test::PutSignalPingPong,
            scope: BLOCK,
            ctas: 1,
            threads: 1024,
            sync_each: false,
            bytes,
            iters: 200,
        });
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
    /// GB/s for bandwidth tests, µs per operation (round trip for ping-pong) otherwise.
    pub fn metric(&self, imp: Imp) -> f64 {
        let ms = median(match imp {
            Imp::Rust => &self.rust_ms,
            Imp::Cuda => &self.cuda_ms,
        });
        let p = self.point;
        if p.test.is_bandwidth() {
            (p.bytes as f64 * f64::from(p.iters)) / (ms * 1e-3) / 1e9
        } else {
            ms * 1e3 / f64::from(p.iters)
        }
    }
    /// Rust over C++: bandwidth ratio (≥ 1 is Rust faster) or latency ratio (≤ 1 is Rust
    /// faster).
    pub fn ratio(&self) -> f64 {
        self.metric(Imp::Rust) / self.metric(Imp::Cuda)
    }
}

/// The symmetric buffers of the measurements.
struct Buffers<'rt> {
    a: SymBuffer<'rt, u8>,
    b: SymBuffer<'rt, u8>,
    words: SymBuffer<'rt, u32>,
    counter: SymBuffer<'rt, u32>,
    sig: SymBuffer<'rt, u64>,
    out: SymBuffer<'rt, u32>,
}

/// One kernel in both implementations, and whether it is launched cooperatively (it waits
/// on other PEs).
struct Pair<'m, K> {
    k: [KernelFn<'m, K>; 2],
    cooperative: bool,
}

/// Both implementations' kernels.
struct Kernels<'m> {
    bw: Pair<'m, kernels::bw>,
    p_bw: Pair<'m, kernels::p_bw>,
    latency: Pair<'m, kernels::latency>,
    ping_pong: Pair<'m, kernels::ping_pong>,
    alltoall: Pair<'m, kernels::alltoall_lat>,
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
}

impl Bench<'_, '_> {
    /// One launch of `imp` at `p` (collective); `Some(ms)` on the PEs that launched.
    fn once(&self, p: &Point, imp: Imp) -> Result<Option<f64>> {
        let (rt, b) = (self.rt, self.bufs);
        let i = imp as usize;
        let (me, n) = (rt.my_pe(), rt.n_pes());
        let peer = (me + 1) % n;
        b.counter.zero()?;
        b.sig.zero()?;
        rt.barrier_all()?;
        let cfg = LaunchConfig::linear(p.ctas, p.threads);
        let ms = if p.test.one_sided() && me != 0 {
            None
        } else {
            // SAFETY: each kernel's contract: the buffers are symmetric with `MAX_BYTES`
            // bytes (`words`: `MAX_BYTES / 4` u32s, sizes bounded by `plan`), `counter` and
            // `sig` were zeroed before the barrier, `peer` is another PE, and every PE runs
            // the same points in the same order (two-sided tests launch on every PE).
            Some(unsafe {
                match p.test {
                    Test::PutBw | Test::GetBw => {
                        let kind = if p.test == Test::PutBw { PUT } else { GET };
                        let args = (
                            kind,
                            p.scope,
                            &b.b,
                            &b.a,
                            p.bytes,
                            p.iters,
                            u32::from(p.sync_each),
                            &b.counter,
                            peer,
                        );
                        time(rt, &self.k.bw, i, cfg, args)?
                    }
                    Test::PBw => {
                        let args = (&b.words, p.bytes / 4, p.iters, peer);
                        time(rt, &self.k.p_bw, i, cfg, args)?
                    }
                    Test::PutLat | Test::GetLat | Test::PLat | Test::GLat => {
                        let op = match p.test {
                            Test::PutLat => LAT_PUT,
                            Test::GetLat => LAT_GET,
                            Test::PLat => LAT_P,
                            _ => LAT_G,
                        };
                        let args = (op, p.scope, &b.b, &b.a, p.bytes, p.iters, peer, &b.out);
                        time(rt, &self.k.latency, i, cfg, args)?
                    }
                    Test::SignalPingPong | Test::PutSignalPingPong => {
                        let kind = u32::from(p.test == Test::PutSignalPingPong);
                        let args = (kind, &b.b, &b.a, p.bytes, &b.sig, p.iters, peer);
                        time(rt, &self.k.ping_pong, i, cfg, args)?
                    }
                    Test::Alltoall => unreachable!("alltoall runs in `alltoall_point`"),
                }
            })
        };
        rt.barrier_all()?;
        Ok(ms)
    }

    /// Alltoall needs buffers of exactly `n * bytes`: allocated for the point (collective).
    fn alltoall_point(&self, p: &Point, imp: Imp) -> Result<Option<f64>> {
        let rt = self.rt;
        let len = p.bytes * rt.n_pes() as usize;
        let src = rt.alloc::<u8>(len)?;
        let dest = rt.alloc::<u8>(len)?;
        src.copy_from(&(0..len).map(|i| (i * 7 + 1) as u8).collect::<Vec<_>>())?;
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
        a: rt.alloc::<u8>(MAX_BYTES)?,
        b: rt.alloc::<u8>(MAX_BYTES)?,
        words: rt.alloc::<u32>(MAX_BYTES / 4)?,
        counter: rt.alloc::<u32>(1)?,
        sig: rt.alloc::<u64>(1)?,
        out: rt.alloc::<u32>(1)?,
    };
    bufs.a
        .copy_from(&(0..MAX_BYTES).map(|i| (i % 251) as u8).collect::<Vec<_>>())?;
    bufs.b.zero()?;
    bufs.words.zero()?;
    let k = Kernels {
        bw: pair(rust, cuda, false)?,
        p_bw: pair(rust, cuda, false)?,
        latency: pair(rust, cuda, false)?,
        ping_pong: pair(rust, cuda, true)?,
        alltoall: pair(rust, cuda, true)?,
    };
    let bench = Bench {
        rt,
        bufs: &bufs,
        k: &k,
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
        // moves at least a byte.
        assert!(bw(Test::PutBw) > 400 && bw(Test::PutBw) == bw(Test::GetBw));
        assert!(
            p.iter()
                .any(|x| x.test == Test::PutBw && x.bytes == 8 && x.scope == BLOCK)
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
        assert_eq!(bw(Test::PutSignalPingPong), 14);
        assert_eq!(bw(Test::Alltoall), 14);
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
            cuda_ms: vec![0.5, 0.5, 0.5, 0.6],
        };
        assert!((m.metric(Imp::Rust) - 1048576.0 * 100.0 / 1e-3 / 1e9).abs() < 1e-9);
        assert!((m.ratio() - 0.5).abs() < 1e-12);
        let lat = Measured {
            point: Point {
                test: Test::PutLat,
                ..point
            },
            ..m
        };
        assert!(
            (lat.metric(Imp::Rust) - 10.0).abs() < 1e-9,
            "1 ms / 100 = 10 us"
        );
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(line(&lat, 0.0).contains("put_lat"));
    }
}
