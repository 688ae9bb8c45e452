//! The device-API suite (`suite/mod.rs`) on real GPUs: every test launched through the
//! launcher on every visible GPU (or `SHMEM_GPU_PES` PEs, several per GPU under CUDA MPS),
//! each result compared with what the host expects (`suite_common::expect`). Also the
//! runtime's failure paths on real hardware.
//!
//! Opt in with `SHMEM_GPU_TESTS=1`; kernels come from `SHMEM_PTX_DIR` (default
//! `target/ptx`, made by `cargo xtask build-ptx`). Without the opt-in every test prints
//! that it was skipped. Each test re-runs this binary once per PE under
//! `shmem_host::launcher` (`<test> --exact`), and the PEs do the checking. Under `mpirun`
//! (`mpirun -np 2 gpu-tests <test> --exact`), each rank is a PE directly, through NVSHMEM's
//! PMIx bootstrap; one test per `mpirun`, since NVSHMEM starts once per process.

mod suite;

use shmem_host::Shmem;
use shmem_host::launcher::{gpu_test, visible_gpus};

/// Whether the GPU tests are opted in (`SHMEM_GPU_TESTS=1`).
fn opted_in() -> bool {
    std::env::var("SHMEM_GPU_TESTS").as_deref() == Ok("1")
}

/// Whether this process is a PE a launcher started (its bootstrap variables are set).
fn is_pe() -> bool {
    shmem_host::runtime::Bootstrap::from_env(|k| std::env::var(k).ok()).is_ok()
}

/// PEs to launch on `gpus` GPUs: `SHMEM_GPU_PES` if set, else one a GPU.
fn pes(gpus: usize) -> usize {
    std::env::var("SHMEM_GPU_PES").map_or(gpus, |v| v.parse().unwrap_or(gpus))
}

/// Whether test `name`, which launches its own PEs, runs: when opted in; else it says why not.
fn runs(name: &str) -> bool {
    if !opted_in() {
        eprintln!("skipped {name}: set SHMEM_GPU_TESTS=1 on a machine with GPUs");
    }
    opted_in()
}

/// Runs `body` on every PE (at least 2): see [`shmem_host::launcher::gpu_test`].
fn on_all_pes(name: &str, body: fn(&Shmem)) {
    if let Ok(gpus) = visible_gpus() {
        let n = pes(gpus);
        assert!(
            !opted_in() || is_pe() || n >= 2,
            "the GPU suite needs at least 2 PEs, found {n} (SHMEM_GPU_PES=2 runs 2 on one GPU under MPS)"
        );
    }
    gpu_test(name, None, body);
}

/// One `#[test]` per suite case, named like it (what `gpu_test` re-runs in each PE).
macro_rules! gpu_tests {
    ($($name:ident: $pes:literal),* $(,)?) => { $(
        #[test]
        fn $name() {
            on_all_pes(stringify!($name), suite::$name);
        }
    )* };
}

suite::simulated_cases!(gpu_tests);
suite::gpu_only_cases!(gpu_tests);

/// One PE's wait outlives its 2 s bound while the others wait for it in a barrier: the PE
/// exits non-zero with the report, and the launcher stops every PE and fails naming it,
/// within seconds. The runner's part checks the launch; each PE's part is below.
#[test]
fn a_timed_out_pe_fails_the_job_quickly() {
    const NAME: &str = "a_timed_out_pe_fails_the_job_quickly";
    if !runs(NAME) {
        return;
    }
    if is_pe() {
        let rt = Shmem::init().expect("NVSHMEM starts");
        let waiter = rt.n_pes() - 1;
        let sig = rt.alloc::<u64>(1).unwrap();
        let m = rt
            .load_module(&suite::ptx_dir(), "host-suite-kernels")
            .unwrap();
        let k = m.kernel::<host_suite_kernels::wait_for_nobody>().unwrap();
        rt.barrier_all().unwrap();
        // SAFETY: every PE launches it; `sig` is symmetric; the wait is bounded.
        let r = unsafe {
            k.launch(
                shmem_host::LaunchConfig::linear(1, 32),
                (&sig, waiter, 2000u64),
            )
        }
        .and_then(|()| rt.synchronize());
        if let Err(e) = r {
            eprintln!("PE {}: {e}", rt.my_pe());
            std::process::exit(3);
        }
        // The others wait here for the waiter, which never comes.
        rt.barrier_all().unwrap();
        unreachable!("PE {} passed a barrier its peer never reached", rt.my_pe());
    }
    let (r, n, gpus, took) = launch_pes(NAME);
    let e = r.expect_err("the job fails").to_string();
    println!("the job failed after {took:.1} s: {e}");
    // On a GPU of its own the waiter is the PE that fails. PEs sharing a GPU under CUDA MPS
    // share its faults: the trap also ends the other clients' contexts, and whichever PE
    // exits first is named.
    let shared = n > gpus;
    assert!(
        e.contains(&format!("PE {} exited with status 3", n - 1))
            || (shared && e.contains(" exited with status ")),
        "{e}"
    );
    assert!(
        took < 10.0 + 5.0,
        "startup plus the 2 s bound took {took:.1} s"
    );
}

