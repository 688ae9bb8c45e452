//! The block-scope collectives on the CPU simulator at 1, 2 and 4 PEs, checked against the
//! same expectations (`suite_common::expect`) as the GPU suite.

use collectives_suite_kernels::collectives;
use shmem_device::sim::{SimBuffer, World};
use std::sync::Arc;
use suite_common::coll_layout::*;
use suite_common::{expect, pattern};

fn filled<T: Copy>(w: &Arc<World>, len: usize, f: impl Fn(i32, usize) -> T) -> SimBuffer<T> {
    let b = w.alloc::<T>(len);
    for pe in 0..w.n_pes() {
        b.write(pe, &(0..len).map(|i| f(pe as i32, i)).collect::<Vec<_>>());
    }
    b
}

#[test]
fn collectives_on_1_2_and_4_pes() {
    for n in [1u32, 2, 4] {
        let w = World::new(n, 1 << 20);
        let len = ALLTOALL + ALLTOALL_LEN * n as usize;
        let rl = 7 * REDUCE_LEN;
        let src = filled(&w, len, pattern);
        let dst = filled(&w, len, |_, _| u64::MAX);
        let isrc = filled(&w, rl, expect::reduce_input);
        let idst = w.alloc::<i32>(rl);
        let fsrc = filled(&w, REDUCE_LEN, |pe, i| {
            expect::reduce_input(pe, i) as f64 + 0.5
        });
        let fdst = w.alloc::<f64>(REDUCE_LEN);
        w.run(1, 128, 3, || {
            // SAFETY: one block on every PE, all threads call; buffers sized as stated.
            unsafe {
                collectives(
                    src.sym(),
                    dst.sym(),
                    isrc.sym(),
                    idst.sym(),
                    fsrc.sym(),
                    fdst.sym(),
                )
            }
        })
        .unwrap_or_else(|e| panic!("{n} PEs: {e}"));
        for me in 0..n as i32 {
            let pe = me as u32;
            for (i, v) in dst.read(pe).iter().enumerate() {
                if let Some(want) = expect::collectives_dst(me, n as i32, i) {
                    assert_eq!(*v, want, "{n} PEs, PE {me}: dst[{i}]");
                }
            }
            for (i, v) in idst.read(pe).iter().enumerate() {
                assert_eq!(
                    *v,
                    expect::reduce_i32(n as i32, i),
                    "{n} PEs, PE {me}: i32 reduction {i}"
                );
            }
            for (i, v) in fdst.read(pe).iter().enumerate() {
                assert_eq!(
                    *v,
                    expect::reduce_f64(n as i32, i),
                    "{n} PEs, PE {me}: f64 sum {i}"
                );
            }
        }
    }
}
