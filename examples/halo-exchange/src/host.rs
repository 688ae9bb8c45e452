//! The host driver: allocate the slab, launch the kernels, time them, check the result.
//!
//! [`run`] is what the `halo_exchange` example and the GPU tests call on every PE. It runs
//! either the Rust kernels of this crate or the CUDA C++ kernels of `cuda/halo.cu` (loaded
//! as a CUDA C++ [`shmem_host::Module`]) with the same buffers, launch shape and timing, so the two
//! implementations differ only in their device code.

use crate::kernels::{self, Slab};
use crate::{FromF64, max_rows, partition, reference, slab};
use shmem_device::kernel::Kernel;
use shmem_device::{Sym, SymSlice, kernel::KernelParam};
use shmem_host::args::HostArg;
use shmem_host::{Enqueue, Error, KernelFn, LaunchConfig, Result, Shmem, StreamRef, SymBuffer};
use std::path::PathBuf;
use std::time::{Duration, Instant};

impl HostArg<Slab> for Slab {
    fn to_param(&self) -> Slab {
        *self
    }
}

/// The element type of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

/// How iterations map to launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// One launch per iteration.
    PerIteration,
    /// One launch for all iterations, with a grid barrier between them.
    Persistent,
    /// Both, timed on this GPU before the solve; the faster runs ([`Outcome::variant`]).
    ///
    /// Which one is faster depends on the GPU as much as on the grid: at 4096² on one PE
    /// the persistent kernel took 0.91 of the per-iteration one's time on an H100 and 1.003
    /// on an H200; at 16384², 0.99 on the H100 and 1.04 on the H200 (BENCHMARKS.md, halo
    /// exchange, thirty-eighth session). So `Auto` measures instead of following a rule of
    /// grid sizes: after the usual reset, each variant runs [`Options::warmup`] iterations
    /// (at least one) twice, eagerly, and the second run is timed on the slowest PE; the
    /// faster per iteration (the persistent one on a tie) then runs the solve. Every PE
    /// takes the same times ([`Shmem::min_max`]), so every PE picks the same variant. With
    /// [`Options::graph`] the trial still launches eagerly.
    Auto,
}

/// Whose kernels run: this crate's Rust kernels or the CUDA C++ ones of `cuda/`.
pub use shmem_host::Implementation;

/// One solve.
#[derive(Clone, Debug)]
pub struct Options {
    /// Columns, including the border.
    pub nx: u32,
    /// Rows, including the border.
    pub ny: u32,
    /// Timed iterations.
    pub iters: u32,
    /// Untimed iterations first (then the grid is reset).
    pub warmup: u32,
    /// Element type.
    pub dtype: Dtype,
    /// Launch per iteration, persistent, or the one measured faster ([`Variant::Auto`]).
    pub variant: Variant,
    /// Residual every this many iterations (0: never).
    pub check_every: u32,
    /// Seed of the initial interior.
    pub seed: u64,
    /// Threads per block (a multiple of 32).
    pub threads: u32,
    /// Blocks; `None` for as many as fit on the GPU at once, but no more than rows + 2.
    pub blocks: Option<u32>,
    /// Compare with the CPU reference afterwards (keep the grid small).
    pub verify: bool,
    /// Print residuals (PE 0) while it runs.
    pub progress: bool,
    /// Iterations per CUDA graph; 0: launch eagerly. With `k > 0` the solve captures `k`
    /// iterations (for the per-iteration variant `k` launches; for the persistent one, one
    /// launch of `k`) after a fill of the signal words and a barrier, on a stream of the
    /// program's own, and replays the graph `iters / k` times. `k` is even (every replay
    /// starts from the same buffer), divides `iters`, and is a multiple of `check_every`.
    pub graph: u32,
    /// Which kernels.
    pub implementation: Implementation,
}

