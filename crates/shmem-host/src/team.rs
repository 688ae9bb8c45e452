//! Teams from the host: subsets of PEs split from the world (or from another team), with
//! their own numbering, barriers and collectives, passed to kernels as a
//! [`shmem_device::Team`] argument.
//!
//! ```
//! use shmem_host::{Shmem, StreamRef, sim, team::Sum};
//! let got = sim::run(4, || {
//!     let rt = Shmem::init()?;
//!     let world = rt.team_world();
//!     // The even PEs: 0 and 2 (the odd ones get `None`).
//!     let evens = world.split_strided(0, 2, 2)?;
//!     let x = rt.alloc::<i32>(1)?;
//!     let sum = rt.alloc::<i32>(1)?;
//!     x.copy_from(&[rt.my_pe() + 1])?;
//!     if let Some(t) = &evens {
//!         t.reduce_on(Sum, &sum, &x, StreamRef::Runtime)?;
//!     }
//!     rt.synchronize()?;
//!     Ok((evens.as_ref().map(|t| t.my_pe()), sum.to_vec()?[0]))
//! })
//! .unwrap();
//! assert_eq!(got, [(Some(0), 4), (None, 0), (Some(1), 4), (None, 0)]);
//! ```
//!
//! Rules, as NVSHMEM's:
//! - Splitting is collective over the parent team: every member calls it with the same
//!   arguments; the PEs outside the new team get `None`.
//! - A [`Team`] borrows the runtime, so it is destroyed before NVSHMEM stops. Dropping a
//!   split team destroys it (`nvshmem_team_destroy`), which every member does, in the same
//!   order, when no kernel that uses it is in flight. The predefined teams are never
//!   destroyed.
//! - Team collectives are enqueued on a stream (`nvshmemx_*_on_stream`) and are collective
//!   over the team's PEs; a graph capture may hold them.

use crate::args::HostArg;
use crate::backend::{ReduceSpec, Split, TeamColl};
use crate::buffer::SymBuffer;
use crate::error::{Error, Result};
use crate::runtime::Shmem;
use crate::stream::StreamRef;

pub use shmem_device::coll::{And, Max, Min, Or, Prod, Sum, Xor};

/// A team of PEs: one of NVSHMEM's predefined teams ([`Shmem::team_world`],
/// [`Shmem::team_node`]) or a split of one ([`Team::split_strided`], [`Team::split_2d`]).
/// See the [module](self) for the rules.
pub struct Team<'rt> {
    rt: &'rt Shmem,
    handle: shmem_device::Team,
    /// Whether dropping it destroys it (split teams, not predefined ones).
    owned: bool,
}

impl Shmem {
    /// Every PE: `NVSHMEM_TEAM_WORLD`.
    pub fn team_world(&self) -> Team<'_> {
        self.predefined(shmem_device::Team::WORLD)
    }

    /// The PEs of this node: `NVSHMEMX_TEAM_NODE` (every PE under the simulator).
    pub fn team_node(&self) -> Team<'_> {
        self.predefined(shmem_device::Team::NODE)
    }

    fn predefined(&self, handle: shmem_device::Team) -> Team<'_> {
        Team {
            rt: self,
            handle,
            owned: false,
        }
    }
}

impl<'rt> Team<'rt> {
    /// The handle kernels take (a `Team` parameter; `&team` passes for it too).
    pub fn handle(&self) -> shmem_device::Team {
        self.handle
    }

    /// This PE's number in the team.
    pub fn my_pe(&self) -> i32 {
        let b = &self.rt.backend;
        b.team_translate(0, self.rt.my_pe(), self.handle.0)
    }

    /// The number of PEs in the team.
    pub fn n_pes(&self) -> i32 {
        self.rt.backend.team_n_pes(self.handle.0)
    }

    /// The number in `other` of this team's PE `pe`, or `None` when it is not in `other`
    /// (or `pe` is out of range). NVSHMEM: `nvshmem_team_translate_pe`.
    pub fn translate_pe(&self, pe: i32, other: &Team<'_>) -> Option<i32> {
        // NVSHMEM does not range-check `pe` (measured: 3.4.5 maps PE 1 of a one-PE team).
        if !(0..self.n_pes()).contains(&pe) {
            return None;
        }
        let t = self
            .rt
            .backend
            .team_translate(self.handle.0, pe, other.handle.0);
        (t >= 0).then_some(t)
    }

