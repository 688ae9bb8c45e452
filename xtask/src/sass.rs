//! `cargo xtask sass`: the SASS of built kernels, read here without a GPU
//! ([`shmem_build::sass`]): a kernel crate's `target/ptx/<arch>/<crate>.cubin` (written by
//! `build-ptx --require-ptxas`), or a cubin.

use crate::flags::Flags;
use shmem_build::Arch;
use std::path::{Path, PathBuf};

pub fn run(args: Vec<String>) -> Result<(), String> {
    let f = Flags::parse(args, &["arch", "kernel"], &["raw"])?;
    let arch = f
        .value("arch")
        .unwrap_or_else(|| "sm_90".into())
        .parse::<Arch>()
        .map_err(|e| e.to_string())?;
    if f.positional.is_empty() {
        return Err(format!(
            "name a kernel crate (built with `cargo xtask build-ptx --arch {arch} --require-ptxas`) or a cubin\n\n{}",
            crate::flags::USAGE
        ));
    }
    let root = crate::project_root();
    let cubins = f
        .positional
        .iter()
        .map(|a| cubin(&root, arch, a))
        .collect::<Result<Vec<_>, _>>()?;
    let kernel = f.value("kernel");
    for c in &cubins {
        match shmem_build::sass::disassemble(c, kernel.as_deref(), f.has("raw")) {
            Ok(Some(text)) => print!("{text}"),
            Ok(None) => {
                return Err(format!(
                    "{} has no kernel `{}`",
                    c.display(),
                    kernel.unwrap_or_default()
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// The cubin of `arg`: a `.cubin` file, or kernel crate `arg`'s in `target/ptx/<arch>/`.
fn cubin(root: &Path, arch: Arch, arg: &str) -> Result<PathBuf, String> {
    if arg.ends_with(".cubin") {
        return Ok(PathBuf::from(arg));
    }
    let built = root.join(format!("target/ptx/{arch}/{arg}.cubin"));
    if built.is_file() {
        Ok(built)
    } else {
        Err(format!(
            "no cubin at {}: build it with `cargo xtask build-ptx --arch {arch} --require-ptxas {arg}` \
             (the cubin is written when ptxas checks the PTX)",
            built.display()
        ))
    }
}