impl Options {
    /// Defaults for an `nx × ny` grid with the Rust kernels in `ptx_dir`.
    pub fn new(nx: u32, ny: u32, ptx_dir: PathBuf) -> Options {
        Options {
            nx,
            ny,
            iters: 1000,
            warmup: 10,
            dtype: Dtype::F32,
            variant: Variant::Persistent,
            check_every: 100,
            seed: 0x5eed,
            threads: 512,
            blocks: None,
            verify: false,
            progress: false,
            graph: 0,
            implementation: Implementation::Rust { ptx_dir },
        }
    }
}

/// What a solve measured and found, on this PE.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Seconds per iteration: the slowest PE's timed loop over the iterations.
    pub seconds_per_iter: f64,
    /// Bytes of halo rows that crossed between PEs per iteration, all PEs together.
    pub halo_bytes_per_iter: u64,
    /// This PE's memory floor per iteration: its slab and two halo rows read once, its
    /// slab written once.
    pub memory_bytes_per_iter: u64,
    /// `(iteration, residual)`: the L2 norm of the change made by that iteration.
    pub residuals: Vec<(u32, f64)>,
    /// Blocks and threads per block of the launches.
    pub launch: (u32, u32),
    /// The variant that ran: [`Options::variant`], or with [`Variant::Auto`] the faster.
    pub variant: Variant,
    /// With [`Variant::Auto`]: the trial's seconds per iteration on the slowest PE,
    /// `[persistent, per-iteration]`.
    pub trial_seconds_per_iter: Option<[f64; 2]>,
    /// With `verify`: points of this PE's slab that differ from the CPU reference.
    pub mismatches: Option<usize>,
    /// With `verify`: the largest relative difference of a residual from the CPU's.
    pub residual_error: Option<f64>,
}

type StepParams<T> = (
    Sym<T>,
    Sym<T>,
    SymSlice<u64>,
    SymSlice<u32>,
    SymSlice<f64>,
    SymSlice<f64>,
    Slab,
    u64,
    i32,
);
type PersistentParams<T> = (
    Sym<T>,
    Sym<T>,
    SymSlice<u64>,
    SymSlice<u32>,
    SymSlice<f64>,
    SymSlice<f64>,
    Slab,
    u32,
    u32,
);

/// The element types with their kernels.
pub trait Element: FromF64 + KernelParam + PartialEq + Default + Send + Sync {
    /// The per-iteration kernel.
    type Step: Kernel<Params = StepParams<Self>>;
    /// The persistent kernel.
    type Persistent: Kernel<Params = PersistentParams<Self>>;
}
impl Element for f32 {
    type Step = kernels::step_f32;
    type Persistent = kernels::persistent_f32;
}
impl Element for f64 {
    type Step = kernels::step_f64;
    type Persistent = kernels::persistent_f64;
}

/// Runs one solve on this PE (collective: every PE calls it with the same options).
pub fn run(rt: &Shmem, opts: &Options) -> Result<Outcome> {
    match opts.dtype {
        Dtype::F32 => solve::<f32>(rt, opts),
        Dtype::F64 => solve::<f64>(rt, opts),
    }
}

fn check_options(opts: &Options, n: u32) -> Result<()> {
    if opts.nx < 3 || opts.ny < 3 {
        return Err(Error::Invalid(format!(
            "the grid must be at least 3 × 3 (border and one interior point), not {} × {}",
            opts.nx, opts.ny
        )));
    }
    if opts.ny - 2 < n {
        return Err(Error::Invalid(format!(
            "{} interior rows cannot be split over {n} PEs: every PE needs at least one",
            opts.ny - 2
        )));
    }
    if opts.threads == 0 || !opts.threads.is_multiple_of(32) || opts.threads > 1024 {
        return Err(Error::Invalid(format!(
            "threads per block must be a multiple of 32 up to 1024, not {}",
            opts.threads
        )));
    }
    if opts.blocks.is_some_and(|b| b < 3) {
        return Err(Error::Invalid(
            "the kernels need at least 3 blocks (two edge rows and the interior)".into(),
        ));
    }
    if opts.iters == 0 {
        return Err(Error::Invalid("at least one iteration".into()));
    }
    let k = opts.graph;
    if k > 0
        && (k % 2 == 1
            || !opts.iters.is_multiple_of(k)
            || (opts.check_every > 0 && !k.is_multiple_of(opts.check_every)))
    {
        return Err(Error::Invalid(format!(
            "a graph of {k} iterations: it must be even, divide the {} iterations and be a              multiple of check-every ({})",
            opts.iters, opts.check_every
        )));
    }
    Ok(())
}

