//! The host driver: inputs, buffers, launches, timing and the check against the CPU.
//!
//! [`Moe::new`] allocates one mode's symmetric buffers and fills this PE's inputs;
//! [`Moe::round`] runs one dispatch, the stand-in experts and one combine with a set of
//! [`Kernels`] (the Rust ones of this crate, or the CUDA C++ ones of `cuda/moe.cu` loaded as a
//! foreign module: the same buffers, shapes and timing); [`Moe::check`] compares what arrived
//! and what was combined with [`crate::reference`]. [`run`] does all of it for the example
//! and the tests.

pub mod front;

use crate::kernels::{
    self, Bufs, DispatchPath, MAX_TOP_K, MODE_LOW_LATENCY, MODE_THROUGHPUT, Shape,
};
use crate::reference::{self, DispatchReport, Inputs, Received};
use crate::routing::{self, Distribution, destinations};
use shmem_device::{DevicePtr, Sym};
use shmem_host::args::HostArg;
use shmem_host::{
    Enqueue, Error, Graph, KernelFn, LaunchConfig, Mark, Module, Result, SharedCarveout, Shmem,
    StreamRef, SymBuffer,
};
use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Kernel parameters that the host passes as themselves.
macro_rules! by_value {
    ($($t:ty),*) => { $(
        impl HostArg<$t> for $t {
            fn to_param(&self) -> $t {
                *self
            }
        }
    )* };
}
by_value!(Shape, Bufs, kernels::Stage, kernels::Gather);

/// Which dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One kernel, atomics, fixed per-(expert, source) slots.
    LowLatency,
    /// A layout pass, then packed, deterministic slots.
    Throughput,
}

impl Mode {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::LowLatency => "low-latency",
            Mode::Throughput => "throughput",
        }
    }
    fn code(self) -> u32 {
        match self {
            Mode::LowLatency => MODE_LOW_LATENCY,
            Mode::Throughput => MODE_THROUGHPUT,
        }
    }
}

/// What the dispatch sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dtype {
    /// The `bf16` tokens as they are.
    #[default]
    Bf16,
    /// `e4m3` with one `f32` scale per 128 values, quantised by the dispatch ([`crate::fp8`]);
    /// the combine stays `bf16`.
    Fp8,
}

impl Dtype {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
        }
    }
    fn code(self) -> u32 {
        match self {
            Dtype::Bf16 => kernels::DTYPE_BF16,
            Dtype::Fp8 => kernels::DTYPE_FP8,
        }
    }
}

/// Whose kernels run: this crate's Rust kernels or the CUDA C++ ones of `cuda/`.
pub use shmem_host::Implementation;

/// One configuration.
#[derive(Clone, Debug)]
pub struct Options {
    /// Tokens per PE.
    pub tokens: u32,
    /// `bf16` values per token (a multiple of 8).
    pub hidden: u32,
    /// Experts, a multiple of the PE count.
    pub experts: u32,
    /// Choices per token (at most 16).
    pub top_k: u32,
    /// The router's distribution.
    pub dist: Distribution,
    /// Pairs kept per (local expert, source) in low-latency mode, per local expert in
    /// throughput mode; `None` for as many as can arrive (nothing is ever dropped).
    pub capacity: Option<u32>,
    /// Which dispatch.
    pub mode: Mode,
    /// What the dispatch sends.
    pub dtype: Dtype,
    /// Seed of tokens and routing.
    pub seed: u64,
    /// Threads per block (a multiple of 32).
    pub threads: u32,
    /// Blocks of the dispatch and combine grids (the FP8 dispatches take two at least:
    /// [`crate::kernels::DispatchPath::min_blocks`]); `None`: one warp per unit of work, at most as
    /// many blocks as fit on the GPU at once.
    pub blocks: Option<u32>,
    /// Timed rounds.
    pub rounds: u32,
    /// Untimed rounds first.
    pub warmup: u32,
    /// Compare with the CPU reference afterwards.
    pub verify: bool,
    /// After the eager rounds: time this many rounds launched eagerly back to back, then
    /// capture a round into a CUDA graph on a stream of the program's own and replay it as
    /// many times, comparing the result with the eager one ([`GraphOutcome`]); 0: not.
    pub graph_replays: u32,
    /// Time each round's parts with the stream held ([`shmem_host::Shmem::hold`]) until the
    /// whole round is enqueued: the parts' GPU time alone, without the gaps where the GPU
    /// waited for the host's next launch.
    pub hold_stream: bool,
    /// Launch the throughput dispatch as a programmatic dependent of its layout
    /// ([`LaunchConfig::dependent`]): it starts while the layout runs (from sm_90, where no
    /// other PE shares the GPU). Off: after the layout has completed.
    pub dependent_launch: bool,
    /// Launch the kernels that look each PE up ([`kernels::Probed`]) even where every PE's
    /// memory is mapped here, which otherwise takes the [`kernels::Mapped`] ones
    /// ([`Shape::mapped`]).
    pub probe_peers: bool,
    /// Which kernels.
    pub implementation: Implementation,
}

impl Options {
    /// Defaults: 7168 hidden, 64 experts, top-8, uniform, low-latency, Rust kernels in
    /// `ptx_dir`.
    pub fn new(tokens: u32, ptx_dir: PathBuf) -> Options {
        Options {
            tokens,
            hidden: 7168,
            experts: 64,
            top_k: 8,
            dist: Distribution::Uniform,
            capacity: None,
            mode: Mode::LowLatency,
            dtype: Dtype::Bf16,
            seed: 0x5eed,
            threads: 256,
            blocks: None,
            rounds: 20,
            warmup: 3,
            verify: false,
            graph_replays: 0,
            hold_stream: false,
            dependent_launch: true,
            probe_peers: false,
            implementation: Implementation::Rust { ptx_dir },
        }
    }

    /// The capacity in effect: the given one, or the most that can arrive.
    pub fn capacity(&self, n: u32) -> u32 {
        self.capacity.unwrap_or(match self.mode {
            Mode::LowLatency => self.tokens,
            Mode::Throughput => self.tokens * n,
        })
    }

