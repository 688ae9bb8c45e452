//! The front: dispatch and combine of the caller's tokens, for a program's own expert layer
//! (what the Python package `shmem_rs` calls; `python/`).
//!
//! A [`Front`] owns one mode's symmetric buffers for a token budget; each call:
//!
//! - [`Front::dispatch`] takes this PE's `tokens × H` tokens, `tokens × K` expert ids and
//!   weights (any device memory: the caller's tensors), and writes the tokens received for
//!   this PE's experts into the caller's `pair_slots × H` rows, one row per kept (token,
//!   local expert) pair, with their layout: for local expert `l` and source PE `s`,
//!   `count[l][s]` rows from slot `offset[l][s]` ([`kernels::Gather`]); an FP8 dispatch
//!   ([`Config::dtype`]) writes `e4m3` rows and one row of `hidden / 128` scales per slot. In low-latency mode
//!   the slots of `(l, s)` start at `(l · n + s) · C`, so the rows read as `L × n·C × H`
//!   with `count` valid rows per source; in throughput mode each expert's rows are packed;
//! - the caller's experts write one output row per pair into a `pair_slots × H` tensor;
//! - [`Front::combine`] sums each token's outputs with its weights, back on its PE, into the
//!   caller's `max_tokens × H` output (rows past the call's tokens: zero).
//!
//! Every call enqueues on the caller's stream (or capture) and returns without waiting, so
//! it composes with the caller's other work and with CUDA graphs: a call restarts the
//! signal words itself ([`kernels::moe_stage()`]), so a captured dispatch and combine replay
//! like eager ones. Calls are collective: every PE dispatches and combines, the same number
//! of times, with the same configuration (tokens may differ per PE).

use super::{Dtype, Held, Kernels, Mode, Options, grids};
use crate::kernels::{self, Bufs, Gather, Shape, Stage};
use shmem_device::DevicePtr;
use shmem_host::{Enqueue, Error, KernelFn, LaunchConfig, Module, Result, Shmem};
use std::cell::Cell;

/// What a [`Front`] is sized for; the same on every PE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// `bf16` values per token (a multiple of 8).
    pub hidden: u32,
    /// Experts, a multiple of the PE count.
    pub experts: u32,
    /// Choices per token (at most 16).
    pub top_k: u32,
    /// The most tokens one call dispatches from a PE.
    pub max_tokens: u32,
    /// Which dispatch.
    pub mode: Mode,
    /// What the dispatch sends, and so what it returns: `bf16` rows, or `e4m3` rows and
    /// their scales ([`Dtype::Fp8`], `hidden` a multiple of 128).
    pub dtype: Dtype,
    /// Pairs kept per (local expert, source) in low-latency mode, per local expert in
    /// throughput mode; `None`: as many as can arrive.
    pub capacity: Option<u32>,
    /// Threads per block (a multiple of 32).
    pub threads: u32,
}

impl Config {
    /// Low-latency mode, every pair kept, 256 threads per block.
    pub fn new(hidden: u32, experts: u32, top_k: u32, max_tokens: u32) -> Config {
        Config {
            hidden,
            experts,
            top_k,
            max_tokens,
            mode: Mode::LowLatency,
            dtype: Dtype::Bf16,
            capacity: None,
            threads: 256,
        }
    }

    fn options(&self) -> Options {
        let mut o = Options::new(self.max_tokens, Default::default());
        o.hidden = self.hidden;
        o.experts = self.experts;
        o.top_k = self.top_k;
        o.mode = self.mode;
        o.dtype = self.dtype;
        o.capacity = self.capacity;
        o.threads = self.threads;
        o
    }
}

/// The kernels of the front: the four of the exchange, and the two that stage the
/// caller's inputs and gather the received tokens.
pub struct FrontKernels<'m> {
    k: Kernels<'m>,
    stage: KernelFn<'m, kernels::moe_stage>,
    gather: KernelFn<'m, kernels::moe_gather>,
}

