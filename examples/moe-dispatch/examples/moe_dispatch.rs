//! MoE dispatch and combine between GPUs, on every local GPU, checked against the CPU.
//!
//! ```text
//! cargo xtask build-ptx
//! cargo run --release --example moe_dispatch
//! ```
//!
//! Started directly it launches one PE per visible GPU (or `--pes N`); under `shmem-run` or
//! `mpirun` it is one PE. Without a GPU it runs 2 PEs on the CPU simulator, at a size the
//! simulator handles in seconds. See `--help` for the options.

use clap::Parser;
use moe_dispatch::host::{Dtype, Implementation, Mode, Options, Outcome, run};
use moe_dispatch::routing::Distribution;
use shmem_host::{Error, Shmem};
use std::path::PathBuf;
use std::process::ExitCode;

/// Mixture-of-experts dispatch and combine by GPU-initiated puts and signals, checked
/// against the CPU.
///
/// Started directly it runs one PE per visible GPU (or --pes); under shmem-run, mpirun or
/// srun it is one PE. Without a GPU it runs on the CPU simulator (2 PEs unless --pes), and
/// every option not given defaults to a small problem there (the second default in
/// brackets), since simulated GPU threads are slow.
#[derive(Parser, Clone, Debug)]
#[command(
    name = "moe_dispatch",
    after_help = "Environment: SHMEM_PTX_DIR (default target/ptx), SHMEM_SIM (1: the simulator, 0: GPUs only), SHMEM_SIM_SEED"
)]
struct Cli {
    /// Tokens per PE, one configuration each [default: 512; 48 on the simulator]
    #[arg(long, value_name = "T[,T..]", value_delimiter = ',')]
    tokens: Vec<u32>,
    /// bf16 values per token, a multiple of 8 (of 128 for fp8) [default: 7168; 64 on the
    /// simulator, 128 with fp8]
    #[arg(long, value_name = "H")]
    hidden: Option<u32>,
    /// Experts, spread evenly over the PEs, one configuration each [default: 64; 8 on the
    /// simulator]
    #[arg(long, value_name = "E[,E..]", value_delimiter = ',')]
    experts: Vec<u32>,
    /// Experts per token, at most 16 [default: 8; 3 on the simulator]
    #[arg(long, value_name = "K")]
    top_k: Option<u32>,
    /// uniform, skewed (popular experts), sparse (a quarter of the experts empty, every
    /// fifth token one choice fewer)
    #[arg(long, default_value = "uniform", value_parser = ["uniform", "skewed", "sparse"])]
    routing: String,
    /// Pairs kept per (expert, source PE) in low-latency mode, per expert in throughput
    /// mode; pairs beyond it are dropped and reported [default: as many as can arrive]
    #[arg(long, value_name = "C")]
    capacity: Option<u32>,
    /// Which dispatch
    #[arg(long, default_value = "both", value_parser = ["low-latency", "throughput", "both"])]
    mode: String,
    /// What the dispatch sends: bf16 tokens, or fp8 (e4m3 with one f32 scale per 128 values,
    /// quantised by the dispatch; the combine stays bf16), or both in turn
    #[arg(long, default_value = "bf16", value_parser = ["bf16", "fp8", "both"])]
    dtype: String,
    /// Timed rounds [default: 20; 2 on the simulator]
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,
    /// Untimed rounds first [default: 3; 0 on the simulator]
    #[arg(long, value_name = "N")]
    warmup: Option<u32>,
    /// Threads per block [default: 256; 64 on the simulator]
    #[arg(long, value_name = "T")]
    threads: Option<u32>,
    /// Blocks of dispatch and combine, 2 at least for the FP8 dispatches, which split their
    /// blocks by role [default: one warp per unit of work, at most what fits on the GPU]
    #[arg(long, value_name = "B")]
    blocks: Option<u32>,
    /// Also launch N rounds back to back and replay a round captured into a CUDA graph N
    /// times: time per step of both, and the graph's result compared with the eager one
    /// (with --compare: for both implementations)
    #[arg(long, value_name = "N")]
    graph: Option<u32>,
    /// Skip the comparison with the CPU reference
    #[arg(long)]
    no_verify: bool,
    /// Enqueue each round on a held stream, released once the round is enqueued: the events
    /// time the GPU's work alone, without the gaps where the GPU waited for the host's next
    /// launch (as nvbench's blocking kernel does)
    #[arg(long)]
    hold_stream: bool,
    /// Launch the throughput dispatch only after its layout has completed, not as its
    /// programmatic dependent (which starts while the layout runs, from sm_90)
    #[arg(long)]
    no_dependent_launch: bool,
    /// Launch the kernels that look each PE up and put through NVSHMEM where one is not
    /// mapped, even where every PE's memory is mapped here (which otherwise takes the kernels
    /// without that code)
    #[arg(long)]
    probe_peers: bool,
    /// Seed of tokens and routing
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Run the CUDA C++ kernels of cuda/moe.cu instead (cuda/build.sh)
    #[arg(long, value_name = "CUBIN")]
    cuda: Option<PathBuf>,
    /// Benchmark: the Rust kernels and the CUDA C++ kernels in CUBIN, both modes, for every
    /// --tokens and --experts given, interleaved (R C R C), --reps times each after a
    /// warm-up; prints medians, ratios, the copy-engine peer bandwidth, and RESULT lines
    /// (JSON). On one PE also each phase against the device copy: its rate on the bytes it
    /// reads and writes as a share of a 256 MiB copy's, and its time against a copy of the
    /// same bytes timed as the rounds are (--hold-stream or not)
    #[arg(long, value_name = "CUBIN", conflicts_with = "cuda")]
    compare: Option<PathBuf>,
    /// Repetitions for --compare
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// With --compare: load the CUDA C++ module first and run its kernels first in each pair.
    /// The two slots are not neutral (the same kernels measure up to a few per cent apart in
    /// them; BENCHMARKS.md), so a ratio is best taken in both orders; figures and ratios stay
    /// Rust / CUDA C++ either way
    #[arg(long, requires = "compare")]
    cuda_first: bool,
    /// PEs to launch when started directly [default: one per GPU; 2 on the simulator]
    #[arg(long, value_name = "N")]
    pes: Option<usize>,
    /// Run on the CPU simulator even with GPUs (as does SHMEM_SIM=1)
    #[arg(long)]
    simulate: bool,
}

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

