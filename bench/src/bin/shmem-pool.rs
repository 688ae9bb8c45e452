//! `shmem-pool`: Rust/CUDA C++ ratios pooled over several runs.
//!
//! ```text
//! shmem-pool FILE... [--control FILE...] [--bw-line 0.98] [--lat-line 1.03]
//!            [--moe-line 1.00] [--min-bytes 65536] [--all]
//! ```
//!
//! Each FILE is a `shmem-bench` `bench.json` (one process: one run) or a log holding
//! `moe_dispatch --compare`'s `RESULT` lines (one call: one run). Per point it prints the
//! geometric mean of the runs' ratios, its 95 % interval and the figures' ranges, and counts
//! the points whose mean, and whose whole interval, lies past the target's line. A `bench.json`
//! written with `shmem-bench --control`, and every file after `--control` (up to the next
//! option: `--control ctl-*.log` takes them all), is pooled apart as the control: the
//! same counts with the CUDA C++ kernels (or any one build) in both slots, which is what the
//! measurement's own spread gives. The statistics are `shmem_bench::pool`'s.

use clap::Parser;
use shmem_bench::pool::{Lines, Sample, parse, pool, report};
use std::path::PathBuf;
use std::process::ExitCode;

/// Rust/CUDA C++ ratios pooled over runs: geometric means, 95 % intervals, a control's beside.
#[derive(Parser, Debug)]
#[command(name = "shmem-pool")]
struct Args {
    /// Runs: shmem-bench's bench.json files, moe_dispatch --compare logs
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Control runs (the same build in both slots): every file up to the next option, so that
    /// a shell pattern's files all go to the control, none to the runs
    #[arg(long, value_name = "FILE", num_args = 1..)]
    control: Vec<PathBuf>,
    /// Bandwidth ratios should be at least this
    #[arg(long, default_value_t = 0.98)]
    bw_line: f64,
    /// Bandwidth points from this many bytes
    #[arg(long, default_value_t = 64 << 10)]
    min_bytes: u64,
    /// shmem-bench latency ratios should be at most this
    #[arg(long, default_value_t = 1.03)]
    lat_line: f64,
    /// MoE time ratios should be at most this
    #[arg(long, default_value_t = 1.0)]
    moe_line: f64,
    /// Every point, not only those past their line
    #[arg(long)]
    all: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let (mut runs, mut controls): (Vec<Sample>, Vec<Sample>) = (Vec::new(), Vec::new());
    let inputs = a
        .files
        .iter()
        .map(|f| (f, false))
        .chain(a.control.iter().map(|f| (f, true)));
    for (f, control) in inputs {
        let parsed = std::fs::read_to_string(f)
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t));
        match parsed {
            Ok((is_control, s)) if control || is_control => controls.extend(s),
            Ok((_, s)) => runs.extend(s),
            Err(e) => {
                eprintln!("shmem-pool: {}: {e}", f.display());
                return ExitCode::from(2);
            }
        }
    }
    let lines = Lines {
        bandwidth: a.bw_line,
        min_bytes: a.min_bytes,
        latency: a.lat_line,
        moe: a.moe_line,
    };
    for (title, s) in [
        ("Rust against the twin", &runs),
        ("control (one build in both slots)", &controls),
    ] {
        if !s.is_empty() {
            for l in report(title, &pool(s), lines, a.all) {
                println!("{l}");
            }
        }
    }
    ExitCode::SUCCESS
}
