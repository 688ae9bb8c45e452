//! 2D Jacobi with GPU-initiated halo exchange, on every local GPU.
//!
//! ```text
//! cargo xtask build-ptx
//! cargo run --release --example halo_exchange -- --size 4096 --iters 2000
//! ```
//!
//! Started directly it launches one PE per visible GPU (or `--pes N`); under `shmem-run` or
//! `mpirun` it is one PE. Without a GPU it runs 2 PEs on the CPU simulator, at a size the
//! simulator handles in seconds (see `--help`). See `--help` for the options.

use halo_exchange::host::{Dtype, Implementation, Options, Outcome, Variant, run};
use shmem_host::{Error, Shmem};
use std::path::PathBuf;
use std::process::ExitCode;

const HELP: &str = "\
halo_exchange: 2D Jacobi (Laplace) with halos moved by GPU-initiated puts and signals

usage: halo_exchange [options]
  --size N           grid of N x N points (default 4096)
  --nx N, --ny N     grid width and height, border included (override --size)
  --iters N          timed iterations (default 1000)
  --warmup N         untimed iterations before (default 10)
  --type f32|f64     element type (default f32)
  --variant V        persistent (one launch) or per-iteration (default persistent)
  --check-every K    residual norm every K iterations, 0 for never (default 100)
  --threads T        threads per block (default 512)
  --blocks B         blocks (default: as many as fit at once, at most rows + 2)
  --verify           compare the result with the CPU reference (small grids)
  --cuda CUBIN       run the CUDA C++ kernels of cuda/halo.cu instead (built by cuda/build.sh)
  --pes N            PEs to launch when started directly (default: one per GPU)
  --quiet            no progress lines
  --seed S           seed of the initial interior
  --simulate         run on the CPU simulator even with GPUs (as does SHMEM_SIM=1)
  --compare CUBIN    benchmark: both variants of the Rust kernels and of the CUDA C++ kernels
                     in CUBIN, interleaved (R C R C ...), --reps times each after a warm-up
                     round; prints medians and Rust/C++ ratios, and RESULT lines (JSON)
  --reps N           repetitions for --compare (default 5)
environment: SHMEM_PTX_DIR (default target/ptx), SHMEM_SIM, SHMEM_SIM_SEED

Without a GPU it runs on the CPU simulator (2 PEs unless --pes): every option not given
defaults to a small solve there (--size 34 --iters 30 --warmup 0 --check-every 10
--threads 32 --verify), since simulated GPU threads are slow.";

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

/// What the command line asks for besides the solve's options.
struct Mode {
    pes: Option<usize>,
    compare: Option<(PathBuf, usize)>,
    /// The options given (the simulator's defaults replace the others).
    given: Vec<String>,
}

/// The solve's defaults on the CPU simulator, for every option not given.
fn simulator_defaults(o: &mut Options, given: &[String]) {
    let not = |f: &str| !given.iter().any(|g| g == f);
    if not("--size") && not("--nx") && not("--ny") {
        (o.nx, o.ny) = (34, 34);
    }
    if not("--iters") {
        o.iters = 30;
    }
    if not("--warmup") {
        o.warmup = 0;
    }
    if not("--check-every") {
        o.check_every = 10;
    }
    if not("--threads") {
        o.threads = 32;
    }
    o.verify = true;
}