/// What one run does: the options shared by every configuration, and the configurations.
#[derive(Clone)]
struct Plan {
    opts: Options,
    tokens: Vec<u32>,
    experts: Vec<u32>,
    modes: Vec<Mode>,
    dtypes: Vec<Dtype>,
}

impl Plan {
    /// Every configuration: experts, tokens, mode and dtype, in that nesting.
    fn configs(&self) -> Vec<Options> {
        let mut all = Vec::new();
        for &experts in &self.experts {
            for &tokens in &self.tokens {
                for &mode in &self.modes {
                    for &dtype in &self.dtypes {
                        let mut o = self.opts.clone();
                        (o.experts, o.tokens, o.mode, o.dtype) = (experts, tokens, mode, dtype);
                        all.push(o);
                    }
                }
            }
        }
        all
    }
}

impl Cli {
    /// The plan; `simulated` picks the simulator's defaults for what was not given.
    fn plan(&self, simulated: bool) -> Plan {
        let pick = |given: Option<u32>, gpu: u32, sim: u32| {
            given.unwrap_or(if simulated { sim } else { gpu })
        };
        let list = |given: &Vec<u32>, gpu: u32, sim: u32| {
            if given.is_empty() {
                vec![if simulated { sim } else { gpu }]
            } else {
                given.clone()
            }
        };
        let dtypes = match self.dtype.as_str() {
            "bf16" => vec![Dtype::Bf16],
            "fp8" => vec![Dtype::Fp8],
            _ => vec![Dtype::Bf16, Dtype::Fp8],
        };
        let mut o = Options::new(512, ptx_dir());
        let sim_hidden = if self.dtype == "bf16" { 64 } else { 128 };
        o.hidden = pick(self.hidden, 7168, sim_hidden);
        o.top_k = pick(self.top_k, 8, 3);
        o.rounds = pick(self.rounds, 20, 2);
        o.warmup = pick(self.warmup, 3, 0);
        o.threads = pick(self.threads, 256, 64);
        o.blocks = self.blocks;
        o.capacity = self.capacity;
        o.seed = self.seed;
        o.verify = !self.no_verify;
        o.hold_stream = self.hold_stream;
        o.dependent_launch = !self.no_dependent_launch;
        o.probe_peers = self.probe_peers;
        o.graph_replays = self.graph.unwrap_or(0);
        o.dist = Distribution::parse(&self.routing).expect("clap checked the value");
        if let Some(cubin) = &self.cuda {
            o.implementation = Implementation::Cuda {
                cubin: cubin.clone(),
            };
        }
        Plan {
            opts: o,
            tokens: list(&self.tokens, 512, 48),
            experts: list(&self.experts, 64, 8),
            modes: match self.mode.as_str() {
                "low-latency" => vec![Mode::LowLatency],
                "throughput" => vec![Mode::Throughput],
                _ => vec![Mode::LowLatency, Mode::Throughput],
            },
            dtypes,
        }
    }
}