/// This PE's slab of the initial grid, halos included: `(rows + 2) × nx`, padded to
/// `max_rows + 2` rows. Rows are filled in parallel (a 16384² grid is 268 M points).
fn initial_slab<T: FromF64 + Send>(opts: &Options, pe: u32, n: u32) -> Vec<T> {
    let (start, rows) = partition(opts.ny, pe, n);
    let nx = opts.nx as usize;
    let mut v = vec![T::from_f64(0.0); (max_rows(opts.ny, n) as usize + 2) * nx];
    let filled = (rows as usize + 2) * nx;
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per = (rows as usize + 2).div_ceil(threads) * nx;
    std::thread::scope(|scope| {
        for (i, part) in v[..filled].chunks_mut(per).enumerate() {
            scope.spawn(move || {
                for (j, cell) in part.iter_mut().enumerate() {
                    let k = i * per + j;
                    let (y, x) = (start - 1 + (k / nx) as u32, (k % nx) as u32);
                    *cell = T::from_f64(crate::initial(opts.seed, opts.nx, opts.ny, y, x));
                }
            });
        }
    });
    v
}

fn solve<T: Element>(rt: &Shmem, opts: &Options) -> Result<Outcome> {
    let (me, n) = (rt.my_pe() as u32, rt.n_pes() as u32);
    check_options(opts, n)?;
    let s = slab(opts.nx, opts.ny, me, n);
    let checks = opts
        .iters
        .max(opts.warmup)
        .checked_div(opts.check_every)
        .unwrap_or(0) as usize;
    let len = (max_rows(opts.ny, n) as usize + 2) * opts.nx as usize;
    let a = rt.alloc::<T>(len)?;
    let a_new = rt.alloc::<T>(len)?;
    let sync = rt.alloc::<u64>(3)?;
    let work = rt.alloc::<u32>(2)?;
    let stats = rt.alloc::<f64>(1 + checks)?;
    let norms = rt.alloc::<f64>((n as usize * checks).max(1))?;
    // SAFETY: `cuda/halo.cu` declares each kernel with the parameters of the Rust kernel of
    // the same name, in the same order: its `Slice<T>` is `SymSlice<T>`'s `#[repr(C)]` layout
    // (pointer, length), its `Slab` is `Slab`'s.
    let module = unsafe { opts.implementation.load(rt, "halo-exchange")? };
    let (step, persistent) = (
        module.kernel::<T::Step>()?,
        module.kernel::<T::Persistent>()?,
    );

    let threads = opts.threads;
    let probe = LaunchConfig::linear(1, threads);
    // A variant's launch: as many blocks as fit at once (at most rows + 2), or the caller's.
    // Both kernels wait on other PEs: cooperative (for the CUDA C++ twin too).
    let cfg = |persistent_kernel: bool| -> Result<LaunchConfig<'static>> {
        let fit = if persistent_kernel {
            persistent.max_coresident_blocks(&probe)?
        } else {
            step.max_coresident_blocks(&probe)?
        };
        let blocks = opts.blocks.unwrap_or_else(|| fit.min(s.rows + 2).max(3));
        Ok(LaunchConfig::linear(blocks, threads).with_cooperative(true))
    };
    let init = initial_slab::<T>(opts, me, n);

    // Resets the grid and the synchronisation words; collective.
    let reset = || -> Result<()> {
        rt.barrier_all()?;
        a.copy_from(&init)?;
        a_new.copy_from(&init)?;
        sync.zero()?;
        work.zero()?;
        stats.zero()?;
        norms.zero()?;
        rt.barrier_all()
    };
    let solver = |persistent_kernel: bool| -> Result<Solver<'_, '_, T>> {
        Ok(Solver {
            a: &a,
            a_new: &a_new,
            sync: &sync,
            work: &work,
            stats: &stats,
            norms: &norms,
            step: &step,
            persistent: &persistent,
            persistent_kernel,
            cfg: cfg(persistent_kernel)?,
            slab: s,
            opts,
        })
    };
    let eager = rt.on(StreamRef::Runtime);
    // Seconds per iteration on the slowest PE of `iters` iterations enqueued by `go`, from
    // the reset grid; collective.
    let timed = |iters: u32, go: &dyn Fn(u32) -> Result<bool>| -> Result<(bool, f64)> {
        let start = rt.mark()?;
        let r = go(iters)?;
        rt.barrier_all_on(StreamRef::Runtime)?;
        let end = rt.mark()?;
        end.synchronize()?;
        let (_, slowest_ns) = rt.min_max((end.seconds_since(&start)? * 1e9) as i64)?;
        Ok((r, slowest_ns as f64 * 1e-9 / f64::from(iters)))
    };
    let (variant, trial_seconds_per_iter) = match opts.variant {
        Variant::Auto => {
            let trial = opts.warmup.max(1);
            let mut per_iter = [0.0; 2];
            for (i, persistent_kernel) in [true, false].into_iter().enumerate() {
                let sv = solver(persistent_kernel)?;
                for _ in 0..2 {
                    reset()?;
                    per_iter[i] = timed(trial, &|k| sv.iterate(eager, k))?.1;
                }
            }
            let v = if per_iter[0] <= per_iter[1] {
                Variant::Persistent
            } else {
                Variant::PerIteration
            };
            (v, Some(per_iter))
        }
        v => (v, None),
    };
    let solver = solver(variant == Variant::Persistent)?;
    // With a graph: `opts.graph` iterations from epoch 0, after the signal words and
    // counters are cleared and every PE has cleared them; a barrier at the end keeps the
    // next replay's clearing after the last halo has landed.
    let own = rt.new_stream()?;
    let graph = if opts.graph > 0 {
        Some(rt.capture(own.as_ref(), |c| {
            c.zero(&sync)?;
            c.zero(&work)?;
            c.barrier_all()?;
            solver.iterate(c.enqueue(), opts.graph)?;
            c.barrier_all()
        })?)
    } else {
        None
    };
    // `iters` iterations from the reset grid, eagerly or by replays; returns whether the
    // result is in `a_new`.
    let iterate = |iters: u32| -> Result<bool> {
        match &graph {
            None => solver.iterate(eager, iters),
            Some(g) => {
                rt.wait_for(own.as_ref(), &rt.mark()?)?;
                for _ in 0..iters / opts.graph {
                    g.launch()?;
                }
                rt.wait_for(StreamRef::Runtime, &rt.mark_on(own.as_ref())?)?;
                Ok(false)
            }
        }
    };

    if opts.warmup > 0 {
        reset()?;
        // With a graph, one replay (the first launch of a graph also uploads it).
        iterate(if graph.is_some() {
            opts.graph
        } else {
            opts.warmup
        })?;
        rt.synchronize()?;
    }
    reset()?;
    // `done` is set once the GPU has finished (not when the host has queued the work), so
    // that the watcher's last look sees every residual; the end event is recorded right
    // after the work, never after waiting for the watcher.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (in_a_new, seconds_per_iter) = std::thread::scope(|scope| -> Result<_> {
        // A watcher reads the GPU while it works; under the simulator a launch returns
        // when it has finished, so the residuals are printed afterwards instead.
        if opts.progress && me == 0 && checks > 0 && !rt.is_simulated() {
            let (ctx, done, addr, len) = (rt.context()?, &done, stats.device_ptr(), stats.len());
            scope.spawn(move || watch(ctx, addr, len, opts, done));
        }
        let out = timed(opts.iters, &iterate);
        done.store(true, std::sync::atomic::Ordering::Release);
        out
    })?;

    let all_stats = stats.to_vec()?;
    // With a graph, the checks of the last replay (each replay writes the same slots).
    let per_run = if graph.is_some() {
        opts.graph
    } else {
        opts.iters
    };
    let first = opts.iters - per_run;
    let done_checks = per_run.checked_div(opts.check_every).unwrap_or(0) as usize;
    let residuals: Vec<(u32, f64)> = (0..done_checks)
        .map(|k| {
            (
                first + (k as u32 + 1) * opts.check_every,
                all_stats[1 + k].sqrt(),
            )
        })
        .collect();
    if opts.progress && me == 0 && rt.is_simulated() {
        for (i, r) in &residuals {
            println!("  iteration {i:>7}: residual {r:.6e}");
        }
    }

    let (mut mismatches, mut residual_error) = (None, None);
    if opts.verify {
        let got = if in_a_new {
            a_new.to_vec()?
        } else {
            a.to_vec()?
        };
        let (want, want_res) =
            reference::solve::<T>(opts.seed, opts.nx, opts.ny, opts.iters, opts.check_every);
        let (start_row, rows) = partition(opts.ny, me, n);
        let nx = opts.nx as usize;
        let mine = &got[nx..(rows as usize + 1) * nx];
        let theirs = &want[start_row as usize * nx..(start_row + rows) as usize * nx];
        mismatches = Some(mine.iter().zip(theirs).filter(|(x, y)| x != y).count());
        // The reference's residuals of the same iterations (the last `per_run`).
        let skip = first.checked_div(opts.check_every).unwrap_or(0) as usize;
        let want_res = want_res.get(skip..).unwrap_or_default();
        residual_error = Some(
            residuals
                .iter()
                .zip(want_res)
                .map(|((_, g), w)| (g * g - w).abs() / w.abs().max(f64::MIN_POSITIVE))
                .fold(0.0, f64::max),
        );
        if residuals.len() != want_res.len() {
            residual_error = Some(f64::INFINITY);
        }
    }
    Ok(Outcome {
        seconds_per_iter,
        halo_bytes_per_iter: 2 * u64::from(n - 1) * u64::from(opts.nx) * size_of::<T>() as u64,
        memory_bytes_per_iter: (2 * u64::from(s.rows) + 2)
            * u64::from(opts.nx)
            * size_of::<T>() as u64,
        residuals,
        launch: (solver.cfg.grid.0, threads),
        variant,
        trial_seconds_per_iter,
        mismatches,
        residual_error,
    })
}

