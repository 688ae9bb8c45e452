//! Starts one process per PE on this machine and watches them.
//!
//! Each child gets `SHMEM_RANK`, `SHMEM_NRANKS`, `SHMEM_LOCAL_RANK` and `SHMEM_UID_FILE`
//! (where rank 0 publishes NVSHMEM's unique id, see [`crate::runtime`]). Their output is
//! forwarded line by line with a `[pe N]` prefix. If any child exits non-zero or is killed,
//! the others are stopped at once and the launch fails naming that PE and its status.

use crate::error::{Error, Result};
use crate::runtime::BackendKind;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What to launch.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// Number of PEs (processes).
    pub n: usize,
    /// The GPUs the PEs spread over, round-robin (PE `i` on GPU `i % gpus`); more PEs than
    /// GPUs need CUDA MPS ([`mps_running`]), and each PE then gets its share of the GPU's
    /// threads (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, unless set). `None`: PE `i` on GPU `i`,
    /// unchecked.
    pub gpus: Option<usize>,
    /// The program every PE runs.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Give up (and stop every PE) after this long.
    pub timeout: Option<Duration>,
    /// Environment variables set for every PE, on top of the launcher's own.
    pub env: Vec<(OsString, OsString)>,
}

/// Where CUDA MPS keeps its pipes: `CUDA_MPS_PIPE_DIRECTORY`, else `/tmp/nvidia-mps`.
pub fn mps_pipe_dir() -> PathBuf {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/nvidia-mps"))
}

/// Whether a CUDA MPS control daemon is running for this user (its control pipe exists).
pub fn mps_running() -> bool {
    mps_pipe_dir().join("control").exists()
}

/// Where each PE runs: its GPU, and the share of that GPU's threads it may use when PEs
/// share GPUs under MPS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// GPU ordinal per PE.
    pub device: Vec<usize>,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for every PE, when PEs share GPUs.
    pub mps_percentage: Option<u32>,
}

impl Placement {
    /// `n` PEs over `gpus` GPUs, round-robin. Sharing a GPU needs MPS (`mps`); without it
    /// the error names the command that starts it.
    pub fn new(n: usize, gpus: Option<usize>, mps: bool) -> Result<Placement> {
        let Some(gpus) = gpus else {
            return Ok(Placement {
                device: (0..n).collect(),
                mps_percentage: None,
            });
        };
        if gpus == 0 {
            return Err(Error::Launch("no GPU visible".into()));
        }
        let per_gpu = n.div_ceil(gpus);
        if per_gpu > 1 && !mps {
            return Err(Error::NeedsMps { pes: n, gpus });
        }
        Ok(Placement {
            device: (0..n).map(|i| i % gpus).collect(),
            mps_percentage: (per_gpu > 1).then(|| (100 / per_gpu as u32).max(1)),
        })
    }
}

/// How a PE ended.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => format!("ended ({status})"),
    }
}

/// The number of GPUs this process can see (`CUDA_VISIBLE_DEVICES` applies).
pub fn visible_gpus() -> Result<usize> {
    crate::error::ensure_driver()?;
    cudarc::driver::result::init()
        .map_err(|e| Error::Cuda(format!("no usable NVIDIA driver: {e}")))?;
    let n = cudarc::driver::result::device::get_count().map_err(|e| Error::Cuda(e.to_string()))?;
    Ok(n.max(0) as usize)
}

/// Forwards a PE's output line by line with its prefix. Lines are bytes, not UTF-8: a PE may
/// print anything (a GPU's printf buffer included), and stopping to read would close the pipe
/// and kill the PE with EPIPE.
fn forward(
    pe: usize,
    stream: impl std::io::Read + Send + 'static,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&buf);
            let line = text.trim_end_matches(['\n', '\r']);
            let _ = if to_stderr {
                writeln!(std::io::stderr().lock(), "[pe {pe}] {line}")
            } else {
                writeln!(std::io::stdout().lock(), "[pe {pe}] {line}")
            };
        }
    })
}

/// What [`run_as_pes`] made of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// This process is a PE: start the runtime and do the work.
    Pe,
    /// This process launched the PEs, and all of them succeeded: exit.
    LaunchedAll,
}