/// Which kernel set ran: `mapped` where every PE's memory is mapped here, else `probed`
/// (`--probe-peers`, or some PE not mapped).
fn kernel_set(mapped: bool) -> &'static str {
    if mapped { "mapped" } else { "probed" }
}

fn gbps(bytes: u64, us: f64) -> f64 {
    bytes as f64 / (us * 1e-6) / 1e9
}

/// One configuration's summary line (PE 0) and, on every PE, its check and drops.
fn report(rt: &Shmem, o: &Options, out: &Outcome) -> bool {
    let (d, c) = out.median_us();
    let me = rt.my_pe();
    if me == 0 {
        println!(
            "{:<11} {:<4} T {:>5} H {} E {:>3} top-{} {:<7}  dispatch {:>9.2} us ({:>6.1} GB/s)  combine {:>9.2} us ({:>6.1} GB/s)  grids {:?}  kernels {}",
            o.mode.name(),
            o.dtype.name(),
            o.tokens,
            o.hidden,
            o.experts,
            o.top_k,
            o.dist.name(),
            d,
            gbps(out.cross_bytes.0, d),
            c,
            gbps(out.cross_bytes.1, c),
            out.launch,
            kernel_set(out.mapped)
        );
    }
    if out.dropped_per_round > 0 {
        println!(
            "  PE {me}: capacity {:?} dropped {} (token, expert) pairs per round; they are missing from the combine",
            o.capacity, out.dropped_per_round
        );
    }
    let graph_ok = match &out.graph {
        Some(g) => {
            if me == 0 {
                println!(
                    "  graph: {} steps per round; per round, {} rounds each: eager back to back {:.2} us (host enqueue {:.2} us), graph replay {:.2} us (host {:.2} us)",
                    g.graph_len,
                    g.replays,
                    g.eager.gpu_us,
                    g.eager.host_us,
                    g.graph.gpu_us,
                    g.graph.host_us
                );
            }
            if !g.ok() {
                println!(
                    "  PE {me}: GRAPH CHECK FAILED: identical to eager {}, check {:?}",
                    g.identical,
                    g.check.as_ref().map(|c| c.ok())
                );
            }
            g.ok()
        }
        None => true,
    };
    graph_ok
        && match &out.check {
            Some(ch) if ch.ok() => {
                println!(
                    "  PE {me}: check ok: {} rows and {} pairs arrived exactly once, bit for bit; combine: {} of {} values differ from the CPU (largest {:.1e})",
                    ch.dispatch.rows,
                    ch.dispatch.pairs,
                    ch.combine_diffs,
                    o.tokens as usize * o.hidden as usize,
                    ch.combine_worst
                );
                true
            }
            Some(ch) => {
                println!(
                    "  PE {me}: CHECK FAILED: combine differs in {} values (largest {:.3e})",
                    ch.combine_diffs, ch.combine_worst
                );
                for p in &ch.dispatch.problems {
                    println!("    {p}");
                }
                false
            }
            None => true,
        }
}

