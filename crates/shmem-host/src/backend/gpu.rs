//! NVSHMEM on this process's GPU: the backend of a PE started by the launcher, `mpirun` or
//! `srun`.

use super::{Backend, Function, LaunchArgs, PeInfo};
use crate::error::{Error, Result};
use crate::module::{LaunchConfig, SharedCarveout};
use crate::nvshmem::{HostSync, Nvshmem, sys::RawUniqueId};
use crate::runtime::Mark;
use crate::stream::{GraphExec, StreamRef};
use cudarc::driver::{CudaContext, CudaStream, DriverError, result, sys};
use shmem_device::bound::{WaitConfig, WaitReport};
use std::ffi::{CString, c_void};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether NVSHMEM runs in this process (it allows one start per process).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// NVSHMEM on a GPU.
pub(crate) struct Gpu {
    pub(crate) nv: Nvshmem,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pe: PeInfo,
    /// 4 symmetric `i64`s for the runtime's own agreement checks.
    ctl: *mut i64,
    /// Whether a graph capture runs on this PE (host work is refused meanwhile).
    capturing: std::cell::Cell<bool>,
    /// Where this PE's kernels report a wait that outlived its bound: mapped, pinned host
    /// memory (host and device addresses).
    report: *mut WaitReport,
    report_dev: u64,
    /// [`Backend::hold`]'s gate: a word of mapped, pinned host memory (host and device
    /// addresses) that held streams wait on until it reaches their ticket; the last ticket
    /// given out.
    gate: *mut u32,
    gate_dev: u64,
    tickets: std::cell::Cell<u32>,
    /// How many PEs run on this PE's GPU (several under CUDA MPS).
    gpu_share: u32,
    /// Whether a launch may overlap the stream's previous kernel (programmatic dependent
    /// launch): sm_90 and up, and the GPU not shared with another PE.
    overlaps: bool,
    /// The program-wide wait bound (ns) written into modules as they load.
    wait_bound_ns: std::cell::Cell<u64>,
    /// The kernels launched since the runtime's stream was last seen idle (for reports).
    in_flight: std::cell::RefCell<Vec<&'static str>>,
    /// Set once a kernel stopped (trap): the context is unusable, NVSHMEM is not finalized.
    poisoned: std::cell::Cell<bool>,
    /// The dynamic shared memory each kernel has been allowed beyond [`SHARED_DEFAULT`]
    /// ([`Gpu::allow_shared`]).
    shared_allowed: std::cell::RefCell<std::collections::HashMap<usize, u32>>,
    /// Each kernel's shared-memory carveout as last set ([`Gpu::set_carveout`]).
    carveouts: std::cell::RefCell<std::collections::HashMap<usize, i32>>,
}

/// Dynamic shared memory a block may have without its kernel opting in (48 KB on every GPU
/// since sm_70).
const SHARED_DEFAULT: u32 = 48 * 1024;

/// How NVSHMEM learns who its PEs are.
pub(crate) enum Start<'a> {
    /// From a unique id handed over by the caller.
    UniqueId {
        rank: i32,
        nranks: i32,
        uid: &'a RawUniqueId,
    },
    /// Through its own PMI/PMIx/MPI bootstrap.
    Bootstrapped,
}

/// Pinned host memory mapped into the device (host and device addresses), holding `value`:
/// this PE's wait report, and [`Backend::hold`]'s gate.
fn mapped<T: Copy>(value: T) -> Result<(*mut T, u64)> {
    let bytes = std::mem::size_of::<T>();
    // SAFETY: allocates pinned, mapped host memory in the current context; it is written
    // below before any use, and freed at drop.
    unsafe {
        let host = result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP)?.cast::<T>();
        host.write_volatile(value);
        let mut dev: sys::CUdeviceptr = 0;
        sys::cuMemHostGetDevicePointer_v2(&mut dev, host.cast(), 0).result()?;
        Ok((host, dev))
    }
}

