//! `shmem-bench`: NVSHMEM's standard measurements, Rust kernels next to CUDA C++ ones.
//!
//! ```text
//! shmem-bench --cuda perftest.cubin [--out DIR] [--reps 5] [--quick] [--only put_bw,...]
//!             [--scope block,...] [--ctas 16,...] [--bytes 131072,...] [--control [cuda|rust]]
//! ```
//!
//! Started directly it launches one PE per visible GPU (at least 2 are needed); under
//! `shmem-run` or `mpirun` it is one PE. PE 0 prints the table and writes `DIR/bench.json`
//! and `DIR/table.txt`; `plot.py DIR/bench.json` draws the curves. Kernels: the Rust ones
//! from `SHMEM_PTX_DIR` (default `target/ptx`), the CUDA C++ ones from `--cuda` (the cubin
//! `scripts/nvcc-cubin.sh` builds from `bench/cuda/perftest.cu`).

use clap::{Parser, ValueEnum};
use serde_json::json;
use shmem_bench::host::{self, Measured};
use shmem_host::launcher::{Role, run_as_pes};
use shmem_host::{Error, Shmem};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// NVSHMEM perftest measurements, Rust kernels against CUDA C++ kernels, interleaved.
///
/// Started directly it launches one PE per visible GPU (at least 2 PEs are needed); under
/// shmem-run or mpirun it is one PE.
#[derive(Parser, Debug)]
#[command(name = "shmem-bench", after_help = tests_help())]
struct Args {
    /// The CUDA C++ kernels (scripts/nvcc-cubin.sh ARCH CUBIN bench/cuda/perftest.cu)
    #[arg(long, value_name = "CUBIN")]
    cuda: PathBuf,
    /// Write DIR/bench.json and DIR/table.txt
    #[arg(long, value_name = "DIR", default_value = "bench-out")]
    out: PathBuf,
    /// Timed launches per implementation and point
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// Three sizes per curve (a smoke test)
    #[arg(long)]
    quick: bool,
    /// Only these tests (names below)
    #[arg(long, value_name = "TEST,..", value_delimiter = ',', value_parser = [
        "put_bw", "get_bw", "p_bw", "put_lat", "get_lat", "p_lat", "g_lat",
        "signal_pingpong", "put_signal_pingpong", "alltoall_lat",
    ])]
    only: Option<Vec<String>>,
    /// Only points of these scopes (thread, warp, block; the tests that have one)
    #[arg(long, value_name = "SCOPE,..", value_delimiter = ',', value_parser = ["thread", "warp", "block"])]
    scope: Option<Vec<String>>,
    /// Only points launched with these numbers of blocks
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    ctas: Option<Vec<u32>>,
    /// Only points of these sizes in bytes (a bandwidth point's size is the grid's)
    #[arg(long, value_name = "BYTES,..", value_delimiter = ',')]
    bytes: Option<Vec<usize>>,
    /// A control, so that the ratios show the measurement's own spread: one build in both
    /// slots, loaded twice and interleaved as usual; `cuda` (the default) the CUDA C++
    /// kernels, `rust` the Rust ones
    #[arg(long, value_name = "BUILD", num_args = 0..=1, default_missing_value = "cuda")]
    control: Option<Control>,
}

/// Which build a control runs in both slots.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Control {
    /// The CUDA C++ kernels (`--cuda`) in the Rust slot too.
    Cuda,
    /// The Rust kernels in the CUDA C++ slot too.
    Rust,
}

/// The tests and the NVSHMEM perftests they mirror, for `--help`.
fn tests_help() -> String {
    let mut s = String::from(
        "Tests (each computes its figure as the NVSHMEM perftest named, perftest/device/: the \
         same kernel loop, per launch bytes*iters/time in GB/s or time/iters in us, round \
         trips for the ping-pongs; the mean over the timed launches):\n",
    );
    for t in host::Test::ALL {
        s += &format!("  {:<20} {}\n", t.name(), t.perftest());
    }
    s + "\nOne-sided tests run on PE 0; the other PEs wait for its launch on the host (copy-engine \
         reads of a word PE 0 writes), not in NVSHMEM's barrier as the perftests' do, so that \
         with several PEs on one GPU no kernel of theirs runs beside the launch timed.\n\
         \nEnvironment: SHMEM_PTX_DIR (default target/ptx)"
}

/// The plan's points that `--only`, `--scope`, `--ctas` and `--bytes` let through.
fn selected(a: &Args) -> Vec<host::Point> {
    host::plan(a.quick)
        .into_iter()
        .filter(|p| {
            admits(&a.only, |t| t == p.test.name())
                && admits(&a.scope, |s| s == host::scope_name(p.scope))
                && admits(&a.ctas, |&c| c == p.ctas)
                && admits(&a.bytes, |&b| b == p.bytes)
        })
        .collect()
}

/// Whether a filter (`None`: none given) lets a point through.
fn admits<T>(filter: &Option<Vec<T>>, matches: impl Fn(&T) -> bool) -> bool {
    filter.as_ref().is_none_or(|f| f.iter().any(matches))
}

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ptx"))
}

