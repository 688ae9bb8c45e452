//! Sets `cfg(shmem_sim)` when kernel code runs on the CPU simulator: the `sim` feature on a
//! host target. The one place that decides it; the sources say `#[cfg(shmem_sim)]`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shmem_sim)");
    println!("cargo::rerun-if-changed=build.rs");
    let sim = std::env::var_os("CARGO_FEATURE_SIM").is_some();
    let nvptx = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("nvptx64");
    if sim && !nvptx {
        println!("cargo::rustc-cfg=shmem_sim");
    }
}
