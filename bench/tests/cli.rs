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

/// `shmem-pool` pools runs per point, apart from the control, and refuses what it cannot read.
#[test]
fn shmem_pool_pools_runs_and_the_control_apart() {
    let dir = std::env::temp_dir().join(format!("shmem-pool-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |name: &str, control: bool, ratio: f64| {
        let p = dir.join(name);
        let json = format!(
            "{{\"meta\": {{\"control\": {control}}}, \"points\": [{{\"test\": \"put_bw\", \
             \"scope\": \"block\", \"ctas\": 16, \"sync_each\": false, \"bytes\": 131072, \
             \"unit\": \"GB/s\", \"ratio\": {ratio}}}]}}"
        );
        std::fs::write(&p, json).unwrap();
        p
    };
    let files = [
        run("a.json", false, 0.93),
        run("b.json", false, 0.94),
        run("c.json", false, 0.95),
        run("d.json", true, 1.00),
        run("e.json", true, 0.99),
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_shmem-pool"))
        .args(&files)
        .output()
        .expect("shmem-pool runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let (rust, control) = text.split_once("== control").expect("a control section");
    assert!(rust.contains("up to 3 runs each"), "{text}");
    assert!(
        rust.contains("mean below 0.98: 1; whole 95 % interval below: 1"),
        "{text}"
    );
    assert!(
        rust.contains("!! put_bw block ctas 16 nosync 131072 B") && rust.contains("mean 0.9400"),
        "{text}"
    );
    assert!(control.contains("up to 2 runs each") && control.contains("below 0.98: 0"));
    // A moe_dispatch log given as a control is pooled as one.
    let log = dir.join("moe.log");
    std::fs::write(
        &log,
        "RESULT {\"mode\": \"low-latency\", \"dtype\": \"bf16\", \"tokens\": 128, \"experts\": 64, \
         \"hidden\": 7168, \"top_k\": 8, \"n_pes\": 1, \"rust_dispatch_us\": 7.7, \
         \"cuda_dispatch_us\": 7.7, \"rust_combine_us\": 9.8, \"cuda_combine_us\": 9.9, \
         \"order\": \"cuda-first\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shmem-pool"))
        .arg(&files[0])
        .arg("--control")
        .arg(&log)
        .output()
        .expect("shmem-pool runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let control = text.split_once("== control").expect("a control section").1;
    assert!(
        control.contains("moe low-latency bf16 T 128") && control.contains("(one run)"),
        "{text}"
    );
    // Every file after `--control` is a control (as a shell pattern gives them), the run
    // before it alone a run.
    let log2 = dir.join("moe2.log");
    std::fs::copy(&log, &log2).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shmem-pool"))
        .arg(&files[0])
        .arg("--control")
        .args([&log, &log2])
        .output()
        .expect("shmem-pool runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let (rust, control) = text.split_once("== control").expect("a control section");
    assert!(!rust.contains("moe low-latency"), "{text}");
    assert!(
        control.contains("moe low-latency bf16 T 128") && control.contains("n  2"),
        "{text}"
    );
    // What it cannot read: exit status 2, naming the file.
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "no results here\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shmem-pool"))
        .arg(&bad)
        .output()
        .expect("shmem-pool runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.txt"));
    std::fs::remove_dir_all(&dir).ok();
}