/// `--compare`: Rust and CUDA C++ kernels interleaved, every configuration; PE 0 reports.
fn compare(
    rt: &Shmem,
    cli: &Plan,
    cubin: &std::path::Path,
    reps: usize,
    cuda_first: bool,
) -> shmem_host::Result<()> {
    use moe_dispatch::host::{Kernels, Moe, Steps, eager_then_replays, load};
    use shmem_host::measure::{
        copy_engine_peer_bandwidth, device_copy_seconds, median, percent_of_device_copy,
    };
    let ce = copy_engine_peer_bandwidth(rt, 5)?;
    let twin = Implementation::Cuda {
        cubin: cubin.to_path_buf(),
    };
    // Loaded, and run in each pair, in this order; index 0 is Rust's, 1 the CUDA C++ one's.
    let (rust, cuda) = if cuda_first {
        let cuda = load(rt, &twin)?;
        (load(rt, &cli.opts.implementation)?, cuda)
    } else {
        let rust = load(rt, &cli.opts.implementation)?;
        (rust, load(rt, &twin)?)
    };
    let (kr, kc) = if cuda_first {
        let kc = Kernels::new(&cuda)?;
        (Kernels::new(&rust)?, kc)
    } else {
        let kr = Kernels::new(&rust)?;
        (kr, Kernels::new(&cuda)?)
    };
    let pair = if cuda_first {
        [(1, &kc), (0, &kr)]
    } else {
        [(0, &kr), (1, &kc)]
    };
    let me = rt.my_pe();
    if let Some(ce) = ce {
        println!("copy-engine peer bandwidth (PE 0 -> PE 1, 256 MiB): {ce:.1} GB/s");
        println!("RESULT {{\"ce_gbps\": {ce:.2}, \"n_pes\": {}}}", rt.n_pes());
    }
    for o in cli.configs() {
        let (experts, tokens, mode) = (o.experts, o.tokens, o.mode);
        let mut moe = Moe::new(rt, &o)?;
        // Per implementation: the rounds' times; one call = `rounds` rounds.
        let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
        for rep in 0..=reps {
            for (i, k) in pair {
                for _ in 0..if rep == 0 { o.warmup } else { o.rounds } {
                    let t = moe.round(k)?;
                    if rep > 0 {
                        times[i][0].push(t.dispatch_ms * 1e3);
                        times[i][1].push(t.combine_ms * 1e3);
                    }
                }
            }
        }
        // With --graph: per implementation, rounds launched back to back and
        // replays of a captured round, interleaved the same way.
        let mut steps = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
        let mut graph_ok = true;
        if o.graph_replays > 0 {
            let stream = rt.new_stream()?;
            let graphs = [
                moe.graph(&kr, stream.as_ref())?,
                moe.graph(&kc, stream.as_ref())?,
            ];
            for rep in 0..=reps {
                for (i, k) in pair {
                    let (e, g, same) = eager_then_replays(&moe, k, &graphs[i], o.graph_replays)?;
                    graph_ok &= same;
                    if rep > 0 {
                        steps[i][0].push(e);
                        steps[i][1].push(g);
                    }
                }
            }
        }
        let check = moe.check()?;
        let (bd, bc) = moe.cross_bytes();
        let (ad, ac) = moe.received_bytes();
        let (md, mc) = moe.memory_bytes();
        let dropped = moe.dropped_per_round()?;
        if !check.ok() || dropped > 0 || !graph_ok {
            println!(
                "  PE {me}: check ok {} graph replays identical {graph_ok} dropped {dropped}: {:?}",
                check.ok(),
                check.dispatch.problems
            );
        }
        if me == 0 {
            let m = |v: &Vec<f64>| median(v);
            let (rd, rc, cd, cc) = (
                m(&times[0][0]),
                m(&times[0][1]),
                m(&times[1][0]),
                m(&times[1][1]),
            );
            println!(
                "{:<11} {:<4} T {tokens:>5} H {} E {experts:>3} top-{}  dispatch rust {rd:>9.2} us cuda {cd:>9.2} us ratio {:.3} ({:.1} GB/s cross-GPU, {:.1} GB/s all received)  combine rust {rc:>9.2} us cuda {cc:>9.2} us ratio {:.3} ({:.1} GB/s cross-GPU, {:.1} GB/s all received)",
                mode.name(),
                o.dtype.name(),
                o.hidden,
                o.top_k,
                rd / cd,
                gbps(bd, rd),
                gbps(ad, rd),
                rc / cc,
                gbps(bc, rc),
                gbps(ac, rc)
            );
            println!(
                "RESULT {{\"mode\": \"{}\", \"dtype\": \"{}\", \"tokens\": {tokens}, \"experts\": {experts}, \"hidden\": {}, \"top_k\": {}, \"n_pes\": {}, \"dispatch_bytes\": {bd}, \"combine_bytes\": {bc}, \"dispatch_received_bytes\": {ad}, \"combine_received_bytes\": {ac}, \"rust_dispatch_us\": {rd:.3}, \"cuda_dispatch_us\": {cd:.3}, \"rust_combine_us\": {rc:.3}, \"cuda_combine_us\": {cc:.3}, \"rounds\": {}, \"check_ok\": {}, \"grids\": \"{:?}\", \"kernels\": \"{}\", \"order\": \"{}\"}}",
                mode.name(),
                o.dtype.name(),
                o.hidden,
                o.top_k,
                rt.n_pes(),
                times[0][0].len(),
                check.ok(),
                moe.launch,
                kernel_set(moe.mapped()),
                if cuda_first {
                    "cuda-first"
                } else {
                    "rust-first"
                }
            );
            if let (1, Some(ce)) = (rt.n_pes(), ce) {
                // One PE: each phase's memory floor against the device copy (which reads and
                // writes each byte: twice the copy's rate).
                let pct = |bytes: u64, us: f64| percent_of_device_copy(bytes, us * 1e-6, ce);
                // And against a copy of the same bytes, its launch included, timed as the
                // rounds are (held or not): what the phase costs beyond moving its bytes.
                let copy_us = |bytes: u64| -> shmem_host::Result<f64> {
                    let s = device_copy_seconds(rt, (bytes / 2) as usize, 9, o.hold_stream)?;
                    Ok(s * 1e6)
                };
                let (kd, kc) = (copy_us(md)?, copy_us(mc)?);
                println!(
                    "{:<11} {:<4} T {tokens:>5}  memory floor: dispatch {:.1} MB, rust {:.0} % / cuda {:.0} % of the device copy; combine {:.1} MB, rust {:.0} % / cuda {:.0} %",
                    mode.name(),
                    o.dtype.name(),
                    md as f64 / 1e6,
                    pct(md, rd),
                    pct(md, cd),
                    mc as f64 / 1e6,
                    pct(mc, rc),
                    pct(mc, cc)
                );
                println!(
                    "{:<11} {:<4} T {tokens:>5}  the same bytes copied: dispatch {kd:.2} us (rust {:.3}x / cuda {:.3}x its time), combine {kc:.2} us (rust {:.3}x / cuda {:.3}x)",
                    mode.name(),
                    o.dtype.name(),
                    rd / kd,
                    cd / kd,
                    rc / kc,
                    cc / kc
                );
                println!(
                    "RESULT {{\"mode\": \"{}\", \"dtype\": \"{}\", \"tokens\": {tokens}, \"experts\": {experts}, \"n_pes\": 1, \"dispatch_memory_bytes\": {md}, \"combine_memory_bytes\": {mc}, \"device_copy_gbps\": {:.2}, \"rust_dispatch_copy_pct\": {:.1}, \"cuda_dispatch_copy_pct\": {:.1}, \"rust_combine_copy_pct\": {:.1}, \"cuda_combine_copy_pct\": {:.1}, \"dispatch_bytes_copy_us\": {kd:.3}, \"combine_bytes_copy_us\": {kc:.3}}}",
                    mode.name(),
                    o.dtype.name(),
                    2.0 * ce,
                    pct(md, rd),
                    pct(md, cd),
                    pct(mc, rc),
                    pct(mc, cc)
                );
            }
            if o.graph_replays > 0 {
                // Medians of GPU and host time per step: [impl][eager, graph].
                let med = |i: usize, j: usize| {
                    let g: Vec<f64> = steps[i][j].iter().map(|s: &Steps| s.gpu_us).collect();
                    let h: Vec<f64> = steps[i][j].iter().map(|s: &Steps| s.host_us).collect();
                    (median(&g), median(&h))
                };
                let ((re, reh), (rg, rgh)) = (med(0, 0), med(0, 1));
                let ((ce, ceh), (cg, cgh)) = (med(1, 0), med(1, 1));
                println!(
                    "{:<11} {:<4} T {tokens:>5} E {experts:>3}  step eager/graph: rust {re:>8.2} / {rg:>8.2} us  cuda {ce:>8.2} / {cg:>8.2} us  ratio rust/cuda eager {:.3} graph {:.3}  host enqueue eager/graph: rust {reh:.2} / {rgh:.2} us  cuda {ceh:.2} / {cgh:.2} us",
                    mode.name(),
                    o.dtype.name(),
                    re / ce,
                    rg / cg
                );
                println!(
                    "RESULT {{\"mode\": \"{}\", \"dtype\": \"{}\", \"tokens\": {tokens}, \"experts\": {experts}, \"n_pes\": {}, \"steps\": {}, \"rust_eager_step_us\": {re:.3}, \"rust_graph_step_us\": {rg:.3}, \"cuda_eager_step_us\": {ce:.3}, \"cuda_graph_step_us\": {cg:.3}, \"rust_eager_host_us\": {reh:.3}, \"rust_graph_host_us\": {rgh:.3}, \"cuda_eager_host_us\": {ceh:.3}, \"cuda_graph_host_us\": {cgh:.3}, \"graph_identical\": {graph_ok}}}",
                    mode.name(),
                    o.dtype.name(),
                    rt.n_pes(),
                    o.graph_replays
                );
            }
        }
    }
    Ok(())
}

