//! NVSHMEM's host library in two layers, as cudarc splits the CUDA driver:
//!
//! - [`sys`]: C types and the raw function table, loaded at run time;
//! - this module, the result layer: one function per host call that the runtime makes,
//!   turning the call's status (or NULL) into a [`Result`] whose error names the call. The
//!   safe API ([`crate::Shmem`] and its backends) never sees a raw status.
//!
//! Functions whose C counterpart has preconditions (NVSHMEM running, a collective call, a
//! valid pointer) are `unsafe` and say so under "Safety"; the rest only read state.

pub mod sys;

use crate::error::{Error, Result};
use std::ffi::c_void;
use sys::{InitAttr, Lib, RawUniqueId};

pub use sys::{candidate_dirs, lib};

/// A status of 0 is success; anything else is [`Error::Nvshmem`] naming `call`.
fn check(call: &'static str, status: i32) -> Result<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(Error::Nvshmem { call, status })
    }
}

/// The loaded library, with each call checked. Cheap to copy.
#[derive(Clone, Copy)]
pub(crate) struct Nvshmem {
    pub(crate) lib: &'static Lib,
}

impl Nvshmem {
    /// Loads the library (once per process).
    pub(crate) fn load() -> Result<Nvshmem> {
        Ok(Nvshmem { lib: lib()? })
    }

    /// `nvshmemx_get_uniqueid`: a fresh unique id (rank 0 only).
    pub(crate) fn get_uniqueid(self) -> Result<RawUniqueId> {
        let mut raw = RawUniqueId {
            version: (1 << 16) + 128,
            internal: [0; 124],
        };
        // SAFETY: `raw` is a valid, writable nvshmemx_uniqueid_t with its version set.
        check("nvshmemx_get_uniqueid", unsafe {
            (self.lib.nvshmemx_get_uniqueid)(&mut raw)
        })?;
        Ok(raw)
    }

    /// `nvshmemx_set_attr_uniqueid_args` then `nvshmemx_hostlib_init_attr(WITH_UNIQUEID)`.
    ///
    /// # Safety
    /// The CUDA context of the PE's GPU is current on this thread; NVSHMEM is not running.
    pub(crate) unsafe fn init_with_uniqueid(
        self,
        rank: i32,
        nranks: i32,
        uid: &RawUniqueId,
    ) -> Result<()> {
        let mut attr = InitAttr::new();
        // SAFETY: `uid` and `attr` are valid for the call; NVSHMEM copies what it keeps.
        check("nvshmemx_set_attr_uniqueid_args", unsafe {
            (self.lib.nvshmemx_set_attr_uniqueid_args)(rank, nranks, uid, &mut attr)
        })?;
        // SAFETY: `attr` was filled above; the caller made the context current.
        check("nvshmemx_hostlib_init_attr", unsafe {
            (self.lib.nvshmemx_hostlib_init_attr)(sys::INIT_WITH_UNIQUEID, &mut attr)
        })
    }

    /// `nvshmemx_hostlib_init_attr(0)`: NVSHMEM bootstraps itself (PMI, PMIx, MPI).
    ///
    /// # Safety
    /// As [`Nvshmem::init_with_uniqueid`].
    pub(crate) unsafe fn init_bootstrapped(self) -> Result<()> {
        let mut attr = InitAttr::new();
        // SAFETY: a default attribute block with its versions set; the context is current.
        check("nvshmemx_hostlib_init_attr", unsafe {
            (self.lib.nvshmemx_hostlib_init_attr)(0, &mut attr)
        })
    }

    /// `nvshmemx_hostlib_finalize`.
    ///
    /// # Safety
    /// NVSHMEM is running and nothing of it (buffers, modules) is used afterwards.
    pub(crate) unsafe fn finalize(self) {
        // SAFETY: the caller's contract.
        unsafe { (self.lib.nvshmemx_hostlib_finalize)() }
    }

    /// `nvshmemx_vendor_get_version_info`.
    pub(crate) fn version(self) -> (u32, u32, u32) {
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: only writes the three out-pointers, which are valid.
        unsafe { (self.lib.nvshmemx_vendor_get_version_info)(&mut a, &mut b, &mut c) };
        (a as u32, b as u32, c as u32)
    }

    /// `nvshmem_team_my_pe(team)` and `nvshmem_team_n_pes(team)`.
    ///
    /// # Safety
    /// NVSHMEM is running.
    pub(crate) unsafe fn team_pe_and_size(self, team: i32) -> (i32, i32) {
        // SAFETY: the caller's contract; the calls only read NVSHMEM's state.
        unsafe {
            (
                (self.lib.nvshmem_team_my_pe)(team),
                (self.lib.nvshmem_team_n_pes)(team),
            )
        }
    }

    /// `nvshmem_malloc(bytes)`; NULL (the heap is full) is [`Error::HeapExhausted`].
    ///
    /// # Safety
    /// NVSHMEM is running; every PE makes the same call (collective).
    pub(crate) unsafe fn malloc(self, bytes: usize) -> Result<*mut c_void> {
        // SAFETY: the caller's contract.
        let p = unsafe { (self.lib.nvshmem_malloc)(bytes.max(1)) };
        if p.is_null() {
            Err(Error::HeapExhausted { bytes })
        } else {
            Ok(p)
        }
    }

