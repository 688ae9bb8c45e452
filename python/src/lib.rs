//! `shmem_rs._native`: the Rust side of the Python package `shmem_rs` (`python/shmem_rs`).
//!
//! It deals in addresses and sizes; the Python side turns tensors (PyTorch, NumPy, anything
//! with DLPack) into them, checks dtypes, shapes and devices, and allocates the outputs.
//!
//! One NVSHMEM runtime per thread: the process's one PE on a GPU, or each simulated PE's
//! thread under `simulate`. The runtime, its module and its buffers live in a
//! thread-local `Runtime` from `init` to `finalize` (or the thread's end): a
//! `MoeBuffer` object only names its buffer there, so no Python object holds a borrow of
//! the runtime, and frees (collective) happen at explicit points, the same on every PE,
//! never when Python's garbage collector gets round to an object.

use moe_dispatch::host::front::{Config, Front, FrontKernels, Handle};
use moe_dispatch::host::{Dtype, Mode};
use moe_dispatch::kernels::{Gather, Stage};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmem_device::DevicePtr;
use shmem_host::runtime::UniqueId;
use shmem_host::{BackendKind, EmbeddedKernels, Error, Module, Shmem, StreamRef};
use std::cell::RefCell;

/// The MoE kernels, built by `build.rs` for the GPU (none under `SHMEM_KERNELS=simulator`).
static KERNELS: EmbeddedKernels = shmem_host::include_kernels!("moe-dispatch");

create_exception!(
    _native,
    ShmemError,
    PyRuntimeError,
    "An error of the shmem-rs runtime: NVSHMEM, CUDA, the bootstrap, or a kernel's wait."
);

fn py_err(e: Error) -> PyErr {
    match e {
        Error::Invalid(m) => PyValueError::new_err(m),
        e => ShmemError::new_err(e.to_string()),
    }
}

/// This thread's runtime and what borrows it.
struct Runtime {
    /// `None` once closed; indexes are [`MoeBuffer::id`]s.
    fronts: Vec<Option<Front<'static>>>,
    kernels: &'static FrontKernels<'static>,
    module: &'static Module<'static>,
    shmem: &'static Shmem,
}

