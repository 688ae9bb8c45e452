//! Streams, events and CUDA graphs: where launches and stream-ordered host operations go.
//!
//! - [`StreamRef`] names a stream: the runtime's own (the default), a cudarc
//!   [`CudaStream`] the program owns, or a raw `CUstream` from another library
//!   ([`StreamRef::from_raw`], `unsafe`). A [`LaunchConfig`] carries
//!   one, and so do the stream-ordered host operations ([`Shmem::barrier_all_on`],
//!   [`Shmem::sync_all_on`], [`Shmem::quiet_on`]).
//! - Events order streams: [`Shmem::mark_on`] records a [`Mark`] on a stream,
//!   [`Shmem::wait_for`] makes another stream wait for it.
//! - [`Shmem::capture`] records what a closure enqueues on a stream (launches, on-stream
//!   barriers, fills of symmetric memory with zeros) into a [`Graph`], which
//!   [`Graph::launch`] replays.
//! - [`Enqueue`] is either target, a stream or a capture, for a step written once and run
//!   both ways ([`Shmem::on`], [`Capture::enqueue`]).
//! - [`Shmem::new_stream`] makes a stream of the program's own that is also valid under the
//!   simulator ([`UserStream`]).
//!
//! # Graph rules
//! A graph replays the launches exactly as captured: the same kernels, shapes and
//! arguments, so the same symmetric buffers. The types hold what they can:
//! - a [`Graph<'b>`] borrows everything its launches use (the runtime, the modules, the
//!   buffers passed as arguments, the stream), so none of it can be dropped or reallocated
//!   while the graph lives; to use new buffers, capture again;
//! - [`Capture`] offers only what can be captured. Host work in the middle of a capture
//!   (`SymBuffer::write`, a host barrier, anything that waits on the host) is refused by the
//!   driver on the capturing thread and comes back as [`Error::Capture`], and so does a
//!   launch the driver will not capture (a cooperative launch on a driver that refuses one):
//!   an error at capture, never a hang at replay;
//! - every PE captures the same sequence and replays it the same number of times: a graph's
//!   collective launches and barriers meet the other PEs' as eager ones do.
//!
//! Under the simulator the runtime's stream is the only one; a capture there records the
//! launches and barriers and a replay runs them again, in order, with the same semantics.

use crate::args::{HostArgs, ParamPtrs};
use crate::buffer::SymBuffer;
use crate::error::{Error, Result};
use crate::module::{KernelFn, LaunchConfig};
use crate::nvshmem::HostSync;
use crate::runtime::{Mark, Shmem};
use cudarc::driver::{CudaStream, sys};
use shmem_device::kernel::Kernel;
use std::sync::Arc;

/// A stream: where a launch or a stream-ordered host operation is enqueued.
#[derive(Clone, Copy, Debug, Default)]
pub enum StreamRef<'s> {
    /// The runtime's own stream ([`Shmem::stream`]); under the simulator, the only one.
    #[default]
    Runtime,
    /// A cudarc stream of this PE's CUDA context.
    Cuda(&'s CudaStream),
    /// A stream from another library, by its driver handle ([`StreamRef::from_raw`]).
    Raw(RawStream),
}

/// A `CUstream` handed over by another library (PyTorch, cuBLAS, a C++ runtime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawStream(sys::CUstream);

// SAFETY: a CUstream is a driver handle, valid from any thread of the process; the
// `from_raw` contract makes its owner keep it alive while it is used here.
unsafe impl Send for RawStream {}
// SAFETY: as above; the handle is only passed to the driver, which synchronises itself.
unsafe impl Sync for RawStream {}

impl StreamRef<'static> {
    /// A stream another library created (`torch.cuda.current_stream().cuda_stream`, a
    /// `cudaStream_t`), or the null stream.
    ///
    /// # Safety
    /// `stream` is null or a live stream of this PE's CUDA context (the primary context of
    /// its GPU, which is what the CUDA runtime and PyTorch use), and stays alive while
    /// anything enqueued through this reference may still run or be replayed.
    pub unsafe fn from_raw(stream: sys::CUstream) -> StreamRef<'static> {
        StreamRef::Raw(RawStream(stream))
    }
}

