//! Kernels built from a `build.rs` and embedded in the program: [`embed_kernels`] builds
//! the kernel crate into `OUT_DIR` and writes a Rust file that `shmem_host::include_kernels!`
//! includes (each build's manifest, PTX and cubin through `include_str!`/`include_bytes!`),
//! so the program carries its kernels and runs from any directory.

use crate::error::{Error, IoContext, Result};
use crate::{Arch, Artifact, Builder, PtxasCheck, SETUP_FIX};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `SHMEM_ARCHS=sm_80,sm_90`: the architectures a build script builds for (default `sm_90`).
pub const ARCHS_VAR: &str = "SHMEM_ARCHS";
/// `SHMEM_KERNELS=simulator`: a build script builds nothing for the GPU (no nightly, NVSHMEM
/// or ptxas needed); the program then runs on the CPU simulator only.
pub const KERNELS_VAR: &str = "SHMEM_KERNELS";

/// What [`try_embed_kernels`] did.
#[derive(Clone, Debug)]
pub struct Embedded {
    /// The kernel crate's package name (what `include_kernels!` names).
    pub crate_name: String,
    /// The Rust file written (`OUT_DIR/shmem-kernels/<crate>.rs`).
    pub file: PathBuf,
    /// The builds, one per architecture (none under `SHMEM_KERNELS=simulator`).
    pub artifacts: Vec<Artifact>,
}

/// From a `build.rs`: builds the kernel crate in `crate_dir` — relative to the directory of
/// the package whose build script this is (`CARGO_MANIFEST_DIR`), or absolute — for the GPU
/// and writes what `shmem_host::include_kernels!("<crate>")` embeds. On failure it prints the
/// error (what is missing, and the one command that installs it) and fails the build.
///
/// ```no_run
/// // In `fn main` of build.rs, for kernels in ../kernels (package `my-kernels`); main.rs
/// // then has `static KERNELS: EmbeddedKernels = shmem_host::include_kernels!("my-kernels");`
/// shmem_build::embed_kernels("../kernels");
/// ```
///
/// `SHMEM_ARCHS` chooses the architectures (default `sm_90`); `SHMEM_KERNELS=simulator`
/// builds nothing for the GPU. Cargo re-runs it when the kernel crate's sources, `PTXAS`,
/// `NVSHMEM_HOME`, `SHMEM_HOME`, `SHMEM_ARCHS` or `SHMEM_KERNELS` change.
pub fn embed_kernels(crate_dir: impl AsRef<Path>) {
    if let Err(e) = try_embed_kernels(crate_dir) {
        eprintln!("error: building the kernels failed\n{e}");
        std::process::exit(1);
    }
}

