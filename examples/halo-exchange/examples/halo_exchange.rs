//! 2D Jacobi with GPU-initiated halo exchange, on every local GPU.
//!
//! ```text
//! cargo xtask build-ptx
//! cargo run --release --example halo_exchange -- --size 4096 --iters 2000
//! ```
//!
//! Started directly it launches one PE per visible GPU (or `--pes N`); under `shmem-run` or
//! `mpirun` it is one PE. See `--help` for the options.

use halo_exchange::host::{Dtype, Implementation, Options, Outcome, Variant, run};
use shmem_host::launcher::{Role, run_as_pes};
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
environment: SHMEM_PTX_DIR (default target/ptx)";

fn ptx_dir() -> PathBuf {
    std::env::var_os("SHMEM_PTX_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"))
}

/// Parsed command line: the solve's options and the PE count to launch.
fn parse(args: &[String]) -> Result<(Options, Option<usize>), String> {
    let mut o = Options::new(4096, 4096, ptx_dir());
    o.progress = true;
    let (mut nx, mut ny, mut pes) = (None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
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
            "--verify" => o.verify = true,
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
    Ok((o, pes))
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

fn pe(o: &Options) -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
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
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (opts, pes) = match parse(&args) {
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
    let outcome = run_as_pes(pes).and_then(|role| match role {
        Role::Pe => pe(&opts),
        Role::LaunchedAll => Ok(()),
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halo_exchange: {e}");
            ExitCode::FAILURE
        }
    }
}