    /// `nvshmem_free(p)`.
    ///
    /// # Safety
    /// `p` came from [`Nvshmem::malloc`] and is freed once, by every PE (collective).
    pub(crate) unsafe fn free(self, p: *mut c_void) {
        // SAFETY: the caller's contract.
        unsafe { (self.lib.nvshmem_free)(p) }
    }

    /// `nvshmem_ptr(p, pe)`: the address of `pe`'s copy in this process, if mapped.
    ///
    /// # Safety
    /// NVSHMEM is running; `p` is a symmetric address; `pe` is in range.
    pub(crate) unsafe fn ptr(self, p: *const c_void, pe: i32) -> Option<*mut c_void> {
        // SAFETY: the caller's contract; the call only translates the address.
        let q = unsafe { (self.lib.nvshmem_ptr)(p, pe) };
        (!q.is_null()).then_some(q)
    }

    /// The host-side synchronisations, by kind (see [`HostSync`]).
    ///
    /// # Safety
    /// NVSHMEM is running; `stream` belongs to the current context; every PE makes the
    /// same call where it is collective.
    pub(crate) unsafe fn sync(self, op: HostSync, stream: sys::Stream) {
        let l = self.lib;
        // SAFETY: the caller's contract.
        unsafe {
            match op {
                HostSync::BarrierAll => (l.nvshmem_barrier_all)(),
                HostSync::SyncAll => (l.nvshmem_sync_all)(),
                HostSync::Quiet => (l.nvshmem_quiet)(),
                HostSync::BarrierAllOnStream => (l.nvshmemx_barrier_all_on_stream)(stream),
                HostSync::SyncAllOnStream => (l.nvshmemx_sync_all_on_stream)(stream),
                HostSync::QuietOnStream => (l.nvshmemx_quiet_on_stream)(stream),
            }
        }
    }

    /// `nvshmemx_int64_max_reduce_on_stream` over the world team.
    ///
    /// # Safety
    /// NVSHMEM is running; `dest` and `src` are symmetric with `n` `i64`s; collective.
    pub(crate) unsafe fn int64_max_reduce_on_stream(
        self,
        dest: *mut i64,
        src: *const i64,
        n: usize,
        stream: sys::Stream,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        check("nvshmemx_int64_max_reduce_on_stream", unsafe {
            (self.lib.nvshmemx_int64_max_reduce_on_stream)(sys::TEAM_WORLD, dest, src, n, stream)
        })
    }

    /// `nvshmem_team_split_strided` or `nvshmem_team_split_2d` of `parent`, default
    /// configuration: the new team (and the column team of a 2D split), `-1`
    /// (`NVSHMEM_TEAM_INVALID`) where this PE is not a member.
    ///
    /// # Safety
    /// NVSHMEM is running; every PE of `parent` makes the same call (collective).
    pub(crate) unsafe fn team_split(
        self,
        parent: i32,
        how: crate::backend::Split,
    ) -> Result<(i32, i32)> {
        use crate::backend::Split;
        let null = std::ptr::null();
        let (mut x, mut y) = (-1, -1);
        // SAFETY: the caller's contract; no configuration (NULL, mask 0); the out-pointers
        // are valid.
        unsafe {
            match how {
                Split::Strided {
                    start,
                    stride,
                    size,
                } => check(
                    "nvshmem_team_split_strided",
                    (self.lib.nvshmem_team_split_strided)(
                        parent, start, stride, size, null, 0, &mut x,
                    ),
                )?,
                Split::TwoD { xrange } => check(
                    "nvshmem_team_split_2d",
                    (self.lib.nvshmem_team_split_2d)(
                        parent, xrange, null, 0, &mut x, null, 0, &mut y,
                    ),
                )?,
            }
        }
        Ok((x, y))
    }

    /// `nvshmem_team_translate_pe`.
    ///
    /// # Safety
    /// NVSHMEM is running.
    pub(crate) unsafe fn team_translate(self, src: i32, pe: i32, dst: i32) -> i32 {
        // SAFETY: the caller's contract; invalid handles and numbers yield -1.
        unsafe { (self.lib.nvshmem_team_translate_pe)(src, pe, dst) }
    }

    /// `nvshmem_team_destroy`.
    ///
    /// # Safety
    /// NVSHMEM is running; `team` was split and is destroyed once, by every member.
    pub(crate) unsafe fn team_destroy(self, team: i32) {
        // SAFETY: the caller's contract.
        unsafe { (self.lib.nvshmem_team_destroy)(team) }
    }