    /// The world number of this team's PE `pe`.
    pub fn world_pe(&self, pe: i32) -> Option<i32> {
        self.translate_pe(pe, &self.rt.team_world())
    }

    /// The team of this team's PEs `start, start + stride, …` (`size` of them, numbered in
    /// that order), or `None` on the PEs outside it. Collective over this team: every member
    /// calls it with the same arguments. NVSHMEM: `nvshmem_team_split_strided`.
    pub fn split_strided(&self, start: i32, stride: i32, size: i32) -> Result<Option<Team<'rt>>> {
        let n = self.n_pes();
        let last = start as i64 + stride as i64 * (size as i64 - 1);
        if size < 1 || !(0..n).contains(&start) || !(0..n as i64).contains(&last) {
            return Err(Error::Invalid(format!(
                "split_strided(start {start}, stride {stride}, size {size}) reaches outside a \
                 team of {n} PEs"
            )));
        }
        let (t, _) = self.rt.backend.team_split(
            self.handle.0,
            Split::Strided {
                start,
                stride,
                size,
            },
        )?;
        Ok(self.owned_team(t))
    }

    /// This team as a grid of rows of `xrange` consecutive PEs: the row this PE is in (x)
    /// and its column (y: the PEs at the same place in every row). A last, shorter row is
    /// allowed. Collective over this team. NVSHMEM: `nvshmem_team_split_2d`.
    pub fn split_2d(&self, xrange: i32) -> Result<(Team<'rt>, Team<'rt>)> {
        if xrange < 1 {
            return Err(Error::Invalid(format!(
                "split_2d(xrange {xrange}): rows need at least one PE"
            )));
        }
        let (x, y) = self
            .rt
            .backend
            .team_split(self.handle.0, Split::TwoD { xrange })?;
        let (Some(x), Some(y)) = (self.owned_team(x), self.owned_team(y)) else {
            return Err(Error::Nvshmem {
                call: "nvshmem_team_split_2d",
                status: -1,
            });
        };
        Ok((x, y))
    }

    fn owned_team(&self, handle: i32) -> Option<Team<'rt>> {
        (handle >= 0).then_some(Team {
            rt: self.rt,
            handle: shmem_device::Team(handle),
            owned: true,
        })
    }

    /// Completes this PE's operations and waits for every member, enqueued on `stream`.
    /// NVSHMEM: `nvshmemx_barrier_on_stream`.
    pub fn barrier_on(&self, stream: StreamRef<'_>) -> Result<()> {
        self.meet(TeamColl::Barrier, stream)
    }

    /// [`Team::barrier_on`] the runtime's stream, then waits for it.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_on(StreamRef::Runtime)?;
        self.rt.synchronize()
    }

    /// Waits for every member, completing nothing, on `stream`. NVSHMEM:
    /// `nvshmemx_team_sync_on_stream`.
    pub fn sync_on(&self, stream: StreamRef<'_>) -> Result<()> {
        self.meet(TeamColl::Sync, stream)
    }

    /// A barrier or sync of the team on `stream`: no buffer is touched.
    fn meet(&self, op: TeamColl, stream: StreamRef<'_>) -> Result<()> {
        // SAFETY: barriers and syncs read and write no buffer (null, 0 bytes); collective by
        // the caller's contract.
        unsafe { self.coll(op, std::ptr::null_mut(), std::ptr::null(), 0, stream) }
    }

    /// Element-wise reduction with `op` ([`Sum`], [`Min`], …) of every member's `src` into
    /// every member's `dest` (equal lengths), on `stream`. NVSHMEM:
    /// `nvshmemx_TYPE_OP_reduce_on_stream`.
    pub fn reduce_on<T: Copy + 'static, O: HostReduce<T>>(
        &self,
        _op: O,
        dest: &SymBuffer<'_, T>,
        src: &SymBuffer<'_, T>,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        self.same_len("reduce", dest.len(), src.len())?;
        let spec = ReduceSpec {
            ty: O::TYPE,
            op: O::OP,
            elem: std::mem::size_of::<T>(),
            fold: fold::<T, O>,
        };
        // SAFETY: two live symmetric buffers of this runtime, of equal length.
        unsafe { self.on_buffers(TeamColl::Reduce(spec), dest, src, src.len(), stream) }
    }

    /// Copies member `root`'s `src` into every member's `dest` (the root's too), on `stream`.
    /// NVSHMEM: `nvshmemx_broadcastmem_on_stream`.
    pub fn broadcast_on<T: Copy + 'static>(
        &self,
        dest: &SymBuffer<'_, T>,
        src: &SymBuffer<'_, T>,
        root: i32,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        self.same_len("broadcast", dest.len(), src.len())?;
        let n = self.n_pes();
        if !(0..n).contains(&root) {
            return Err(Error::Invalid(format!(
                "broadcast root {root} is not a member of a team of {n} PEs"
            )));
        }
        // SAFETY: as in `reduce_on`.
        unsafe { self.on_buffers(TeamColl::Broadcast { root }, dest, src, src.len(), stream) }
    }

    /// Every member's `src` concatenated, in team order, into every member's `dest`
    /// (`n_pes()` times as long), on `stream`. NVSHMEM: `nvshmemx_fcollectmem_on_stream`.
    pub fn fcollect_on<T: Copy + 'static>(
        &self,
        dest: &SymBuffer<'_, T>,
        src: &SymBuffer<'_, T>,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        let n = self.n_pes() as usize;
        self.same_len(
            "fcollect (dest against n_pes × src)",
            dest.len(),
            src.len() * n,
        )?;
        // SAFETY: as in `reduce_on`; `dest` holds `n` blocks of `src`'s length.
        unsafe { self.on_buffers(TeamColl::Fcollect, dest, src, src.len(), stream) }
    }

    /// Block `j` of member `i`'s `src` to block `i` of member `j`'s `dest` (equal lengths,
    /// `n_pes()` blocks), on `stream`. NVSHMEM: `nvshmemx_alltoallmem_on_stream`.
    pub fn alltoall_on<T: Copy + 'static>(
        &self,
        dest: &SymBuffer<'_, T>,
        src: &SymBuffer<'_, T>,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        let n = self.n_pes() as usize;
        self.same_len("alltoall", dest.len(), src.len())?;
        if !src.len().is_multiple_of(n) {
            return Err(Error::Invalid(format!(
                "alltoall of {} elements: not a multiple of the team's {n} PEs",
                src.len()
            )));
        }
        // SAFETY: as in `reduce_on`; the blocks divide the buffers.
        unsafe { self.on_buffers(TeamColl::Alltoall, dest, src, src.len() / n, stream) }
    }

    fn same_len(&self, what: &str, a: usize, b: usize) -> Result<()> {
        if a == b {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "{what} with buffers of {a} and {b} elements: they must agree"
            )))
        }
    }

    /// # Safety
    /// `dest` and `src` hold what `op` needs for blocks of `len` elements.
    unsafe fn on_buffers<T: Copy + 'static>(
        &self,
        op: TeamColl,
        dest: &SymBuffer<'_, T>,
        src: &SymBuffer<'_, T>,
        len: usize,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        if !std::ptr::eq(dest.runtime(), self.rt) || !std::ptr::eq(src.runtime(), self.rt) {
            return Err(Error::Invalid(
                "a team collective on buffers of another runtime".into(),
            ));
        }
        let bytes = len * std::mem::size_of::<T>();
        // SAFETY: the caller's contract.
        unsafe { self.coll(op, dest.raw().cast(), src.raw().cast(), bytes, stream) }
    }

    /// # Safety
    /// As [`crate::backend::Backend::team_coll`].
    unsafe fn coll(
        &self,
        op: TeamColl,
        dest: *mut u8,
        src: *const u8,
        bytes: usize,
        stream: StreamRef<'_>,
    ) -> Result<()> {
        if self.my_pe() < 0 {
            return Err(Error::Invalid(format!(
                "PE {} is not a member of team {}",
                self.rt.my_pe(),
                self.handle.0
            )));
        }
        // SAFETY: the caller's contract; this PE is a member.
        unsafe {
            self.rt
                .backend
                .team_coll(self.handle.0, op, dest, src, bytes, stream)
        }
    }
}