impl<'s> From<&'s CudaStream> for StreamRef<'s> {
    fn from(s: &'s CudaStream) -> StreamRef<'s> {
        StreamRef::Cuda(s)
    }
}

impl<'s> From<&'s Arc<CudaStream>> for StreamRef<'s> {
    fn from(s: &'s Arc<CudaStream>) -> StreamRef<'s> {
        StreamRef::Cuda(s)
    }
}

impl StreamRef<'_> {
    /// The driver handle: the runtime's stream is `runtime`.
    pub(crate) fn cu_stream(self, runtime: &CudaStream) -> sys::CUstream {
        match self {
            StreamRef::Runtime => runtime.cu_stream(),
            StreamRef::Cuda(s) => s.cu_stream(),
            StreamRef::Raw(r) => r.0,
        }
    }
}

/// A stream of the program's own, for code that runs on both backends
/// ([`Shmem::new_stream`]): a new CUDA stream of this PE's context, or under the simulator,
/// which has one stream, the runtime's.
#[derive(Debug)]
pub struct UserStream(Option<Arc<CudaStream>>);

impl UserStream {
    /// The stream, to launch, capture or mark on.
    pub fn as_ref(&self) -> StreamRef<'_> {
        self.0.as_ref().map_or(StreamRef::Runtime, StreamRef::from)
    }

    /// The cudarc stream (`None` under the simulator).
    pub fn cuda(&self) -> Option<&Arc<CudaStream>> {
        self.0.as_ref()
    }
}

/// Where a sequence of launches and stream-ordered operations goes: straight onto a stream
/// ([`Shmem::on`]) or into a capture ([`Capture::enqueue`]). Code that enqueues a step
/// through it once runs that step eagerly and captures it into a [`Graph`] alike.
#[derive(Clone, Copy)]
pub enum Enqueue<'c, 'b> {
    /// Run on this stream now (in stream order; the host does not wait).
    Stream(&'b Shmem, StreamRef<'b>),
    /// Record into this capture.
    Capture(&'c Capture<'b>),
}

impl<'b> Enqueue<'_, 'b> {
    /// The stream the work goes on.
    pub fn stream(&self) -> StreamRef<'b> {
        match self {
            Enqueue::Stream(_, s) => *s,
            Enqueue::Capture(c) => c.stream,
        }
    }

    /// Launches `kernel` ([`KernelFn::launch`]) on the target's stream, or captures the
    /// launch ([`Capture::launch`]); `cfg` keeps the default stream (naming another is
    /// an error).
    ///
    /// # Safety
    /// As [`KernelFn::launch`] (for every replay, when captured).
    pub unsafe fn launch<K: Kernel, A: HostArgs<K::Params> + 'b>(
        &self,
        kernel: &KernelFn<'b, K>,
        cfg: LaunchConfig<'_>,
        args: A,
    ) -> Result<()>
    where
        K::Params: ParamPtrs,
    {
        match self {
            Enqueue::Stream(_, stream) => {
                let cfg = on_target::<K>(cfg, *stream, "through `Enqueue`", "target's")
                    .map_err(Error::Invalid)?;
                // SAFETY: the caller's contract.
                unsafe { kernel.launch(cfg, args) }
            }
            // SAFETY: the caller's contract.
            Enqueue::Capture(c) => unsafe { c.launch(kernel, cfg, args) },
        }
    }

    /// [`Shmem::barrier_all_on`] the target's stream. Collective.
    pub fn barrier_all(&self) -> Result<()> {
        match self {
            Enqueue::Stream(rt, s) => rt.barrier_all_on(*s),
            Enqueue::Capture(c) => c.barrier_all(),
        }
    }

    /// [`SymBuffer::zero_on`] the target's stream.
    pub fn zero<T: Copy + 'static>(&self, buf: &'b SymBuffer<'_, T>) -> Result<()> {
        match self {
            Enqueue::Stream(_, s) => buf.zero_on(*s),
            Enqueue::Capture(c) => c.zero(buf),
        }
    }
}