    /// A team collective on `stream` (`nvshmemx_*_on_stream`); sizes as
    /// [`crate::backend::TeamColl`] says.
    ///
    /// # Safety
    /// NVSHMEM is running; `dest` and `src` are symmetric with the sizes `op` needs; every
    /// member of `team` makes the same call; `stream` is of the current context.
    pub(crate) unsafe fn team_coll(
        self,
        team: i32,
        op: crate::backend::TeamColl,
        dest: *mut c_void,
        src: *const c_void,
        bytes: usize,
        stream: sys::Stream,
    ) -> Result<()> {
        use crate::backend::TeamColl;
        let l = self.lib;
        // SAFETY: the caller's contract.
        let status = unsafe {
            match op {
                TeamColl::Barrier => (l.nvshmemx_barrier_on_stream)(team, stream),
                TeamColl::Sync => (l.nvshmemx_team_sync_on_stream)(team, stream),
                TeamColl::Broadcast { root } => {
                    (l.nvshmemx_broadcastmem_on_stream)(team, dest, src, bytes, root, stream)
                }
                TeamColl::Fcollect => {
                    (l.nvshmemx_fcollectmem_on_stream)(team, dest, src, bytes, stream)
                }
                TeamColl::Alltoall => {
                    (l.nvshmemx_alltoallmem_on_stream)(team, dest, src, bytes, stream)
                }
                TeamColl::Reduce(r) => {
                    let f = l.reduce_on_stream(r.ty, r.op)?;
                    f(team, dest, src, bytes / r.elem, stream)
                }
            }
        };
        check(op.name(), status)
    }

    /// `nvshmemx_buffer_register`: makes `bytes` of device memory at `p` usable as the local
    /// side of NVSHMEM operations.
    ///
    /// # Safety
    /// NVSHMEM is running; `p..p+bytes` is device memory of this PE's context that stays
    /// allocated until [`Nvshmem::buffer_unregister`].
    pub(crate) unsafe fn buffer_register(self, p: *mut c_void, bytes: usize) -> Result<()> {
        // SAFETY: the caller's contract.
        check("nvshmemx_buffer_register", unsafe {
            (self.lib.nvshmemx_buffer_register)(p, bytes)
        })
    }

    /// `nvshmemx_buffer_unregister`.
    ///
    /// # Safety
    /// `p` was registered and no operation that uses it is in flight.
    pub(crate) unsafe fn buffer_unregister(self, p: *mut c_void) -> Result<()> {
        // SAFETY: the caller's contract.
        check("nvshmemx_buffer_unregister", unsafe {
            (self.lib.nvshmemx_buffer_unregister)(p)
        })
    }

    /// `nvshmemx_cumodule_init`: registers a loaded module's NVSHMEM state.
    ///
    /// # Safety
    /// `module` is a CUmodule loaded into the current context; NVSHMEM is running.
    pub(crate) unsafe fn cumodule_init(self, module: *mut c_void) -> Result<()> {
        // SAFETY: the caller's contract.
        check("nvshmemx_cumodule_init", unsafe {
            (self.lib.nvshmemx_cumodule_init)(module)
        })
    }

    /// `nvshmemx_cumodule_finalize`.
    ///
    /// # Safety
    /// `module` was registered by [`Nvshmem::cumodule_init`] and no launch of it is in flight.
    pub(crate) unsafe fn cumodule_finalize(self, module: *mut c_void) -> Result<()> {
        // SAFETY: the caller's contract.
        check("nvshmemx_cumodule_finalize", unsafe {
            (self.lib.nvshmemx_cumodule_finalize)(module)
        })
    }
}

/// The host-side synchronisations NVSHMEM offers, blocking or enqueued on a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostSync {
    /// `nvshmem_barrier_all`: completes this PE's operations, waits for every PE.
    BarrierAll,
    /// `nvshmem_sync_all`: waits for every PE.
    SyncAll,
    /// `nvshmem_quiet`: completes this PE's host-initiated operations.
    Quiet,
    /// `nvshmemx_barrier_all_on_stream`.
    BarrierAllOnStream,
    /// `nvshmemx_sync_all_on_stream`.
    SyncAllOnStream,
    /// `nvshmemx_quiet_on_stream`.
    QuietOnStream,
}

impl HostSync {
    /// The C function's name.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            HostSync::BarrierAll => "barrier_all",
            HostSync::SyncAll => "sync_all",
            HostSync::Quiet => "quiet",
            HostSync::BarrierAllOnStream => "barrier_all_on_stream",
            HostSync::SyncAllOnStream => "sync_all_on_stream",
            HostSync::QuietOnStream => "quiet_on_stream",
        }
    }

    /// Whether every PE takes part.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub(crate) fn is_collective(self) -> bool {
        !matches!(self, HostSync::Quiet | HostSync::QuietOnStream)
    }

    /// Whether it is enqueued on the stream rather than waiting for it first.
    pub(crate) fn on_stream(self) -> bool {
        matches!(
            self,
            HostSync::BarrierAllOnStream | HostSync::SyncAllOnStream | HostSync::QuietOnStream
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_status_names_the_call() {
        assert!(check("nvshmemx_cumodule_init", 0).is_ok());
        let e = check("nvshmemx_cumodule_init", 7).unwrap_err().to_string();
        assert!(
            e.contains("nvshmemx_cumodule_init") && e.contains('7'),
            "{e}"
        );
    }
}