impl Runtime {
    fn start(shmem: Shmem) -> Result<Runtime, Error> {
        let shmem: &'static Shmem = Box::leak(Box::new(shmem));
        let module: &'static Module<'static> = match shmem.load_embedded(&KERNELS) {
            Ok(m) => Box::leak(Box::new(m)),
            Err(e) => {
                // SAFETY: leaked just above, and nothing borrows it yet.
                drop(unsafe { Box::from_raw(shmem as *const Shmem as *mut Shmem) });
                return Err(e);
            }
        };
        let kernels = FrontKernels::new(module);
        let kernels: &'static FrontKernels<'static> = match kernels {
            Ok(k) => Box::leak(Box::new(k)),
            Err(e) => {
                // SAFETY: leaked above; nothing else borrows them (drop order: module, runtime).
                unsafe {
                    drop(Box::from_raw(module as *const Module as *mut Module));
                    drop(Box::from_raw(shmem as *const Shmem as *mut Shmem));
                }
                return Err(e);
            }
        };
        Ok(Runtime {
            fronts: Vec::new(),
            kernels,
            module,
            shmem,
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Buffers first (collective frees, in creation order on every PE), then the kernels,
        // the module and NVSHMEM.
        self.fronts.clear();
        // SAFETY: the three were leaked by `Runtime::start` and are reachable only through
        // this `Runtime` (calls borrow them for their own duration, on this thread, and
        // none is running: this is that thread); every borrower of each is dropped before
        // it (the buffers above, then in this order).
        unsafe {
            drop(Box::from_raw(
                self.kernels as *const FrontKernels as *mut FrontKernels,
            ));
            drop(Box::from_raw(self.module as *const Module as *mut Module));
            drop(Box::from_raw(self.shmem as *const Shmem as *mut Shmem));
        }
    }
}

thread_local! {
    static RUNTIME: RefCell<Option<Runtime>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's runtime, or raises the error that says there is none.
fn with_rt<R>(f: impl FnOnce(&mut Runtime) -> Result<R, Error>) -> PyResult<R> {
    RUNTIME.with(|r| match r.borrow_mut().as_mut() {
        Some(rt) => f(rt).map_err(py_err),
        None => Err(ShmemError::new_err(
            "shmem_rs is not initialized on this thread: call shmem_rs.init() first (inside a torchrun or shmem-run job, or a PE of shmem_rs.run under the simulator)",
        )),
    })
}

/// A fresh NVSHMEM unique id (128 bytes), for rank 0 to hand to the others.
#[pyfunction]
fn unique_id(py: Python<'_>) -> PyResult<Py<PyBytes>> {
    let id = UniqueId::new().map_err(py_err)?;
    Ok(PyBytes::new(py, &id.to_bytes()).unbind())
}

/// Starts NVSHMEM on this thread: with `uid` (from rank 0's [`unique_id`]), as PE `rank` of
/// `nranks` on GPU `device`; without, as the environment says (shmem-run, mpirun, srun,
/// or a simulated PE's thread). Collective.
#[pyfunction]
#[pyo3(signature = (rank=None, nranks=None, uid=None, device=None))]
fn init(
    py: Python<'_>,
    rank: Option<i32>,
    nranks: Option<i32>,
    uid: Option<Vec<u8>>,
    device: Option<usize>,
) -> PyResult<()> {
    if RUNTIME.with(|r| r.borrow().is_some()) {
        return Err(ShmemError::new_err(
            "shmem_rs is already initialized on this thread (one PE per process)",
        ));
    }
    // The runtime is not `Send`: it is made and kept on this thread, inside the closure
    // (which runs on this thread, without the GIL while NVSHMEM starts).
    py.detach(move || -> Result<(), Error> {
        let shmem = match (rank, nranks, uid) {
            (Some(rank), Some(nranks), Some(uid)) => {
                let id = UniqueId::from_bytes(&uid)?;
                Shmem::init_with_uid(rank, nranks, &id, device.unwrap_or(0))?
            }
            (None, None, None) => Shmem::init()?,
            _ => {
                return Err(Error::Invalid(
                    "init takes rank, nranks and uid together, or none of them".into(),
                ));
            }
        };
        let rt = Runtime::start(shmem)?;
        RUNTIME.with(|r| *r.borrow_mut() = Some(rt));
        Ok(())
    })
    .map_err(py_err)
}

/// Frees every buffer and finalizes NVSHMEM on this thread (collective); nothing if not
/// initialized.
#[pyfunction]
fn finalize(py: Python<'_>) {
    py.detach(|| RUNTIME.with(|r| drop(r.borrow_mut().take())));
}

/// Whether this thread has a runtime.
#[pyfunction]
fn initialized() -> bool {
    RUNTIME.with(|r| r.borrow().is_some())
}

/// This PE's number.
#[pyfunction]
fn my_pe() -> PyResult<i32> {
    with_rt(|rt| Ok(rt.shmem.my_pe()))
}

/// The number of PEs.
#[pyfunction]
fn n_pes() -> PyResult<i32> {
    with_rt(|rt| Ok(rt.shmem.n_pes()))
}

/// `"gpu"` or `"simulator"`.
#[pyfunction]
fn backend() -> PyResult<&'static str> {
    with_rt(|rt| {
        Ok(match rt.shmem.backend_kind() {
            BackendKind::Gpu => "gpu",
            BackendKind::Simulator => "simulator",
        })
    })
}

/// Runs `f()` on `n` PEs of the CPU simulator, each on a thread of its own (where
/// [`init`] starts that PE), finalizing each PE's runtime after `f`; returns their results
/// in PE order, or raises the first exception raised (the cause: the other PEs' errors
/// then say that a peer failed).
#[pyfunction]
fn simulate(py: Python<'_>, n: u32, f: Py<PyAny>) -> PyResult<Vec<Py<PyAny>>> {
    let raised: std::sync::Mutex<Vec<(u32, PyErr)>> = Default::default();
    let out = py.detach(|| {
        shmem_host::sim::run(n, || {
            let got = Python::attach(|py| {
                f.call0(py).map_err(|e| {
                    let pe = RUNTIME.with(|r| r.borrow().as_ref().map(|rt| rt.shmem.my_pe()));
                    (pe.map_or(u32::MAX, |p| p as u32), e)
                })
            });
            // This PE's buffers and runtime go with its thread's end, collectively.
            drop(RUNTIME.with(|r| r.borrow_mut().take()));
            got.map_err(|(pe, e)| {
                let m = Python::attach(|py| e.value(py).to_string());
                raised.lock().unwrap().push((pe, e));
                Error::Invalid(format!("PE {pe} raised: {m}"))
            })
        })
    });
    match out {
        Ok(v) => Ok(v),
        Err(e) => {
            // The first to raise is the cause; the others' errors say they lost a peer.
            match raised.into_inner().unwrap().into_iter().next() {
                Some((_, err)) => Err(err),
                None => Err(py_err(e)),
            }
        }
    }
}

/// A raw stream, or the runtime's on the simulator.
fn stream_ref(rt: &Runtime, s: usize) -> StreamRef<'static> {
    match rt.shmem.backend_kind() {
        // SAFETY: the caller passes a live stream of this PE's GPU's context (PyTorch's
        // current stream), which outlives the calls enqueued on it.
        BackendKind::Gpu => unsafe { StreamRef::from_raw(s as _) },
        BackendKind::Simulator => StreamRef::Runtime,
    }
}

fn dev<T>(addr: usize) -> DevicePtr<T> {
    // SAFETY: only an address: what may be done through it is the kernels' contract, which
    // the Python side keeps (dtype, size, device and alignment checked there).
    unsafe { DevicePtr::from_raw(addr as *mut T) }
}

/// The handle of one dispatch, for its combine.
#[pyclass(frozen, module = "shmem_rs._native")]
struct DispatchHandle {
    handle: Handle,
    buffer: usize,
}

#[pymethods]
impl DispatchHandle {
    /// The tokens this PE dispatched.
    #[getter]
    fn tokens(&self) -> u32 {
        self.handle.tokens()
    }
}

/// The symmetric buffers of one MoE exchange (see `shmem_rs.MoeBuffer`).
#[pyclass(module = "shmem_rs._native")]
struct MoeBuffer {
    id: usize,
    config: Config,
    pair_slots: usize,
    layout: (usize, usize),
}

impl MoeBuffer {
    fn front<'r>(&self, rt: &'r Runtime) -> Result<&'r Front<'static>, Error> {
        rt.fronts
            .get(self.id)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::Invalid("this buffer was closed (or belongs to an earlier runtime)".into())
            })
    }
}

