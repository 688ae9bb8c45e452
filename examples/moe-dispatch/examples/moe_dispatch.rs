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

use moe_dispatch::host::{Implementation, Mode, Options, Outcome, run};
use moe_dispatch::routing::Distribution;
use shmem_host::{Error, Shmem};
use std::path::PathBuf;
use std::process::ExitCode;

const HELP: &str = "\
moe_dispatch: mixture-of-experts dispatch and combine by GPU-initiated puts and signals

usage: moe_dispatch [options]
  --tokens T[,T..]    tokens per PE (default 512)
  --hidden H          bf16 values per token, a multiple of 8 (default 7168)
  --experts E[,E..]   experts, spread evenly over the PEs (default 64)
  --top-k K           experts per token, at most 16 (default 8)
  --routing R         uniform, skewed (popular experts), sparse (a quarter of the experts
                      empty, every fifth token one choice fewer) (default uniform)
  --capacity C        pairs kept per (expert, source PE) in low-latency mode, per expert in
                      throughput mode; pairs beyond it are dropped and reported
                      (default: as many as can arrive)
  --mode M            low-latency, throughput or both (default both)
  --rounds N          timed rounds (default 20)
  --warmup N          untimed rounds first (default 3)
  --threads T         threads per block (default 256)
  --blocks B          blocks of dispatch and combine (default: one warp per unit of work,
                      at most what fits on the GPU)
  --no-verify         skip the comparison with the CPU reference
  --seed S            seed of tokens and routing
  --cuda CUBIN        run the CUDA C++ kernels of cuda/moe.cu instead (cuda/build.sh)
  --compare CUBIN     benchmark: the Rust kernels and the CUDA C++ kernels in CUBIN, both
                      modes, for every --tokens and --experts given, interleaved (R C R C),
                      --reps times each after a warm-up; prints medians, ratios, the
                      copy-engine peer bandwidth, and RESULT lines (JSON)
  --reps N            repetitions for --compare (default 5)
  --pes N             PEs to launch when started directly (default: one per GPU)
  --simulate          run on the CPU simulator even with GPUs (as does SHMEM_SIM=1)
environment: SHMEM_PTX_DIR (default target/ptx), SHMEM_SIM, SHMEM_SIM_SEED

Without a GPU it runs on the CPU simulator (2 PEs unless --pes): every option not given
defaults to a small problem there (--tokens 48 --hidden 64 --experts 8 --top-k 3
--rounds 2 --warmup 0 --threads 64), since simulated GPU threads are slow.";

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

/// The command line.
#[derive(Clone)]
struct Cli {
    opts: Options,
    tokens: Vec<u32>,
    experts: Vec<u32>,
    modes: Vec<Mode>,
    pes: Option<usize>,
    compare: Option<(PathBuf, usize)>,
    /// The options given (the simulator's defaults replace the others).
    given: Vec<String>,
}

impl Cli {
    /// The problem's defaults on the CPU simulator, for every option not given.
    fn simulator_defaults(&mut self) {
        let given = &self.given;
        let not = |f: &str| !given.iter().any(|g| g == f);
        let o = &mut self.opts;
        if not("--tokens") {
            self.tokens = vec![48];
        }
        if not("--experts") {
            self.experts = vec![8];
        }
        if not("--hidden") {
            o.hidden = 64;
        }
        if not("--top-k") {
            o.top_k = 3;
        }
        if not("--rounds") {
            o.rounds = 2;
        }
        if not("--warmup") {
            o.warmup = 0;
        }
        if not("--threads") {
            o.threads = 64;
        }
    }
}

