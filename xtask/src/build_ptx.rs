//! `cargo xtask build-ptx`: every kernel crate (or the named ones) for every requested arch.

use crate::flags::Flags;
use shmem_build::{Arch, Builder, PtxasCheck, Toolchain, Workspace};
use std::path::PathBuf;
use std::time::Instant;

pub fn run(args: Vec<String>) -> Result<(), String> {
    let f = Flags::parse(
        args,
        &["arch", "nvshmem", "toolchain", "out", "deny-spills"],
        &["require-ptxas", "no-ptxas"],
    )?;
    let mut archs = Vec::new();
    for a in f.values("arch") {
        archs.push(a.parse::<Arch>().map_err(|e| e.to_string())?);
    }
    if archs.is_empty() {
        archs.push(Arch::Sm90);
    }
    archs.dedup();
    let root = crate::project_root();
    let tc = Toolchain::detect(f.value("toolchain").as_deref()).map_err(|e| e.to_string())?;
    let ws = Workspace::read(&tc, &root.join("Cargo.toml")).map_err(|e| e.to_string())?;

    let mut crates: Vec<PathBuf> = Vec::new();
    if f.positional.is_empty() {
        crates.extend(
            ws.packages
                .iter()
                .filter(|p| p.is_kernel_crate)
                .map(|p| p.dir.clone()),
        );
    }
    for name in &f.positional {
        // A package name, or the name of a kernel crate's directory (`ring` for
        // examples/ring, whose package is `ring-kernels`).
        let by_name = ws
            .packages
            .iter()
            .find(|p| &p.name == name)
            .or_else(|| {
                ws.packages.iter().find(|p| {
                    p.is_kernel_crate && p.dir.file_name().is_some_and(|d| d == name.as_str())
                })
            })
            .map(|p| p.dir.clone());
        let path = PathBuf::from(name);
        match by_name {
            Some(d) => crates.push(d),
            None if path.join("Cargo.toml").is_file() => crates.push(path),
            None => {
                let kernels: Vec<&str> = ws
                    .packages
                    .iter()
                    .filter(|p| p.is_kernel_crate)
                    .map(|p| p.name.as_str())
                    .collect();
                return Err(format!(
                    "`{name}` is neither a package of this workspace nor a directory with a Cargo.toml; \
                     the kernel crates are: {}",
                    kernels.join(", ")
                ));
            }
        }
    }
    if crates.is_empty() {
        return Err(
            "no kernel crates: mark one with `[package.metadata.shmem] kernels = true` or name it"
                .into(),
        );
    }
    println!(
        "toolchain: {}{}",
        tc.version,
        if tc.bootstrap {
            " (RUSTC_BOOTSTRAP=1)"
        } else {
            ""
        }
    );
    let ptxas = if f.has("require-ptxas") {
        PtxasCheck::Require
    } else if f.has("no-ptxas") {
        PtxasCheck::Skip
    } else {
        PtxasCheck::IfFound
    };
    // Crates whose kernels must not spill on sm_90 and newer, the archs their launch bounds
    // were tuned on (the table below is printed for every crate and arch).
    let deny: Vec<String> = f
        .values("deny-spills")
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::to_string)
        .collect();
    let mut spilled = Vec::new();
    let start = Instant::now();
    for dir in crates {
        let mut b = Builder::new(&dir)
            .archs(archs.iter().copied())
            .in_workspace(tc.clone(), ws.clone())
            .ptxas(ptxas);
        if let Some(n) = f.value("nvshmem") {
            b = b.nvshmem_dir(n);
        }
        // By default into `target/ptx` of this checkout, where every reader here looks (the
        // examples and tests, `sass`, `gpu-bundle`), whatever `CARGO_TARGET_DIR` says.
        let out = f
            .value("out")
            .map_or_else(|| root.join("target/ptx"), std::path::PathBuf::from);
        b = b.out_dir(out);
        let t = Instant::now();
        let artifacts = b.build().map_err(|e| e.to_string())?;
        for a in artifacts {
            let m = &a.manifest;
            let coll: Vec<&str> = m
                .kernels
                .iter()
                .filter(|k| k.collective)
                .map(|k| k.name.as_str())
                .collect();
            println!(
                "{:<20} {:<7} nvshmem {:<6} ptx {}  {} kernels ({} collective)  ptxas {}  {}  [{:.1}s]",
                m.crate_name,
                m.arch,
                m.nvshmem_version,
                m.ptx_isa,
                m.kernels.len(),
                coll.len(),
                if m.ptxas_verified { "ok" } else { "not run" },
                if a.rebuilt { "built" } else { "up to date" },
                t.elapsed().as_secs_f64()
            );
            println!("    {}", a.ptx.display());
            for k in &m.kernels {
                let Some(r) = k.resources else { continue };
                println!(
                    "    {:<28} {:>3} registers  {:>4} B stack  {:>4} B spill stores  {:>4} B spill loads",
                    k.name, r.registers, r.stack_bytes, r.spill_stores, r.spill_loads
                );
                if r.spills() && deny.contains(&m.crate_name) && a.arch >= Arch::Sm90 {
                    spilled.push(format!("{} {} ({})", m.crate_name, k.name, m.arch));
                }
            }
        }
    }
    println!("done in {:.1}s", start.elapsed().as_secs_f64());
    if !spilled.is_empty() {
        return Err(format!(
            "ptxas spilled registers in kernels that must not spill (--deny-spills): {}",
            spilled.join(", ")
        ));
    }
    Ok(())
}