/// Parsed command line: the solve's options and the mode.
fn parse(args: &[String]) -> Result<(Options, Mode), String> {
    let mut o = Options::new(4096, 4096, ptx_dir());
    o.progress = true;
    let (mut nx, mut ny, mut pes) = (None, None, None);
    let (mut compare, mut reps) = (None, 5);
    let mut given = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        given.push(flag.clone());
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let num = |v: String| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{flag}: `{v}` is not a non-negative integer"))
        };
        match flag.as_str() {
            "--size" => {
                let v = num(value()?)? as u32;
                (o.nx, o.ny) = (v, v);
            }
            "--nx" => nx = Some(num(value()?)? as u32),
            "--ny" => ny = Some(num(value()?)? as u32),
            "--iters" => o.iters = num(value()?)? as u32,
            "--warmup" => o.warmup = num(value()?)? as u32,
            "--check-every" => o.check_every = num(value()?)? as u32,
            "--threads" => o.threads = num(value()?)? as u32,
            "--blocks" => o.blocks = Some(num(value()?)? as u32),
            "--seed" => o.seed = num(value()?)?,
            "--pes" => pes = Some(num(value()?)? as usize),
            "--type" => {
                o.dtype = match value()?.as_str() {
                    "f32" => Dtype::F32,
                    "f64" => Dtype::F64,
                    v => return Err(format!("--type: `{v}` is not f32 or f64")),
                }
            }
            "--variant" => {
                o.variant = match value()?.as_str() {
                    "persistent" => Variant::Persistent,
                    "per-iteration" => Variant::PerIteration,
                    v => {
                        return Err(format!(
                            "--variant: `{v}` is not persistent or per-iteration"
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
            "--reps" => reps = num(value()?)?.max(1) as usize,
            "--verify" => o.verify = true,
            "--simulate" => {}
            "--quiet" => o.progress = false,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option `{other}` (see --help)")),
        }
    }
    if let Some(v) = nx {
        o.nx = v;
    }
    if let Some(v) = ny {
        o.ny = v;
    }
    let compare = compare.map(|c| (c, reps));
    Ok((
        o,
        Mode {
            pes,
            compare,
            given,
        },
    ))
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
    let variants = [Variant::Persistent, Variant::PerIteration];
    let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let mut halo_bytes = 0;
    for rep in 0..=reps {
        for (vi, v) in variants.iter().enumerate() {
            for (ii, imp) in [&rust, &cuda].into_iter().enumerate() {
                let mut x = o.clone();
                (x.variant, x.implementation, x.verify, x.progress) =
                    (*v, imp.clone(), false, false);
                let out = run(rt, &x)?;
                halo_bytes = out.halo_bytes_per_iter;
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
    for (vi, v) in variants.iter().enumerate() {
        let (r, c) = (median(&times[vi][0]), median(&times[vi][1]));
        println!(
            "{}x{} {:?} {v:?} on {} PE(s): rust {:.2} us/iter, cuda {:.2} us/iter, rust/cuda time {:.3}, halo {:.2} GB/s",
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
            "RESULT {{\"nx\":{},\"ny\":{},\"dtype\":\"{:?}\",\"variant\":\"{v:?}\",\"pes\":{},\"iters\":{},\"rust_us\":{:?},\"cuda_us\":{:?},\"halo_bytes_per_iter\":{}}}",
            o.nx,
            o.ny,
            o.dtype,
            rt.n_pes(),
            o.iters,
            times[vi][0].iter().map(|t| t * 1e6).collect::<Vec<_>>(),
            times[vi][1].iter().map(|t| t * 1e6).collect::<Vec<_>>(),
            halo_bytes
        );
    }
    Ok(())
}

fn summary(o: &Options, out: &Outcome, n: i32) -> String {
    let us = out.seconds_per_iter * 1e6;
    let mut s = format!(
        "halo_exchange {}x{} {:?} {:?} {} on {n} PE(s), {} iterations, {} blocks x {} threads\n  \
         time per iteration {us:.2} us, halo traffic {:.2} GB/s ({} B per iteration)",
        o.nx,
        o.ny,
        o.dtype,
        o.variant,
        match &o.implementation {
            Implementation::Rust { .. } => "rust".to_string(),
            Implementation::Cuda { cubin } => format!("cuda ({})", cubin.display()),
        },
        o.iters,
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

fn pe(o: &Options, mode: &Mode) -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
    let mut o = o.clone();
    if rt.is_simulated() {
        simulator_defaults(&mut o, &mode.given);
    }
    let o = &o;
    if let Some((cubin, reps)) = &mode.compare {
        return compare(&rt, o, cubin, *reps);
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (opts, mode) = match parse(&args) {
        Ok(v) => v,
        Err(e) if e.is_empty() => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("halo_exchange: {e}");
            return ExitCode::from(2);
        }
    };
    if mode.given.iter().any(|g| g == "--simulate") {
        // SAFETY: set before any thread starts; `launcher::run` reads it below.
        unsafe { std::env::set_var("SHMEM_SIM", "1") };
    }
    match shmem_host::launcher::run(mode.pes, || pe(&opts, &mode)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halo_exchange: {e}");
            ExitCode::FAILURE
        }
    }
}