/// One solve's buffers, kernels and launch shape: what [`Solver::iterate`] enqueues.
struct Solver<'a, 'rt, T: Element> {
    a: &'a SymBuffer<'rt, T>,
    a_new: &'a SymBuffer<'rt, T>,
    sync: &'a SymBuffer<'rt, u64>,
    work: &'a SymBuffer<'rt, u32>,
    stats: &'a SymBuffer<'rt, f64>,
    norms: &'a SymBuffer<'rt, f64>,
    step: &'a KernelFn<'a, T::Step>,
    persistent: &'a KernelFn<'a, T::Persistent>,
    /// Whether the persistent kernel runs (else one launch per iteration).
    persistent_kernel: bool,
    cfg: LaunchConfig<'static>,
    slab: Slab,
    opts: &'a Options,
}

impl<'a, T: Element> Solver<'a, '_, T> {
    /// Enqueues `iters` iterations from epoch 0 (after the grid and the synchronisation
    /// words were reset) into `to`; returns whether the result is in `a_new`.
    fn iterate(&self, to: Enqueue<'_, 'a>, iters: u32) -> Result<bool> {
        let (a, a_new, opts) = (self.a, self.a_new, self.opts);
        let (sync, work, stats, norms) = (self.sync, self.work, self.stats, self.norms);
        if !self.persistent_kernel {
            let mut check = 0;
            for e in 0..iters {
                let (src, dst) = if e % 2 == 0 { (a, a_new) } else { (a_new, a) };
                let c = if opts.check_every > 0 && (e + 1) % opts.check_every == 0 {
                    check += 1;
                    check - 1
                } else {
                    -1
                };
                let args = (
                    src,
                    dst,
                    sync,
                    work,
                    stats,
                    norms,
                    self.slab,
                    u64::from(e),
                    c,
                );
                // SAFETY: every PE enqueues the same sequence (collective `run`); buffers
                // and shape as the kernel documents; epochs count up from 0 after the
                // reset (or the graph's fill).
                unsafe { to.launch(self.step, self.cfg, args)? };
            }
        } else {
            let args = (
                a,
                a_new,
                sync,
                work,
                stats,
                norms,
                self.slab,
                iters,
                opts.check_every,
            );
            // SAFETY: as above; `work` was zeroed by the reset (or the graph's fill).
            unsafe { to.launch(self.persistent, self.cfg, args)? };
        }
        Ok(iters % 2 == 1)
    }
}

