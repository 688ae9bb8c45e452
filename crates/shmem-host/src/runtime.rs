//! The runtime handle: NVSHMEM started on this process's GPU, finalized on drop.
//!
//! One PE per process, one GPU per PE. [`Shmem::init`] reads how to start from the
//! environment:
//!
//! - under `shmem-run` (or [`crate::launcher`]): `SHMEM_RANK`, `SHMEM_NRANKS`,
//!   `SHMEM_LOCAL_RANK` and `SHMEM_UID_FILE`. Rank 0 creates NVSHMEM's unique id and
//!   publishes it in that file; the others read it; all start with
//!   `NVSHMEMX_INIT_WITH_UNIQUEID`;
//! - otherwise, under a cluster launcher (`mpirun`, `srun`): NVSHMEM bootstraps itself —
//!   through MPI under Open MPI, through PMIx under another PMIx launcher, as
//!   [`cluster_bootstrap`] decides unless `NVSHMEM_BOOTSTRAP` is set — on the GPU of the
//!   launcher's local rank.

use crate::backend::gpu::{Gpu, Start};
use crate::backend::{Backend, PeInfo};
use crate::error::{Error, Result};
use crate::nvshmem::{HostSync, Nvshmem, sys::RawUniqueId};
use crate::stream::StreamRef;
use cudarc::driver::{CudaContext, CudaStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// NVSHMEM's unique id: 128 opaque bytes that rank 0 makes and every rank starts with.
#[derive(Clone, Copy)]
pub struct UniqueId(pub(crate) RawUniqueId);

impl UniqueId {
    /// Asks NVSHMEM for a fresh id (rank 0 only).
    pub fn new() -> Result<UniqueId> {
        Ok(UniqueId(Nvshmem::load()?.get_uniqueid()?))
    }

    /// The 128 bytes, to hand to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        let mut out = [0u8; 128];
        out[..4].copy_from_slice(&self.0.version.to_ne_bytes());
        out[4..].copy_from_slice(&self.0.internal);
        out
    }

    /// Rebuilds an id from [`UniqueId::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let b: &[u8; 128] = bytes.try_into().map_err(|_| {
            Error::Bootstrap(format!("a unique id is 128 bytes, got {}", bytes.len()))
        })?;
        let mut internal = [0u8; 124];
        internal.copy_from_slice(&b[4..]);
        Ok(UniqueId(RawUniqueId {
            version: i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            internal,
        }))
    }
}

