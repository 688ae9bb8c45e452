//! `cargo xtask setup`: what `shmem setup` does (`shmem_build::setup::all`), for this checkout.

use crate::flags::Flags;
use shmem_build::setup;

pub fn run(args: Vec<String>) -> Result<(), String> {
    let f = Flags::parse(args, &["nvshmem-version", "toolchain"], &["no-ptxas"])?;
    let versions = f.values("nvshmem-version");
    let toolchain = f.value("toolchain");
    let done = setup::all(toolchain.as_deref(), &versions, !f.has("no-ptxas"))
        .map_err(|e| e.to_string())?;
    println!("{done}");
    Ok(())
}