    fn check(&self, n: u32) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if n > 32 {
            return bad(format!(
                "at most 32 PEs (the destination masks are 32 bits), not {n}"
            ));
        }
        if self.tokens == 0 || self.hidden == 0 || !self.hidden.is_multiple_of(8) {
            return bad(format!(
                "tokens must be positive and hidden a positive multiple of 8 (16-byte rows), not {} and {}",
                self.tokens, self.hidden
            ));
        }
        if self.dtype == Dtype::Fp8 && !self.hidden.is_multiple_of(crate::fp8::GROUP as u32) {
            return bad(format!(
                "an FP8 dispatch scales groups of {} values: hidden must be a multiple of {0}, not {}",
                crate::fp8::GROUP,
                self.hidden
            ));
        }
        if self.experts == 0 || !self.experts.is_multiple_of(n) {
            return bad(format!(
                "{} experts cannot be spread evenly over {n} PEs",
                self.experts
            ));
        }
        if self.top_k == 0 || self.top_k as usize > MAX_TOP_K || self.top_k > self.experts {
            return bad(format!(
                "top-k must be 1 to {MAX_TOP_K} and at most the experts ({}), not {}",
                self.experts, self.top_k
            ));
        }
        if self.dist == Distribution::Sparse && self.top_k > self.experts - self.experts.div_ceil(4)
        {
            return bad(
                "sparse routing leaves a quarter of the experts empty: top-k too large".into(),
            );
        }
        if self.capacity == Some(0) {
            return bad("capacity must be at least 1".into());
        }
        if self.threads == 0 || !self.threads.is_multiple_of(32) || self.threads > 1024 {
            return bad(format!(
                "threads per block must be a multiple of 32 up to 1024, not {}",
                self.threads
            ));
        }
        if self.rounds == 0 || self.blocks == Some(0) {
            return bad("at least one round and one block".into());
        }
        let path = self.shape(n).dispatch_path();
        if let Some(blocks) = self.blocks.filter(|&b| b < path.min_blocks()) {
            return bad(format!(
                "the {path:?} dispatch needs at least {} blocks, not {blocks}",
                path.min_blocks()
            ));
        }
        let units = u64::from(n) * u64::from(self.tokens) * u64::from(self.hidden.div_ceil(1024));
        if units > u64::from(u32::MAX) {
            return bad(format!(
                "{units} units of combine work do not fit in 32 bits: fewer tokens"
            ));
        }
        let pairs = self.shape(n).pair_slots();
        if pairs > i32::MAX as usize {
            return bad(format!(
                "{pairs} pair slots (more than i32 indexes): lower --capacity"
            ));
        }
        Ok(())
    }

    /// The kernels' shape on `rt`'s GPU: [`Options::shape`] with [`Shape::read_once`] set
    /// for its L2 cache ([`Shape::for_l2`]; never under the simulator, which has none).
    pub(crate) fn gpu_shape(&self, rt: &Shmem) -> Result<Shape> {
        let s = self.shape(rt.n_pes() as u32);
        if rt.is_simulated() {
            return Ok(s);
        }
        let l2 = rt.context()?.attribute(
            shmem_host::cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
        )?;
        Ok(s.for_l2(l2.max(0) as u64))
    }

    /// The kernels' shape for `n` PEs (round 0: [`Moe::round`] counts from 1).
    fn shape(&self, n: u32) -> Shape {
        Shape {
            tokens: self.tokens,
            hidden: self.hidden,
            experts: self.experts,
            top_k: self.top_k,
            n_pes: n,
            capacity: self.capacity(n),
            round: 0,
            mode: self.mode.code(),
            dtype: self.dtype.code(),
            read_once: 0,
            mapped: 0,
        }
    }
}

/// The module's kernels, Rust or CUDA C++.
pub struct Kernels<'m> {
    layout: KernelFn<'m, kernels::moe_layout>,
    dispatch: KernelFn<'m, kernels::moe_dispatch>,
    dispatch_registers: KernelFn<'m, kernels::moe_dispatch_registers>,
    dispatch_throughput: KernelFn<'m, kernels::moe_dispatch_throughput>,
    dispatch_throughput_registers: KernelFn<'m, kernels::moe_dispatch_throughput_registers>,
    dispatch_fp8: KernelFn<'m, kernels::moe_dispatch_fp8>,
    dispatch_fp8_throughput: KernelFn<'m, kernels::moe_dispatch_fp8_throughput>,
    dispatch_mapped: KernelFn<'m, kernels::moe_dispatch_mapped>,
    dispatch_registers_mapped: KernelFn<'m, kernels::moe_dispatch_registers_mapped>,
    dispatch_throughput_mapped: KernelFn<'m, kernels::moe_dispatch_throughput_mapped>,
    dispatch_throughput_registers_mapped:
        KernelFn<'m, kernels::moe_dispatch_throughput_registers_mapped>,
    dispatch_fp8_mapped: KernelFn<'m, kernels::moe_dispatch_fp8_mapped>,
    dispatch_fp8_throughput_mapped: KernelFn<'m, kernels::moe_dispatch_fp8_throughput_mapped>,
    experts: KernelFn<'m, kernels::moe_experts>,
    combine: KernelFn<'m, kernels::moe_combine>,
    combine_mapped: KernelFn<'m, kernels::moe_combine_mapped>,
    /// Streaming multiprocessors of the GPU.
    sms: u32,
}