/// How many PEs of this node run on this PE's GPU (by PCI address): 1 unless several share
/// it under CUDA MPS. Collective (an fcollect over the node's PEs).
///
/// # Safety
/// NVSHMEM is running; every PE calls it at the same point of its start.
unsafe fn pes_on_this_gpu(
    nv: &Nvshmem,
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    n_pes: i32,
    node_n_pes: i32,
) -> Result<u32> {
    use sys::CUdevice_attribute as A;
    let key = (ctx.attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)? as i64) << 32
        | (ctx.attribute(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)? as i64) << 8
        | ctx.attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)? as i64;
    // `n_pes + 1` words on every PE (a collective allocation has one size everywhere):
    // this PE's key, then the node's keys.
    let words = n_pes as usize + 1;
    // SAFETY: collective by the caller's contract; freed below by every PE.
    let p = unsafe { nv.malloc(words * 8)? }.cast::<i64>();
    let result = (|| -> Result<u32> {
        // SAFETY: `p` holds `words` i64s of this PE's heap; the copies are synchronous; the
        // fcollect writes `node_n_pes` words after the first, as `words` allows.
        unsafe {
            result::memcpy_htod_sync(p as sys::CUdeviceptr, &[key])?;
            nv.team_coll(
                crate::nvshmem::sys::TEAM_NODE,
                super::TeamColl::Fcollect,
                p.add(1).cast(),
                p.cast(),
                8,
                stream.cu_stream().cast(),
            )?;
            stream.synchronize()?;
            let mut keys = vec![0i64; node_n_pes as usize];
            result::memcpy_dtoh_sync(&mut keys, (p as sys::CUdeviceptr) + 8)?;
            Ok(keys.iter().filter(|&&k| k == key).count().max(1) as u32)
        }
    })();
    // SAFETY: allocated above by every PE, freed once by every PE.
    unsafe { nv.free(p.cast()) };
    result
}

/// Clears [`RUNNING`] if a start fails half-way.
struct StartGuard(bool);
impl Drop for StartGuard {
    fn drop(&mut self) {
        if !self.0 {
            RUNNING.store(false, Ordering::SeqCst);
        }
    }
}

/// How long [`open_context`] waits for an MPS server that is not ready.
const MPS_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// A context on GPU `device`. Under MPS, a server that is restarting after a client's fault
/// (a kernel that trapped in the process before) refuses new clients for a moment
/// (`CUDA_ERROR_MPS_SERVER_NOT_READY`, seen between two GPU tests on an H100): that one error
/// is retried for up to [`MPS_READY_WAIT`], then reported as what it is.
fn open_context(device: usize) -> Result<std::sync::Arc<CudaContext>> {
    let start = std::time::Instant::now();
    loop {
        match CudaContext::new(device) {
            Ok(ctx) => return Ok(ctx),
            Err(DriverError(sys::CUresult::CUDA_ERROR_MPS_SERVER_NOT_READY))
                if start.elapsed() < MPS_READY_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e @ DriverError(sys::CUresult::CUDA_ERROR_MPS_SERVER_NOT_READY)) => {
                return Err(Error::Cuda(format!(
                    "cannot open GPU {device}: {e}: the MPS server did not accept clients \
                     within {} s (is it restarting after a fault?)",
                    MPS_READY_WAIT.as_secs()
                )));
            }
            Err(e) => {
                return Err(Error::Cuda(format!(
                    "cannot open GPU {device}: {e} (is the NVIDIA driver installed and the GPU \
                     visible?)"
                )));
            }
        }
    }
}