/// Lets a program be started directly: if this process is not already a PE (no
/// `SHMEM_RANK`, no cluster launcher's rank), it re-runs itself once per PE (`n`, default one
/// per visible GPU) under [`launch`] and reports how that went.
pub fn run_as_pes(n: Option<usize>) -> Result<Role> {
    let env = |k: &str| std::env::var(k).ok();
    if crate::runtime::Bootstrap::from_env(env).is_ok() {
        return Ok(Role::Pe);
    }
    let n = match n {
        Some(n) => n,
        None => visible_gpus()?,
    };
    if n == 0 {
        return Err(Error::Launch("no GPU visible".into()));
    }
    let program = std::env::current_exe()
        .map_err(|e| Error::Launch(format!("cannot find this program: {e}")))?;
    launch(&LaunchSpec {
        n,
        gpus: Some(visible_gpus()?),
        program,
        args: std::env::args_os().skip(1).collect(),
        timeout: None,
        env: Vec::new(),
    })?;
    Ok(Role::LaunchedAll)
}

/// The PEs a program runs when started directly and the simulator is chosen (`--pes` or
/// the `n` of [`run`] overrides it).
pub const SIM_DEFAULT_PES: usize = 2;

/// Where [`run`] runs a program's PEs, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// GPUs (one process per PE, this program re-run under [`launch`]) or the simulator
    /// (threads of this process).
    pub backend: BackendKind,
    /// Why, in words (shown when the simulator is chosen).
    pub why: String,
}

impl Choice {
    fn gpu() -> Choice {
        Choice {
            backend: BackendKind::Gpu,
            why: "GPUs visible".into(),
        }
    }
    fn sim(why: impl Into<String>) -> Choice {
        Choice {
            backend: BackendKind::Simulator,
            why: why.into(),
        }
    }
}

/// The backend for a program started directly: `SHMEM_SIM=1` asks for the simulator,
/// `SHMEM_SIM=0` for GPUs (an error where there are none); otherwise GPUs if the driver
/// sees any, else the simulator (`gpus` is what [`visible_gpus`] said).
pub fn choose_backend(sim_var: Option<&str>, gpus: &Result<usize>) -> Result<Choice> {
    match sim_var.map(str::trim) {
        Some("1") => return Ok(Choice::sim("SHMEM_SIM=1")),
        Some("0") => {
            return match gpus {
                Ok(n) if *n > 0 => Ok(Choice::gpu()),
                Ok(_) => Err(Error::Launch(
                    "no GPU visible (and SHMEM_SIM=0 refuses the CPU simulator)".into(),
                )),
                Err(e) => Err(Error::Launch(format!(
                    "{e} (and SHMEM_SIM=0 refuses the CPU simulator)"
                ))),
            };
        }
        Some(v) if !v.is_empty() => {
            return Err(Error::Invalid(format!(
                "SHMEM_SIM={v:?}: 1 for the CPU simulator, 0 for GPUs only"
            )));
        }
        _ => {}
    }
    Ok(match gpus {
        Ok(n) if *n > 0 => Choice::gpu(),
        Ok(_) => Choice::sim("no GPU visible"),
        Err(e) if e.to_string().contains("no NVIDIA driver") => Choice::sim("no NVIDIA driver"),
        Err(e) => Choice::sim(format!("no usable GPU: {e}")),
    })
}

/// The PE count `SHMEM_PES` asks for, if set.
pub fn pes_from_env(v: Option<&str>) -> Result<Option<usize>> {
    match v.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(Error::Invalid(format!(
                "SHMEM_PES={v:?} is not a positive number of PEs"
            ))),
        },
    }
}

/// Runs a program's per-PE code `pe` on every PE, wherever this process stands:
///
/// - in a PE (started by [`launch`], `shmem-run`, `mpirun` or `srun`): runs `pe` once;
/// - started directly, with GPUs: re-runs this program once per PE (`n`, else `SHMEM_PES`,
///   else one per visible GPU) under [`launch`], and reports how that went;
/// - started directly without a GPU (or with `SHMEM_SIM=1`): runs `pe` on `n` PEs (else
///   `SHMEM_PES`, else [`SIM_DEFAULT_PES`]) as threads of this process on the CPU simulator
///   ([`crate::sim::run`]), after saying so on standard error.
///
/// In every case `pe` starts the runtime with [`crate::Shmem::init`]. `Ok` when every PE's
/// `pe` returned `Ok`; otherwise the error names the PE that failed first.
pub fn run(n: Option<usize>, pe: impl Fn() -> Result<()> + Sync) -> Result<()> {
    if crate::runtime::Bootstrap::from_env(|k| std::env::var(k).ok()).is_ok() {
        return pe();
    }
    let n = match n {
        Some(n) => Some(n),
        None => pes_from_env(std::env::var("SHMEM_PES").ok().as_deref())?,
    };
    if n == Some(0) {
        return Err(Error::Invalid("cannot run 0 PEs".into()));
    }
    let sim_var = std::env::var("SHMEM_SIM").ok();
    let gpus = match sim_var.as_deref().map(str::trim) {
        Some("1") => Ok(0),
        _ => visible_gpus(),
    };
    let choice = choose_backend(sim_var.as_deref(), &gpus)?;
    match choice.backend {
        BackendKind::Gpu => match run_as_pes(n)? {
            Role::Pe => pe(),
            Role::LaunchedAll => Ok(()),
        },
        BackendKind::Simulator => simulate(n.unwrap_or(SIM_DEFAULT_PES), &choice.why, pe),
    }
}

