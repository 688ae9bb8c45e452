//! `cargo xtask` on bad input: a clear message and a non-zero exit, never a panic.

use std::process::{Command, Output};

fn xtask(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("xtask runs")
}

fn fails_with(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr:\n{err}"
    );
    assert_eq!(out.status.code(), Some(1), "stderr:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}

#[test]
fn unknown_arch() {
    let out = xtask(&["build-ptx", "--arch", "sm_75", "ring-kernels"], &[]);
    fails_with(
        &out,
        &["unknown GPU architecture `sm_75`", "sm_80, sm_90, sm_100"],
    );
}

#[test]
fn nvshmem_dir_without_bitcode() {
    let empty = std::env::temp_dir().join(format!("shmem-cli-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = xtask(
        &[
            "build-ptx",
            "--nvshmem",
            empty.to_str().unwrap(),
            "ring-kernels",
        ],
        &[],
    );
    fails_with(&out, &["is not a usable NVSHMEM", "libnvshmem_device"]);
    let out = xtask(
        &["build-ptx", "ring-kernels"],
        &[("NVSHMEM_HOME", empty.to_str().unwrap())],
    );
    fails_with(&out, &["NVSHMEM_HOME is set"]);
}

#[test]
fn missing_toolchain() {
    let out = xtask(
        &[
            "build-ptx",
            "--toolchain",
            "shmem-no-such-toolchain",
            "ring-kernels",
        ],
        &[],
    );
    fails_with(
        &out,
        &[
            "`shmem-no-such-toolchain` is not installed",
            "fix: rustup toolchain install",
        ],
    );
}

#[test]
fn unknown_crate_and_option() {
    fails_with(
        &xtask(&["build-ptx", "no-such-crate"], &[]),
        &["`no-such-crate` is neither a package"],
    );
    fails_with(
        &xtask(&["build-ptx", "--frobnicate"], &[]),
        &["unknown option --frobnicate", "usage:"],
    );
    let out = xtask(&["no-such-command"], &[]);
    fails_with(&out, &["unknown command `no-such-command`"]);
}