/// Runs `$body` with `$f` bound to the dispatch kernel in `$k` (a [`Kernels`]) of shape
/// `$s` launched as `$cfg` says: the one place that maps a [`DispatchPath`] and
/// [`Shape::dispatch_by_registers`] to its pair of kernels, of which [`Shape::mapped`] picks
/// one (the `@` arm, shared with [`with_combine!`]).
macro_rules! with_dispatch {
    ($k:expr, $s:expr, $cfg:expr, $f:ident => $body:expr) => {
        match (
            $s.dispatch_path(),
            $s.dispatch_by_registers($cfg.threads(), $cfg.shared_mem_bytes),
        ) {
            (DispatchPath::LowLatency, false) => {
                with_dispatch!(@ $k, $s, dispatch, dispatch_mapped, $f => $body)
            }
            (DispatchPath::LowLatency, true) => {
                with_dispatch!(@ $k, $s, dispatch_registers, dispatch_registers_mapped, $f => $body)
            }
            (DispatchPath::Throughput, false) => {
                with_dispatch!(@ $k, $s, dispatch_throughput, dispatch_throughput_mapped, $f => $body)
            }
            (DispatchPath::Throughput, true) => with_dispatch!(
                @ $k, $s, dispatch_throughput_registers, dispatch_throughput_registers_mapped,
                $f => $body
            ),
            (DispatchPath::Fp8LowLatency, _) => {
                with_dispatch!(@ $k, $s, dispatch_fp8, dispatch_fp8_mapped, $f => $body)
            }
            (DispatchPath::Fp8Throughput, _) => with_dispatch!(
                @ $k, $s, dispatch_fp8_throughput, dispatch_fp8_throughput_mapped, $f => $body
            ),
        }
    };
    (@ $k:expr, $s:expr, $probed:ident, $mapped:ident, $f:ident => $body:expr) => {
        if $s.mapped() {
            let $f = &$k.$mapped;
            $body
        } else {
            let $f = &$k.$probed;
            $body
        }
    };
}

/// Runs `$body` with `$f` bound to the combine kernel in `$k` (a [`Kernels`]) of shape `$s`
/// ([`Shape::mapped`]).
macro_rules! with_combine {
    ($k:expr, $s:expr, $f:ident => $body:expr) => {
        with_dispatch!(@ $k, $s, combine, combine_mapped, $f => $body)
    };
}

/// Loads the kernels of `imp`. Collective.
pub fn load<'rt>(rt: &'rt Shmem, imp: &Implementation) -> Result<Module<'rt>> {
    // SAFETY: `cuda/moe.cu` declares each kernel with the Rust kernel's name and parameters
    // (`Bufs`, `Shape`: the same `#[repr(C)]` structs) and the same contract.
    unsafe { imp.load(rt, "moe-dispatch") }
}

impl<'m> Kernels<'m> {
    /// The kernels of `module`.
    pub fn new(module: &'m Module<'_>) -> Result<Kernels<'m>> {
        Ok(Kernels {
            layout: module.kernel()?,
            dispatch: module.kernel()?,
            dispatch_registers: module.kernel()?,
            dispatch_throughput: module.kernel()?,
            dispatch_throughput_registers: module.kernel()?,
            dispatch_fp8: module.kernel()?,
            dispatch_fp8_throughput: module.kernel()?,
            dispatch_mapped: module.kernel()?,
            dispatch_registers_mapped: module.kernel()?,
            dispatch_throughput_mapped: module.kernel()?,
            dispatch_throughput_registers_mapped: module.kernel()?,
            dispatch_fp8_mapped: module.kernel()?,
            dispatch_fp8_throughput_mapped: module.kernel()?,
            experts: module.kernel()?,
            combine: module.kernel()?,
            combine_mapped: module.kernel()?,
            sms: module.runtime().multiprocessors()?,
        })
    }

    /// Blocks of the dispatch kernel of `shape` that fit on the GPU at once with `cfg`'s
    /// block.
    fn dispatch_fit(&self, shape: Shape, cfg: &LaunchConfig<'_>) -> Result<u32> {
        with_dispatch!(self, shape, cfg, f => f.max_coresident_blocks(cfg))
    }

    /// Enqueues the dispatch of `s` into `to`: in throughput mode the layout (`g[0]`), then
    /// the dispatch kernel of `s` ([`Shape::dispatch_path`]) on `g[1]`'s grid.
    ///
    /// # Safety
    /// As the kernels' contracts say: `b` holds the buffers sized for `s`, every PE enqueues
    /// the same rounds with the same shape and grids, and the dispatch follows the previous
    /// round's combine on the stream.
    unsafe fn enqueue_dispatch<'b>(
        &'b self,
        to: &Enqueue<'_, 'b>,
        g: &[LaunchConfig<'static>; 4],
        b: Bufs,
        s: Shape,
    ) -> Result<()> {
        // SAFETY: the caller's contract; the layout precedes the dispatch of the same round.
        unsafe {
            if s.mode == MODE_THROUGHPUT {
                to.launch(&self.layout, g[0], (b, s))?;
            }
            with_dispatch!(self, s, g[1], f => to.launch(f, g[1], (b, s)))
        }
    }

    /// Enqueues the combine of `s` into `to` on `g[3]`'s grid.
    ///
    /// # Safety
    /// As the kernel's contract says: `b` holds the buffers sized for `s`, every PE enqueues
    /// the same rounds with the same shape and grids, and the combine follows the experts
    /// of the same round on the stream.
    unsafe fn enqueue_combine<'b>(
        &'b self,
        to: &Enqueue<'_, 'b>,
        g: &[LaunchConfig<'static>; 4],
        b: Bufs,
        s: Shape,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { with_combine!(self, s, f => to.launch(f, g[3], (b, s))) }
    }
}

/// One mode's buffers and this PE's inputs.
pub struct Moe<'rt> {
    rt: &'rt Shmem,
    opts: Options,
    shape: Shape,
    inputs: Inputs,
    bufs: Bufs,
    held: Held<'rt>,
    /// The round the signal words have reached (a graph restarts them at round 1).
    round: Cell<u32>,
    /// Rounds run on these buffers, eager and replayed.
    rounds_run: Cell<u64>,
    /// Launch shapes: layout, dispatch, experts, combine (blocks, threads).
    pub launch: [(u32, u32); 4],
}

