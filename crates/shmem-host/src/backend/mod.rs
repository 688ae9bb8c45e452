//! The one seam between what the runtime does and where it happens: NVSHMEM on a GPU
//! ([`gpu`]) or a PE of the CPU simulator (`crate::sim`). [`crate::Shmem`] holds one
//! [`Backend`] and says what happens; each implementation says how. Nothing else in the
//! crate asks which backend it has.

pub(crate) mod gpu;

use crate::error::Result;
use crate::module::LaunchConfig;
use crate::nvshmem::HostSync;
use crate::runtime::Mark;
use crate::stream::{GraphExec, StreamRef};
use cudarc::driver::sys::{CUfunction, CUmodule};
use std::ffi::c_void;
use std::path::Path;

/// Who this PE is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeInfo {
    pub my_pe: i32,
    pub n_pes: i32,
    /// This PE's number among the PEs of its node, and their number.
    pub node_pe: i32,
    pub node_n_pes: i32,
    /// The NVSHMEM version: the host library's, or the one the simulator follows.
    pub version: (u32, u32, u32),
    pub kind: crate::runtime::BackendKind,
}

/// A kernel's launch arguments, type-erased for the backend: parameter pointers for the
/// driver, or a call of the kernel's host build for the simulator.
pub(crate) trait LaunchArgs {
    /// One pointer per parameter, valid while `self` is alive and unmoved.
    fn param_ptrs(&mut self) -> Vec<*mut c_void>;
    /// The kernel body called with these arguments (the simulator runs it on each thread).
    #[cfg(feature = "sim")]
    fn host_call(&self) -> HostCall;
}

/// A kernel body with its arguments bound, run by every simulated thread of one PE.
#[cfg(feature = "sim")]
pub(crate) type HostCall = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Where a kernel of a module lives: a `CUfunction`, or (simulator) nothing, because the
/// kernel runs from the program's own host build.
pub(crate) type Function = CUfunction;