#[pymethods]
impl MoeBuffer {
    /// Allocates the buffers. Collective.
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    #[new]
    #[pyo3(signature = (hidden, experts, top_k, max_tokens, mode="low_latency", capacity=None, threads=256, dtype="bf16"))]
    fn new(
        py: Python<'_>,
        hidden: u32,
        experts: u32,
        top_k: u32,
        max_tokens: u32,
        mode: &str,
        capacity: Option<u32>,
        threads: u32,
        dtype: &str,
    ) -> PyResult<MoeBuffer> {
        let dtype = match dtype {
            "bf16" => Dtype::Bf16,
            "fp8" => Dtype::Fp8,
            d => {
                return Err(PyValueError::new_err(format!(
                    "dtype must be \"bf16\" or \"fp8\", not {d:?}"
                )));
            }
        };
        let mode = match mode {
            "low_latency" => Mode::LowLatency,
            "throughput" => Mode::Throughput,
            m => {
                return Err(PyValueError::new_err(format!(
                    "mode must be \"low_latency\" or \"throughput\", not {m:?}"
                )));
            }
        };
        let config = Config {
            hidden,
            experts,
            top_k,
            max_tokens,
            mode,
            dtype,
            capacity,
            threads,
        };
        py.detach(|| {
            with_rt(|rt| {
                let front = Front::new(rt.shmem, config)?;
                let (pair_slots, layout) = (front.pair_slots(), front.layout_dims());
                rt.fronts.push(Some(front));
                Ok(MoeBuffer {
                    id: rt.fronts.len() - 1,
                    config,
                    pair_slots,
                    layout,
                })
            })
        })
    }