/// A kernel traps on a held stream ([`Shmem::hold`]) and the program finds out from an
/// event, as a timing loop does (or, under CUDA MPS, from whichever step another PE's trap
/// fails): every later call that needs the context fails with an error, and dropping the
/// program's buffers, team, module and runtime ends, so that the process exits (a rank
/// that crashes is an error, never a hang). The runner checks that the job ends well
/// within the launcher's bound; each PE's part is below.
#[test]
fn a_trapped_kernel_fails_calls_and_drops() {
    use shmem_host::{LaunchConfig, StreamRef};
    const NAME: &str = "a_trapped_kernel_fails_calls_and_drops";
    if !runs(NAME) {
        return;
    }
    if is_pe() {
        let rt = Shmem::init().expect("NVSHMEM starts");
        let me = rt.my_pe();
        let data = rt.alloc::<u32>(4).unwrap();
        let team = rt
            .team_world()
            .split_strided(0, 1, rt.n_pes())
            .unwrap()
            .expect("every PE is in the split");
        let m = rt
            .load_module(&suite::ptx_dir(), "api-suite-kernels")
            .unwrap();
        let k = m.kernel::<api_suite_kernels::bounds_check>().unwrap();
        rt.barrier_all().unwrap();
        // Under CUDA MPS the PEs that share the GPU share its faults: the first trap fails
        // every PE's context, at whatever step each is, so any of these steps may fail.
        let stopped = (|| {
            let hold = rt.hold(StreamRef::Runtime)?;
            // SAFETY: index 4 is out of bounds on purpose: the kernel panics and traps.
            unsafe { k.launch(LaunchConfig::linear(1, 32), (&data, 4u32))? };
            let end = rt.mark()?;
            drop(hold);
            end.synchronize()
        })();
        let e = stopped.expect_err("the trapped kernel fails its event");
        println!("PE {me}: the event failed: {e}");
        let e = data.to_vec().expect_err("a copy after the trap fails");
        println!("PE {me}: the copy failed: {e}");
        let e = rt
            .barrier_all()
            .expect_err("a barrier after the trap fails");
        println!("PE {me}: the barrier failed: {e}");
        assert!(
            rt.alloc::<u32>(4).is_err(),
            "an allocation after the trap fails"
        );
        drop(team);
        drop(m);
        drop(data);
        drop(rt);
        println!("PE {me}: dropped everything");
        return;
    }
    let (r, _, _, took) = launch_pes(NAME);
    println!("the job ended after {took:.1} s: {r:?}");
    r.expect("every PE fails its calls, drops everything and exits");
}

/// Runs test `name` of this binary once per PE (one per visible GPU, or `SHMEM_GPU_PES`)
/// under the launcher, bounded at 60 s: its result, the PE and GPU counts, and the seconds
/// it took.
fn launch_pes(name: &str) -> (shmem_host::Result<()>, usize, usize, f64) {
    use shmem_host::launcher::{LaunchSpec, launch};
    let gpus = visible_gpus().expect("a CUDA driver");
    let n = pes(gpus);
    let start = std::time::Instant::now();
    let r = launch(&LaunchSpec {
        n,
        gpus: Some(gpus),
        program: std::env::current_exe().expect("the test binary"),
        args: [name, "--exact", "--nocapture", "--test-threads=1"]
            .map(Into::into)
            .to_vec(),
        timeout: Some(std::time::Duration::from_secs(60)),
        env: Vec::new(),
    });
    (r, n, gpus, start.elapsed().as_secs_f64())
}
