//! A user's own project, as a user makes it: `shmem new` writes it into a temporary
//! directory outside this checkout, plain `cargo build --release` builds it (the kernels
//! compiled for the GPU and embedded by its `build.rs`), it runs on the CPU simulator at 2
//! and 4 PEs, and again after being copied to another directory (no PTX beside it); `shmem
//! sass` shows its kernel's SASS from the build's cubin. Then the
//! errors a user meets: a kernel crate that does not exist, a toolchain that is not
//! installed; and a build for the simulator only (`SHMEM_KERNELS=simulator`).
//!
//! Needs what `shmem setup` installs (the nightly's components, NVSHMEM, ptxas); without it
//! the test says so and passes, unless `SHMEM_REQUIRE_PIPELINE` is set (CI sets it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn prerequisites() -> bool {
    let ok = shmem_build::Toolchain::detect(None).is_ok()
        && shmem_build::Nvshmem::locate(None).is_ok()
        && shmem_build::locate::ptxas().is_some();
    if !ok {
        let msg = "the toolchain components, NVSHMEM or ptxas are missing: run `shmem setup`";
        assert!(
            std::env::var_os("SHMEM_REQUIRE_PIPELINE").is_none(),
            "{msg}"
        );
        eprintln!("SKIPPED: {msg}");
    }
    ok
}

/// A command with none of the outer cargo's variables (it builds another workspace).
fn clean(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if (k.starts_with("CARGO_") && k != "CARGO_HOME")
            || k.starts_with("RUSTC")
            || k.starts_with("RUSTFLAGS")
            || k.starts_with("RUSTDOC")
            || k.starts_with("SHMEM_")
        {
            c.env_remove(&k);
        }
    }
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `cargo build --release` in `project`, with `env`.
fn build(project: &Path, target: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = clean("cargo");
    c.current_dir(project)
        .args(["build", "--release"])
        .env("CARGO_TARGET_DIR", target);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("cargo runs")
}

/// Runs the program on `pes` simulated PEs from directory `cwd`; asserts that it passed.
fn runs(program: &Path, cwd: &Path, pes: u32) {
    let out = clean(program)
        .current_dir(cwd)
        .env("SHMEM_SIM", "1")
        .env("SHMEM_PES", pes.to_string())
        .output()
        .expect("the program runs");
    let t = text(&out);
    assert!(
        out.status.success(),
        "{} at {pes} PEs:\n{t}",
        program.display()
    );
    assert!(t.contains("PASS"), "{t}");
    assert_eq!(t.matches("all correct").count(), pes as usize, "{t}");
}

#[test]
fn a_new_project_builds_runs_anywhere_and_fails_clearly() {
    if !prerequisites() {
        return;
    }
    let tmp = std::env::temp_dir().join(format!("shmem-new-project-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let project = tmp.join("demo");
    // Kept between runs, so that the dependencies build once.
    let target = checkout().join("target/new-project");
    let out = clean(env!("CARGO_BIN_EXE_shmem"))
        .arg("new")
        .arg(&project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!project.starts_with(checkout()), "outside the checkout");

    let out = build(&project, &target, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let program = target.join("release/demo");
    for pes in [2, 4] {
        runs(&program, &project, pes);
    }
    // The kernel's SASS, from the cubin the build left under its target directory.
    let out = clean(env!("CARGO_BIN_EXE_shmem"))
        .args(["sass", "--kernel", "send_to_next"])
        .arg(target.join("release/build"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Function : send_to_next") && text(&out).contains("EXIT"),
        "{}",
        text(&out)
    );
    let elsewhere = tmp.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(&program, elsewhere.join("demo")).unwrap();
    runs(&elsewhere.join("demo"), &elsewhere, 2);

    // A kernel crate that does not exist.
    let build_rs = project.join("app/build.rs");
    let good = std::fs::read_to_string(&build_rs).unwrap();
    std::fs::write(&build_rs, good.replace("\"../kernels\"", "\"../kernelz\"")).unwrap();
    let out = build(&project, &target, &[]);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("no kernel crate at") && t.contains("kernelz") && t.contains("relative to"),
        "{t}"
    );
    std::fs::write(&build_rs, good).unwrap();

    // A toolchain that is not installed: one error, and the command that installs it.
    let out = build(
        &project,
        &target,
        &[("SHMEM_TOOLCHAIN", "no-such-toolchain")],
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("`no-such-toolchain` is not installed")
            && t.contains("rustup toolchain install"),
        "{t}"
    );

    // For the simulator only: nothing built for the GPU, and it still runs there.
    let out = build(&project, &target, &[("SHMEM_KERNELS", "simulator")]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("simulator only"), "{}", text(&out));
    runs(&program, &project, 2);
    let _ = std::fs::remove_dir_all(&tmp);
}