/// Makes the allocations behind [`Bufs`] from the buffer list ([`crate::moe_buffers`]).
macro_rules! held {
    ($($(#[$doc:meta])* $name:ident: $t:ty $(as $local:ident)? = $len:expr;)*) => {
        /// The allocations behind [`Bufs`] (freed, collectively, when their owner is dropped).
        pub(crate) struct Held<'rt> {
            $(pub(crate) $name: SymBuffer<'rt, $t>,)*
        }
        impl<'rt> Held<'rt> {
            /// Every buffer, as long as `lens` says; with `local` false, the buffers marked
            /// `as local` get one element (their owner passes other memory in their place).
            /// Collective.
            pub(crate) fn alloc(rt: &'rt Shmem, lens: &kernels::Lens, local: bool) -> Result<Held<'rt>> {
                Ok(Held { $($name: rt.alloc(held!(@len local, lens.$name $(, $local)?))?,)* })
            }
            pub(crate) fn bufs(&self) -> Bufs {
                Bufs { $($name: held!(@handle &self.$name $(, $local)?),)* }
            }
        }
    };
    (@len $keep:ident, $len:expr) => { $len };
    (@len $keep:ident, $len:expr, local) => { if $keep { $len } else { 1 } };
    (@handle $b:expr) => { sym($b) };
    (@handle $b:expr, local) => { device($b) };
}
crate::moe_buffers!(held);

impl Held<'_> {
    /// `s` with [`Shape::mapped`] set: whether every PE's copy of these buffers is mapped
    /// here (`nvshmem_ptr`; the whole symmetric heap is mapped alike), unless `probe` asks
    /// for the kernels that look each PE up.
    pub(crate) fn reach(&self, s: Shape, probe: bool) -> Result<Shape> {
        let mut mapped = !probe;
        for pe in 0..s.n_pes as i32 {
            mapped &= self.signals.peer_device_ptr(pe)?.is_some();
        }
        Ok(Shape {
            mapped: u32::from(mapped),
            ..s
        })
    }

    /// Zeroes the kernels' counters, counts and layout words: where they start, and where
    /// every round leaves them.
    pub(crate) fn zero_counters(&self) -> Result<()> {
        for b in [
            &self.work,
            &self.counts,
            &self.base,
            &self.recv_count,
            &self.expert_count,
            &self.expert_offset,
            &self.dropped,
        ] {
            b.zero()?;
        }
        // The layout's tags count with `work`'s barrier generation: both start again.
        self.scratch.zero()
    }
}

pub(crate) fn sym<T>(b: &SymBuffer<'_, T>) -> Sym<T>
where
    T: Copy + 'static,
{
    // SAFETY: the address of a live symmetric allocation of `T`s (kept in `Held` for as long
    // as the `Bufs` that carries it).
    unsafe { Sym::from_raw(b.device_ptr() as *mut T) }
}

fn device<T>(b: &SymBuffer<'_, T>) -> DevicePtr<T>
where
    T: Copy + 'static,
{
    // SAFETY: as in `sym`: this PE's copy of a live allocation, device memory.
    unsafe { DevicePtr::from_raw(b.device_ptr() as *mut T) }
}

/// The shared-memory carveout of the throughput layout's SMs where its dispatch takes shared
/// memory and starts while it runs ([`grids`]).
const LAYOUT_CARVEOUT_PERCENT: u8 = 100;

/// The most threads of the dispatch grid an SM takes: the occupancy its kernels are tuned for
/// (four blocks of 256 threads, at their 64 registers from sm_90), where a kernel that needs
/// fewer registers would fit more. The [`kernels::Mapped`] `bf16` dispatches need 48 and fit
/// five such blocks: on those 660 blocks of one H200 the low-latency round took 1.02 of its
/// time on 528 at 4096 tokens (1 PE, held; the twin alike; BENCHMARKS.md, seventy-ninth
/// session).
const DISPATCH_THREADS_PER_SM: u32 = 1024;

/// The shapes of the four launches of `k` (layout, dispatch, experts, combine) for `opts`.
fn grids(k: &Kernels<'_>, opts: &Options, shape: Shape) -> Result<[LaunchConfig<'static>; 4]> {
    let th = opts.threads;
    let wpb = th / 32;
    let probe = LaunchConfig::linear(1, th);
    let n = shape.n_pes;
    // How many blocks of `th` threads fit at once; none (too many registers per thread
    // for blocks this large) is an error, not a launch that would fail.
    let resident = |what: &str, fit: Result<u32>| -> Result<u32> {
        match fit? {
            0 => Err(Error::Invalid(format!(
                "the {what} kernel cannot run blocks of {th} threads on this GPU (too many registers per thread): use fewer --threads"
            ))),
            f => Ok(f),
        }
    };
    // The layout runs in blocks of `th` too: its units spread over more SMs than in blocks
    // of 1024, where at 128 and 512 tokens a few SMs held them all (one H200, the layout in
    // units of four chunks: its round 1.9-3.0 µs shorter at 128 and 512 tokens than in blocks
    // of 1024 at 64 registers, within 0.7 µs at 4096; BENCHMARKS.md, forty-sixth session).
    let lf = resident("layout", k.layout.max_coresident_blocks(&probe))?;
    // The `bf16` dispatches take shared memory for their bulk copies, the low-latency FP8 one
    // for the table of its reserved pair slots (the kernel says how much; without it, they copy
    // through registers, and take an atomic a pair).
    let shared = shape.dispatch_shared_bytes();
    let df = resident(
        "dispatch",
        k.dispatch_fit(shape, &probe.with_shared_mem(shared)),
    )?
    .min((k.sms * (DISPATCH_THREADS_PER_SM / th)).max(1));
    let ef = resident("experts", k.experts.max_coresident_blocks(&probe))?;
    let cf = resident(
        "combine",
        with_combine!(k, shape, f => f.max_coresident_blocks(&probe)),
    )?;
    let fit = |f: u32, units: u32| opts.blocks.unwrap_or(units.div_ceil(wpb)).clamp(1, f);
    let t = shape.tokens;
    let dependent = opts.dependent_launch && shape.mode == MODE_THROUGHPUT;
    // Units of work (one warp each): layout (column, `LAYOUT_SEGMENT` chunks); dispatch, a
    // block per token; combine (received row, segment).
    let layout = kernels::layout_units(t, n, shape.experts) as u32;
    let dispatch = t * wpb;
    // The low-latency FP8 dispatch splits its blocks by role: two at least, where they fit.
    let dispatch_blocks = fit(df, dispatch)
        .max(shape.dispatch_path().min_blocks())
        .min(df);
    let segs = (shape.hidden / 8).div_ceil(32 * kernels::SEGMENT_CHUNKS as u32);
    let combine = t * n * segs;
    // Where the throughput dispatch starts while its layout runs, its blocks take shared memory
    // (the `bf16` one) and the layout's grid has a block on (nearly) every SM, the layout's SMs
    // keep the most shared memory they can have, so that the dispatch's blocks start beside the
    // layout's. With the driver's carveout for the layout (which takes none), the first dispatch
    // block started 5.6 µs into the layout at 4096 tokens, and 1.2 µs in with this. 1 PE on GPU 0
    // of two H200s, the round with it: 1.2, 0.7 and 1.0 µs shorter at 2048, 3072 and 4096 tokens
    // (130-260 layout blocks on 132 SMs), but 0.5-1.1 µs longer at 512-1536 (33-98 blocks: the
    // dispatch's blocks went first to the SMs the layout left free). The throughput FP8
    // dispatch takes no shared memory, and at this carveout (its blocks then run with the least
    // L1) took 2.6 µs more (BENCHMARKS.md, forty-ninth session).
    let layout_blocks = layout.div_ceil(wpb).clamp(1, lf);
    let layout_carveout = if dependent && shared > 0 && layout_blocks * 10 >= k.sms * 9 {
        SharedCarveout::Percent(LAYOUT_CARVEOUT_PERCENT)
    } else {
        SharedCarveout::Default
    };
    Ok([
        // Layout and combine wait inside the grid and on other PEs, dispatch on other
        // PEs: cooperative, for the CUDA C++ twin too (the Rust manifest says so itself);
        // experts is local. The throughput dispatch starts while its layout runs, and
        // waits for it inside (`shmem_device::pdl`): not cooperatively, as no cooperative
        // launch starts early. Its grid fits all the same (`fit`), and only its block 0
        // waits for the others.
        LaunchConfig::linear(layout_blocks, th)
            .with_cooperative(true)
            .with_shared_carveout(layout_carveout),
        LaunchConfig::linear(dispatch_blocks, th)
            .with_shared_mem(shared)
            .with_cooperative(!dependent)
            .with_dependent_launch(dependent),
        LaunchConfig::linear(ef, th).with_cooperative(false),
        LaunchConfig::linear(fit(cf, combine), th).with_cooperative(true),
    ])
}

/// What a round measured (slowest PE), in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Layout (throughput mode) and dispatch.
    pub dispatch_ms: f64,
    /// Combine.
    pub combine_ms: f64,
}

/// The result of [`Moe::check`] on this PE.
#[derive(Clone, Debug)]
pub struct Check {
    /// What arrived here.
    pub dispatch: DispatchReport,
    /// Combined values that differ from the CPU reference (bit for bit).
    pub combine_diffs: usize,
    /// The largest relative difference among them.
    pub combine_worst: f64,
}

impl Check {
    /// Everything arrived exactly once and the combine is within `bf16` rounding (one unit in
    /// the last place: 2^-7 relative) of the CPU.
    pub fn ok(&self) -> bool {
        self.dispatch.problems.is_empty() && self.combine_worst <= 1.0 / 128.0
    }
}

impl<'rt> Moe<'rt> {
    /// Allocates the buffers of `opts.mode` and uploads this PE's inputs. Collective.
    pub fn new(rt: &'rt Shmem, opts: &Options) -> Result<Moe<'rt>> {
        let (me, n) = (rt.my_pe() as u32, rt.n_pes() as u32);
        opts.check(n)?;
        let shape = opts.gpu_shape(rt)?;
        let r = routing::route(
            opts.seed,
            me,
            opts.tokens,
            opts.experts,
            opts.top_k,
            opts.dist,
        );
        let inputs = Inputs {
            x: routing::tokens(opts.seed, me, opts.tokens, opts.hidden),
            routing: r,
        };
        let lens = shape.lens();
        let held = Held::alloc(rt, &lens, true)?;
        let shape = held.reach(shape, opts.probe_peers)?;
        held.x.copy_from(&inputs.x)?;
        held.topk.copy_from(&inputs.routing.topk_buffer())?;
        held.weights.copy_from(&inputs.routing.weights)?;
        // Counters, counts and signals start at zero; so does `out`, so that a token no
        // kernel wrote is never mistaken for a result.
        held.zero_counters()?;
        held.signals.zero()?;
        held.out.zero()?;
        let bufs = held.bufs();
        rt.barrier_all()?;
        Ok(Moe {
            rt,
            opts: opts.clone(),
            shape,
            inputs,
            bufs,
            held,
            round: Cell::new(0),
            rounds_run: Cell::new(0),
            launch: [(0, 0); 4],
        })
    }

    /// Whether this buffer's rounds take the [`kernels::Mapped`] kernels
    /// ([`Shape::mapped`]).
    pub fn mapped(&self) -> bool {
        self.shape.mapped()
    }

    /// The shapes of the four launches for `k`.
    fn grids(&self, k: &Kernels<'_>) -> Result<[LaunchConfig<'static>; 4]> {
        grids(k, &self.opts, self.shape)
    }

    /// Enqueues round `s.round` into `sink`: a barrier on the stream, (layout,) dispatch,
    /// experts, a barrier, combine; `at(i)` marks the points 0 to 3 that time the parts
    /// (before dispatch, after it, before combine, after it).
    fn enqueue<'b>(
        &self,
        k: &'b Kernels<'_>,
        g: &[LaunchConfig<'static>; 4],
        s: Shape,
        to: Enqueue<'_, 'b>,
        at: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let b = self.bufs;
        to.barrier_all()?;
        at(0)?;
        // SAFETY: every PE runs the same rounds with the same shape and grids (collective
        // `round` and `graph`); the buffers are those `Moe::new` sized for this mode and
        // zeroed, the signal words are at round `s.round - 1`, and each kernel follows the
        // previous one on the stream.
        unsafe { k.enqueue_dispatch(&to, g, b, s)? };
        at(1)?;
        // SAFETY: as above.
        unsafe { to.launch(&k.experts, g[2], (b, s))? };
        to.barrier_all()?;
        at(2)?;
        // SAFETY: as above.
        unsafe { k.enqueue_combine(&to, g, b, s)? };
        at(3)
    }

    /// The shape of the next eager round.
    fn next_round(&self) -> Shape {
        self.round.set(self.round.get() + 1);
        self.rounds_run.set(self.rounds_run.get() + 1);
        Shape {
            round: self.round.get(),
            ..self.shape
        }
    }

    /// One round: dispatch (layout first in throughput mode), the stand-in experts, combine;
    /// every PE calls it with kernels of the same implementation. Returns each part's time on
    /// the slowest PE: a barrier on the stream lines the PEs up before each part, and CUDA
    /// events time the part alone (with [`Options::hold_stream`], enqueued on a held
    /// stream).
    pub fn round(&mut self, k: &Kernels<'_>) -> Result<Timing> {
        let g = self.grids(k)?;
        self.launch = g.map(|c| (c.grid.0, c.block.0));
        let rt = self.rt;
        let mut marks = Vec::with_capacity(4);
        let s = self.next_round();
        let hold = if self.opts.hold_stream {
            Some(rt.hold(StreamRef::Runtime)?)
        } else {
            None
        };
        self.enqueue(k, &g, s, rt.on(StreamRef::Runtime), &mut |_| {
            marks.push(rt.mark()?);
            Ok(())
        })?;
        drop(hold);
        marks[3].synchronize()?;
        let slowest = |a: &Mark, z: &Mark| -> Result<f64> {
            let ns = (z.seconds_since(a)? * 1e9) as i64;
            Ok(rt.min_max(ns)?.1 as f64 * 1e-6)
        };
        Ok(Timing {
            dispatch_ms: slowest(&marks[0], &marks[1])?,
            combine_ms: slowest(&marks[2], &marks[3])?,
        })
    }

    /// `count` rounds enqueued back to back on the runtime's stream, the host waiting only
    /// at the end: the time per round when the host launches every kernel, to compare
    /// with [`MoeGraph::steps`].
    pub fn eager_steps(&self, k: &Kernels<'_>, count: u32) -> Result<Steps> {
        let g = self.grids(k)?;
        let rt = self.rt;
        let start = rt.mark()?;
        let host = Instant::now();
        for _ in 0..count {
            let s = self.next_round();
            self.enqueue(k, &g, s, rt.on(StreamRef::Runtime), &mut |_| Ok(()))?;
        }
        let host = host.elapsed();
        let end = rt.mark()?;
        end.synchronize()?;
        Steps::measured(rt, &start, &end, host, count)
    }

    /// Captures one round into a graph on `stream`: a fill of this PE's signal words with
    /// zeros, then the round as [`Moe::round`] enqueues it, at round 1. Every replay is a
    /// whole round from the same inputs (the kernels' counters return to zero by
    /// themselves; the signal words count rounds, hence the fill, which the barrier that
    /// opens the round orders before any PE signals). Collective: every PE captures, and
    /// replays as many times.
    pub fn graph<'g>(&'g self, k: &'g Kernels<'_>, stream: StreamRef<'g>) -> Result<MoeGraph<'g>> {
        let g = self.grids(k)?;
        let s = Shape {
            round: 1,
            ..self.shape
        };
        let graph = self.rt.capture(stream, |c| {
            c.zero(&self.held.signals)?;
            self.enqueue(k, &g, s, c.enqueue(), &mut |_| Ok(()))
        })?;
        Ok(MoeGraph {
            moe: self,
            graph,
            stream,
        })
    }

    /// The combined tokens of the last round on this PE (`T × H` `bf16` bits).
    pub fn combined(&self) -> Result<Vec<u16>> {
        self.held.out.to_vec()
    }

    /// Zeroes the combined tokens on this PE (so that a comparison sees what the next
    /// rounds write, not what an earlier one left).
    pub fn clear_combined(&self) -> Result<()> {
        self.held.out.zero()
    }

    /// Pairs this PE's dispatches dropped for capacity, per round so far.
    pub fn dropped_per_round(&self) -> Result<u64> {
        let d = u64::from(self.held.dropped.to_vec()?[0]);
        Ok(d.checked_div(self.rounds_run.get()).unwrap_or(0))
    }

    /// Cross-GPU token bytes of one round, the most any PE sends: `(dispatch, combine)`.
    /// A dispatch sends each token once to each other PE that holds one of its experts; a
    /// combine sends one row back per row received from another PE. Only token rows count
    /// (`hidden * 2` bytes each, an FP8 dispatch's `hidden + hidden / 32`), not the routing
    /// metadata (`8 * top_k + 4` bytes a row).
    pub fn cross_bytes(&self) -> (u64, u64) {
        self.token_bytes(false)
    }

    /// All token bytes of one round, the most any PE receives, its own rows included:
    /// `(dispatch, combine)`, as DeepEP-derived benchmarks count them (a dispatch delivers
    /// each token once to each PE holding one of its experts, this PE too; a combine
    /// returns one row per delivered row).
    pub fn received_bytes(&self) -> (u64, u64) {
        self.token_bytes(true)
    }

    /// With one PE, the bytes each phase must at least read and write in the GPU's memory:
    /// the dispatch reads every token and writes it as sent, the combine reads every
    /// (token, expert) output row and writes every token. `(dispatch, combine)`; with more
    /// PEs the same counts for PE 0's tokens (a floor no longer exact: rows also cross).
    pub fn memory_bytes(&self) -> (u64, u64) {
        let r = routing::route(
            self.opts.seed,
            0,
            self.shape.tokens,
            self.shape.experts,
            self.shape.top_k,
            self.opts.dist,
        );
        let pairs = r.topk.iter().filter(|&&e| e >= 0).count() as u64;
        let t = u64::from(self.shape.tokens);
        let (row, sent_row) = (
            u64::from(self.shape.hidden) * 2,
            self.shape.sent_row() as u64 * 2,
        );
        (t * (row + sent_row), (pairs + t) * row)
    }

    /// Token rows per round with or without a PE's rows to itself: the most any PE sends
    /// (dispatch) and receives (combine), or with `with_self` the most any PE receives in
    /// both phases.
    fn token_bytes(&self, with_self: bool) -> (u64, u64) {
        let n = self.shape.n_pes;
        let (k, l) = (self.shape.top_k as usize, self.shape.experts / n);
        let row = u64::from(self.shape.hidden) * 2;
        let sent_row = self.shape.sent_row() as u64 * 2;
        let mut sent = vec![0u64; n as usize];
        let mut received = vec![0u64; n as usize];
        for pe in 0..n {
            let r = routing::route(
                self.opts.seed,
                pe,
                self.shape.tokens,
                self.shape.experts,
                self.shape.top_k,
                self.opts.dist,
            );
            for ids in r.topk.chunks(k) {
                let m = destinations(ids, l) & if with_self { !0 } else { !(1 << pe) };
                sent[pe as usize] += u64::from(m.count_ones());
                for d in 0..n {
                    if m & (1 << d) != 0 {
                        received[d as usize] += 1;
                    }
                }
            }
        }
        // Rows, times the bytes of a row in that phase.
        let most = |rows: Vec<u64>, bytes: u64| rows.into_iter().max().unwrap_or(0) * bytes;
        if with_self {
            // A combine returns to each token's PE what its dispatch delivered.
            (most(received, sent_row), most(sent, row))
        } else {
            (most(sent, sent_row), most(received, row))
        }
    }

    /// Compares the last round's received data and combined tokens with the CPU reference.
    pub fn check(&self) -> Result<Check> {
        let s = Shape {
            round: self.round.get(),
            ..self.shape
        };
        let me = self.rt.my_pe() as u32;
        let sources: Vec<Inputs> = (0..s.n_pes)
            .map(|pe| Inputs {
                x: routing::tokens(self.opts.seed, pe, s.tokens, s.hidden),
                routing: routing::route(
                    self.opts.seed,
                    pe,
                    s.tokens,
                    s.experts,
                    s.top_k,
                    self.opts.dist,
                ),
            })
            .collect();
        let h = &self.held;
        let got = Received {
            recv_count: h.recv_count.to_vec()?,
            recv_src: h.recv_src.to_vec()?,
            recv_pair: h.recv_pair.to_vec()?,
            recv_w: h.recv_w.to_vec()?,
            recv_x: h.recv_x.to_vec()?,
            expert_count: h.expert_count.to_vec()?,
            expert_offset: h.expert_offset.to_vec()?,
            expert_rows: h.expert_rows.to_vec()?,
        };
        let dispatch = reference::check_dispatch(me, &s, &sources, &got);
        let kept: Vec<bool> = h.send_pair.to_vec()?.iter().map(|&p| p >= 0).collect();
        let want = reference::combine(&self.inputs, &kept, &s);
        let (combine_diffs, combine_worst) = reference::compare(&h.out.to_vec()?, &want);
        Ok(Check {
            dispatch,
            combine_diffs,
            combine_worst,
        })
    }
}

/// The time of a step (a round) repeated back to back, on the slowest PE.
#[derive(Clone, Copy, Debug)]
pub struct Steps {
    /// Microseconds per step on the GPU (first mark to last, divided by the steps).
    pub gpu_us: f64,
    /// Microseconds per step the host spent enqueueing (launches, barriers, or a graph
    /// launch): what a graph saves the host, and what bounds a step when the GPU is faster.
    pub host_us: f64,
}

impl Steps {
    /// From marks around `count` steps and the host's time to enqueue them. Collective.
    fn measured(rt: &Shmem, start: &Mark, end: &Mark, host: Duration, count: u32) -> Result<Steps> {
        let slowest = |ns: f64| -> Result<f64> {
            Ok(rt.min_max(ns as i64)?.1 as f64 * 1e-3 / f64::from(count.max(1)))
        };
        Ok(Steps {
            gpu_us: slowest(end.seconds_since(start)? * 1e9)?,
            host_us: slowest(host.as_nanos() as f64)?,
        })
    }
}

/// One round of a [`Moe`] captured into a CUDA graph ([`Moe::graph`]); it borrows the
/// `Moe` (its buffers) and the kernels for as long as it lives.
pub struct MoeGraph<'g> {
    moe: &'g Moe<'g>,
    graph: Graph<'g>,
    stream: StreamRef<'g>,
}

impl MoeGraph<'_> {
    /// Replays the round `count` times on the graph's stream, after the work already on
    /// the runtime's stream and before what comes after it there (events order the two;
    /// the host does not wait). Collective: every PE replays as many times.
    pub fn replay(&self, count: u32) -> Result<()> {
        self.marked_replay(count).map(drop)
    }

    /// [`MoeGraph::replay`] timed, per round.
    pub fn steps(&self, count: u32) -> Result<Steps> {
        let (start, end, host) = self.marked_replay(count)?;
        end.synchronize()?;
        Steps::measured(self.moe.rt, &start, &end, host, count)
    }

    /// [`MoeGraph::replay`], returning marks on the graph's stream before and after, and
    /// the host's time to launch the replays.
    fn marked_replay(&self, count: u32) -> Result<(Mark, Mark, Duration)> {
        let rt = self.moe.rt;
        rt.wait_for(self.stream, &rt.mark()?)?;
        let start = rt.mark_on(self.stream)?;
        let host = Instant::now();
        for _ in 0..count {
            self.graph.launch()?;
        }
        let host = host.elapsed();
        let end = rt.mark_on(self.stream)?;
        rt.wait_for(StreamRef::Runtime, &end)?;
        self.moe.round.set(1);
        self.moe
            .rounds_run
            .set(self.moe.rounds_run.get() + u64::from(count));
        Ok((start, end, host))
    }

    /// Launches and barriers in the graph.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether the graph is empty (never: a round has four launches or more).
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }
}

/// What [`run`] measured and found on this PE.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Each timed round (slowest PE).
    pub timings: Vec<Timing>,
    /// Cross-GPU token bytes per round, the most any PE sends: dispatch, combine.
    pub cross_bytes: (u64, u64),
    /// Pairs this PE's dispatches dropped per round.
    pub dropped_per_round: u64,
    /// Launch shapes: layout, dispatch, experts, combine.
    pub launch: [(u32, u32); 4],
    /// Whether the dispatch and combine kernels were the [`kernels::Mapped`] ones
    /// ([`Shape::mapped`]).
    pub mapped: bool,
    /// With `verify`: the comparison with the CPU.
    pub check: Option<Check>,
    /// With `graph_replays`: eager and graph rounds compared.
    pub graph: Option<GraphOutcome>,
}