/// Prints residuals as the kernels write them (PE 0), reading `stats` (`len` `f64`s at device
/// address `addr`) on a stream of its own so that the solve's stream is never stalled.
fn watch(
    ctx: &std::sync::Arc<shmem_host::cudarc::driver::CudaContext>,
    addr: u64,
    len: usize,
    opts: &Options,
    done: &std::sync::atomic::AtomicBool,
) {
    use shmem_host::cudarc::driver::result;
    let stream = match ctx.bind_to_thread().and_then(|()| ctx.new_stream()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("halo_exchange: no progress reports: {e}");
            return;
        }
    };
    let t0 = Instant::now();
    let mut shown = 0;
    let mut buf = vec![0f64; len];
    loop {
        let finished = done.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: `addr` is this PE's `stats` buffer of `len` f64s, alive until the solve
        // (which outlives this thread) returns; `buf` has `len` elements and is borrowed until
        // the synchronisation below. A value being written concurrently is read old or new.
        let copied = unsafe { result::memcpy_dtoh_async(&mut buf, addr, stream.cu_stream()) };
        if let Err(e) = copied.and_then(|()| stream.synchronize()) {
            eprintln!("halo_exchange: progress reports stopped: {e}");
            return;
        }
        while 1 + shown < buf.len() && buf[1 + shown] != 0.0 {
            println!(
                "  iteration {:>7}: residual {:.6e}  ({:.2} s)",
                (shown as u32 + 1) * opts.check_every,
                buf[1 + shown].sqrt(),
                t0.elapsed().as_secs_f64()
            );
            shown += 1;
        }
        if finished {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_slab_is_the_global_grid_cut_by_partition() {
        let mut o = Options::new(37, 29, PathBuf::new());
        o.seed = 11;
        for n in [1u32, 2, 3, 5] {
            for pe in 0..n {
                let v = initial_slab::<f64>(&o, pe, n);
                let (start, rows) = partition(o.ny, pe, n);
                assert_eq!(v.len(), (max_rows(o.ny, n) as usize + 2) * 37);
                for r in 0..rows + 2 {
                    for x in 0..37u32 {
                        let want = crate::initial(11, 37, 29, start - 1 + r, x);
                        assert_eq!(v[(r * 37 + x) as usize], want, "n {n} pe {pe} r {r} x {x}");
                    }
                }
            }
        }
    }
}