/// Writes the id where the other ranks wait for it (atomically: write, then rename).
pub fn publish_uid(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes)
        .map_err(|e| Error::Bootstrap(format!("writing {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::Bootstrap(format!("publishing {}: {e}", path.display())))
}

/// Waits up to `timeout` for rank 0 to publish the id.
pub fn wait_uid(path: &Path, timeout: Duration) -> Result<Vec<u8>> {
    let start = Instant::now();
    loop {
        if let Ok(b) = std::fs::read(path) {
            return Ok(b);
        }
        if start.elapsed() > timeout {
            return Err(Error::Bootstrap(format!(
                "rank 0 did not publish NVSHMEM's unique id in {} within {:?} (did rank 0 fail?)",
                path.display(),
                timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How this process was asked to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// Our launcher: rank, size, local rank, unique-id file.
    Launcher {
        /// This PE.
        rank: i32,
        /// PEs in all.
        nranks: i32,
        /// Index among this node's PEs (the GPU ordinal).
        local_rank: usize,
        /// Where rank 0 publishes the unique id.
        uid_file: std::path::PathBuf,
    },
    /// A cluster launcher; NVSHMEM bootstraps itself through PMI/PMIx/MPI.
    Pmi {
        /// The GPU ordinal, from the launcher's local rank.
        local_rank: usize,
    },
}

impl Bootstrap {
    /// Reads the environment (through `get`, so tests can supply one).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Bootstrap> {
        let num = |k: &str| -> Result<Option<i64>> {
            get(k)
                .map(|v| {
                    v.trim()
                        .parse::<i64>()
                        .map_err(|_| Error::Bootstrap(format!("{k}={v:?} is not a number")))
                })
                .transpose()
        };
        if let Some(rank) = num("SHMEM_RANK")? {
            let nranks = num("SHMEM_NRANKS")?.ok_or_else(|| {
                Error::Bootstrap("SHMEM_RANK is set but SHMEM_NRANKS is not".into())
            })?;
            if rank < 0 || rank >= nranks {
                return Err(Error::Bootstrap(format!(
                    "SHMEM_RANK={rank} is outside 0..{nranks}"
                )));
            }
            let uid_file = get("SHMEM_UID_FILE").ok_or_else(|| {
                Error::Bootstrap("SHMEM_RANK is set but SHMEM_UID_FILE is not".into())
            })?;
            let local_rank = num("SHMEM_LOCAL_RANK")?.unwrap_or(rank) as usize;
            return Ok(Bootstrap::Launcher {
                rank: rank as i32,
                nranks: nranks as i32,
                local_rank,
                uid_file: uid_file.into(),
            });
        }
        for k in [
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "SLURM_LOCALID",
            "MPI_LOCALRANKID",
            "MV2_COMM_WORLD_LOCAL_RANK",
            "PMI_LOCAL_RANK",
            "PALS_LOCAL_RANKID",
        ] {
            if let Some(l) = num(k)? {
                return Ok(Bootstrap::Pmi {
                    local_rank: l as usize,
                });
            }
        }
        Err(Error::Bootstrap(
            "no launcher environment: run under `shmem-run -n N -- <program>` (or shmem_host::launcher), \
             or under mpirun/srun so that NVSHMEM can bootstrap through PMI"
                .into(),
        ))
    }
}

/// The bootstrap to ask NVSHMEM for under a cluster launcher, unless the user chose one
/// (`NVSHMEM_BOOTSTRAP` / `NVSHMEM_BOOTSTRAP_PMI` set): under Open MPI, NVSHMEM's MPI
/// bootstrap (its PMIx plugin failed against the PMIx of the Open MPI 5.0.11 wheel:
/// `undefined symbol: pmix_value_load`; the MPI plugin ran); under another PMIx launcher
/// (srun with PMIx), NVSHMEM's PMIx bootstrap.
pub fn cluster_bootstrap(
    get: impl Fn(&str) -> Option<String>,
) -> Option<(&'static str, &'static str)> {
    if get("NVSHMEM_BOOTSTRAP").is_some() || get("NVSHMEM_BOOTSTRAP_PMI").is_some() {
        return None;
    }
    if get("OMPI_COMM_WORLD_RANK").is_some() {
        Some(("NVSHMEM_BOOTSTRAP", "MPI"))
    } else if get("PMIX_RANK").is_some() {
        Some(("NVSHMEM_BOOTSTRAP_PMI", "PMIX"))
    } else {
        None
    }
}

/// NVSHMEM running on this process's GPU, or one PE of the CPU simulator. Dropping it
/// finalizes NVSHMEM; everything that borrows it (symmetric buffers, modules) is gone by
/// then, because the borrow says so.
///
/// The same program runs on either backend: [`crate::launcher::run`] starts one process per
/// GPU, or, where there is no GPU, the PEs as threads of this process on the CPU simulator
/// ([`crate::sim`]), where [`Shmem::init`] returns the simulated PE. What only a GPU has
/// (its CUDA context and stream, device addresses, CUDA C++ modules) is an
/// [`Error::Simulator`] there; [`Shmem::synchronize`] and [`Shmem::mark`] work on both.
///
/// Collective calls ([`Shmem::alloc`], [`Shmem::barrier_all`], [`Shmem::sync_all`], their
/// on-stream forms, [`Shmem::min_max`], loading modules and launching collective kernels)
/// are made by every PE, in the same order.
///
/// A kernel that stops on the GPU (a panic, which traps; a wait past its bound) leaves this
/// PE's CUDA context unusable. The first wait that sees it returns the error (an event's
/// included); from then on the calls that need NVSHMEM or the context return errors, and
/// dropping buffers, modules, teams and the runtime skips NVSHMEM's calls that would wait on
/// the device or on other PEs forever, so the process ends with the error instead of
/// hanging (the launcher then stops the other PEs).
pub struct Shmem {
    pub(crate) backend: Box<dyn Backend>,
    pe: PeInfo,
}

/// Where a program's PEs run: the one notion of backend, shared by the runtime
/// ([`Shmem::backend_kind`]) and the launcher ([`crate::launcher::choose_backend`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// NVSHMEM on a GPU, one process per PE.
    Gpu,
    /// The CPU simulator, one thread per PE ([`crate::sim`]).
    Simulator,
}

/// A point in a PE's work, for timing it: a CUDA event recorded on the runtime's stream, or
/// the host clock under the simulator (where launches return when the grid has finished).
pub struct Mark(MarkAt);

enum MarkAt {
    Event(cudarc::driver::CudaEvent),
    Clock(Instant),
}

impl Mark {
    pub(crate) fn event(e: cudarc::driver::CudaEvent) -> Mark {
        Mark(MarkAt::Event(e))
    }

    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub(crate) fn clock() -> Mark {
        Mark(MarkAt::Clock(Instant::now()))
    }

    /// The CUDA event, on a GPU.
    pub(crate) fn cuda_event(&self) -> Option<&cudarc::driver::CudaEvent> {
        match &self.0 {
            MarkAt::Event(e) => Some(e),
            MarkAt::Clock(_) => None,
        }
    }

    /// Waits until the work before the mark has finished.
    pub fn synchronize(&self) -> Result<()> {
        match &self.0 {
            MarkAt::Event(e) => Ok(e.synchronize()?),
            MarkAt::Clock(_) => Ok(()),
        }
    }

    /// Whether the work before the mark has finished (always, under the simulator).
    pub fn is_done(&self) -> Result<bool> {
        match &self.0 {
            MarkAt::Event(e) => Ok(e.try_is_complete()?),
            MarkAt::Clock(_) => Ok(true),
        }
    }

    /// Seconds from `earlier` to this mark, once this mark's work has finished.
    pub fn seconds_since(&self, earlier: &Mark) -> Result<f64> {
        match (&earlier.0, &self.0) {
            (MarkAt::Event(a), MarkAt::Event(b)) => Ok(f64::from(a.elapsed_ms(b)?) * 1e-3),
            (MarkAt::Clock(a), MarkAt::Clock(b)) => Ok(b.duration_since(*a).as_secs_f64()),
            _ => Err(Error::Invalid(
                "marks of different runtimes cannot be compared".into(),
            )),
        }
    }
}

impl Shmem {
    fn with(backend: Box<dyn Backend>) -> Result<Shmem> {
        let pe = backend.pe();
        let rt = Shmem { backend, pe };
        if let Some(bound) = wait_bound_from(std::env::var("SHMEM_WAIT_TIMEOUT").ok())? {
            rt.set_wait_bound(Some(bound));
        }
        Ok(rt)
    }

    /// Bounds every wait of the kernels of modules loaded from now on
    /// ([`shmem_device::bound`]): a wait that lasts longer stops its kernel, and the next
    /// synchronisation returns [`Error::WaitTimedOut`] with the report. `None`: unbounded
    /// (the default). `SHMEM_WAIT_TIMEOUT` (`2s`, `500ms`, `1.5`) sets it at start-up, so
    /// a program can be run bounded without a change. On a GPU the bound is written into
    /// each module as it loads, so modules loaded earlier keep theirs; on the simulator it
    /// holds from the next launch.
    pub fn set_wait_bound(&self, bound: Option<Duration>) {
        let ns = bound.map_or(0, |d| (d.as_nanos().min(u64::MAX as u128) as u64).max(1));
        self.backend.set_wait_bound(ns);
    }

    /// Starts NVSHMEM as the environment says (see the module documentation). On a thread
    /// that [`crate::sim::run`] started, returns that thread's simulated PE instead.
    pub fn init() -> Result<Shmem> {
        #[cfg(feature = "sim")]
        if let Some(pe) = crate::sim::take_thread_pe()? {
            return Shmem::with(Box::new(pe));
        }
        match Bootstrap::from_env(|k| std::env::var(k).ok())? {
            Bootstrap::Launcher {
                rank,
                nranks,
                local_rank,
                uid_file,
            } => {
                let uid = if rank == 0 {
                    let id = UniqueId::new()?;
                    publish_uid(&uid_file, &id.to_bytes())?;
                    id
                } else {
                    UniqueId::from_bytes(&wait_uid(&uid_file, Duration::from_secs(120))?)?
                };
                Shmem::init_with_uid(rank, nranks, &uid, local_rank)
            }
            Bootstrap::Pmi { local_rank } => Shmem::init_pmi(local_rank),
        }
    }

    /// Starts NVSHMEM with a unique id handed over by the caller, on GPU `device`.
    pub fn init_with_uid(rank: i32, nranks: i32, uid: &UniqueId, device: usize) -> Result<Shmem> {
        let how = Start::UniqueId {
            rank,
            nranks,
            uid: &uid.0,
        };
        Shmem::with(Box::new(Gpu::start(device, how)?))
    }

    /// Starts NVSHMEM through its own PMI/PMIx/MPI bootstrap, on GPU `device`.
    pub fn init_pmi(device: usize) -> Result<Shmem> {
        if let Some((var, value)) = cluster_bootstrap(|k| std::env::var(k).ok()) {
            // SAFETY: set before NVSHMEM starts and before this crate starts any thread; NVSHMEM
            // reads it during init.
            unsafe { std::env::set_var(var, value) };
        }
        Shmem::with(Box::new(Gpu::start(device, Start::Bootstrapped)?))
    }

    /// The GPU backend, or the error that says this PE runs on the simulator.
    pub(crate) fn gpu(&self) -> Result<&Gpu> {
        self.backend.gpu()
    }

    /// Where this PE runs.
    pub fn backend_kind(&self) -> BackendKind {
        self.pe.kind
    }

    /// Whether this PE runs on the CPU simulator.
    pub fn is_simulated(&self) -> bool {
        self.pe.kind == BackendKind::Simulator
    }

    /// This PE's number in the world team.
    pub fn my_pe(&self) -> i32 {
        self.pe.my_pe
    }
    /// The number of PEs.
    pub fn n_pes(&self) -> i32 {
        self.pe.n_pes
    }
    /// This PE's number on its node (`NVSHMEMX_TEAM_NODE`; every simulated PE shares one node).
    pub fn node_pe(&self) -> i32 {
        self.pe.node_pe
    }
    /// PEs on this node.
    pub fn node_n_pes(&self) -> i32 {
        self.pe.node_n_pes
    }
    /// The host library's version, `(major, minor, patch)`; under the simulator, the
    /// NVSHMEM version whose semantics it follows (`sim::NVSHMEM_VERSION`).
    pub fn version(&self) -> (u32, u32, u32) {
        self.pe.version
    }
    /// Whether dependent launches ([`crate::LaunchConfig::with_dependent_launch`]) can begin
    /// before the previous kernel on their stream has completed on this PE: its GPU is sm_90
    /// or later and no other PE shares it (false on the simulator). A given launch then does
    /// when it is not cooperative and its module is built for sm_90 or later (or CUDA C++);
    /// elsewhere it is an ordinary launch.
    pub fn dependent_launches_overlap(&self) -> bool {
        self.backend.overlaps_dependents()
    }
    /// Streaming multiprocessors of this PE's GPU (under the simulator, the number it
    /// models), shared with the other PEs on the GPU where several are (CUDA MPS).
    pub fn multiprocessors(&self) -> Result<u32> {
        self.backend.multiprocessors()
    }
    /// The CUDA context of this PE's GPU ([`Error::Simulator`] under the simulator).
    pub fn context(&self) -> Result<&Arc<CudaContext>> {
        Ok(&self.gpu()?.ctx)
    }
    /// The stream launches and on-stream operations use ([`Error::Simulator`] under the
    /// simulator).
    pub fn stream(&self) -> Result<&Arc<CudaStream>> {
        Ok(&self.gpu()?.stream)
    }

    /// Waits until the work launched on this PE has finished (the stream, on a GPU; under
    /// the simulator a launch returns when its grid has finished).
    pub fn synchronize(&self) -> Result<()> {
        self.backend.synchronize()
    }

    /// Marks this point of the PE's work, for timing ([`Mark::seconds_since`]): an event
    /// recorded on the stream, or the host clock under the simulator.
    pub fn mark(&self) -> Result<Mark> {
        self.backend.mark_on(crate::StreamRef::Runtime)
    }

    /// Holds `stream` on the device: what is enqueued on it after this call waits on the
    /// GPU until the returned [`StreamHold`] is released or dropped. For timing: events
    /// around work enqueued while the stream is held measure the GPU's time alone, without
    /// the gaps where the GPU waited for the host to enqueue the next launch (as when a
    /// stream is busy with earlier work; nvbench's blocking kernel does the same). Under
    /// the simulator, where work runs as it is enqueued, there is nothing to hold.
    ///
    /// Release it before waiting on the host for an event of `stream` ([`Mark`]): that wait
    /// would never end. The runtime's own waits ([`Shmem::synchronize`], host barriers)
    /// release every hold first. Enqueue a round's worth of work meanwhile, not thousands
    /// of launches: the driver's queue is finite, and a full one blocks the host. Refused
    /// while a capture runs.
    ///
    /// ```no_run
    /// # fn f(rt: &shmem_host::Shmem) -> shmem_host::Result<()> {
    /// let hold = rt.hold(shmem_host::StreamRef::Runtime)?;
    /// let start = rt.mark()?;
    /// // ... launches ...
    /// let end = rt.mark()?;
    /// hold.release();
    /// end.synchronize()?;
    /// let gpu_seconds = end.seconds_since(&start)?;
    /// # Ok(()) }
    /// ```
    pub fn hold(&self, stream: crate::StreamRef<'_>) -> Result<StreamHold<'_>> {
        Ok(StreamHold {
            rt: self,
            ticket: self.backend.hold(stream)?,
        })
    }

    /// Checks that `pe` names a PE.
    pub fn check_pe(&self, pe: i32) -> Result<i32> {
        let n = self.n_pes();
        if (0..n).contains(&pe) {
            Ok(pe)
        } else {
            Err(Error::Invalid(format!(
                "PE {pe} is out of range: there are {n} PEs (0..{n})"
            )))
        }
    }

    /// Completes this PE's operations and waits for every PE (host-side, after synchronising
    /// this PE's stream). Collective.
    pub fn barrier_all(&self) -> Result<()> {
        self.backend.sync(HostSync::BarrierAll, StreamRef::Runtime)
    }
    /// Waits for every PE without completing operations. Collective.
    pub fn sync_all(&self) -> Result<()> {
        self.backend.sync(HostSync::SyncAll, StreamRef::Runtime)
    }
    /// Completes this PE's host-initiated operations (none are pending under the simulator,
    /// whose launches complete their operations before they return).
    pub fn quiet(&self) -> Result<()> {
        self.backend.sync(HostSync::Quiet, StreamRef::Runtime)
    }
    /// [`Shmem::barrier_all`] enqueued on `stream` (`StreamRef::Runtime`: the runtime's;
    /// at once under the simulator). Collective.
    pub fn barrier_all_on(&self, stream: StreamRef<'_>) -> Result<()> {
        self.backend.sync(HostSync::BarrierAllOnStream, stream)
    }
    /// [`Shmem::sync_all`] enqueued on `stream` (at once under the simulator). Collective.
    pub fn sync_all_on(&self, stream: StreamRef<'_>) -> Result<()> {
        self.backend.sync(HostSync::SyncAllOnStream, stream)
    }
    /// [`Shmem::quiet`] enqueued on `stream`.
    pub fn quiet_on(&self, stream: StreamRef<'_>) -> Result<()> {
        self.backend.sync(HostSync::QuietOnStream, stream)
    }

    /// The smallest and largest of every PE's `value`. Collective: every PE calls it; it
    /// waits for the runtime's stream.
    pub fn min_max(&self, value: i64) -> Result<(i64, i64)> {
        self.backend.min_max(value)
    }

    /// Allocates `len` elements on the symmetric heap, zero-filled. Collective: every PE must
    /// call it with the same `len`; if they differ, every PE gets
    /// [`Error::UnequalAllocation`] and nothing is allocated.
    pub fn alloc<T: Copy + 'static>(&self, len: usize) -> Result<crate::buffer::SymBuffer<'_, T>> {
        crate::buffer::SymBuffer::new(self, len)
    }
}

/// A bound from `SHMEM_WAIT_TIMEOUT`: seconds (`2`, `1.5`, `2s`) or milliseconds
/// (`500ms`); `0` or unset: none.
pub(crate) fn wait_bound_from(v: Option<String>) -> Result<Option<Duration>> {
    let Some(v) = v else { return Ok(None) };
    let t = v.trim();
    let (num, scale) = match t.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (t.strip_suffix('s').unwrap_or(t), 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(x) if x > 0.0 && x.is_finite() => Ok(Some(Duration::from_secs_f64(x * scale))),
        _ => Err(Error::Invalid(format!(
            "SHMEM_WAIT_TIMEOUT={v:?} is not a duration (seconds, as `2`, `1.5s`, or `500ms`)"
        ))),
    }
}

impl std::fmt::Debug for Shmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shmem")
            .field("my_pe", &self.my_pe())
            .field("n_pes", &self.n_pes())
            .field("simulated", &self.is_simulated())
            .field("version", &self.version())
            .finish()
    }
}

/// A stream held by [`Shmem::hold`]: its work waits on the GPU until [`StreamHold::release`]
/// or drop.
#[must_use = "the stream is held until this is released or dropped"]
pub struct StreamHold<'r> {
    rt: &'r Shmem,
    ticket: Option<u32>,
}

impl StreamHold<'_> {
    /// Lets the held work run.
    pub fn release(self) {}
}

impl Drop for StreamHold<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.rt.backend.release(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn wait_bounds_from_the_environment() {
        let b = |v: &str| wait_bound_from(Some(v.into()));
        assert_eq!(b("2s").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(b("1.5").unwrap(), Some(Duration::from_millis(1500)));
        assert_eq!(b("500ms").unwrap(), Some(Duration::from_millis(500)));
        assert_eq!(b("0").unwrap(), None);
        assert_eq!(wait_bound_from(None).unwrap(), None);
        for bad in ["soon", "-1", "2h"] {
            let e = b(bad).unwrap_err().to_string();
            assert!(e.contains("SHMEM_WAIT_TIMEOUT"), "{e}");
        }
    }

    #[test]
    fn launcher_environment() {
        let b = Bootstrap::from_env(env(&[
            ("SHMEM_RANK", "1"),
            ("SHMEM_NRANKS", "2"),
            ("SHMEM_UID_FILE", "/tmp/u"),
        ]))
        .unwrap();
        assert_eq!(
            b,
            Bootstrap::Launcher {
                rank: 1,
                nranks: 2,
                local_rank: 1,
                uid_file: "/tmp/u".into()
            }
        );
        let e = Bootstrap::from_env(env(&[
            ("SHMEM_RANK", "2"),
            ("SHMEM_NRANKS", "2"),
            ("SHMEM_UID_FILE", "/tmp/u"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("outside 0..2"), "{e}");
        let e = Bootstrap::from_env(env(&[("SHMEM_RANK", "x")])).unwrap_err();
        assert!(e.to_string().contains("is not a number"), "{e}");
    }

    #[test]
    fn cluster_bootstrap_choice() {
        assert_eq!(
            cluster_bootstrap(env(&[("OMPI_COMM_WORLD_RANK", "0"), ("PMIX_RANK", "0")])),
            Some(("NVSHMEM_BOOTSTRAP", "MPI"))
        );
        assert_eq!(
            cluster_bootstrap(env(&[("PMIX_RANK", "0")])),
            Some(("NVSHMEM_BOOTSTRAP_PMI", "PMIX"))
        );
        assert_eq!(
            cluster_bootstrap(env(&[
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("NVSHMEM_BOOTSTRAP", "PMI")
            ])),
            None
        );
        assert_eq!(cluster_bootstrap(env(&[])), None);
    }

    #[test]
    fn cluster_and_missing_environment() {
        assert_eq!(
            Bootstrap::from_env(env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "3")])).unwrap(),
            Bootstrap::Pmi { local_rank: 3 }
        );
        let e = Bootstrap::from_env(env(&[])).unwrap_err().to_string();
        assert!(e.contains("shmem-run") && e.contains("mpirun"), "{e}");
    }

    #[test]
    fn unique_id_round_trips_through_the_file() {
        let dir = std::env::temp_dir().join(format!("shmem-uid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("uid");
        let mut bytes = [0u8; 128];
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        let reader = {
            let path = path.clone();
            std::thread::spawn(move || wait_uid(&path, Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(50));
        publish_uid(&path, &bytes).unwrap();
        let got = reader.join().unwrap().unwrap();
        let id = UniqueId::from_bytes(&got).unwrap();
        assert_eq!(id.to_bytes(), bytes);
        assert!(UniqueId::from_bytes(&got[..10]).is_err());
        let e = wait_uid(&dir.join("never"), Duration::from_millis(30))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not publish"), "{e}");
    }
}