/// `cfg` moved onto `to`, the stream of a capture or an [`Enqueue`]; a `cfg` that names a
/// stream of its own is refused, with the message.
fn on_target<'s, K: Kernel>(
    cfg: LaunchConfig<'_>,
    to: StreamRef<'s>,
    context: &str,
    which: &str,
) -> std::result::Result<LaunchConfig<'s>, String> {
    if !matches!(cfg.stream, StreamRef::Runtime) {
        return Err(format!(
            "the launch of `{}` names a stream of its own; {context} every launch goes on \
             the {which} stream",
            K::NAME
        ));
    }
    Ok(LaunchConfig { stream: to, ..cfg })
}

/// What a backend made of a capture.
pub(crate) enum GraphExec {
    /// An instantiated CUDA graph.
    Cuda(crate::backend::gpu::CudaGraphExec),
    /// The simulator's recording: launches and barriers, replayed in order.
    #[cfg(feature = "sim")]
    Sim(Vec<crate::sim::Step>),
}

/// A captured sequence of launches and on-stream barriers, replayed by [`Graph::launch`].
/// It borrows for `'b` whatever its launches use (see the [module](self#graph-rules)).
pub struct Graph<'b> {
    rt: &'b Shmem,
    stream: StreamRef<'b>,
    exec: GraphExec,
    steps: usize,
}

impl Graph<'_> {
    /// Replays the graph on the stream it was captured on.
    pub fn launch(&self) -> Result<()> {
        self.rt.backend.launch_graph(&self.exec, self.stream)
    }

    /// How many launches and barriers it holds.
    pub fn len(&self) -> usize {
        self.steps
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.steps == 0
    }
}

impl std::fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("steps", &self.steps)
            .field("stream", &self.stream)
            .finish()
    }
}

/// What [`Shmem::capture`]'s closure may enqueue: launches and stream-ordered barriers,
/// all on the capturing stream.
pub struct Capture<'b> {
    rt: &'b Shmem,
    stream: StreamRef<'b>,
    steps: std::cell::Cell<usize>,
}

impl<'b> Capture<'b> {
    /// The capturing stream (for the program's own stream work, a cudarc memcpy or a
    /// library call, to be captured with the launches).
    pub fn stream(&self) -> StreamRef<'b> {
        self.stream
    }

    /// Captures a launch of `kernel`: as [`KernelFn::launch`], on the capturing stream (a
    /// `cfg` naming another stream is refused). The arguments, and so the buffers they
    /// borrow, must outlive the graph (`A: 'b`).
    ///
    /// # Safety
    /// As [`KernelFn::launch`], for every replay of the graph.
    pub unsafe fn launch<K: Kernel, A: HostArgs<K::Params> + 'b>(
        &self,
        kernel: &KernelFn<'b, K>,
        cfg: LaunchConfig<'_>,
        args: A,
    ) -> Result<()>
    where
        K::Params: ParamPtrs,
    {
        let cfg = on_target::<K>(cfg, self.stream, "in a capture", "capturing")
            .map_err(Error::Capture)?;
        // SAFETY: the caller's contract, for this launch and every replay.
        unsafe { kernel.launch(cfg, args) }.map_err(|e| match e {
            Error::Capture(_) => e,
            other => Error::Capture(format!("launching `{}`: {other}", K::NAME)),
        })?;
        self.steps.set(self.steps.get() + 1);
        Ok(())
    }

    /// This capture as an [`Enqueue`] target, for code that also runs eagerly.
    pub fn enqueue(&self) -> Enqueue<'_, 'b> {
        Enqueue::Capture(self)
    }

    /// Captures [`SymBuffer::zero_on`]: every replay fills this PE's copy of `buf` with
    /// zero bytes at this point (counters and signal words that a kernel expects at zero).
    pub fn zero<T: Copy + 'static>(&self, buf: &'b SymBuffer<'_, T>) -> Result<()> {
        buf.zero_on(self.stream)?;
        self.steps.set(self.steps.get() + 1);
        Ok(())
    }

    /// Captures [`Shmem::barrier_all_on`]. Collective at every replay.
    pub fn barrier_all(&self) -> Result<()> {
        self.sync(HostSync::BarrierAllOnStream)
    }

    /// Captures [`Shmem::sync_all_on`]. Collective at every replay.
    pub fn sync_all(&self) -> Result<()> {
        self.sync(HostSync::SyncAllOnStream)
    }

    /// Captures [`Shmem::quiet_on`].
    pub fn quiet(&self) -> Result<()> {
        self.sync(HostSync::QuietOnStream)
    }

    fn sync(&self, op: HostSync) -> Result<()> {
        self.rt.backend.sync(op, self.stream)?;
        self.steps.set(self.steps.get() + 1);
        Ok(())
    }
}