impl<'m> FrontKernels<'m> {
    /// The kernels of `module` (this crate's, built or embedded).
    pub fn new(module: &'m Module<'_>) -> Result<FrontKernels<'m>> {
        Ok(FrontKernels {
            k: Kernels::new(module)?,
            stage: module.kernel()?,
            gather: module.kernel()?,
        })
    }
}

/// Which dispatch a [`Front::combine`] answers: the call it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    call: u64,
    tokens: u32,
}

impl Handle {
    /// The tokens this PE dispatched.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }
}

/// One mode's symmetric buffers for [`Config`]'s budget (module documentation).
pub struct Front<'rt> {
    shape: Shape,
    config: Config,
    held: Held<'rt>,
    bufs: Bufs,
    /// Launch shapes: layout, dispatch, (experts), combine; then stage and gather.
    launch: Cell<Option<([LaunchConfig<'static>; 4], [LaunchConfig<'static>; 2])>>,
    /// Dispatches so far (the last one's handle is the one a combine may take).
    calls: Cell<u64>,
}

impl<'rt> Front<'rt> {
    /// Allocates the buffers (the `as local` ones excepted: the caller's memory takes their
    /// place). Collective.
    pub fn new(rt: &'rt Shmem, config: Config) -> Result<Front<'rt>> {
        let n = rt.n_pes() as u32;
        let opts = config.options();
        opts.check(n)?;
        let shape = Shape {
            round: 1,
            ..opts.gpu_shape(rt)?
        };
        let held = Held::alloc(rt, &shape.lens(), false)?;
        let shape = held.reach(shape, opts.probe_peers)?;
        // The kernels' counters start at zero and return there by themselves.
        held.zero_counters()?;
        let bufs = held.bufs();
        rt.barrier_all()?;
        Ok(Front {
            shape,
            config,
            held,
            bufs,
            launch: Cell::new(None),
            calls: Cell::new(0),
        })
    }

    /// The configuration.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Rows of the received tokens and of the experts' outputs: pair slots.
    pub fn pair_slots(&self) -> usize {
        self.shape.pair_slots()
    }

    /// Local experts (`L`) and PEs (`n`): the layout is `2 × L × n` words.
    pub fn layout_dims(&self) -> (usize, usize) {
        let n = self.shape.n_pes as usize;
        (self.shape.experts as usize / n, n)
    }

    /// This PE's copy of the symmetric token buffer (`max_tokens × H` `bf16`): tokens
    /// written here need no copy ([`Stage::x`] null).
    pub fn input_tokens(&self) -> DevicePtr<u16> {
        super::device(&self.held.x)
    }

    /// Pairs this PE's dispatches dropped for capacity, over all calls.
    pub fn dropped(&self) -> Result<u64> {
        Ok(u64::from(self.held.dropped.to_vec()?[0]))
    }

    fn launches(
        &self,
        k: &FrontKernels<'_>,
    ) -> Result<([LaunchConfig<'static>; 4], [LaunchConfig<'static>; 2])> {
        if let Some(l) = self.launch.get() {
            return Ok(l);
        }
        let g = grids(&k.k, &self.config.options(), self.shape)?;
        let th = self.config.threads;
        let wpb = th / 32;
        let fit = k
            .stage
            .max_coresident_blocks(&LaunchConfig::linear(1, th))?;
        let items =
            (self.shape.tokens * self.shape.top_k).max(self.shape.tokens * self.shape.hidden / 8);
        let per_pair = self.shape.pair_slots().div_ceil(wpb as usize).max(1) as u32;
        let gfit = k
            .gather
            .max_coresident_blocks(&LaunchConfig::linear(1, th))?;
        let local = [
            LaunchConfig::linear(items.div_ceil(th).clamp(1, fit.max(1) * 4), th)
                .with_cooperative(false),
            LaunchConfig::linear(per_pair.clamp(1, gfit.max(1) * 4), th).with_cooperative(false),
        ];
        self.launch.set(Some((g, local)));
        Ok((g, local))
    }

    /// Enqueues a dispatch of `input.tokens` tokens into `to`: the inputs staged, a barrier,
    /// (the layout,) the dispatch, and the gather into `out`. Returns the handle that the
    /// matching [`Front::combine`] takes. Collective.
    ///
    /// # Safety
    /// `input`'s pointers are this PE's device memory (host memory under the simulator)
    /// holding `input.tokens` rows (`x`: `hidden` `bf16` each, 16-byte aligned, or null;
    /// `topk`: `top_k` ids, each `-1` or a distinct expert; `weights`: `top_k` values);
    /// `out.x` holds [`Front::pair_slots`] rows of `hidden` `bf16` (FP8: `hidden` bytes),
    /// 16-byte aligned, FP8's `out.scales` as many rows of `hidden / 128` `f32`, and
    /// `out.layout` `2 × L × n` `i32`; all stay valid and untouched by anything else until
    /// the enqueued work has run (every replay of it, when `to` is a capture).
    pub unsafe fn dispatch<'b>(
        &self,
        k: &'b FrontKernels<'_>,
        input: Stage,
        out: Gather,
        to: Enqueue<'_, 'b>,
    ) -> Result<Handle> {
        let tokens = u32::try_from(input.tokens).unwrap_or(u32::MAX);
        if tokens > self.config.max_tokens {
            return Err(Error::Invalid(format!(
                "{tokens} tokens, more than the {} this buffer was made for",
                self.config.max_tokens
            )));
        }
        if self.shape.fp8() && out.scales.as_ptr().is_null() {
            return Err(Error::Invalid(
                "an FP8 dispatch returns scales: the gather's scales pointer is null".into(),
            ));
        }
        let (g, local) = self.launches(k)?;
        let (b, s) = (self.bufs, self.shape);
        // SAFETY: the caller's contract for the pointers; the buffers are this `Front`'s,
        // sized for `s`; every PE enqueues the same calls (collective), and each kernel
        // follows the previous one on the stream: the stage after the previous call's
        // combine, the barrier after every PE's stage (so no signal of this call arrives
        // before the words restart), the dispatch after it, the gather after the dispatch.
        unsafe {
            to.launch(&k.stage, local[0], (b, s, input))?;
            to.barrier_all()?;
            k.k.enqueue_dispatch(&to, &g, b, s)?;
            to.launch(&k.gather, local[1], (b, s, out))?;
        }
        self.calls.set(self.calls.get() + 1);
        Ok(Handle {
            call: self.calls.get(),
            tokens,
        })
    }