fn pe(a: &Args) -> shmem_host::Result<()> {
    let rt = Shmem::init()?;
    if rt.n_pes() < 2 {
        return Err(Error::Invalid("shmem-bench needs at least 2 PEs".into()));
    }
    let me = rt.my_pe();
    let load_cuda = || {
        // SAFETY: `cuda/perftest.cu` declares every kernel with the name and parameters of
        // the Rust kernel (`Slice<T>` is `SymSlice<T>`'s layout; pointers for `Sym<T>`).
        unsafe { rt.load_cuda_module(&a.cuda) }
    };
    let load_rust = || rt.load_module(&ptx_dir(), "shmem-bench");
    let (rust, cuda) = match a.control {
        None => (load_rust()?, load_cuda()?),
        Some(Control::Cuda) => (load_cuda()?, load_cuda()?),
        Some(Control::Rust) => (load_rust()?, load_rust()?),
    };
    let points = selected(a);
    let ceiling =
        shmem_host::measure::copy_engine_peer_bandwidth(&rt, a.reps as usize)?.unwrap_or(0.0);
    if me == 0 {
        println!("copy-engine ceiling (256 MiB, PE 0 -> PE 1): {ceiling:.1} GB/s");
        println!(
            "{} points x {} reps, {} interleaved",
            points.len(),
            a.reps,
            match a.control {
                None => "Rust and CUDA C++",
                Some(Control::Cuda) => "control: CUDA C++ in both slots",
                Some(Control::Rust) => "control: Rust in both slots",
            }
        );
    }
    let started = std::time::Instant::now();
    let ms: Vec<Measured> = host::run(&rt, &rust, &cuda, &points, a.reps as usize, |i, m| {
        if me == 0 {
            println!("{:>4} {}", i + 1, host::line(m, ceiling));
        }
    })?;
    if me != 0 {
        return Ok(());
    }
    let verdict = host::verdict(&ms, ceiling);
    println!("== summary ({:.0} s)", started.elapsed().as_secs_f64());
    for l in &verdict {
        println!("{l}");
    }
    let ctx = rt.context()?;
    let (major, minor, patch) = rt.version();
    let control_build = a.control.and_then(|c| c.to_possible_value());
    let control_build = control_build.as_ref().map(|v| v.get_name());
    let meta = json!({
        "device": ctx.name().unwrap_or_default(),
        "pes": rt.n_pes(),
        "nvshmem": format!("{major}.{minor}.{patch}"),
        "reps": a.reps,
        "rust_ptx": rust.origin().display().to_string(),
        "control": a.control.is_some(),
        "control_build": control_build,
        "cuda_cubin": a.cuda.display().to_string(),
        "verdict": verdict,
    });
    std::fs::create_dir_all(&a.out)
        .map_err(|e| Error::Invalid(format!("creating {}: {e}", a.out.display())))?;
    let json = host::to_json(&ms, ceiling, meta);
    let write = |name: &str, text: String| {
        std::fs::File::create(a.out.join(name))
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| Error::Invalid(format!("writing {}: {e}", a.out.join(name).display())))
    };
    write(
        "bench.json",
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    )?;
    let mut table = format!("copy-engine ceiling: {ceiling:.1} GB/s\n");
    match a.control {
        None => {}
        Some(Control::Cuda) => {
            table += "control: the CUDA C++ kernels in both slots (\"rust\" is CUDA C++ too)\n"
        }
        Some(Control::Rust) => {
            table += "control: the Rust kernels in both slots (\"cuda\" is Rust too)\n"
        }
    }
    for m in &ms {
        table += &host::line(m, ceiling);
        table.push('\n');
    }
    for l in &verdict {
        table += l;
        table.push('\n');
    }
    write("table.txt", table)?;
    println!("wrote {}/bench.json and table.txt", a.out.display());
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    if selected(&a).is_empty() {
        // Before any PE starts: one message, not one a PE after NVSHMEM's start-up.
        let mut ctas: Vec<u32> = host::plan(a.quick).iter().map(|p| p.ctas).collect();
        ctas.sort_unstable();
        ctas.dedup();
        eprintln!(
            "shmem-bench: no point of the plan has all of the --only, --scope, --ctas and \
             --bytes given (the plan's block counts: {ctas:?}; its sizes are powers of two, a \
             bandwidth point's the grid's)"
        );
        return ExitCode::from(2);
    }
    let outcome = run_as_pes(None).and_then(|role| match role {
        Role::Pe => pe(&a),
        Role::LaunchedAll => Ok(()),
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmem-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["shmem-bench", "--cuda", "x.cubin"].iter().chain(extra))
    }

    #[test]
    fn filters_select_points_and_control_parses() {
        let all = selected(&args(&[]));
        assert_eq!(all, host::plan(false));
        // One free-running and one barrier-paced point: 16 blocks putting 8 KiB each.
        let one = selected(&args(&[
            "--only", "put_bw", "--scope", "block", "--ctas", "16", "--bytes", "131072",
        ]));
        assert_eq!(one.len(), 2, "{one:?}");
        assert!(one.iter().all(|p| p.test == host::Test::PutBw
            && p.scope == shmem_bench::kernels::BLOCK
            && p.ctas == 16
            && p.bytes == 131072));
        assert_ne!(one[0].sync_each, one[1].sync_each);
        // Filters combine: every warp-scope point of two tests, nothing else.
        let warp = selected(&args(&["--only", "put_bw,get_lat", "--scope", "warp"]));
        assert!(!warp.is_empty());
        assert!(warp.iter().all(|p| p.scope == shmem_bench::kernels::WARP
            && matches!(p.test, host::Test::PutBw | host::Test::GetLat)));
        assert!(warp.iter().any(|p| p.test == host::Test::GetLat));
        assert!(selected(&args(&["--ctas", "3"])).is_empty());
        assert_eq!(args(&[]).control, None);
        assert_eq!(args(&["--control"]).control, Some(Control::Cuda));
        assert_eq!(args(&["--control", "rust"]).control, Some(Control::Rust));
        assert!(Args::try_parse_from(["shmem-bench", "--cuda", "x", "--control", "c"]).is_err());
    }
}