impl Gpu {
    /// Starts NVSHMEM on GPU `device`.
    pub(crate) fn start(device: usize, how: Start<'_>) -> Result<Gpu> {
        crate::error::ensure_driver()?;
        let nv = Nvshmem::load()?;
        if RUNNING.swap(true, Ordering::SeqCst) {
            return Err(Error::Bootstrap(
                "NVSHMEM is already running in this process (one Shmem per process)".into(),
            ));
        }
        let mut guard = StartGuard(false);
        for (var, path) in crate::nvshmem::sys::bootstrap_plugins(&nv.lib.path) {
            if std::env::var_os(var).is_none() {
                // SAFETY: set before NVSHMEM starts and before this crate starts any thread;
                // NVSHMEM reads these variables during init.
                unsafe { std::env::set_var(var, path) };
            }
        }
        let ctx = open_context(device)?;
        ctx.bind_to_thread()?;
        // SAFETY: this GPU's context is current; NVSHMEM is not running (RUNNING).
        unsafe {
            match how {
                Start::UniqueId { rank, nranks, uid } => {
                    nv.init_with_uniqueid(rank, nranks, uid)?
                }
                Start::Bootstrapped => nv.init_bootstrapped()?,
            }
        }
        let world = crate::nvshmem::sys::TEAM_WORLD;
        // SAFETY: NVSHMEM is running.
        let ((my_pe, n_pes), (node_pe, node_n_pes)) = unsafe {
            (
                nv.team_pe_and_size(world),
                nv.team_pe_and_size(crate::nvshmem::sys::TEAM_NODE),
            )
        };
        let stream = ctx.new_stream()?;
        // SAFETY: collective allocation, made by every PE at the same point of its start.
        let ctl = unsafe { nv.malloc(4 * std::mem::size_of::<i64>())? }.cast::<i64>();
        let (report, report_dev) = mapped(WaitReport::EMPTY)?;
        let (gate, gate_dev) = mapped(0u32)?;
        // SAFETY: NVSHMEM is running; every PE makes this call at the same point of its start.
        let gpu_share = unsafe { pes_on_this_gpu(&nv, &ctx, &stream, n_pes, node_n_pes)? };
        let major =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let overlaps = major >= 9 && gpu_share == 1;
        guard.0 = true;
        Ok(Gpu {
            nv,
            ctx,
            stream,
            pe: PeInfo {
                my_pe,
                n_pes,
                node_pe,
                node_n_pes,
                version: nv.version(),
                kind: crate::runtime::BackendKind::Gpu,
            },
            ctl,
            capturing: std::cell::Cell::new(false),
            report,
            report_dev,
            gate,
            gate_dev,
            tickets: std::cell::Cell::new(0),
            gpu_share,
            overlaps,
            wait_bound_ns: std::cell::Cell::new(0),
            in_flight: Default::default(),
            poisoned: std::cell::Cell::new(false),
            shared_allowed: Default::default(),
            carveouts: Default::default(),
        })
    }

    /// Lets every held stream run ([`Backend::hold`]): before a wait on the host, which
    /// would never end otherwise.
    fn release_all(&self) {
        self.release(self.tickets.get());
    }

    /// Waits for every stream of the context (held ones released first) and says whether
    /// the context still works. It does not once a kernel stopped (a trap, a wait past its
    /// bound): then NVSHMEM's calls that wait on the device or on the other PEs (`free`,
    /// team destruction, module finalization, `finalize`) would never return, so the
    /// callers that clean up skip them and leave the memory to the process's end. The
    /// failure is usually seen first by a wait that returned it to the program (perhaps an
    /// event's, which the runtime does not see); this wait sees it again.
    pub(crate) fn settle(&self) -> bool {
        self.release_all();
        if !self.poisoned.get() && self.ctx.synchronize().is_err() {
            self.poisoned.set(true);
        }
        !self.poisoned.get()
    }

    /// Refuses NVSHMEM work after a kernel stopped ([`Gpu::settle`]): the context is
    /// unusable, and NVSHMEM's calls could wait forever.
    fn usable(&self) -> Result<()> {
        if self.poisoned.get() {
            Err(Error::Cuda(format!(
                "PE {}: a kernel stopped earlier on this PE, so its CUDA context is unusable; \
                 end the process (NVSHMEM is not finalized)",
                self.pe.my_pe
            )))
        } else {
            Ok(())
        }
    }

    /// Waits for the runtime's stream; a failure is explained by the wait report when a
    /// kernel wrote one. A held stream is released first: the wait would never end.
    pub(crate) fn sync_stream(&self) -> Result<()> {
        self.release_all();
        match self.stream.synchronize() {
            Ok(()) => {
                self.in_flight.borrow_mut().clear();
                Ok(())
            }
            Err(e) => Err(self.explain(e)),
        }
    }