    /// Rows of the received tokens and of the experts' outputs.
    #[getter]
    fn pair_slots(&self) -> usize {
        self.pair_slots
    }

    /// `(local experts, PEs)`: the layout's last two dimensions.
    #[getter]
    fn layout_dims(&self) -> (usize, usize) {
        self.layout
    }

    /// `(hidden, experts, top_k, max_tokens, mode, capacity, dtype)`.
    #[getter]
    fn config(&self) -> (u32, u32, u32, u32, &'static str, Option<u32>, &'static str) {
        let c = self.config;
        let mode = match c.mode {
            Mode::LowLatency => "low_latency",
            Mode::Throughput => "throughput",
        };
        (
            c.hidden,
            c.experts,
            c.top_k,
            c.max_tokens,
            mode,
            c.capacity,
            c.dtype.name(),
        )
    }

    /// The address of this PE's symmetric token buffer (`max_tokens × hidden` `bf16`).
    fn input_tokens_ptr(&self) -> PyResult<usize> {
        with_rt(|rt| Ok(self.front(rt)?.input_tokens().as_ptr() as usize))
    }

    /// Pairs this PE's dispatches dropped for capacity, over all calls.
    fn dropped(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| with_rt(|rt| self.front(rt)?.dropped()))
    }

    /// Enqueues a dispatch on `stream` (addresses: see `Front::dispatch`; `x` 0: the tokens
    /// are already in the symmetric buffer; `scales` 0 for `bf16`). Collective.
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &self,
        py: Python<'_>,
        x: usize,
        topk: usize,
        weights: usize,
        tokens: u64,
        recv: usize,
        scales: usize,
        layout: usize,
        stream: usize,
    ) -> PyResult<DispatchHandle> {
        let id = self.id;
        let handle = py.detach(|| {
            with_rt(|rt| {
                let front = self.front(rt)?;
                let input = Stage {
                    x: dev(x),
                    topk: dev(topk),
                    weights: dev(weights),
                    tokens,
                };
                let out = Gather {
                    x: dev(recv),
                    scales: dev(scales),
                    layout: dev(layout),
                };
                // SAFETY: the Python side checked every tensor's dtype, shape, device and
                // alignment, and keeps the inputs and outputs alive (its stream-ordered
                // allocator keeps them until the work on the stream has run).
                unsafe {
                    front.dispatch(rt.kernels, input, out, rt.shmem.on(stream_ref(rt, stream)))
                }
            })
        })?;
        Ok(DispatchHandle { handle, buffer: id })
    }

    /// Enqueues the combine of `handle`'s dispatch on `stream`. Collective.
    fn combine(
        &self,
        py: Python<'_>,
        handle: &DispatchHandle,
        y: usize,
        out: usize,
        stream: usize,
    ) -> PyResult<()> {
        if handle.buffer != self.id {
            return Err(PyValueError::new_err(
                "this handle comes from another buffer's dispatch",
            ));
        }
        let h = handle.handle;
        py.detach(|| {
            with_rt(|rt| {
                let front = self.front(rt)?;
                // SAFETY: as in `dispatch`.
                unsafe {
                    front.combine(
                        rt.kernels,
                        h,
                        dev(y),
                        dev(out),
                        rt.shmem.on(stream_ref(rt, stream)),
                    )
                }
            })
        })
    }

    /// Frees the buffers now (collective: every PE closes it); later calls raise.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let id = self.id;
        py.detach(|| {
            with_rt(|rt| {
                if let Some(f) = rt.fronts.get_mut(id) {
                    *f = None;
                }
                Ok(())
            })
        })
    }
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ShmemError", m.py().get_type::<ShmemError>())?;
    m.add_function(wrap_pyfunction!(unique_id, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(finalize, m)?)?;
    m.add_function(wrap_pyfunction!(initialized, m)?)?;
    m.add_function(wrap_pyfunction!(my_pe, m)?)?;
    m.add_function(wrap_pyfunction!(n_pes, m)?)?;
    m.add_function(wrap_pyfunction!(backend, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_class::<MoeBuffer>()?;
    m.add_class::<DispatchHandle>()?;
    Ok(())
}