/// How the throughput dispatch follows its layout here: a line for the report's head.
fn dependent_launch(rt: &Shmem, o: &Options) -> &'static str {
    if !o.dependent_launch {
        "after its layout (--no-dependent-launch)"
    } else if rt.dependent_launches_overlap() {
        "as its layout's dependent, starting while the layout runs"
    } else {
        "after its layout (dependent launches do not overlap here: simulator, before sm_90, or a shared GPU)"
    }
}

fn pe_main(args: &Cli) -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
    let cli = &args.plan(rt.is_simulated());
    if rt.my_pe() == 0 {
        println!("throughput dispatch: {}", dependent_launch(&rt, &cli.opts));
    }
    if let Some(cubin) = &args.compare {
        return compare(&rt, cli, cubin, args.reps as usize, args.cuda_first);
    }
    if rt.my_pe() == 0 {
        println!(
            "moe_dispatch: {} PEs{}, NVSHMEM {:?}, {} kernels, {} timed rounds each",
            rt.n_pes(),
            if rt.is_simulated() {
                " on the CPU simulator (times are the simulator's)"
            } else {
                ""
            },
            rt.version(),
            cli.opts.implementation.label(),
            cli.opts.rounds
        );
    }
    let mut ok = true;
    for o in cli.configs() {
        let out = run(&rt, &o)?;
        ok &= report(&rt, &o, &out);
        rt.barrier_all()?;
    }
    let (worst, _) = rt.min_max(i64::from(ok))?;
    if rt.my_pe() == 0 {
        println!(
            "{}",
            if worst == 1 {
                "summary: every check passed (exactly-once delivery, combine within bf16 rounding)"
            } else {
                "summary: CHECK FAILED on at least one PE (see above)"
            }
        );
    }
    if worst == 1 {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "PE {}: a check failed (see above)",
            rt.my_pe()
        )))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.simulate {
        // SAFETY: set before any thread starts; `launcher::run` reads it below.
        unsafe { std::env::set_var("SHMEM_SIM", "1") };
    }
    match shmem_host::launcher::run(cli.pes, || pe_main(&cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moe_dispatch: {e}");
            ExitCode::FAILURE
        }
    }
}
