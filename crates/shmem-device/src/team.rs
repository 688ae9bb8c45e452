//! Teams: ordered subsets of PEs. Device code uses the predefined ones.
//!
//! - [`Team::WORLD`]: every PE, numbered `0..n_pes()`.
//! - [`Team::SHARED`]: the PEs whose memory this PE can load and store (same node, P2P).
//! - [`Team::NODE`]: the PEs on this node.
//!
//! Teams created on the host (`nvshmem_team_split_strided`) can be passed to a kernel as a
//! [`Team`] parameter.

/// An NVSHMEM team handle (`nvshmem_team_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Team(pub i32);

impl Team {
    /// `NVSHMEM_TEAM_WORLD`.
    pub const WORLD: Team = Team(0);
    /// `NVSHMEM_TEAM_SHARED`.
    pub const SHARED: Team = Team(1);
    /// `NVSHMEMX_TEAM_NODE`.
    pub const NODE: Team = Team(2);
    /// `NVSHMEM_TEAM_INVALID`.
    pub const INVALID: Team = Team(-1);

    /// This PE's number in the team, or -1 if it is not a member. NVSHMEM: `nvshmem_team_my_pe`.
    #[inline(always)]
    pub fn my_pe(self) -> i32 {
        // SAFETY: reads NVSHMEM's device state for a team handle; an invalid handle yields -1.
        unsafe { crate::sys::nvshmem_team_my_pe(self.0) }
    }

    /// The number of PEs in the team, or -1 for an invalid team. NVSHMEM: `nvshmem_team_n_pes`.
    #[inline(always)]
    pub fn n_pes(self) -> i32 {
        // SAFETY: as in `my_pe`.
        unsafe { crate::sys::nvshmem_team_n_pes(self.0) }
    }

    /// The number in `other` of the PE numbered `pe` in this team, or -1.
    /// NVSHMEM: `nvshmem_team_translate_pe`.
    #[inline(always)]
    pub fn translate_pe(self, pe: i32, other: Team) -> i32 {
        // SAFETY: as in `my_pe`; out-of-range numbers yield -1.
        unsafe { crate::sys::nvshmem_team_translate_pe(self.0, pe, other.0) }
    }
}

/// This PE's number in [`Team::WORLD`]. NVSHMEM: `nvshmem_my_pe`.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn my_pe() -> i32 {
    // SAFETY: reads NVSHMEM's device state, set up by `nvshmemx_cumodule_init`.
    unsafe { crate::sys::nvshmem_my_pe() }
}

/// The number of PEs in [`Team::WORLD`]. NVSHMEM: `nvshmem_n_pes`.
#[inline(always)]
#[cfg_attr(shmem_sim, track_caller)]
pub fn n_pes() -> i32 {
    // SAFETY: as in `my_pe`.
    unsafe { crate::sys::nvshmem_n_pes() }
}