/// [`embed_kernels`], returning the error instead of failing the build.
pub fn try_embed_kernels(crate_dir: impl AsRef<Path>) -> Result<Embedded> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let package_dir = var("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .ok_or_else(|| {
            Error::Crate(
                "embed_kernels runs in a build script (CARGO_MANIFEST_DIR is not set)".into(),
            )
        })?;
    let out_dir = var("OUT_DIR").map(PathBuf::from).ok_or_else(|| {
        Error::Crate("embed_kernels runs in a build script (OUT_DIR is not set)".into())
    })?;
    let dir = package_dir.join(crate_dir.as_ref());
    let crate_name = package_name(&dir.join("Cargo.toml")).map_err(|why| {
        Error::Crate(format!(
            "no kernel crate at {} (`{}`, relative to {}, the package whose build.rs this is): {why}",
            dir.display(),
            crate_dir.as_ref().display(),
            package_dir.display()
        ))
    })?;
    for v in [
        ARCHS_VAR,
        KERNELS_VAR,
        "PTXAS",
        "NVSHMEM_HOME",
        "SHMEM_HOME",
        "SHMEM_TOOLCHAIN",
        "CUDA_HOME",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed={}", dir.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("Cargo.toml").display()
    );
    let out = out_dir.join("shmem-kernels");
    let simulator_only = match var(KERNELS_VAR).as_deref() {
        None | Some("gpu") => false,
        Some("simulator") => true,
        Some(other) => {
            return Err(Error::Crate(format!(
                "{KERNELS_VAR}={other:?}: `simulator` (build nothing for the GPU) or `gpu` (the default)"
            )));
        }
    };
    let artifacts = if simulator_only {
        println!(
            "cargo:warning=the kernels of {crate_name} were not built for the GPU ({KERNELS_VAR}=simulator): this program runs on the CPU simulator only"
        );
        Vec::new()
    } else {
        let archs = match var(ARCHS_VAR) {
            Some(list) => list
                .split(',')
                .map(|a| a.parse::<Arch>().map_err(Error::from))
                .collect::<Result<Vec<_>>>()?,
            None => vec![Arch::Sm90],
        };
        let built = Builder::new(&dir)
            .archs(archs)
            .out_dir(&out)
            .ptxas(PtxasCheck::IfFound)
            .build()?;
        if built.iter().any(|a| a.manifest.cubin.is_none()) {
            println!(
                "cargo:warning=ptxas not found: {crate_name} embeds PTX only, which the driver compiles when the program loads it (slow for large kernels). Install it: {SETUP_FIX}"
            );
        }
        built
    };
    let file = out.join(format!("{crate_name}.rs"));
    std::fs::create_dir_all(&out).ctx(|| format!("creating {}", out.display()))?;
    std::fs::write(&file, embedding(&crate_name, &artifacts))
        .ctx(|| format!("writing {}", file.display()))?;
    Ok(Embedded {
        crate_name,
        file,
        artifacts,
    })
}

/// The `[package] name` of a `Cargo.toml`.
fn package_name(manifest: &Path) -> std::result::Result<String, String> {
    let text = std::fs::read_to_string(manifest).map_err(|e| e.to_string())?;
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some(rest) = line.strip_prefix("name")
            && let Some(value) = rest.trim_start().strip_prefix('=')
        {
            return Ok(value.trim().trim_matches('"').to_string());
        }
    }
    Err("it has no [package] name".into())
}

/// The Rust expression `include_kernels!` includes: a `shmem_host::module::EmbeddedKernels`.
fn embedding(crate_name: &str, artifacts: &[Artifact]) -> String {
    let lit = |p: &Path| format!("{:?}", p.display().to_string());
    let mut builds = String::new();
    for a in artifacts {
        let dir = a.ptx.parent().unwrap_or(Path::new("."));
        let cubin = match &a.manifest.cubin {
            Some(c) => format!(
                "::core::option::Option::Some(include_bytes!({}))",
                lit(&dir.join(c))
            ),
            None => "::core::option::Option::None".into(),
        };
        let _ = writeln!(
            builds,
            "        ::shmem_host::module::EmbeddedBuild {{\n            manifest: include_str!({}),\n            ptx: include_bytes!({}),\n            cubin: {cubin},\n        }},",
            lit(&a.manifest_path),
            lit(&a.ptx),
        );
    }
    format!(
        "// Written by shmem_build::embed_kernels; included by shmem_host::include_kernels!.\n::shmem_host::module::EmbeddedKernels {{\n    crate_name: {crate_name:?},\n    builds: &[\n{builds}    ],\n}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names() {
        let dir = std::env::temp_dir().join(format!("shmem-embed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = dir.join("Cargo.toml");
        std::fs::write(
            &m,
            "[workspace]\nname = \"no\"\n[package]\nversion = \"0.1.0\"\nname = \"my-kernels\"\n",
        )
        .unwrap();
        assert_eq!(package_name(&m).unwrap(), "my-kernels");
        std::fs::write(&m, "[workspace]\n").unwrap();
        assert!(package_name(&m).is_err());
        assert!(package_name(&dir.join("none.toml")).is_err());
    }

    #[test]
    fn the_embedding_names_every_file() {
        let text = embedding("k", &[]);
        assert!(
            text.contains("crate_name: \"k\"") && text.contains("builds: &["),
            "{text}"
        );
    }
}