#[cfg(feature = "sim")]
fn simulate(n: usize, why: &str, pe: impl Fn() -> Result<()> + Sync) -> Result<()> {
    eprintln!(
        "shmem: running {n} PEs on the CPU simulator ({why}); kernels run on simulated GPU \
         threads, slowly: use small problem sizes (SHMEM_SIM=0 refuses the simulator)"
    );
    crate::sim::run(n as u32, pe).map(drop)
}

#[cfg(not(feature = "sim"))]
fn simulate(_: usize, why: &str, _: impl Fn() -> Result<()> + Sync) -> Result<()> {
    Err(Error::Launch(format!(
        "{why}, and this program was built without shmem-host's `sim` feature (the CPU simulator)"
    )))
}

/// Runs `spec.n` copies of the program and waits for all of them. `Ok` if every PE exited
/// with status 0.
pub fn launch(spec: &LaunchSpec) -> Result<()> {
    if spec.n == 0 {
        return Err(Error::Launch("cannot launch 0 PEs".into()));
    }
    let placement = Placement::new(spec.n, spec.gpus, mps_running())?;
    let dir = std::env::temp_dir().join(format!(
        "shmem-run-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::Launch(format!("creating {}: {e}", dir.display())))?;
    let uid_file = dir.join("uid");
    let mut children: Vec<Child> = Vec::new();
    let mut pumps = Vec::new();
    for pe in 0..spec.n {
        let mut cmd = Command::new(&spec.program);
        if let Some(p) = placement.mps_percentage
            && std::env::var_os("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").is_none()
        {
            cmd.env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", p.to_string());
        }
        let spawned = cmd
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("SHMEM_RANK", pe.to_string())
            .env("SHMEM_NRANKS", spec.n.to_string())
            .env("SHMEM_LOCAL_RANK", placement.device[pe].to_string())
            .env("SHMEM_UID_FILE", &uid_file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so stopping a PE stops everything it started.
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                stop(&mut children);
                return Err(Error::Launch(format!(
                    "cannot start PE {pe} ({}): {e}",
                    spec.program.display()
                )));
            }
        };
        pumps.push(forward(pe, child.stdout.take().expect("piped"), false));
        pumps.push(forward(pe, child.stderr.take().expect("piped"), true));
        children.push(child);
    }
    let start = Instant::now();
    let mut done = vec![false; spec.n];
    let outcome = loop {
        let mut failed = None;
        for (pe, c) in children.iter_mut().enumerate() {
            if done[pe] {
                continue;
            }
            match c.try_wait() {
                Ok(Some(st)) if st.success() => done[pe] = true,
                Ok(Some(st)) => {
                    done[pe] = true;
                    failed = Some(format!("PE {pe} {}", describe(st)));
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    failed = Some(format!("cannot wait for PE {pe}: {e}"));
                    break;
                }
            }
        }
        if let Some(f) = failed {
            break Err(f);
        }
        if done.iter().all(|d| *d) {
            break Ok(());
        }
        if spec.timeout.is_some_and(|t| start.elapsed() > t) {
            break Err(format!(
                "timed out after {:?}",
                spec.timeout.unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped: Vec<usize> = (0..spec.n).filter(|pe| !done[*pe]).collect();
    if outcome.is_err() {
        stop(&mut children);
    }
    for p in pumps {
        let _ = p.join();
    }
    let _ = std::fs::remove_dir_all(&dir);
    outcome.map_err(|why| {
        let others = if stopped.is_empty() {
            String::new()
        } else {
            format!(
                "; stopped PE {}",
                stopped
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        Error::Launch(format!("{why}{others}"))
    })
}

/// Stops every PE still running and whatever it started: SIGTERM to each process group,
/// then SIGKILL to those still there after a grace period.
fn stop(children: &mut [Child]) {
    let signal_all = |children: &mut [Child], sig: i32| {
        for c in children.iter_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                // SAFETY: `kill` on the process group we created for this child (its pid).
                unsafe { libc::kill(-(c.id() as i32), sig) };
            }
        }
    };
    signal_all(children, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline
        && children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_all(children, libc::SIGKILL);
    for c in children.iter_mut() {
        let _ = c.wait();
        // Children of the PE (same group) may outlive it briefly; make sure they go too.
        // SAFETY: as above; the group id is still ours to signal.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
    }
}

/// The harness of GPU tests: runs `body` on `pes` PEs (default `SHMEM_GPU_PES`, else one per
/// visible GPU) when `SHMEM_GPU_TESTS=1`, and prints that the test was skipped otherwise.
///
/// In the test runner's process it re-runs the test binary once per PE under [`launch`]
/// (`<name> --exact`) and panics, naming the failure, if any PE fails. In a PE (started by
/// [`launch`], `mpirun` or `srun`) it starts the runtime, runs `body`, and ends with a
/// barrier. `name` is the test's name as the harness knows it (its path within the binary).
pub fn gpu_test(name: &str, pes: Option<usize>, body: impl FnOnce(&crate::Shmem)) {
    if std::env::var("SHMEM_GPU_TESTS").as_deref() != Ok("1") {
        eprintln!("skipped {name}: set SHMEM_GPU_TESTS=1 on a machine with GPUs");
        return;
    }
    if crate::runtime::Bootstrap::from_env(|k| std::env::var(k).ok()).is_ok() {
        // Tells the runner this PE reached the test (a `name` that matches no test would
        // otherwise run nothing and pass); before the body, which may end the process.
        if let Some(dir) = std::env::var_os(RAN_DIR) {
            let rank = std::env::var("SHMEM_RANK").unwrap_or_default();
            std::fs::write(PathBuf::from(dir).join(rank), name)
                .expect("the runner's marker directory");
        }
        let rt = crate::Shmem::init().expect("NVSHMEM starts");
        body(&rt);
        rt.barrier_all().expect("final barrier");
        println!("PE {}/{}: {name} ok", rt.my_pe(), rt.n_pes());
        return;
    }
    let gpus = visible_gpus().expect("a CUDA driver");
    let n = match (pes, std::env::var("SHMEM_GPU_PES")) {
        (Some(n), _) => n,
        (None, Ok(v)) => v.parse().expect("SHMEM_GPU_PES is a number"),
        (None, Err(_)) => gpus,
    };
    let args = [name, "--exact", "--nocapture", "--test-threads=1"]
        .map(Into::into)
        .to_vec();
    let ran = std::env::temp_dir().join(format!(
        "shmem-gpu-test-{}-{name}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&ran).expect("a marker directory");
    let launched = launch(&LaunchSpec {
        n,
        gpus: Some(gpus),
        program: std::env::current_exe().expect("the test binary"),
        args,
        timeout: Some(Duration::from_secs(100)),
        env: vec![(RAN_DIR.into(), ran.clone().into())],
    });
    let marks = std::fs::read_dir(&ran).map_or(0, |d| d.count());
    let _ = std::fs::remove_dir_all(&ran);
    launched.unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        marks, n,
        "{name}: {marks} of {n} PEs reached the test; `name` must be the test's path in \
         its binary (the function's name for a test at the top of the file)"
    );
}

/// Where [`gpu_test`]'s PEs mark that they ran the body.
const RAN_DIR: &str = "SHMEM_GPU_TEST_RAN";

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, n: usize) -> LaunchSpec {
        LaunchSpec {
            n,
            gpus: None,
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            timeout: Some(Duration::from_secs(60)),
            env: Vec::new(),
        }
    }

    #[test]
    fn all_succeed() {
        launch(&sh(
            r#"test "$SHMEM_NRANKS" = 3 && test -n "$SHMEM_UID_FILE" && echo "rank $SHMEM_RANK""#,
            3,
        ))
        .unwrap();
    }

    #[test]
    fn a_failing_pe_stops_the_others_quickly_and_is_named() {
        let t = Instant::now();
        let e = launch(&sh(
            r#"if [ "$SHMEM_RANK" = 1 ]; then exit 3; fi; sleep 30"#,
            3,
        ))
        .unwrap_err()
        .to_string();
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t.elapsed()
        );
        assert!(e.contains("PE 1 exited with status 3"), "{e}");
        assert!(e.contains("stopped PE 0, 2"), "{e}");
    }

    #[test]
    fn output_that_is_not_utf8_is_forwarded_and_does_not_break_the_pipe() {
        // Invalid UTF-8, then more output: the PE must not die of EPIPE.
        launch(&sh(
            r#"printf 'bad \377\376 bytes\n'; sleep 0.2; echo after; echo more >&2"#,
            2,
        ))
        .unwrap();
    }

    #[test]
    fn a_killed_pe_is_reported_with_its_signal() {
        let e = launch(&sh(
            r#"if [ "$SHMEM_RANK" = 0 ]; then kill -9 $$; fi; sleep 30"#,
            2,
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("PE 0 was killed by signal 9") && e.contains("stopped PE 1"),
            "{e}"
        );
    }

    #[test]
    fn bad_program_and_zero_pes() {
        let e = launch(&LaunchSpec {
            n: 2,
            gpus: None,
            program: "/nonexistent/prog".into(),
            args: vec![],
            timeout: None,
            env: Vec::new(),
        })
        .unwrap_err();
        assert!(e.to_string().contains("cannot start PE 0"), "{e}");
        assert!(launch(&sh("true", 0)).is_err());
    }

    #[test]
    fn missing_driver_is_an_error_not_a_panic() {
        // On a machine with a driver this counts GPUs; without one it must say so.
        match visible_gpus() {
            Ok(n) => eprintln!("driver present: {n} GPUs"),
            Err(e) => assert!(
                e.to_string().contains("no NVIDIA driver")
                    && e.to_string().contains("libcuda.so.1"),
                "{e}"
            ),
        }
    }

    #[test]
    fn backend_choice() {
        let none = || Err(Error::Cuda("no NVIDIA driver: libcuda.so.1 missing".into()));
        assert_eq!(choose_backend(None, &Ok(2)).unwrap(), Choice::gpu());
        assert_eq!(
            choose_backend(None, &Ok(0)).unwrap(),
            Choice::sim("no GPU visible")
        );
        assert_eq!(
            choose_backend(None, &none()).unwrap(),
            Choice::sim("no NVIDIA driver")
        );
        assert_eq!(
            choose_backend(Some("1"), &Ok(8)).unwrap(),
            Choice::sim("SHMEM_SIM=1")
        );
        assert_eq!(choose_backend(Some("0"), &Ok(1)).unwrap(), Choice::gpu());
        let e = choose_backend(Some("0"), &none()).unwrap_err().to_string();
        assert!(
            e.contains("no NVIDIA driver") && e.contains("SHMEM_SIM=0"),
            "{e}"
        );
        let e = choose_backend(Some("yes"), &Ok(1)).unwrap_err().to_string();
        assert!(e.contains("SHMEM_SIM=\"yes\""), "{e}");
    }

    #[test]
    fn placement_round_robin_and_mps() {
        let p = Placement::new(4, Some(2), true).unwrap();
        assert_eq!(p.device, vec![0, 1, 0, 1]);
        assert_eq!(p.mps_percentage, Some(50));
        let p = Placement::new(2, Some(2), false).unwrap();
        assert_eq!((p.device, p.mps_percentage), (vec![0, 1], None));
        let p = Placement::new(3, Some(1), true).unwrap();
        assert_eq!((p.device, p.mps_percentage), (vec![0, 0, 0], Some(33)));
        let e = Placement::new(2, Some(1), false).unwrap_err().to_string();
        assert!(
            e.contains("2 PEs would share 1 GPU") && e.contains("nvidia-cuda-mps-control -d"),
            "{e}"
        );
        assert!(Placement::new(2, Some(0), true).is_err());
        assert_eq!(
            Placement::new(3, None, false).unwrap().device,
            vec![0, 1, 2]
        );
    }

    #[test]
    fn more_pes_than_gpus_without_mps_is_refused_before_starting_any() {
        let dir = std::env::temp_dir().join(format!("shmem-mps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let marker = dir.join("started");
        let mut s = sh(
            &format!("mkdir -p {0} && touch {1}", dir.display(), marker.display()),
            2,
        );
        s.gpus = Some(1);
        if mps_running() {
            return eprintln!("MPS is running here; nothing to refuse");
        }
        let e = launch(&s).unwrap_err().to_string();
        assert!(e.contains("CUDA MPS"), "{e}");
        assert!(!marker.exists(), "a PE was started");
    }

    #[test]
    fn pe_count_from_the_environment() {
        assert_eq!(pes_from_env(None).unwrap(), None);
        assert_eq!(pes_from_env(Some("4")).unwrap(), Some(4));
        for bad in ["0", "four", "-1"] {
            let e = pes_from_env(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("SHMEM_PES"), "{e}");
        }
        let e = run(Some(0), || Ok(())).unwrap_err().to_string();
        assert!(e.contains("cannot run 0 PEs"), "{e}");
    }

    #[test]
    fn timeout_stops_everyone() {
        let mut s = sh("sleep 30", 2);
        s.timeout = Some(Duration::from_millis(300));
        let e = launch(&s).unwrap_err().to_string();
        assert!(
            e.contains("timed out") && e.contains("stopped PE 0, 1"),
            "{e}"
        );
    }
}
