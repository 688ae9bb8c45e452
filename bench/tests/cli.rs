//! `shmem-bench`'s command line: what it cannot run is refused before any PE starts.

use std::process::Command;

#[test]
fn filters_that_match_no_point_are_refused_before_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmem-bench"))
        .args(["--cuda", "missing.cubin", "--only", "put_bw", "--ctas", "3"])
        .output()
        .expect("shmem-bench runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no point of the plan") && err.contains("[1, 4, 8, 16, 32]"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}
