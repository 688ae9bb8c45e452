//! 2D Jacobi with GPU-initiated halo exchange, on every local GPU.
//!
//! ```text
//! cargo xtask build-ptx
//! cargo run --release --example halo_exchange -- --size 4096 --iters 2000
//! ```
//!
//! Started directly it launches one PE per visible GPU (or `--pes N`); under `shmem-run` or
//! `mpirun` it is one PE. Without a GPU it runs 2 PEs on the CPU simulator, at a size the
//! simulator handles in seconds. See `--help` for the options.

use clap::Parser;
use halo_exchange::host::{Dtype, Implementation, Options, Outcome, Variant, run};
use shmem_host::{Error, Shmem};
use std::path::PathBuf;
use std::process::ExitCode;

/// 2D Jacobi (Laplace) with halos moved by GPU-initiated puts and signals.
///
/// Started directly it runs one PE per visible GPU (or --pes); under shmem-run, mpirun or
/// srun it is one PE. Without a GPU it runs on the CPU simulator (2 PEs unless --pes), and
/// every option not given defaults to a small solve there (the second default in brackets),
/// since simulated GPU threads are slow; --verify is always on there.
#[derive(Parser, Debug)]
#[command(
    name = "halo_exchange",
    after_help = "Environment: SHMEM_PTX_DIR (default target/ptx), SHMEM_SIM (1: the simulator, 0: GPUs only), SHMEM_SIM_SEED"
)]
struct Cli {
    /// Grid of N x N points [default: 4096; 34 on the simulator]
    #[arg(long, value_name = "N")]
    size: Option<u32>,
    /// Grid width, border included (overrides --size)
    #[arg(long, value_name = "N")]
    nx: Option<u32>,
    /// Grid height, border included (overrides --size)
    #[arg(long, value_name = "N")]
    ny: Option<u32>,
    /// Timed iterations [default: 1000; 30 on the simulator]
    #[arg(long, value_name = "N")]
    iters: Option<u32>,
    /// Untimed iterations before [default: 10; 0 on the simulator]
    #[arg(long, value_name = "N")]
    warmup: Option<u32>,
    /// Element type
    #[arg(long = "type", value_name = "T", default_value = "f32", value_parser = ["f32", "f64"])]
    dtype: String,
    /// One launch per solve (persistent) or one per iteration; auto: both timed on this GPU
    /// first (--warmup iterations each, at least one, twice), the faster runs; the summary
    /// names it with both trial times
    #[arg(long, default_value = "auto", value_parser = ["auto", "persistent", "per-iteration"])]
    variant: String,
    /// Residual norm every K iterations, 0 for never [default: 100; 10 on the simulator]
    #[arg(long, value_name = "K")]
    check_every: Option<u32>,
    /// Threads per block, a multiple of 32 [default: 512; 32 on the simulator]
    #[arg(long, value_name = "T")]
    threads: Option<u32>,
    /// Blocks [default: as many as fit at once, at most rows + 2]
    #[arg(long, value_name = "B")]
    blocks: Option<u32>,
    /// Capture K iterations into a CUDA graph and replay it --iters / K times instead of
    /// launching eagerly (K even, dividing --iters, a multiple of --check-every); with
    /// --compare, both eager and graph rows
    #[arg(long, value_name = "K")]
    graph: Option<u32>,
    /// Compare the result with the CPU reference (small grids)
    #[arg(long)]
    verify: bool,
    /// Run the CUDA C++ kernels of cuda/halo.cu instead (built by cuda/build.sh)
    #[arg(long, value_name = "CUBIN")]
    cuda: Option<PathBuf>,
    /// PEs to launch when started directly [default: one per GPU; 2 on the simulator]
    #[arg(long, value_name = "N")]
    pes: Option<usize>,
    /// No progress lines
    #[arg(long)]
    quiet: bool,
    /// Seed of the initial interior
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Run on the CPU simulator even with GPUs (as does SHMEM_SIM=1)
    #[arg(long)]
    simulate: bool,
    /// Benchmark: both variants of the Rust kernels and of the CUDA C++ kernels in CUBIN,
    /// interleaved (R C R C ...), --reps times each after a warm-up round; prints medians,
    /// Rust/C++ ratios, and RESULT lines (JSON)
    #[arg(long, value_name = "CUBIN", conflicts_with = "cuda")]
    compare: Option<PathBuf>,
    /// Repetitions for --compare
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
}

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

