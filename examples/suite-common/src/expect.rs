//! What the host must find after each kernel of the suite, as plain functions of the PE
//! number, the PE count and the element index. Shared by the GPU tests and (later) the CPU
//! simulator, so the expectations are written once.

use crate::{
    BULK_CASE, ENTRY_MARK, ENTRY_OLD, ENTRY_WARP, SIGNAL_CASE, SMALL_MAX, SMALL_SLOT, Val,
    WARP_LENS, WARP_SLOT, neighbours, pattern,
};

/// `rma_p_g`: what the host puts in `src[k]` on PE `pe`: `pattern(pe, k)` as slot `k`'s type,
/// zero-extended bits.
pub fn p_g_source(pe: i32, k: usize) -> u64 {
    let v = pattern(pe, k);
    match k {
        0 => i8::from_u64(v).bits(),
        1 => i16::from_u64(v).bits(),
        2 => i32::from_u64(v).bits(),
        3 => i64::from_u64(v).bits(),
        4 => u8::from_u64(v).bits(),
        5 => u16::from_u64(v).bits(),
        6 => u32::from_u64(v).bits(),
        7 => u64::from_u64(v).bits(),
        8 => f32::from_u64(v).bits(),
        _ => f64::from_u64(v).bits(),
    }
}

/// `rma_p_g`: `(dst[k], got[k])` on PE `pe`: prev's value (put here) and next's (read).
pub fn p_g(pe: i32, n: i32, k: usize) -> (u64, u64) {
    let (next, prev) = neighbours(pe, n);
    (p_g_source(prev, k), p_g_source(next, k))
}

/// `rma_bulk`: `dst[i]` on PE `pe`.
pub fn bulk(pe: i32, n: i32, i: usize) -> u32 {
    let (next, prev) = neighbours(pe, n);
    let case = i / BULK_CASE;
    (if case < 6 {
        pattern(prev, i)
    } else {
        pattern(next, i)
    }) as u32
}

/// `group_entry` with `b` threads: `(dst[i], got[i])` on PE `pe`; `got` is `None` past the
/// old contents it checks.
pub fn group_entry(pe: i32, n: i32, b: usize, i: usize) -> (u32, Option<u32>) {
    let (next, prev) = neighbours(pe, n);
    let r = 4 * b;
    // The gets fill `[r, 2r)` and the second warp region; the puts and put-signals the rest.
    let get = (r..2 * r).contains(&i) || (2 * r + ENTRY_WARP..2 * r + 2 * ENTRY_WARP).contains(&i);
    let dst = if get {
        pattern(next, i) as u32
    } else {
        pattern(prev, i) as u32 + ENTRY_MARK
    };
    // got[j]: the old contents of the block get's element r + j, then the warp get's.
    let got = if i < r {
        Some(ENTRY_OLD + (r + i) as u32)
    } else if i < r + ENTRY_WARP {
        Some(ENTRY_OLD + (2 * r + ENTRY_WARP + i - r) as u32)
    } else {
        None
    };
    (dst, got)
}

/// `rma_small`: `dst[i]` on PE `pe`: what its case moved, and zero past the case's length
/// (a copy must not write beyond it).
pub fn small(pe: i32, n: i32, i: usize) -> u32 {
    let (next, prev) = neighbours(pe, n);
    let (case, at) = (i / SMALL_SLOT, i % SMALL_SLOT);
    let (op, len) = (case / SMALL_MAX, case % SMALL_MAX + 1);
    if at >= len {
        0
    } else if op < 2 {
        pattern(prev, i) as u32
    } else {
        pattern(next, i) as u32
    }
}

/// `rma_warp`: `dst[i]` on PE `pe`: what its case moved, and zero past the case's length.
pub fn warp(pe: i32, n: i32, i: usize) -> u32 {
    let (next, prev) = neighbours(pe, n);
    let (case, at) = (i / WARP_SLOT, i % WARP_SLOT);
    let (op, len) = (case / WARP_LENS.len(), WARP_LENS[case % WARP_LENS.len()]);
    if at >= len as usize {
        0
    } else if op == 2 || op == 3 {
        pattern(next, i) as u32
    } else {
        pattern(prev, i) as u32
    }
}

/// `signals`: `dst[i]` on PE `pe`.
pub fn signals_dst(pe: i32, n: i32, i: usize) -> u64 {
    let _ = SIGNAL_CASE;
    pattern(neighbours(pe, n).1, i)
}

/// `signals`: `sig[c]` and `got[c]`.
pub fn signals_sig(c: usize) -> u64 {
    match c {
        12 => 7,
        13 => 9,
        c => c as u64 + 1,
    }
}

/// `waits`: the results for each type.
pub const WAITS: [u64; crate::WAIT_RESULTS] = [1, 0, 1, 0, 3, 2, u64::MAX, 3];