impl Shmem {
    /// Captures what `record` enqueues on `stream` into a [`Graph`], to replay with
    /// [`Graph::launch`]. Nothing runs during the capture. An error inside `record` (or
    /// host work the driver refuses while capturing) ends the capture and is returned as
    /// [`Error::Capture`]; the partial graph is discarded.
    ///
    /// ```no_run
    /// # use shmem_host::{LaunchConfig, Shmem, StreamRef};
    /// # fn demo(rt: &Shmem, m: &shmem_host::Module, buf: &shmem_host::SymBuffer<i32>) -> shmem_host::Result<()> {
    /// let stream = rt.context()?.new_stream()?;
    /// let ring = m.kernel::<ring_kernels::ring>()?;
    /// let graph = rt.capture((&stream).into(), |c| {
    ///     for _ in 0..100 {
    ///         // SAFETY: every PE captures and replays the same launches; `buf` is a
    ///         // symmetric i32 that outlives the graph.
    ///         unsafe { c.launch(&ring, LaunchConfig::linear(1, 32), (buf,))? };
    ///         c.barrier_all()?;
    ///     }
    ///     Ok(())
    /// })?;
    /// for _ in 0..1000 {
    ///     graph.launch()?;
    /// }
    /// stream.synchronize()?;
    /// # Ok(()) }
    /// ```
    pub fn capture<'b>(
        &'b self,
        stream: StreamRef<'b>,
        record: impl FnOnce(&Capture<'b>) -> Result<()>,
    ) -> Result<Graph<'b>> {
        self.backend.begin_capture(stream)?;
        let cap = Capture {
            rt: self,
            stream,
            steps: std::cell::Cell::new(0),
        };
        let recorded = record(&cap);
        let ended = self.backend.end_capture(stream);
        let exec = match (recorded, ended) {
            (Ok(()), Ok(exec)) => exec,
            (Err(e), _) => {
                return Err(match e {
                    Error::Capture(_) => e,
                    other => Error::Capture(other.to_string()),
                });
            }
            (Ok(()), Err(e)) => return Err(e),
        };
        Ok(Graph {
            rt: self,
            stream,
            exec,
            steps: cap.steps.get(),
        })
    }

    /// `stream` as an [`Enqueue`] target: work enqueued through it runs there now.
    pub fn on<'b>(&'b self, stream: StreamRef<'b>) -> Enqueue<'b, 'b> {
        Enqueue::Stream(self, stream)
    }

    /// A new stream of the program's own: a CUDA stream of this PE's context, or under
    /// the simulator the runtime's stream (its only one). For code that runs on both; with
    /// a GPU only, `rt.context()?.new_stream()` is the same.
    pub fn new_stream(&self) -> Result<UserStream> {
        Ok(UserStream(if self.is_simulated() {
            None
        } else {
            Some(self.context()?.new_stream()?)
        }))
    }

    /// Records a [`Mark`] (an event) on `stream`: [`Shmem::wait_for`] on another stream
    /// orders that stream after everything enqueued here so far.
    pub fn mark_on(&self, stream: StreamRef<'_>) -> Result<Mark> {
        self.backend.mark_on(stream)
    }

    /// Makes `stream` wait, on the GPU, for `mark` (the host does not wait).
    pub fn wait_for(&self, stream: StreamRef<'_>, mark: &Mark) -> Result<()> {
        self.backend.wait_for(stream, mark)
    }
}