impl Cli {
    /// The solve's options; `simulated` picks the simulator's defaults for what was not given.
    fn options(&self, simulated: bool) -> Options {
        let pick = |given: Option<u32>, gpu: u32, sim: u32| {
            given.unwrap_or(if simulated { sim } else { gpu })
        };
        let size = pick(self.size, 4096, 34);
        let mut o = Options::new(self.nx.unwrap_or(size), self.ny.unwrap_or(size), ptx_dir());
        o.iters = pick(self.iters, 1000, 30);
        o.warmup = pick(self.warmup, 10, 0);
        o.check_every = pick(self.check_every, 100, 10);
        o.threads = pick(self.threads, 512, 32);
        o.blocks = self.blocks;
        o.seed = self.seed;
        o.verify = self.verify || simulated;
        o.progress = !self.quiet;
        o.graph = self.graph.unwrap_or(0);
        o.dtype = if self.dtype == "f64" {
            Dtype::F64
        } else {
            Dtype::F32
        };
        o.variant = match self.variant.as_str() {
            "per-iteration" => Variant::PerIteration,
            "persistent" => Variant::Persistent,
            _ => Variant::Auto,
        };
        if let Some(cubin) = &self.cuda {
            o.implementation = Implementation::Cuda {
                cubin: cubin.clone(),
            };
        }
        o
    }
}

/// `--compare`: Rust and CUDA C++ kernels, both variants, interleaved; PE 0 reports.
fn compare(
    rt: &Shmem,
    o: &Options,
    cubin: &std::path::Path,
    reps: usize,
) -> shmem_host::Result<()> {
    let rust = o.implementation.clone();
    let cuda = Implementation::Cuda {
        cubin: cubin.to_path_buf(),
    };
    // Both variants, eagerly and (with --graph) in a graph.
    let mut variants = vec![(Variant::Persistent, 0), (Variant::PerIteration, 0)];
    if o.graph > 0 {
        variants.extend([
            (Variant::Persistent, o.graph),
            (Variant::PerIteration, o.graph),
        ]);
    }
    // One PE: the sweep against a device-to-device copy in the same process.
    let copy_gbps = if rt.n_pes() == 1 && !rt.is_simulated() {
        shmem_host::measure::copy_engine_peer_bandwidth(rt, 5)?
    } else {
        None
    };
    let mut times = vec![[Vec::new(), Vec::new()]; variants.len()];
    let (mut halo_bytes, mut memory_bytes) = (0, 0);
    for rep in 0..=reps {
        for (vi, &(v, graph)) in variants.iter().enumerate() {
            for (ii, imp) in [&rust, &cuda].into_iter().enumerate() {
                let mut x = o.clone();
                (x.variant, x.graph, x.implementation, x.verify, x.progress) =
                    (v, graph, imp.clone(), false, false);
                let out = run(rt, &x)?;
                (halo_bytes, memory_bytes) = (out.halo_bytes_per_iter, out.memory_bytes_per_iter);
                if rep > 0 {
                    times[vi][ii].push(out.seconds_per_iter);
                }
            }
        }
    }
    if rt.my_pe() != 0 {
        return Ok(());
    }
    let median = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    for (vi, &(v, graph)) in variants.iter().enumerate() {
        let (r, c) = (median(&times[vi][0]), median(&times[vi][1]));
        let how = if graph > 0 {
            format!(" graph of {graph}")
        } else {
            String::new()
        };
        println!(
            "{}x{} {:?} {v:?}{how} on {} PE(s): rust {:.2} us/iter, cuda {:.2} us/iter, rust/cuda time {:.3}, halo {:.2} GB/s",
            o.nx,
            o.ny,
            o.dtype,
            rt.n_pes(),
            r * 1e6,
            c * 1e6,
            r / c,
            halo_bytes as f64 / r / 1e9
        );
        println!(
            "RESULT {{\"nx\":{},\"ny\":{},\"dtype\":\"{:?}\",\"variant\":\"{v:?}\",\"graph\":{graph},\"pes\":{},\"iters\":{},\"rust_us\":{:?},\"cuda_us\":{:?},\"halo_bytes_per_iter\":{}}}",
            o.nx,
            o.ny,
            o.dtype,
            rt.n_pes(),
            o.iters,
            times[vi][0].iter().map(|t| t * 1e6).collect::<Vec<_>>(),
            times[vi][1].iter().map(|t| t * 1e6).collect::<Vec<_>>(),
            halo_bytes
        );
        if let Some(ce) = copy_gbps {
            let pct = |t: f64| shmem_host::measure::percent_of_device_copy(memory_bytes, t, ce);
            println!(
                "  memory floor {:.1} MB per iteration: rust {:.1} % / cuda {:.1} % of the device copy ({ce:.1} GB/s copied)",
                memory_bytes as f64 / 1e6,
                pct(r),
                pct(c)
            );
            println!(
                "RESULT {{\"nx\":{},\"ny\":{},\"dtype\":\"{:?}\",\"variant\":\"{v:?}\",\"graph\":{graph},\"pes\":1,\"memory_bytes_per_iter\":{memory_bytes},\"device_copy_gbps\":{ce:.2},\"rust_copy_pct\":{:.2},\"cuda_copy_pct\":{:.2}}}",
                o.nx,
                o.ny,
                o.dtype,
                pct(r),
                pct(c)
            );
        }
    }
    Ok(())
}