    /// Enqueues the combine of the dispatch that returned `handle`: the experts' outputs
    /// `y` (one row per pair slot, as the dispatch's rows) summed with the routing weights
    /// into `out` (`max_tokens × H`). Collective.
    ///
    /// # Safety
    /// `y` holds [`Front::pair_slots`] rows of `hidden` `bf16`, `out` `max_tokens` rows, both
    /// 16-byte aligned device memory of this PE (host memory under the simulator), valid
    /// until the enqueued work has run (every replay, for a capture); `y`'s rows of the
    /// dispatch's pairs are written before the combine runs (earlier on the stream).
    pub unsafe fn combine<'b>(
        &self,
        k: &'b FrontKernels<'_>,
        handle: Handle,
        y: DevicePtr<u16>,
        out: DevicePtr<u16>,
        to: Enqueue<'_, 'b>,
    ) -> Result<()> {
        if handle.call != self.calls.get() {
            return Err(Error::Invalid(format!(
                "this combine takes the handle of dispatch {} of this buffer, but dispatch {} has run since and replaced its tokens: combine each dispatch before the next",
                handle.call,
                self.calls.get()
            )));
        }
        let (g, _) = self.launches(k)?;
        let b = Bufs {
            expert_y: y,
            out,
            ..self.bufs
        };
        // No barrier first: a combine writes only the sources' `comb_recv`, which no dispatch
        // touches, and a source reads it only after every PE's combine has signalled it.
        // SAFETY: the caller's contract for `y` and `out`; the rest as in `dispatch`, whose
        // round this is.
        unsafe { k.k.enqueue_combine(&to, &g, b, self.shape) }
    }
}