fn parse(args: &[String]) -> Result<Cli, String> {
    let mut o = Options::new(512, ptx_dir());
    o.verify = true;
    let (mut tokens, mut experts) = (vec![512], vec![64]);
    let mut modes = vec![Mode::LowLatency, Mode::Throughput];
    let (mut pes, mut compare, mut reps) = (None, None, 5);
    let mut given = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        given.push(flag.clone());
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let num = |v: &str| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{flag}: `{v}` is not a non-negative integer"))
        };
        let list = |v: String| -> Result<Vec<u32>, String> {
            v.split(',').map(|x| num(x).map(|x| x as u32)).collect()
        };
        match flag.as_str() {
            "--tokens" => tokens = list(value()?)?,
            "--experts" => experts = list(value()?)?,
            "--hidden" => o.hidden = num(&value()?)? as u32,
            "--top-k" => o.top_k = num(&value()?)? as u32,
            "--capacity" => o.capacity = Some(num(&value()?)? as u32),
            "--rounds" => o.rounds = num(&value()?)? as u32,
            "--warmup" => o.warmup = num(&value()?)? as u32,
            "--threads" => o.threads = num(&value()?)? as u32,
            "--blocks" => o.blocks = Some(num(&value()?)? as u32),
            "--seed" => o.seed = num(&value()?)?,
            "--pes" => pes = Some(num(&value()?)? as usize),
            "--reps" => reps = num(&value()?)?.max(1) as usize,
            "--routing" => {
                let v = value()?;
                o.dist = Distribution::parse(&v)
                    .ok_or_else(|| format!("--routing: `{v}` is not uniform, skewed or sparse"))?;
            }
            "--mode" => {
                modes = match value()?.as_str() {
                    "low-latency" => vec![Mode::LowLatency],
                    "throughput" => vec![Mode::Throughput],
                    "both" => vec![Mode::LowLatency, Mode::Throughput],
                    v => {
                        return Err(format!(
                            "--mode: `{v}` is not low-latency, throughput or both"
                        ));
                    }
                }
            }
            "--cuda" => {
                o.implementation = Implementation::Cuda {
                    cubin: value()?.into(),
                }
            }
            "--compare" => compare = Some(PathBuf::from(value()?)),
            "--no-verify" => o.verify = false,
            "--simulate" => {}
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option `{other}` (see --help)")),
        }
    }
    if tokens.is_empty() || experts.is_empty() {
        return Err("--tokens and --experts need at least one value".into());
    }
    Ok(Cli {
        opts: o,
        tokens,
        experts,
        modes,
        pes,
        compare: compare.map(|c| (c, reps)),
        given,
    })
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
            "{:<11} T {:>5} H {} E {:>3} top-{} {:<7}  dispatch {:>9.2} us ({:>6.1} GB/s)  combine {:>9.2} us ({:>6.1} GB/s)  grids {:?}",
            o.mode.name(),
            o.tokens,
            o.hidden,
            o.experts,
            o.top_k,
            o.dist.name(),
            d,
            gbps(out.cross_bytes.0, d),
            c,
            gbps(out.cross_bytes.1, c),
            out.launch
        );
    }
    if out.dropped_per_round > 0 {
        println!(
            "  PE {me}: capacity {:?} dropped {} (token, expert) pairs per round; they are missing from the combine",
            o.capacity, out.dropped_per_round
        );
    }
    match &out.check {
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
fn compare(rt: &Shmem, cli: &Cli, cubin: &std::path::Path, reps: usize) -> shmem_host::Result<()> {
    use moe_dispatch::host::{Kernels, Moe, load};
    use shmem_host::measure::{copy_engine_peer_bandwidth, median};
    let ce = copy_engine_peer_bandwidth(rt, 5)?;
    let rust = load(rt, &cli.opts.implementation)?;
    let cuda = load(
        rt,
        &Implementation::Cuda {
            cubin: cubin.to_path_buf(),
        },
    )?;
    let (kr, kc) = (Kernels::new(&rust)?, Kernels::new(&cuda)?);
    let me = rt.my_pe();
    if let Some(ce) = ce {
        println!("copy-engine peer bandwidth (PE 0 -> PE 1, 256 MiB): {ce:.1} GB/s");
        println!("RESULT {{\"ce_gbps\": {ce:.2}, \"n_pes\": {}}}", rt.n_pes());
    }
    for &experts in &cli.experts {
        for &tokens in &cli.tokens {
            for &mode in &cli.modes {
                let mut o = cli.opts.clone();
                (o.experts, o.tokens, o.mode) = (experts, tokens, mode);
                let mut moe = Moe::new(rt, &o)?;
                // Per implementation: the rounds' times; one call = `rounds` rounds.
                let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
                for rep in 0..=reps {
                    for (i, k) in [&kr, &kc].into_iter().enumerate() {
                        for _ in 0..if rep == 0 { o.warmup } else { o.rounds } {
                            let t = moe.round(k)?;
                            if rep > 0 {
                                times[i][0].push(t.dispatch_ms * 1e3);
                                times[i][1].push(t.combine_ms * 1e3);
                            }
                        }
                    }
                }
                let check = moe.check()?;
                let (bd, bc) = moe.cross_bytes();
                let dropped = moe.dropped_per_round()?;
                if !check.ok() || dropped > 0 {
                    println!(
                        "  PE {me}: check ok {} dropped {dropped}: {:?}",
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
                        "{:<11} T {tokens:>5} E {experts:>3}  dispatch rust {rd:>9.2} us cuda {cd:>9.2} us ratio {:.3} ({:.1} GB/s)  combine rust {rc:>9.2} us cuda {cc:>9.2} us ratio {:.3} ({:.1} GB/s)",
                        mode.name(),
                        rd / cd,
                        gbps(bd, rd),
                        rc / cc,
                        gbps(bc, rc)
                    );
                    println!(
                        "RESULT {{\"mode\": \"{}\", \"tokens\": {tokens}, \"experts\": {experts}, \"hidden\": {}, \"top_k\": {}, \"n_pes\": {}, \"dispatch_bytes\": {bd}, \"combine_bytes\": {bc}, \"rust_dispatch_us\": {rd:.3}, \"cuda_dispatch_us\": {cd:.3}, \"rust_combine_us\": {rc:.3}, \"cuda_combine_us\": {cc:.3}, \"rounds\": {}, \"check_ok\": {}, \"grids\": \"{:?}\"}}",
                        mode.name(),
                        o.hidden,
                        o.top_k,
                        rt.n_pes(),
                        times[0][0].len(),
                        check.ok(),
                        moe.launch
                    );
                }
            }
        }
    }
    Ok(())
}

fn pe_main(cli: &Cli) -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
    let sim_cli;
    let cli = if rt.is_simulated() {
        let mut c = cli.clone();
        c.simulator_defaults();
        sim_cli = c;
        &sim_cli
    } else {
        cli
    };
    if let Some((cubin, reps)) = &cli.compare {
        return compare(&rt, cli, cubin, *reps);
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
            match &cli.opts.implementation {
                Implementation::Rust { .. } => "Rust",
                Implementation::Cuda { .. } => "CUDA C++",
            },
            cli.opts.rounds
        );
    }
    let mut ok = true;
    for &experts in &cli.experts {
        for &tokens in &cli.tokens {
            for &mode in &cli.modes {
                let mut o = cli.opts.clone();
                (o.experts, o.tokens, o.mode) = (experts, tokens, mode);
                let out = run(&rt, &o)?;
                ok &= report(&rt, &o, &out);
                rt.barrier_all()?;
            }
        }
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = match parse(&args) {
        Ok(c) => c,
        Err(e) if e.is_empty() => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("moe_dispatch: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.given.iter().any(|g| g == "--simulate") {
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