impl Drop for Team<'_> {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: a team this PE is a member of (`owned_team`), destroyed once, here;
            // every member drops it in the same order (the module's rules).
            unsafe { self.rt.backend.team_destroy(self.handle.0) }
        }
    }
}

impl std::fmt::Debug for Team<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("handle", &self.handle.0)
            .field("my_pe", &self.my_pe())
            .field("n_pes", &self.n_pes())
            .finish()
    }
}

impl HostArg<shmem_device::Team> for &Team<'_> {
    fn to_param(&self) -> shmem_device::Team {
        self.handle
    }
}

/// A reduction operator the host can enqueue on `T` (NVSHMEM's `TYPE` and `OP` names, and
/// the operation itself for the simulator): [`Sum`], [`Prod`], [`Min`], [`Max`] on every
/// number type, [`And`], [`Or`], [`Xor`] on integers.
#[diagnostic::on_unimplemented(message = "NVSHMEM has no host `{Self}` reduction for `{T}`")]
pub trait HostReduce<T>: shmem_device::coll::ReduceOp<T> {
    #[doc(hidden)]
    const TYPE: &'static str;
    #[doc(hidden)]
    const OP: &'static str;
    #[doc(hidden)]
    fn apply(a: T, b: T) -> T;
}

/// `acc[k] = op(acc[k], v[k])` over arrays of `T` held as bytes.
fn fold<T: Copy, O: HostReduce<T>>(acc: &mut [u8], v: &[u8]) {
    let size = std::mem::size_of::<T>();
    for (a, b) in acc.chunks_exact_mut(size).zip(v.chunks_exact(size)) {
        // SAFETY: each chunk holds one `T` (unaligned reads and writes).
        unsafe {
            let x = a.as_ptr().cast::<T>().read_unaligned();
            let y = b.as_ptr().cast::<T>().read_unaligned();
            a.as_mut_ptr().cast::<T>().write_unaligned(O::apply(x, y));
        }
    }
}