/// Eager rounds and replays of a captured round, compared ([`Options::graph_replays`]).
#[derive(Clone, Debug)]
pub struct GraphOutcome {
    /// Replays (and eager rounds) timed.
    pub replays: u32,
    /// Rounds launched eagerly, back to back.
    pub eager: Steps,
    /// Replays of the graph.
    pub graph: Steps,
    /// Steps in the graph (fill, barriers, launches).
    pub graph_len: usize,
    /// The combined tokens after the last replay equal, bit for bit, those after the last
    /// eager round.
    pub identical: bool,
    /// With `verify`: the last replay compared with the CPU.
    pub check: Option<Check>,
}

impl GraphOutcome {
    /// Identical to eager, and (when checked) correct.
    pub fn ok(&self) -> bool {
        self.identical && self.check.as_ref().is_none_or(Check::ok)
    }
}

impl Outcome {
    /// Median dispatch and combine times in microseconds.
    pub fn median_us(&self) -> (f64, f64) {
        use shmem_host::measure::median;
        let d: Vec<f64> = self.timings.iter().map(|t| t.dispatch_ms * 1e3).collect();
        let c: Vec<f64> = self.timings.iter().map(|t| t.combine_ms * 1e3).collect();
        (median(&d), median(&c))
    }
}

/// Runs `warmup + rounds` rounds of `opts` on this PE and checks the last one if asked
/// (collective: every PE calls it with the same options).
pub fn run(rt: &Shmem, opts: &Options) -> Result<Outcome> {
    let mut moe = Moe::new(rt, opts)?;
    let module = load(rt, &opts.implementation)?;
    let k = Kernels::new(&module)?;
    for _ in 0..opts.warmup {
        moe.round(&k)?;
    }
    let timings = (0..opts.rounds)
        .map(|_| moe.round(&k))
        .collect::<Result<Vec<_>>>()?;
    let check = if opts.verify {
        Some(moe.check()?)
    } else {
        None
    };
    let graph = if opts.graph_replays > 0 {
        Some(compare_graph(
            rt,
            &moe,
            &k,
            opts.graph_replays,
            opts.verify,
        )?)
    } else {
        None
    };
    Ok(Outcome {
        timings,
        cross_bytes: moe.cross_bytes(),
        dropped_per_round: moe.dropped_per_round()?,
        launch: moe.launch,
        mapped: moe.shape.mapped(),
        check,
        graph,
    })
}

