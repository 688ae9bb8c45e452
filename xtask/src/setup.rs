//! `cargo xtask setup`.

use crate::flags::Flags;
use shmem_build::setup;

pub fn run(args: Vec<String>) -> Result<(), String> {
    let f = Flags::parse(args, &["nvshmem-version", "toolchain"], &["no-ptxas"])?;
    let root = crate::project_root();
    let toolchain = f.value("toolchain").unwrap_or_else(|| "nightly".into());
    let mut versions = f.values("nvshmem-version");
    if versions.is_empty() {
        versions.push(setup::DEFAULT_NVSHMEM.to_string());
    }
    // A machine without the nightly falls back to stable (RUSTC_BOOTSTRAP), as the build does.
    let tc = match setup::toolchain_components(&toolchain) {
        Ok(()) => toolchain,
        Err(e) if f.value("toolchain").is_none() => {
            eprintln!("note: {e}; trying the stable toolchain");
            setup::toolchain_components("stable").map_err(|e| e.to_string())?;
            "stable".into()
        }
        Err(e) => return Err(e.to_string()),
    };
    println!("toolchain   {tc}: rust-src and llvm-tools present");
    for v in &versions {
        let dir = setup::nvshmem(&root, v).map_err(|e| e.to_string())?;
        println!("nvshmem     {v}: {}", dir.display());
    }
    if !f.has("no-ptxas") {
        let p = setup::ptxas(&root).map_err(|e| e.to_string())?;
        println!("ptxas       {}", p.display());
    }
    Ok(())
}
