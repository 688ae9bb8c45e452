//! Which threads cooperate in one NVSHMEM call.
//!
//! NVSHMEM offers most bulk operations at three scopes: called by one thread
//! (`nvshmem_putmem`), by all 32 lanes of a warp together (`nvshmemx_putmem_warp`), or by all
//! threads of a block together (`nvshmemx_putmem_block`). The wider scopes spread the copy
//! over their threads and are how bulk transfers reach full NVLink bandwidth.
//!
//! Here the scope is a value of a zero-sized type passed as the first argument:
//! `put(Warp, dst, src, pe)`. The choice is resolved at compile time; no branch remains.
//!
//! **Convergence rule.** With [`Warp`], every lane of the warp must make the same call with
//! the same arguments; with [`Block`], every thread of the block. Otherwise the call hangs
//! or transfers garbage.
//!
//! **A scoped put or get meets its group on entry and on return** (every form: `put`,
//! `put_nbi`, `get`, `get_nbi`, `put_signal`), as NVSHMEM's own do, whether the data moves
//! by this crate's peer copy or by NVSHMEM: what any thread of the group wrote to the source
//! before the call is what the call moves, reads of the destination made before the call by
//! any thread see the old contents, and a blocking get's data is in place for every thread
//! of the group when the call returns.

/// The scope of a cooperative NVSHMEM call. Implemented by [`Thread`], [`Warp`], [`Block`].
pub trait Scope: Copy + sealed::Sealed {
    /// Which one.
    const KIND: ScopeKind;
}

mod sealed {
    pub trait Sealed {}
}

/// The three scopes as a value, for `match`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeKind {
    /// One thread.
    Thread,
    /// All 32 lanes of a warp.
    Warp,
    /// All threads of a block.
    Block,
}

/// One thread makes the call on its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct Thread;
/// All lanes of the calling warp make the call together.
#[derive(Clone, Copy, Debug, Default)]
pub struct Warp;
/// All threads of the calling block make the call together.
#[derive(Clone, Copy, Debug, Default)]
pub struct Block;

impl sealed::Sealed for Thread {}
impl sealed::Sealed for Warp {}
impl sealed::Sealed for Block {}
impl Scope for Thread {
    const KIND: ScopeKind = ScopeKind::Thread;
}
impl Scope for Warp {
    const KIND: ScopeKind = ScopeKind::Warp;
}
impl Scope for Block {
    const KIND: ScopeKind = ScopeKind::Block;
}

/// Calls the thread, warp or block form of a C function, chosen by `S` at compile time.
macro_rules! by_scope {
    ($s:ty, $thread:path, $warp:path, $block:path, ($($arg:expr),*)) => {
        match <$s as $crate::scope::Scope>::KIND {
            $crate::scope::ScopeKind::Thread => $thread($($arg),*),
            $crate::scope::ScopeKind::Warp => $warp($($arg),*),
            $crate::scope::ScopeKind::Block => $block($($arg),*),
        }
    };
}
pub(crate) use by_scope;
