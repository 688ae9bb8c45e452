//! `cargo xtask ci`: the project's test command (what `.ci/run` executes).

use std::process::Command;

fn step(name: &str, cmd: &mut Command) -> Result<(), String> {
    println!("\n=== {name}: {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("{name}: cannot start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status})"))
    }
}

pub fn run(args: Vec<String>) -> Result<(), String> {
    if !args.is_empty() {
        return Err("`cargo xtask ci` takes no arguments".into());
    }
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let xtask = std::env::current_exe().map_err(|e| e.to_string())?;
    let c = |args: &[&str]| {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&root).args(args);
        cmd
    };
    let mut setup = Command::new(&xtask);
    setup.args([
        "setup",
        "--nvshmem-version",
        "3.4.5",
        "--nvshmem-version",
        "3.8.0",
    ]);
    step("setup", &mut setup)?;
    step("fmt", &mut c(&["fmt", "--all", "--", "--check"]))?;
    step(
        "clippy",
        &mut c(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    step(
        "rustdoc",
        c(&["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    let mut build = Command::new(&xtask);
    // The example kernels must not spill; every crate's table of registers, stack and
    // spills is printed.
    build.args([
        "build-ptx",
        "--arch",
        "sm_80,sm_90,sm_100",
        "--require-ptxas",
        "--deny-spills",
        "halo-exchange,moe-dispatch,ring-kernels",
    ]);
    step("build-ptx", &mut build)?;
    // The SASS of a kernel just built, by the disassembler `cargo xtask sass` installs: it
    // fails if the listing has no `ring` kernel.
    let mut sass = Command::new(&xtask);
    sass.args(["sass", "--kernel", "ring", "ring-kernels"])
        .stdout(std::process::Stdio::null());
    step("sass", &mut sass)?;
    step("doctests", &mut c(&["test", "--workspace", "--doc"]))?;
    // The README's programs on the CPU simulator (what its main command does on a machine
    // without a GPU): each exits non-zero if its check against the CPU fails.
    for (pkg, example) in [
        ("shmem-host", "ring"),
        ("halo-exchange", "halo_exchange"),
        ("moe-dispatch", "moe_dispatch"),
    ] {
        step(
            &format!("{example} on the simulator"),
            c(&["run", "-q", "-p", pkg, "--example", example]).env("SHMEM_SIM", "1"),
        )?;
    }
    python(&root)?;
    // Last, so the run's closing lines are the test suite's counts.
    step(
        "test",
        c(&["test", "--workspace", "--all-targets"]).env("SHMEM_REQUIRE_PIPELINE", "1"),
    )?;
    println!("\nci: all steps passed");
    Ok(())
}

/// The Python package (`python/`) on the simulator: a virtual environment in
/// `target/py-venv` with maturin, pytest and NumPy (installed once), the wheel built by
/// maturin and installed there, and its pytest suite (NumPy arrays; the torch tests run
/// where torch is installed, on the GPU machine).
fn python(root: &std::path::Path) -> Result<(), String> {
    let bin = py_venv(root)?;
    let wheel = py_wheel(root, &bin)?;
    step(
        "python install",
        Command::new(bin.join("pip"))
            .args(["install", "-q", "--force-reinstall", "--no-deps"])
            .arg(&wheel),
    )?;
    step(
        "python example on the simulator",
        Command::new(bin.join("python"))
            .current_dir(root)
            .arg("python/examples/moe_layer.py"),
    )?;
    step(
        "python tests",
        Command::new(bin.join("pytest"))
            .current_dir(root)
            .args(["-q", "python/tests"]),
    )
}

/// `target/py-venv` with maturin, pytest and NumPy (made once); returns its `bin`.
pub fn py_venv(root: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let venv = root.join("target/py-venv");
    let bin = venv.join("bin");
    if !bin.join("maturin").exists() || !bin.join("pytest").exists() {
        step(
            "python venv",
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
        )?;
        step(
            "python tools",
            Command::new(bin.join("pip")).args([
                "install",
                "-q",
                "maturin==1.16.0",
                "pytest==9.2.0",
                "numpy==2.1.3",
            ]),
        )?;
    }
    Ok(bin)
}

/// Builds the wheel of `python/` into `target/wheels` with the venv's maturin; returns it.
pub fn py_wheel(
    root: &std::path::Path,
    bin: &std::path::Path,
) -> Result<std::path::PathBuf, String> {
    let wheels = root.join("target/wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    step(
        "python wheel",
        Command::new(bin.join("maturin"))
            .current_dir(root.join("python"))
            .args(["build", "--release", "-o"])
            .arg(&wheels),
    )?;
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| format!("{}: {e}", wheels.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("maturin wrote no wheel")?;
    Ok(wheel)
}
