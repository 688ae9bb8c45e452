//! `shmem`: the command a user of shmem-rs types outside this repository.
//!
//! ```text
//! shmem setup [--nvshmem-version V]... [--toolchain T] [--no-ptxas]
//! shmem new PATH [--name NAME] [--shmem-rs DIR]
//! shmem sass [--kernel NAME] [--raw] PATH...
//! ```
//!
//! Install it from the checkout: `cargo install --path crates/shmem-cli`.

mod new;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// GPU kernels in Rust that communicate by themselves: set up a machine, start a project,
/// read what the GPU runs.
#[derive(Parser)]
#[command(name = "shmem", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install what building kernels needs, once per user: the nightly toolchain's rust-src
    /// and llvm-tools, NVSHMEM's wheel and ptxas, into ~/.cache/shmem-rs (SHMEM_HOME to
    /// choose). Idempotent; offline once installed.
    Setup {
        /// NVSHMEM versions to install (3.4 to 3.8) [default: 3.4.5]
        #[arg(long = "nvshmem-version", value_name = "V")]
        nvshmem_versions: Vec<String>,
        /// The rustup toolchain [default: nightly, else stable with RUSTC_BOOTSTRAP]
        #[arg(long)]
        toolchain: Option<String>,
        /// Do not install ptxas (the driver then compiles PTX when a program loads it)
        #[arg(long)]
        no_ptxas: bool,
    },
    /// Write a new project at PATH: a kernel crate with one kernel and a program that builds
    /// it for the GPU, embeds it, launches it on every PE and checks the result.
    New {
        /// Where (must not exist, or be empty)
        path: PathBuf,
        /// The program's name [default: PATH's last component]
        #[arg(long)]
        name: Option<String>,
        /// The shmem-rs checkout the project depends on (by path) [default: the one this
        /// command was built from]
        #[arg(long, value_name = "DIR")]
        shmem_rs: Option<PathBuf>,
    },
    /// Print the SASS (the GPU's own instructions) of built kernels, without a GPU: each cubin
    /// named, or found under a directory (a project's `target/`, where its build.rs leaves
    /// `<arch>/<crate>.cubin`), through cuobjdump and nvdisasm from pip (installed into
    /// ~/.cache/shmem-rs on first use).
    Sass {
        /// Cubins, or directories to search for them
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// That kernel only: cubins without it are left out (an error if none has it)
        #[arg(long, value_name = "NAME")]
        kernel: Option<String>,
        /// Keep each instruction's encoding
        #[arg(long)]
        raw: bool,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Setup {
            nvshmem_versions,
            toolchain,
            no_ptxas,
        } => shmem_build::setup::all(toolchain.as_deref(), &nvshmem_versions, !no_ptxas)
            .map(|done| println!("{done}"))
            .map_err(|e| e.to_string()),
        Command::New {
            path,
            name,
            shmem_rs,
        } => new::run(&path, name.as_deref(), shmem_rs.as_deref()),
        Command::Sass { paths, kernel, raw } => sass(&paths, kernel.as_deref(), raw),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmem: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `shmem sass`: each cubin of `paths` (files, or the cubins under directories) that has
/// `kernel` (every cubin without one), a header line naming it when there are several; an
/// error if none has it.
fn sass(paths: &[PathBuf], kernel: Option<&str>, raw: bool) -> Result<(), String> {
    let mut cubins = Vec::new();
    for p in paths {
        cubins.extend(shmem_build::sass::cubins(p).map_err(|e| e.to_string())?);
    }
    if cubins.is_empty() {
        return Err(
            "no cubin found: build the kernels with ptxas installed (`shmem setup`)".into(),
        );
    }
    let mut shown = 0;
    for c in &cubins {
        if let Some(text) =
            shmem_build::sass::disassemble(c, kernel, raw).map_err(|e| e.to_string())?
        {
            if cubins.len() > 1 {
                println!("== {}", c.display());
            }
            print!("{text}");
            shown += 1;
        }
    }
    match (shown, kernel) {
        (0, Some(k)) => Err(format!("no kernel `{k}` in {} cubin(s)", cubins.len())),
        _ => Ok(()),
    }
}