fn summary(o: &Options, out: &Outcome, n: i32) -> String {
    let us = out.seconds_per_iter * 1e6;
    let mut s = format!(
        "halo_exchange {}x{} {:?} {:?}{} {} on {n} PE(s), {} iterations{}, {} blocks x {} threads\n  \
         time per iteration {us:.2} us, halo traffic {:.2} GB/s ({} B per iteration)",
        o.nx,
        o.ny,
        o.dtype,
        out.variant,
        match out.trial_seconds_per_iter {
            Some([p, i]) => format!(
                " (auto: measured {:.2} us an iteration persistent, {:.2} per-iteration)",
                p * 1e6,
                i * 1e6
            ),
            None => String::new(),
        },
        match &o.implementation {
            Implementation::Rust { .. } => "rust".to_string(),
            Implementation::Cuda { cubin } => format!("cuda ({})", cubin.display()),
        },
        o.iters,
        if o.graph > 0 {
            format!(
                " (a graph of {} replayed {} times)",
                o.graph,
                o.iters / o.graph
            )
        } else {
            String::new()
        },
        out.launch.0,
        out.launch.1,
        out.halo_bytes_per_iter as f64 / out.seconds_per_iter / 1e9,
        out.halo_bytes_per_iter,
    );
    match out.residuals.last() {
        Some((i, r)) => s += &format!("\n  final residual {r:.6e} (iteration {i})"),
        None => s += "\n  no residual computed (--check-every 0)",
    }
    if let Some(m) = out.mismatches {
        s += &format!(
            "\n  verify: {m} points differ from the CPU reference; residuals within {:.1e} relative",
            out.residual_error.unwrap_or(f64::NAN)
        );
    }
    s
}

fn pe(cli: &Cli) -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
    let o = &cli.options(rt.is_simulated());
    if let Some(cubin) = &cli.compare {
        return compare(&rt, o, cubin, cli.reps as usize);
    }
    let out = run(&rt, o)?;
    if let Some(m) = out.mismatches
        && (m != 0 || out.residual_error.is_some_and(|e| e > 1e-9))
    {
        return Err(Error::Invalid(format!(
            "PE {}: {m} points differ from the CPU reference, residual error {:?}",
            rt.my_pe(),
            out.residual_error
        )));
    }
    if rt.my_pe() == 0 {
        println!("{}", summary(o, &out, rt.n_pes()));
        if rt.is_simulated() {
            println!(
                "  (on the CPU simulator: the times are the simulator's, not a GPU's; \
                 every point matches the CPU reference)"
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.simulate {
        // SAFETY: set before any thread starts; `launcher::run` reads it below.
        unsafe { std::env::set_var("SHMEM_SIM", "1") };
    }
    match shmem_host::launcher::run(cli.pes, || pe(&cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halo_exchange: {e}");
            ExitCode::FAILURE
        }
    }
}
