//! `shmem-run [-n N] [--timeout SECS] -- PROGRAM [ARGS...]`: runs PROGRAM once per PE on this
//! machine (default: one PE per visible GPU), forwarding output with a `[pe N]` prefix. If a PE
//! fails, the others are stopped and the exit status is non-zero, naming the PE.

use shmem_host::launcher::{LaunchSpec, launch, visible_gpus};
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: shmem-run [-n N] [--timeout SECS] -- PROGRAM [ARGS...]";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut n = None;
    let mut timeout = None;
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("-n") | Some("--np") => match args
                .next()
                .and_then(|v| v.to_str().and_then(|s| s.parse::<usize>().ok()))
            {
                Some(v) if v > 0 => n = Some(v),
                _ => return fail(&format!("-n needs a positive number\n{USAGE}")),
            },
            Some("--timeout") => match args
                .next()
                .and_then(|v| v.to_str().and_then(|s| s.parse::<u64>().ok()))
            {
                Some(v) => timeout = Some(Duration::from_secs(v)),
                None => return fail(&format!("--timeout needs seconds\n{USAGE}")),
            },
            Some("--") => {
                rest.extend(args.by_ref());
                break;
            }
            Some("-h") | Some("--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => {
                rest.push(a);
                rest.extend(args.by_ref());
                break;
            }
        }
    }
    if rest.is_empty() {
        return fail(&format!("no program given\n{USAGE}"));
    }
    let n = match n {
        Some(n) => n,
        None => match visible_gpus() {
            Ok(0) => return fail("no GPU visible; pass -n N to choose the number of PEs"),
            Ok(g) => g,
            Err(e) => return fail(&format!("{e}; pass -n N to choose the number of PEs")),
        },
    };
    let program = rest.remove(0).into();
    match launch(&LaunchSpec {
        n,
        program,
        args: rest,
        timeout,
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("shmem-run: {msg}");
    ExitCode::FAILURE
}
