//! The CPU simulator's execution engine: CUDA's thread model on the CPU, seeded schedules,
//! deadlock reports. Kernel code here is ordinary `shmem-device` code (the same functions a
//! GPU kernel calls), run by `shmem_device::sim::run`.

#![cfg(feature = "sim")]

use shmem_device::scoped::{self, Gpu};
use shmem_device::sim::run;
use shmem_device::{Sym, thread::*};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// A word of "global memory" the simulated threads share.
fn word(v: &AtomicU32) -> Sym<u32> {
    // SAFETY: `v` outlives the run; only simulated threads touch it, one at a time.
    unsafe { Sym::from_raw(v.as_ptr()) }
}

#[test]
fn indices_and_block_barrier() {
    let slots: Vec<AtomicU32> = (0..3 * 48).map(|_| AtomicU32::new(0)).collect();
    let sums: Vec<AtomicU32> = (0..3).map(|_| AtomicU32::new(0)).collect();
    run(3, 48, 7, || {
        let (b, t) = (block_idx_x(), thread_idx_x());
        assert_eq!((grid_dim_x(), block_dim_x(), thread_idx_y()), (3, 48, 0));
        slots[global_idx_x()].store(b * 1000 + t, Ordering::Relaxed);
        sync_threads();
        if t == 0 {
            let s: u32 = (0..48)
                .map(|i| slots[(b * 48 + i) as usize].load(Ordering::Relaxed))
                .sum();
            sums[b as usize].store(s, Ordering::Relaxed);
        }
    })
    .unwrap();
    for b in 0..3u32 {
        assert_eq!(
            sums[b as usize].load(Ordering::Relaxed),
            48 * b * 1000 + 47 * 48 / 2
        );
    }
}

#[test]
fn warp_shuffles_and_ballots_with_a_partial_warp() {
    let out: Vec<AtomicU32> = (0..40).map(|_| AtomicU32::new(0)).collect();
    run(1, 40, 3, || {
        let t = thread_idx_x();
        let lanes = if t < 32 { 32 } else { 8 };
        // A butterfly over lanes that exist (a partial warp's missing lanes are undefined on
        // a GPU; here they give back the caller's own value).
        let sum = if t < 32 {
            warp_sum(t)
        } else {
            t + shfl_xor(t, 1)
        };
        let from0 = shfl_idx(t * 10, 0);
        let odd = ballot(t % 2 == 1);
        let first = t / 32 * 32;
        let want = if t < 32 {
            (0..32).sum::<u32>()
        } else {
            t + (t ^ 1)
        };
        assert_eq!(sum, want, "thread {t}");
        assert_eq!(from0, first * 10);
        assert_eq!(odd, if lanes == 32 { 0xaaaa_aaaa } else { 0xaa });
        out[t as usize].store(shfl_xor(t, 1), Ordering::Relaxed);
    })
    .unwrap();
    for t in 0..40u32 {
        assert_eq!(out[t as usize].load(Ordering::Relaxed), t ^ 1);
    }
}

#[test]
fn grid_barriers_order_the_blocks() {
    let counter = AtomicU32::new(0);
    let phase: Vec<AtomicU32> = (0..4).map(|_| AtomicU32::new(0)).collect();
    let (c, g) = (AtomicU32::new(0), AtomicU32::new(0));
    run(4, 32, 11, || {
        let b = block_idx_x() as usize;
        for k in 1..=3u32 {
            if thread_idx_x() == 0 {
                phase[b].store(k, Ordering::Relaxed);
            }
            // SAFETY: every thread of the (co-resident, simulated) grid calls it in turn.
            unsafe { scoped::grid_barrier(word(&counter), k) };
            for other in &phase {
                assert!(
                    other.load(Ordering::Relaxed) >= k,
                    "a block passed the barrier early"
                );
            }
            // SAFETY: as above; the words are this barrier's.
            unsafe { scoped::grid_sync(word(&c), word(&g)) };
        }
    })
    .unwrap();
    assert_eq!(g.load(Ordering::Relaxed), 3);
}

#[test]
fn a_missed_barrier_is_a_deadlock_with_its_site() {
    let e = run(2, 64, 5, || {
        if !(block_idx_x() == 1 && thread_idx_x() == 9) {
            sync_threads();
        } else {
            sync_warp(u32::MAX);
        }
        sync_threads();
    })
    .unwrap_err();
    // Thread 9 waits for its warp at `sync_warp`, its warp at the block's barrier.
    assert!(e.message.starts_with("deadlock"), "{e}");
    assert!(e.message.contains("block 1 thread 9: sync_warp at"), "{e}");
    assert!(
        e.message.contains("block 1 thread 8: sync_threads at"),
        "{e}"
    );
    assert!(e.message.contains("tests/sim.rs:"), "{e}");
    assert!(e.to_string().contains("seed 0x5"), "{e}");
}

#[test]
fn a_wait_nobody_ends_is_reported_where_it_polls() {
    let flag = AtomicU32::new(0);
    let e = run(1, 32, 1, || {
        if thread_idx_x() == 0 {
            // SAFETY: a word of this test; nobody ever sets it.
            while unsafe { scoped::load_acquire(Gpu, word(&flag)) } == 0 {}
        }
    })
    .unwrap_err();
    assert!(e.message.contains("keeps polling"), "{e}");
    assert!(
        e.message.contains("block 0 thread 0: polls memory at"),
        "{e}"
    );
}

#[test]
fn a_panic_stops_the_run_and_names_the_thread() {
    let e = run(2, 32, 9, || {
        if block_idx_x() == 1 && thread_idx_x() == 3 {
            panic!("bad index");
        }
        sync_threads();
    })
    .unwrap_err();
    assert_eq!(e.message, "block 1 thread 3 panicked: bad index");
}

#[test]
fn the_seed_decides_the_schedule() {
    let order = |seed| {
        let log = Mutex::new(Vec::new());
        let c = AtomicU32::new(0);
        run(2, 8, seed, || {
            for _ in 0..3 {
                // SAFETY: a counter of this test.
                let v = unsafe { scoped::fetch_add(Gpu, word(&c), 1u32) };
                log.lock().unwrap().push((global_idx_x(), v));
            }
        })
        .unwrap();
        log.into_inner().unwrap()
    };
    assert_eq!(order(42), order(42));
    assert_ne!(order(42), order(43));
}