/// `atomics`: the integer results for each type (as that type's bits).
pub const AMO_INT: [u64; crate::AMO_INT_RESULTS] = [10, 17, 19, 19, 100, 100, 3, 12, 8, 13, 1];

/// `atomics`: the float results for type `T`.
pub fn amo_float<T: Val>() -> [u64; crate::AMO_FLOAT_RESULTS] {
    [
        T::from_u64(3).bits(),
        T::from_u64(3).bits(),
        T::from_u64(7).bits(),
    ]
}

/// `barriers`: `got[k]` on PE `pe` (single node: NODE and SHARED equal WORLD).
pub fn barriers(pe: i32, n: i32, k: usize) -> u64 {
    match k {
        k if k < crate::BARRIER_PHASES => pattern(neighbours(pe, n).1, k),
        12 | 14 | 17 => pe as u64,
        _ => n as u64,
    }
}

/// `collectives`: input of the `i32` reductions (1..=5, so 8-PE products fit).
pub fn reduce_input(pe: i32, i: usize) -> i32 {
    ((pe as usize * 3 + i * 2) % 5 + 1) as i32
}

/// `collectives`: `idst[i]` after the reductions over `n` PEs.
pub fn reduce_i32(n: i32, i: usize) -> i32 {
    let op = i / crate::coll_layout::REDUCE_LEN;
    let vals = (0..n).map(|pe| reduce_input(pe, i));
    match op {
        0 => vals.sum(),
        1 => vals.product(),
        2 => vals.min().unwrap_or(0),
        3 => vals.max().unwrap_or(0),
        4 => vals.fold(-1, |a, b| a & b),
        5 => vals.fold(0, |a, b| a | b),
        _ => vals.fold(0, |a, b| a ^ b),
    }
}

/// `collectives`: `fdst[i]` (the sum of `reduce_input + 0.5`).
pub fn reduce_f64(n: i32, i: usize) -> f64 {
    (0..n).map(|pe| reduce_input(pe, i) as f64 + 0.5).sum()
}

/// `collectives`: `dst[i]` on PE `pe`, or `None` where the kernel writes nothing.
pub fn collectives_dst(pe: i32, n: i32, i: usize) -> Option<u64> {
    use crate::coll_layout::*;
    let nu = n as usize;
    if (BCAST..BCAST + BCAST_LEN).contains(&i) {
        return Some(pattern(0, i));
    }
    if (FCOLLECT_DST..FCOLLECT_DST + FCOLLECT_LEN * nu).contains(&i) {
        let j = i - FCOLLECT_DST;
        return Some(pattern(
            (j / FCOLLECT_LEN) as i32,
            FCOLLECT_SRC + j % FCOLLECT_LEN,
        ));
    }
    if (ALLTOALL..ALLTOALL + ALLTOALL_LEN * nu).contains(&i) {
        let j = i - ALLTOALL;
        let from = (j / ALLTOALL_LEN) as i32;
        return Some(pattern(
            from,
            ALLTOALL + pe as usize * ALLTOALL_LEN + j % ALLTOALL_LEN,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_are_self_consistent() {
        // p/g: what PE 1 receives from PE 0 is what PE 0 sends.
        assert_eq!(p_g(1, 2, 2).0, (pattern(0, 2) as i32).bits());
        // bulk: put cases come from prev, get cases from next.
        assert_eq!(bulk(0, 3, 0), pattern(2, 0) as u32);
        assert_eq!(bulk(0, 3, 6 * BULK_CASE), pattern(1, 6 * BULK_CASE) as u32);
        // reductions over 2 PEs, element 0: inputs 1 and 4.
        assert_eq!((reduce_input(0, 0), reduce_input(1, 0)), (1, 4));
        assert_eq!(reduce_i32(2, 0), 5);
        let pair = |i: usize| (reduce_input(0, i), reduce_input(1, i));
        let r = crate::coll_layout::REDUCE_LEN;
        let (a, b) = pair(r);
        assert_eq!(reduce_i32(2, r), a * b);
        let (a, b) = pair(3 * r);
        assert_eq!(reduce_i32(2, 3 * r), a.max(b));
        let (a, b) = pair(4 * r);
        assert_eq!(reduce_i32(2, 4 * r), a & b);
        let (a, b) = pair(6 * r);
        assert_eq!(reduce_i32(2, 6 * r), a ^ b);
        assert_eq!(reduce_f64(2, 0), 1.5 + 4.5);
        // alltoall: PE 1 gets PE 0's block 1.
        assert_eq!(collectives_dst(1, 2, 128), Some(pattern(0, 130)));
        assert_eq!(barriers(1, 4, 13), 4);
    }
}