/// What a backend does. Every method that takes part in a collective call is collective on
/// this backend too (the simulator meets the PEs' threads there).
pub(crate) trait Backend {
    fn pe(&self) -> PeInfo;
    /// The GPU, or the error that this needs one ([`crate::Error::Simulator`]).
    fn gpu(&self) -> Result<&gpu::Gpu>;
    /// Waits for the work launched on this PE.
    fn synchronize(&self) -> Result<()>;
    /// An event recorded on `stream` (the host clock under the simulator).
    fn mark_on(&self, stream: StreamRef<'_>) -> Result<Mark>;
    /// Makes `stream` wait for `mark` on the device.
    fn wait_for(&self, stream: StreamRef<'_>, mark: &Mark) -> Result<()>;
    /// Makes `stream` wait on the device until [`Backend::release`] of the returned ticket
    /// (`None`: nothing to hold). Refused during a capture.
    fn hold(&self, stream: StreamRef<'_>) -> Result<Option<u32>>;
    /// Lets the work held by `ticket`, and by every earlier ticket, run.
    fn release(&self, ticket: u32);
    /// A host synchronisation; the on-stream ones go on `stream`.
    fn sync(&self, op: HostSync, stream: StreamRef<'_>) -> Result<()>;
    /// Starts capturing `stream` (thread-local mode: host work on this thread that the
    /// capture cannot hold is refused by the driver).
    fn begin_capture(&self, stream: StreamRef<'_>) -> Result<()>;
    /// Ends the capture of `stream` and instantiates what it recorded.
    fn end_capture(&self, stream: StreamRef<'_>) -> Result<GraphExec>;
    /// Replays a graph on `stream`.
    fn launch_graph(&self, graph: &GraphExec, stream: StreamRef<'_>) -> Result<()>;
    fn min_max(&self, value: i64) -> Result<(i64, i64)>;
    /// A collective allocation of `bytes`, zero-filled; [`unequal`] when the PEs asked for
    /// different sizes (on every PE, and nothing is allocated).
    fn alloc(&self, bytes: usize) -> Result<*mut u8>;
    /// # Safety
    /// `p` came from [`Backend::alloc`]; every PE frees it in the same order.
    unsafe fn free(&self, p: *mut u8);
    /// Copies `bytes` from host memory `src` to this PE's copy at `dst`.
    ///
    /// # Safety
    /// `dst..dst+bytes` is symmetric memory of this PE; `src..src+bytes` is readable.
    unsafe fn write(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()>;
    /// Copies `bytes` of this PE's copy at `src` into host memory `dst`.
    ///
    /// # Safety
    /// `src..src+bytes` is symmetric memory of this PE; `dst..dst+bytes` is writable.
    unsafe fn read(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()>;
    /// # Safety
    /// `p..p+bytes` is symmetric memory of this PE.
    unsafe fn fill_zero(&self, p: *mut u8, bytes: usize) -> Result<()>;
    /// Enqueues a fill of `p..p+bytes` with zero bytes on `stream` (recorded, when `stream`
    /// is being captured).
    ///
    /// # Safety
    /// `p..p+bytes` is symmetric memory of this PE, live until the fill has run (every
    /// replay, when captured).
    unsafe fn fill_zero_on(&self, p: *mut u8, bytes: usize, stream: StreamRef<'_>) -> Result<()>;
    /// The address of `pe`'s copy of symmetric `p` in this process, if mapped.
    fn peer_ptr(&self, p: *const u8, pe: i32) -> Option<u64>;
    /// Loads a module image (cubin or PTX) and registers it with NVSHMEM; `None` under the
    /// simulator, whose kernels run from the program itself.
    fn load(&self, image: Vec<u8>, origin: &Path) -> Result<Option<CUmodule>>;
    /// # Safety
    /// `m` came from [`Backend::load`] and is unloaded once.
    unsafe fn unload(&self, m: CUmodule);
    fn function(&self, m: CUmodule, name: &str, origin: &Path) -> Result<Function>;
    /// Blocks of `cfg`'s shape of `f` that can be resident at once (what a cooperative
    /// launch may have).
    fn coresident_blocks(&self, f: Function, cfg: &LaunchConfig) -> Result<u32>;
    /// Streaming multiprocessors of this PE's GPU (the simulator's count of them).
    fn multiprocessors(&self) -> Result<u32>;
    /// Splits `parent` (collective over its PEs): the new team, and for [`Split::TwoD`] the
    /// column team too (`-1` where this PE is not a member, and as the second for strided).
    fn team_split(&self, parent: i32, how: Split) -> Result<(i32, i32)>;
    /// `nvshmem_team_n_pes`: the size of `team`, or -1 for an invalid team.
    fn team_n_pes(&self, team: i32) -> i32;
    /// `nvshmem_team_translate_pe`: the number in `dst` of `src`'s PE `pe`, or -1.
    fn team_translate(&self, src: i32, pe: i32, dst: i32) -> i32;
    /// `nvshmem_team_destroy` (by every member, in the same order).
    ///
    /// # Safety
    /// `team` came from [`Backend::team_split`], this PE is a member, and it is destroyed
    /// once; no kernel that uses it is in flight.
    unsafe fn team_destroy(&self, team: i32);
    /// A collective of `team`'s PEs on `stream`.
    ///
    /// # Safety
    /// `dest` and `src` are symmetric and hold what `op` reads and writes for `bytes` and the
    /// team's size; every member makes the same call.
    unsafe fn team_coll(
        &self,
        team: i32,
        op: TeamColl,
        dest: *mut u8,
        src: *const u8,
        bytes: usize,
        stream: StreamRef<'_>,
    ) -> Result<()>;
    /// The program-wide wait bound (ns, 0: none) of modules loaded from now on.
    fn set_wait_bound(&self, ns: u64);
    /// Whether a launch with [`LaunchConfig::dependent`] may begin before the stream's
    /// previous kernel has completed (a GPU from sm_90, not shared with another PE).
    fn overlaps_dependents(&self) -> bool {
        false
    }
    /// Launches `f` (cooperatively when `cooperative`; as a dependent of the stream's
    /// previous kernel when `cfg.dependent`, which `crate::module` clears for cooperative
    /// launches, and [`Backend::overlaps_dependents`]), after the checks common to every
    /// backend (in `crate::module`).
    ///
    /// # Safety
    /// `args` are `f`'s parameters and satisfy its kernel's contract with this shape.
    unsafe fn launch(
        &self,
        f: Function,
        name: &'static str,
        cfg: &LaunchConfig<'_>,
        cooperative: bool,
        args: &mut dyn LaunchArgs,
    ) -> Result<()>;
}

/// How [`Backend::team_split`] splits a team (NVSHMEM's two ways).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// `nvshmem_team_split_strided`: the parent's PEs `start, start + stride, …`, `size` of
    /// them.
    Strided { start: i32, stride: i32, size: i32 },
    /// `nvshmem_team_split_2d`: rows of `xrange` consecutive parent PEs (x) and the columns
    /// across them (y).
    TwoD { xrange: i32 },
}

/// A collective operation of a team, enqueued on a stream (`nvshmemx_*_on_stream`). Sizes
/// are in bytes: the whole buffer for `Broadcast` and `Reduce`, one PE's block for
/// `Fcollect` and `Alltoall`.
#[derive(Clone, Copy)]
pub(crate) enum TeamColl {
    Barrier,
    Sync,
    Broadcast { root: i32 },
    Fcollect,
    Alltoall,
    Reduce(ReduceSpec),
}

impl TeamColl {
    /// The C function's name (for errors and the simulator's meetings).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            TeamColl::Barrier => "nvshmemx_barrier_on_stream",
            TeamColl::Sync => "nvshmemx_team_sync_on_stream",
            TeamColl::Broadcast { .. } => "nvshmemx_broadcastmem_on_stream",
            TeamColl::Fcollect => "nvshmemx_fcollectmem_on_stream",
            TeamColl::Alltoall => "nvshmemx_alltoallmem_on_stream",
            TeamColl::Reduce(_) => "nvshmemx_TYPE_OP_reduce_on_stream",
        }
    }
}

/// A reduction: NVSHMEM's names for its type and operation, the element size, and (for the
/// simulator) the operation folding one array of elements into another, as bytes.
#[derive(Clone, Copy)]
pub(crate) struct ReduceSpec {
    pub ty: &'static str,
    pub op: &'static str,
    /// Bytes per element.
    pub elem: usize,
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub fold: fn(&mut [u8], &[u8]),
}

/// The error for host work asked for while this PE captures a graph: the same on every
/// backend (the GPU's driver would refuse it, or worse, run it at capture time).
pub(crate) fn capture_refuses(what: &str) -> crate::Error {
    crate::Error::Capture(format!(
        "{what} during a capture: host work cannot be part of a graph"
    ))
}

/// The error of a collective allocation in which PEs asked for sizes `min..=max`, or `Ok`
/// when they agree.
pub(crate) fn unequal(mine: usize, (min, max): (usize, usize)) -> Result<()> {
    if min == max {
        Ok(())
    } else {
        Err(crate::Error::UnequalAllocation { mine, min, max })
    }
}
