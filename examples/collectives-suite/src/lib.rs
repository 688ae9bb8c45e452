//! The collectives of the NVSHMEM device API at block scope, checked by the host.
//!
//! Apart from the rest of the API suite because NVSHMEM's block-scope reductions are large:
//! each (operation, type) pair is ~19k lines of LLVM IR, so this module takes minutes in
//! `ptxas` (and would in the driver's JIT, which is why the build keeps the cubin `ptxas`
//! makes). Keeping it in its own crate keeps edits to the other kernels fast to rebuild.

#![no_std]

use shmem_device::prelude::*;
use suite_common::coll_layout;

/// Block-scope collectives over `Team::WORLD`: broadcast, fcollect, alltoall, and reductions
/// (sum, prod, min, max, and, or, xor on `i32`; sum on `f64`).
///
/// Host initialises `src[i] = pattern(pe, i)`, `isrc[i] = expect::reduce_input(pe, i)`,
/// `fsrc[i] = expect::reduce_input(pe, i) as f64 + 0.5`; expectations in [`suite_common::expect`].
///
/// # Safety
/// Launch one block on every PE (all threads call); collective launch; buffers symmetric,
/// `src`/`dst` ≥ 128 + 2·n_pes, `isrc`/`idst` ≥ 28, `fsrc`/`fdst` ≥ 4.
#[shmem_kernel]
pub unsafe fn collectives(
    src: SymSlice<u64>,
    dst: SymSlice<u64>,
    isrc: SymSlice<i32>,
    idst: SymSlice<i32>,
    fsrc: SymSlice<f64>,
    fdst: SymSlice<f64>,
) {
    use coll_layout::*;
    let w = Team::WORLD;
    let n = n_pes() as usize;
    let r = REDUCE_LEN;
    // SAFETY: every PE makes the same calls in the same order with every thread of its
    // block; all operands are disjoint symmetric regions of the sizes the contract states.
    unsafe {
        let _ = broadcast(
            Block,
            w,
            dst.sub(BCAST, BCAST_LEN),
            src.sub(BCAST, BCAST_LEN),
            0,
        );
        let _ = fcollect(
            Block,
            w,
            dst.sub(FCOLLECT_DST, FCOLLECT_LEN * n),
            src.sub(FCOLLECT_SRC, FCOLLECT_LEN),
        );
        let _ = alltoall(
            Block,
            w,
            dst.sub(ALLTOALL, ALLTOALL_LEN * n),
            src.sub(ALLTOALL, ALLTOALL_LEN * n),
        );
        let _ = reduce(Block, w, Sum, idst.sub(0, r), isrc.sub(0, r));
        let _ = reduce(Block, w, Prod, idst.sub(r, r), isrc.sub(r, r));
        let _ = reduce(Block, w, Min, idst.sub(2 * r, r), isrc.sub(2 * r, r));
        let _ = reduce(Block, w, Max, idst.sub(3 * r, r), isrc.sub(3 * r, r));
        let _ = reduce(Block, w, And, idst.sub(4 * r, r), isrc.sub(4 * r, r));
        let _ = reduce(Block, w, Or, idst.sub(5 * r, r), isrc.sub(5 * r, r));
        let _ = reduce(Block, w, Xor, idst.sub(6 * r, r), isrc.sub(6 * r, r));
        let _ = reduce(Block, w, Sum, fdst.sub(0, r), fsrc.sub(0, r));
    }
}