macro_rules! host_reduce {
    (@one $op:ident $name:literal $t:ty, $ty:literal, |$a:ident, $b:ident| $e:expr) => {
        impl HostReduce<$t> for $op {
            const TYPE: &'static str = $ty;
            const OP: &'static str = $name;
            fn apply($a: $t, $b: $t) -> $t {
                $e
            }
        }
    };
    (int: $($t:ty => $ty:literal),*; float: $($f:ty => $fy:literal),*) => {
        $(
            host_reduce!(@one Sum "sum" $t, $ty, |a, b| a.wrapping_add(b));
            host_reduce!(@one Prod "prod" $t, $ty, |a, b| a.wrapping_mul(b));
            host_reduce!(@one Min "min" $t, $ty, |a, b| a.min(b));
            host_reduce!(@one Max "max" $t, $ty, |a, b| a.max(b));
            host_reduce!(@one And "and" $t, $ty, |a, b| a & b);
            host_reduce!(@one Or "or" $t, $ty, |a, b| a | b);
            host_reduce!(@one Xor "xor" $t, $ty, |a, b| a ^ b);
        )*
        $(
            host_reduce!(@one Sum "sum" $f, $fy, |a, b| a + b);
            host_reduce!(@one Prod "prod" $f, $fy, |a, b| a * b);
            host_reduce!(@one Min "min" $f, $fy, |a, b| a.min(b));
            host_reduce!(@one Max "max" $f, $fy, |a, b| a.max(b));
        )*
    };
}

host_reduce! {
    int: i8 => "int8", i16 => "int16", i32 => "int32", i64 => "int64",
         u8 => "uint8", u16 => "uint16", u32 => "uint32", u64 => "uint64";
    float: f32 => "float", f64 => "double"
}