    /// The error for a failed driver call: [`Error::WaitTimedOut`] when a kernel stopped at
    /// a wait's bound, else the driver's error. Either way a failure at synchronisation
    /// leaves the context unusable, so NVSHMEM is not finalized at drop.
    pub(crate) fn explain(&self, e: DriverError) -> Error {
        self.poisoned.set(true);
        // SAFETY: `report` is this PE's mapped report, valid until drop; the device wrote it
        // completely before setting `state` (fenced), and the kernel has stopped.
        let report = unsafe { self.report.read_volatile() };
        if !report.is_written() {
            return e.into();
        }
        let names = self.in_flight.borrow();
        let mut unique: Vec<&str> = Vec::new();
        for n in names.iter() {
            if !unique.contains(n) {
                unique.push(n);
            }
        }
        let kernels = match unique.as_slice() {
            [] => "a kernel".to_string(),
            [one] => format!("kernel `{one}`"),
            many => format!(
                "one of the kernels {}",
                many.iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Error::WaitTimedOut {
            kernels,
            report: Box::new(report),
        }
    }

    /// Writes a module's wait configuration (bound and report address), if it has one
    /// (modules of CUDA C++ or of builds before bounded waits do not).
    fn configure_waits(&self, m: sys::CUmodule) -> Result<()> {
        let name = CString::new(shmem_device::bound::CONFIG_SYMBOL).expect("no NUL");
        // SAFETY: a loaded module of this context.
        let Ok((ptr, bytes)) = (unsafe { result::module::get_global(m, name) }) else {
            return Ok(());
        };
        if bytes != std::mem::size_of::<WaitConfig>() {
            return Err(Error::Module(format!(
                "the module's {} has {bytes} bytes, not {}: built by another version of \
                 shmem-rs",
                shmem_device::bound::CONFIG_SYMBOL,
                std::mem::size_of::<WaitConfig>()
            )));
        }
        let cfg = WaitConfig {
            bound_ns: self.wait_bound_ns.get(),
            report: self.report_dev,
            claimed: 0,
            reserved: 0,
        };
        // SAFETY: `ptr` is the module's global of exactly this layout; no kernel of the
        // module runs yet; the copy is synchronous. `WaitConfig` is plain data.
        unsafe {
            let src = std::slice::from_raw_parts(
                (&raw const cfg).cast::<u8>(),
                std::mem::size_of::<WaitConfig>(),
            );
            result::memcpy_htod_sync(ptr, src)?;
        }
        Ok(())
    }

    fn cu_stream(&self) -> crate::nvshmem::sys::Stream {
        self.stream.cu_stream().cast()
    }

    /// [`super::capture_refuses`] while a capture runs.
    fn not_capturing(&self, what: &str) -> Result<()> {
        if self.capturing.get() {
            Err(super::capture_refuses(what))
        } else {
            Ok(())
        }
    }

    /// The driver handle of `stream`, with this context current on the thread; a cudarc
    /// stream of another context is refused.
    fn resolve(&self, stream: StreamRef<'_>) -> Result<sys::CUstream> {
        if let StreamRef::Cuda(s) = stream
            && s.context().cu_ctx() != self.ctx.cu_ctx()
        {
            return Err(Error::Invalid(
                "the stream belongs to another CUDA context than this PE's".into(),
            ));
        }
        self.ctx.bind_to_thread()?;
        Ok(stream.cu_stream(&self.stream))
    }
}

/// An instantiated CUDA graph and the graph it came from, destroyed on drop.
pub(crate) struct CudaGraphExec {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    ctx: Arc<CudaContext>,
}

impl Drop for CudaGraphExec {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: created by `end_capture`, owned here, destroyed once; a replay still in
        // flight keeps its resources (the driver defers the release).
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

impl Gpu {
    /// Lets `f`'s blocks have `bytes` of dynamic shared memory: above [`SHARED_DEFAULT`] the
    /// kernel must opt in (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`), once a kernel
    /// and size. More than the GPU gives a block (with the kernel's static shared memory)
    /// is [`Error::Invalid`], naming both.
    fn allow_shared(&self, f: Function, bytes: u32) -> Result<()> {
        if bytes <= SHARED_DEFAULT {
            return Ok(());
        }
        let mut allowed = self.shared_allowed.borrow_mut();
        if allowed.get(&(f as usize)).is_some_and(|&b| b >= bytes) {
            return Ok(());
        }
        use sys::CUfunction_attribute_enum as A;
        let optin = self.ctx.attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as u32;
        // SAFETY: `f` is a function of a loaded module of this context.
        let fixed = unsafe {
            result::function::get_function_attribute(f, A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        }? as u32;
        if u64::from(bytes) + u64::from(fixed) > u64::from(optin) {
            return Err(Error::Invalid(format!(
                "a launch asks for {bytes} bytes of dynamic shared memory a block; with the \
                 kernel's {fixed} bytes of static shared memory this GPU allows at most {}",
                optin.saturating_sub(fixed)
            )));
        }
        // SAFETY: as above; the size is within what the GPU allows (checked).
        unsafe {
            result::function::set_function_attribute(
                f,
                A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        }?;
        allowed.insert(f as usize, bytes);
        Ok(())
    }

    /// Sets `f`'s preferred shared-memory carveout to `carveout` where it is not that already
    /// (the attribute stays with the kernel: one driver call a change, not a launch).
    fn set_carveout(&self, f: Function, carveout: SharedCarveout) -> Result<()> {
        let v = carveout.attribute();
        let mut set = self.carveouts.borrow_mut();
        if set.get(&(f as usize)) == Some(&v) {
            return Ok(());
        }
        // SAFETY: `f` is a function of a loaded module of this context; `v` is -1 or a
        // percentage (`crate::module` refuses more than 100).
        unsafe {
            result::function::set_function_attribute(
                f,
                sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                v,
            )
        }?;
        set.insert(f as usize, v);
        Ok(())
    }
}

impl Backend for Gpu {
    fn pe(&self) -> PeInfo {
        self.pe
    }

    fn gpu(&self) -> Result<&Gpu> {
        Ok(self)
    }

    fn synchronize(&self) -> Result<()> {
        self.sync_stream()
    }

    fn mark_on(&self, stream: StreamRef<'_>) -> Result<Mark> {
        let event = self
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        // SAFETY: a live event of this context; the stream is this context's (`StreamRef`'s
        // contract) and alive.
        unsafe { result::event::record(event.cu_event(), self.resolve(stream)?)? };
        Ok(Mark::event(event))
    }

    fn wait_for(&self, stream: StreamRef<'_>, mark: &Mark) -> Result<()> {
        let Some(event) = mark.cuda_event() else {
            return Err(Error::Invalid(
                "a mark of the simulator cannot order a GPU stream".into(),
            ));
        };
        // SAFETY: as in `mark_on`; the event outlives the call (borrowed).
        unsafe {
            result::stream::wait_event(
                self.resolve(stream)?,
                event.cu_event(),
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )?
        };
        Ok(())
    }

    fn hold(&self, stream: StreamRef<'_>) -> Result<Option<u32>> {
        self.not_capturing("holding a stream")?;
        let s = self.resolve(stream)?;
        let ticket = self.tickets.get().wrapping_add(1);
        // SAFETY: `gate_dev` is the device address of this PE's mapped gate word, alive
        // until drop (after the stream is idle); the stream is this context's.
        unsafe {
            sys::cuStreamWaitValue32_v2(
                s,
                self.gate_dev,
                ticket,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
            .result()?
        };
        self.tickets.set(ticket);
        Ok(Some(ticket))
    }

    fn release(&self, ticket: u32) {
        // SAFETY: the gate is this PE's mapped word, alive until drop; the device only
        // reads it. The tickets count up, so a later release never lowers it.
        unsafe {
            if self.gate.read_volatile() < ticket {
                self.gate.write_volatile(ticket);
            }
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    fn sync(&self, op: HostSync, stream: StreamRef<'_>) -> Result<()> {
        self.usable()?;
        let s = self.resolve(stream)?;
        if !op.on_stream() {
            self.not_capturing(&format!("a host {}", op.name()))?;
            self.sync_stream()?;
        }
        // SAFETY: NVSHMEM is running; the stream is this context's; collective calls are
        // made by every PE (the caller's contract, documented on `Shmem`).
        unsafe { self.nv.sync(op, s.cast()) };
        Ok(())
    }

    fn begin_capture(&self, stream: StreamRef<'_>) -> Result<()> {
        let s = self.resolve(stream)?;
        if self.capturing.replace(true) {
            return Err(Error::Capture(
                "a capture is already running on this PE".into(),
            ));
        }
        // SAFETY: a live stream of this context, current on this thread (`resolve`).
        unsafe {
            result::stream::begin_capture(
                s,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(|e| {
            self.capturing.set(false);
            Error::Capture(format!("cannot start capturing the stream: {e}"))
        })
    }

    fn end_capture(&self, stream: StreamRef<'_>) -> Result<GraphExec> {
        self.capturing.set(false);
        let s = self.resolve(stream)?;
        // SAFETY: the stream is capturing (begin_capture); ending it returns the graph, or
        // an error when the capture was invalidated.
        let graph = unsafe { result::stream::end_capture(s) }.map_err(|e| {
            Error::Capture(format!(
                "the driver invalidated the capture ({e}): something in it cannot be captured"
            ))
        })?;
        if graph.is_null() {
            return Err(Error::Capture("the capture recorded no graph".into()));
        }
        // SAFETY: a graph the capture just produced, owned here.
        match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(GraphExec::Cuda(CudaGraphExec {
                graph,
                exec,
                ctx: self.ctx.clone(),
            })),
            Err(e) => {
                // SAFETY: owned here and not instantiated.
                let _ = unsafe { result::graph::destroy(graph) };
                Err(Error::Capture(format!(
                    "the driver cannot instantiate the graph: {e}"
                )))
            }
        }
    }

    fn launch_graph(&self, graph: &GraphExec, stream: StreamRef<'_>) -> Result<()> {
        #[allow(irrefutable_let_patterns)]
        let GraphExec::Cuda(g) = graph else {
            return Err(Error::Invalid(
                "a graph of the simulator cannot run on a GPU".into(),
            ));
        };
        // SAFETY: an instantiated graph of this context; the stream is live (the graph
        // borrows it) and this context's.
        unsafe { result::graph::launch(g.exec, self.resolve(stream)?)? };
        Ok(())
    }

    fn team_split(&self, parent: i32, how: super::Split) -> Result<(i32, i32)> {
        self.not_capturing("a team split")?;
        self.usable()?;
        self.ctx.bind_to_thread()?;
        // SAFETY: NVSHMEM is running; collective by the caller's contract (documented on
        // `Team`).
        unsafe { self.nv.team_split(parent, how) }
    }

    fn team_n_pes(&self, team: i32) -> i32 {
        // SAFETY: NVSHMEM is running; an invalid handle yields -1.
        unsafe { self.nv.team_pe_and_size(team).1 }
    }

    fn team_translate(&self, src: i32, pe: i32, dst: i32) -> i32 {
        // SAFETY: NVSHMEM is running.
        unsafe { self.nv.team_translate(src, pe, dst) }
    }

    unsafe fn team_destroy(&self, team: i32) {
        if self.ctx.bind_to_thread().is_ok() && self.settle() {
            // SAFETY: the caller's contract.
            unsafe { self.nv.team_destroy(team) }
        }
    }

    unsafe fn team_coll(
        &self,
        team: i32,
        op: super::TeamColl,
        dest: *mut u8,
        src: *const u8,
        bytes: usize,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        self.usable()?;
        let s = self.resolve(stream)?;
        // SAFETY: the caller's contract; `s` is this context's (`resolve`).
        unsafe {
            self.nv
                .team_coll(team, op, dest.cast(), src.cast(), bytes, s.cast())
        }
    }

    fn overlaps_dependents(&self) -> bool {
        self.overlaps
    }

    fn set_wait_bound(&self, ns: u64) {
        self.wait_bound_ns.set(ns);
    }

    fn min_max(&self, value: i64) -> Result<(i64, i64)> {
        self.not_capturing("an agreement between PEs")?;
        self.usable()?;
        let ctl = self.ctl as sys::CUdeviceptr;
        // SAFETY: `ctl` holds 4 i64s of this PE's symmetric heap; the copies are synchronous
        // and no kernel uses the control block; every PE makes this call (collective).
        unsafe {
            result::memcpy_htod_sync(ctl, &[value, -value])?;
            self.nv
                .int64_max_reduce_on_stream(self.ctl.add(2), self.ctl, 2, self.cu_stream())?;
            self.sync_stream()?;
            let mut out = [0i64; 2];
            result::memcpy_dtoh_sync(&mut out, ctl + 16)?;
            Ok((-out[1], out[0]))
        }
    }

    fn alloc(&self, bytes: usize) -> Result<*mut u8> {
        let (min, max) = self.min_max(bytes as i64)?;
        super::unequal(bytes, (min as usize, max as usize))?;
        // SAFETY: collective by the caller's contract; every PE asked for `bytes`.
        let p = unsafe { self.nv.malloc(bytes)? }.cast::<u8>();
        // SAFETY: `bytes` bytes of this PE's symmetric heap, just allocated.
        unsafe { self.fill_zero(p, bytes)? };
        Ok(p)
    }

    unsafe fn free(&self, p: *mut u8) {
        // Every stream of the context, not only the runtime's: a launch, fill or graph
        // replay on the program's own stream may still use the memory.
        if self.settle() {
            // SAFETY: the caller's contract.
            unsafe { self.nv.free(p.cast()) }
        }
    }

    unsafe fn write(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        self.not_capturing("a copy to symmetric memory")?;
        self.sync_stream()?;
        // SAFETY: the caller's contract; the stream is idle, so no kernel touches `dst`.
        unsafe {
            result::memcpy_htod_sync(
                dst as sys::CUdeviceptr,
                std::slice::from_raw_parts(src, bytes),
            )?
        };
        Ok(())
    }

    unsafe fn read(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        self.not_capturing("a copy from symmetric memory")?;
        self.sync_stream()?;
        // SAFETY: the caller's contract; the stream is idle.
        unsafe {
            result::memcpy_dtoh_sync(
                std::slice::from_raw_parts_mut(dst, bytes),
                src as sys::CUdeviceptr,
            )?
        };
        Ok(())
    }

    unsafe fn fill_zero(&self, p: *mut u8, bytes: usize) -> Result<()> {
        self.not_capturing("a fill of symmetric memory")?;
        self.sync_stream()?;
        // SAFETY: the caller's contract; the stream is idle, so no kernel touches `p`.
        unsafe { result::memset_d8_sync(p as sys::CUdeviceptr, 0, bytes)? };
        Ok(())
    }

    unsafe fn fill_zero_on(&self, p: *mut u8, bytes: usize, stream: StreamRef<'_>) -> Result<()> {
        let s = self.resolve(stream)?;
        // SAFETY: the caller's contract; the driver orders the fill on `s` (or records it,
        // when `s` is being captured).
        unsafe { result::memset_d8_async(p as sys::CUdeviceptr, 0, bytes, s)? };
        Ok(())
    }

    fn peer_ptr(&self, p: *const u8, pe: i32) -> Option<u64> {
        // SAFETY: NVSHMEM is running; `p` is a live symmetric address and `pe` in range
        // (checked by the caller); the call only translates the address.
        unsafe { self.nv.ptr(p.cast(), pe) }.map(|q| q as u64)
    }

    fn load(&self, mut image: Vec<u8>, origin: &Path) -> Result<Option<sys::CUmodule>> {
        self.usable()?;
        image.push(0);
        self.ctx.bind_to_thread()?;
        // SAFETY: `image` is a NUL-terminated PTX text or a cubin, alive for the call.
        let m = unsafe { result::module::load_data(image.as_ptr().cast()) }.map_err(|e| {
            Error::Module(format!(
                "the CUDA driver rejected {}: {e}",
                origin.display()
            ))
        })?;
        // SAFETY: a freshly loaded module of this context; NVSHMEM is running.
        if let Err(e) = unsafe { self.nv.cumodule_init(m.cast()) } {
            // SAFETY: loaded above and not used elsewhere.
            let _ = unsafe { result::module::unload(m) };
            return Err(e);
        }
        if let Err(e) = self.configure_waits(m) {
            // SAFETY: as above; registered with NVSHMEM just now.
            unsafe {
                let _ = self.nv.cumodule_finalize(m.cast());
                let _ = result::module::unload(m);
            }
            return Err(e);
        }
        Ok(Some(m))
    }

    unsafe fn unload(&self, m: sys::CUmodule) {
        if !self.settle() {
            return;
        }
        // SAFETY: registered by `load`; no launch of it is in flight (synchronised); the
        // caller unloads it once.
        unsafe {
            let _ = self.nv.cumodule_finalize(m.cast());
            let _ = result::module::unload(m);
        }
    }

    fn function(&self, m: sys::CUmodule, name: &str, origin: &Path) -> Result<Function> {
        let c = CString::new(name).map_err(|_| Error::Invalid("kernel name has a NUL".into()))?;
        // SAFETY: the module is loaded; `c` is NUL-terminated.
        unsafe { result::module::get_function(m, c) }.map_err(|e| {
            Error::Module(format!(
                "kernel `{name}` is not in {}: {e}",
                origin.display()
            ))
        })
    }

    fn coresident_blocks(&self, f: Function, cfg: &LaunchConfig) -> Result<u32> {
        self.allow_shared(f, cfg.shared_mem_bytes)?;
        // SAFETY: `f` is a function of a loaded module of this context.
        let per_sm = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(
                f,
                cfg.threads() as i32,
                cfg.shared_mem_bytes as usize,
            )
        }?;
        let sms = self.multiprocessors()?;
        // PEs that share the GPU (CUDA MPS) run at once, and MPS does not keep their SMs
        // apart: each counts on its share of every SM, so that all of their grids fit
        // together whatever SMs they land on. Sized at the whole GPU, two PEs' grids that
        // wait on each other deadlocked (measured: halo and MoE defaults, 2 PEs on one H200).
        Ok((per_sm.max(0) as u32 * sms) / self.gpu_share)
    }

    fn multiprocessors(&self) -> Result<u32> {
        Ok(self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            as u32)
    }

    unsafe fn launch(
        &self,
        f: Function,
        name: &'static str,
        cfg: &LaunchConfig<'_>,
        cooperative: bool,
        args: &mut dyn LaunchArgs,
    ) -> Result<()> {
        let stream = self.resolve(cfg.stream)?;
        self.allow_shared(f, cfg.shared_mem_bytes)?;
        if let Some(c) = cfg.shared_carveout {
            self.set_carveout(f, c)?;
        }
        {
            let mut names = self.in_flight.borrow_mut();
            if names.len() < 64 {
                names.push(name);
            }
        }
        let mut ptrs: Vec<*mut c_void> = args.param_ptrs();
        // SAFETY: `ptrs` point at the fields of `args` (alive until the call returns, the
        // driver copies them), whose types are `f`'s parameters (the caller's contract).
        unsafe {
            if cfg.dependent && self.overlaps_dependents() {
                launch_dependent(f, cfg, stream, &mut ptrs)?
            } else if cooperative {
                result::launch_cooperative_kernel(
                    f,
                    cfg.grid,
                    cfg.block,
                    cfg.shared_mem_bytes,
                    stream,
                    &mut ptrs,
                )?
            } else {
                result::launch_kernel(
                    f,
                    cfg.grid,
                    cfg.block,
                    cfg.shared_mem_bytes,
                    stream,
                    &mut ptrs,
                )?
            }
        };
        Ok(())
    }
}

/// `cuLaunchKernelEx` with programmatic stream serialization allowed: the launch may begin
/// before the stream's previous kernel completes ([`LaunchConfig::dependent`]). Not
/// cooperative: the driver never starts a cooperative launch early (measured on an H200:
/// `scripts/probes/pdl_overlap.cu`).
///
/// # Safety
/// As `cuLaunchKernel`: `ptrs` point at `f`'s parameters, `stream` is this context's.
unsafe fn launch_dependent(
    f: Function,
    cfg: &LaunchConfig<'_>,
    stream: sys::CUstream,
    ptrs: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: an all-zero attribute is valid (an id and a C union of plain integers).
    let mut attr = unsafe { std::mem::zeroed::<sys::CUlaunchAttribute>() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid.0,
        gridDimY: cfg.grid.1,
        gridDimZ: cfg.grid.2,
        blockDimX: cfg.block.0,
        blockDimY: cfg.block.1,
        blockDimZ: cfg.block.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: `config` and its attribute outlive the call; the caller's contract covers `f`,
    // `stream` and `ptrs`.
    unsafe { sys::cuLaunchKernelEx(&config, f, ptrs.as_mut_ptr(), std::ptr::null_mut()).result()? };
    Ok(())
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // A hold that was leaked (`mem::forget`) must not keep the stream from finishing.
        if !self.settle() {
            // A kernel stopped: the context is unusable and NVSHMEM cannot finalize (it would
            // wait for the other PEs); the process ends without it. The report memory goes
            // with the process.
            eprintln!(
                "PE {}: not finalizing NVSHMEM after a failed kernel",
                self.pe.my_pe
            );
            RUNNING.store(false, Ordering::SeqCst);
            return;
        }
        // SAFETY: every buffer and module borrowing the `Shmem` is gone (lifetimes); the
        // control block was allocated at start by every PE and is freed by every PE here,
        // before NVSHMEM is finalized.
        unsafe {
            self.nv.free(self.ctl.cast());
            self.nv.finalize();
            let _ = result::free_host(self.report.cast());
            let _ = result::free_host(self.gate.cast());
        }
        RUNNING.store(false, Ordering::SeqCst);
    }
}