/// `replays` eager rounds back to back, then a round captured on a stream of the
/// program's own and replayed `replays` times; the combined tokens of both compared (each
/// written over zeros). Collective.
pub fn compare_graph(
    rt: &Shmem,
    moe: &Moe<'_>,
    k: &Kernels<'_>,
    replays: u32,
    verify: bool,
) -> Result<GraphOutcome> {
    let stream = rt.new_stream()?;
    let graph = moe.graph(k, stream.as_ref())?;
    let (eager, replayed, identical) = eager_then_replays(moe, k, &graph, replays)?;
    let check = if verify { Some(moe.check()?) } else { None };
    Ok(GraphOutcome {
        replays,
        eager,
        graph: replayed,
        graph_len: graph.len(),
        identical,
        check,
    })
}

/// `count` eager rounds of `k` back to back, then `count` replays of `graph` (captured
/// with `k`), each over zeroed combined tokens: both timings, and whether the replays'
/// combined tokens equal the eager rounds' bit for bit. Collective.
pub fn eager_then_replays(
    moe: &Moe<'_>,
    k: &Kernels<'_>,
    graph: &MoeGraph<'_>,
    count: u32,
) -> Result<(Steps, Steps, bool)> {
    moe.clear_combined()?;
    let eager = moe.eager_steps(k, count)?;
    let want = moe.combined()?;
    moe.clear_combined()?;
    let replayed = graph.steps(count)?;
    Ok((eager, replayed, moe.combined()? == want))
}

#[cfg(test)]
mod tests {
    use super::{Dtype, Mode, Options};

    /// The FP8 dispatches split their blocks by role: `--blocks 1` is refused there, and taken
    /// by the `bf16` ones.
    #[test]
    fn one_block_is_refused_only_where_the_dispatch_needs_two() {
        for (mode, dtype, ok) in [
            (Mode::LowLatency, Dtype::Fp8, false),
            (Mode::Throughput, Dtype::Fp8, false),
            (Mode::LowLatency, Dtype::Bf16, true),
            (Mode::Throughput, Dtype::Bf16, true),
        ] {
            let mut o = Options::new(16, "/nonexistent".into());
            (o.mode, o.dtype, o.blocks) = (mode, dtype, Some(1));
            let got = o.check(2);
            assert_eq!(got.is_ok(), ok, "{mode:?} {dtype:?}: {got:?}");
            if !ok {
                let msg = got.unwrap_err().to_string();
                assert!(msg.contains("at least 2 blocks, not 1"), "{msg}");
            }
            o.blocks = Some(2);
            assert!(o.check(2).is_ok(), "{mode:?} {dtype:?} on two blocks");
        }
    }
}
