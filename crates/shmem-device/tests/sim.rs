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

/// `warp_prefix_sum`: a plain prefix sum, and sums within runs of lanes (runs of 1, 5, 3, 11,
/// 12 lanes, each lane giving its run's first lane).
#[test]
fn warp_prefix_sums_plain_and_within_runs() {
    const RUNS: [u32; 5] = [1, 5, 3, 11, 12];
    run(1, 32, 5, || {
        let lane = lane_id();
        let v = lane * lane + 3;
        let plain = warp_prefix_sum(v, 0);
        assert_eq!(
            plain,
            (0..=lane).map(|l| l * l + 3).sum::<u32>(),
            "lane {lane}"
        );
        let mut from = 0;
        for r in RUNS {
            if lane < from + r {
                break;
            }
            from += r;
        }
        let within = warp_prefix_sum(v, from);
        assert_eq!(
            within,
            (from..=lane).map(|l| l * l + 3).sum::<u32>(),
            "lane {lane}"
        );
    })
    .unwrap();
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
fn block_votes_count_and_combine_every_thread_of_the_block() {
    // 3 blocks of 40 threads (a partial second warp); each block's count differs.
    let out: Vec<AtomicU32> = (0..3 * 40).map(|_| AtomicU32::new(0)).collect();
    run(3, 40, 5, || {
        let (b, t) = (block_idx_x(), thread_idx_x());
        let count = sync_threads_count(t % 3 == b);
        let all = sync_threads_and(t < 40);
        let not_all = sync_threads_and(t != 39);
        let one = sync_threads_or(t == 7 + b);
        let none = sync_threads_or(false);
        let packed = count | u32::from(all) << 8 | u32::from(not_all) << 9;
        let packed = packed | u32::from(one) << 10 | u32::from(none) << 11;
        out[(b * 40 + t) as usize].store(packed, Ordering::Relaxed);
    })
    .unwrap();
    for b in 0..3u32 {
        let count = (0..40).filter(|t| t % 3 == b).count() as u32;
        for t in 0..40 {
            let got = out[(b * 40 + t) as usize].load(Ordering::Relaxed);
            assert_eq!(got, count | 1 << 8 | 1 << 10, "block {b} thread {t}");
        }
    }
}

#[test]
fn a_finished_thread_takes_no_part_in_a_block_vote() {
    let out: Vec<AtomicU32> = (0..64).map(|_| AtomicU32::new(0)).collect();
    run(1, 64, 9, || {
        let t = thread_idx_x();
        if t >= 60 {
            return;
        }
        let count = sync_threads_count(true);
        let all = sync_threads_and(true);
        out[t as usize].store(count | u32::from(all) << 8, Ordering::Relaxed);
    })
    .unwrap();
    for (t, w) in out.iter().enumerate().take(60) {
        assert_eq!(w.load(Ordering::Relaxed), 60 | 1 << 8, "thread {t}");
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
fn an_acquire_wait_returns_the_value_that_met_it_and_sees_the_data_before_the_release() {
    let data: Vec<AtomicU32> = (0..16).map(|_| AtomicU32::new(0)).collect();
    let flag = AtomicU32::new(0);
    let seen = Mutex::new(Vec::new());
    for seed in 0..8 {
        flag.store(0, Ordering::Relaxed);
        run(2, 32, seed, || {
            if thread_idx_x() != 0 {
                return;
            }
            // SAFETY: words of this test, each touched only through `scoped` here.
            unsafe {
                if block_idx_x() == 1 {
                    for (i, d) in data.iter().enumerate() {
                        scoped::store_relaxed(Gpu, word(d), seed as u32 * 100 + i as u32);
                    }
                    scoped::store_release(Gpu, word(&flag), 3u32);
                } else {
                    let v = scoped::wait_acquire(Gpu, word(&flag), Cmp::Ge, 2u32);
                    let got: Vec<u32> = data
                        .iter()
                        .map(|d| scoped::load_relaxed(Gpu, word(d)))
                        .collect();
                    seen.lock().unwrap().push((seed, v, got));
                }
            }
        })
        .unwrap();
    }
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 8, "one wait a seed");
    for (seed, v, got) in seen {
        assert_eq!(v, 3, "seed {seed}: the value that met the wait");
        let want: Vec<u32> = (0..16).map(|i| seed as u32 * 100 + i).collect();
        assert_eq!(got, want, "seed {seed}: the data the release published");
    }
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
        e.message.contains("block 1 thread 0-8: sync_threads at"),
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

// ---- PEs: symmetric heaps, RMA that lands late, signals, barriers, collectives ----

use shmem_device::coll::{Sum, barrier_all, fcollect, reduce};
use shmem_device::p2p::Cmp;
use shmem_device::rma::{p, put, put_nbi};
use shmem_device::signal::{SignalOp, put_signal, signal_wait_until};
use shmem_device::sim::World;
use shmem_device::{Block, DeviceSlice, Team, Thread, fence, my_pe, n_pes, quiet};

/// Host memory as a kernel's local operand (the simulator's "device memory").
fn local<T>(v: &[T]) -> DeviceSlice<T> {
    // SAFETY: `v` outlives the run and is only read.
    unsafe { DeviceSlice::from_raw_parts(v.as_ptr().cast_mut(), v.len()) }
}

#[test]
fn a_ring_of_puts_on_four_pes() {
    let w = World::new(4, 1 << 16);
    let got = w.alloc::<i32>(1);
    w.run(1, 32, 1, || {
        if thread_idx_x() == 0 {
            let (me, n) = (my_pe(), n_pes());
            // SAFETY: a symmetric i32; each PE writes only its successor's.
            unsafe { p(got.at(0), me * 10, (me + 1) % n) };
            quiet();
            // SAFETY: one thread per PE reaches it.
            unsafe { barrier_all(Thread) };
            // SAFETY: the barrier completed every PE's put into this word.
            let v = unsafe { got.at(0).read() };
            assert_eq!(v, ((me + n - 1) % n) * 10);
        }
    })
    .unwrap();
    assert_eq!(
        (0..4).map(|pe| got.read(pe)[0]).collect::<Vec<_>>(),
        [30, 0, 10, 20]
    );
}

/// How PE 0's put of 64 words reaches PE 1's reader in [`stale_words`].
#[derive(Clone, Copy)]
enum Handoff {
    /// PE 0 sets a flag on PE 1 after the put (with a fence between, or not); PE 1 waits
    /// for the flag.
    Flag { fence: bool },
    /// Both PEs meet in `barrier_all` (which completes the put) or `sync_all` (which does
    /// not).
    Meet { barrier: bool },
}

/// PE 0 puts 64 words to PE 1, then hands off as `how` says; PE 1 counts the words it
/// finds stale.
fn stale_words(seed: u64, how: Handoff) -> u32 {
    let w = World::new(2, 1 << 16);
    let (data, flag) = (w.alloc::<u32>(64), w.alloc::<u64>(1));
    let src: Vec<u32> = (1..=64).collect();
    let stale = AtomicU32::new(0);
    w.run(1, 32, seed, || {
        if thread_idx_x() != 0 {
            return;
        }
        // SAFETY: symmetric buffers of this test; PE 0 writes PE 1's, PE 1 reads its own
        // after the handoff; one thread of each PE meets the other.
        unsafe {
            if my_pe() == 0 {
                put_nbi(Thread, data.sym(), local(&src), 1);
            }
            match how {
                Handoff::Flag { fence: f } if my_pe() == 0 => {
                    if f {
                        fence();
                    }
                    p(flag.at(0), 1u64, 1);
                    quiet();
                }
                Handoff::Flag { .. } => shmem_device::p2p::wait_until(flag.at(0), Cmp::Eq, 1u64),
                Handoff::Meet { barrier: true } => shmem_device::coll::barrier_all(Thread),
                Handoff::Meet { barrier: false } => shmem_device::coll::sync_all(Thread),
            }
            if my_pe() == 1 {
                let bad = (0..64)
                    .filter(|&i| data.at(i).read_volatile() != i as u32 + 1)
                    .count();
                stale.store(bad as u32, Ordering::Relaxed);
            }
        }
    })
    .unwrap();
    stale.load(Ordering::Relaxed)
}

#[test]
fn a_flag_without_a_fence_can_overtake_the_data() {
    let stale: Vec<u32> = (0..20)
        .map(|seed| stale_words(seed, Handoff::Flag { fence: false }))
        .collect();
    assert!(
        stale.iter().any(|&s| s > 0),
        "no seed showed stale data: {stale:?}"
    );
    let fenced: Vec<u32> = (0..20)
        .map(|seed| stale_words(seed, Handoff::Flag { fence: true }))
        .collect();
    assert!(
        fenced.iter().all(|&s| s == 0),
        "stale data despite the fence: {fenced:?}"
    );
}

#[test]
fn a_put_read_without_quiet_is_stale() {
    let stale: Vec<u32> = (0..10)
        .map(|seed| stale_words(seed, Handoff::Meet { barrier: false }))
        .collect();
    assert!(
        stale.iter().any(|&s| s > 0),
        "no seed showed the unquieted put as stale: {stale:?}"
    );
    let quieted: Vec<u32> = (0..10)
        .map(|seed| stale_words(seed, Handoff::Meet { barrier: true }))
        .collect();
    assert!(
        quieted.iter().all(|&s| s == 0),
        "stale data after barrier_all, which quiets: {quieted:?}"
    );
}

#[test]
fn put_signal_delivers_data_before_the_signal() {
    for seed in 0..10 {
        let w = World::new(2, 1 << 16);
        let (data, sig) = (w.alloc::<u32>(256), w.alloc::<u64>(1));
        let src: Vec<u32> = (0..256).map(|i| i * 3).collect();
        w.run(2, 64, seed, || {
            // SAFETY: symmetric buffers of this test; block 0 of PE 0 sends, PE 1 waits.
            unsafe {
                if my_pe() == 0 && block_idx_x() == 0 {
                    put_signal(
                        Block,
                        data.sym(),
                        local(&src),
                        sig.at(0),
                        7,
                        SignalOp::Set,
                        1,
                    );
                } else if my_pe() == 1 && thread_idx_x() == 0 {
                    signal_wait_until(sig.at(0), Cmp::Eq, 7);
                    for i in 0..256 {
                        assert_eq!(data.at(i).read_volatile(), i as u32 * 3, "seed {seed}");
                    }
                }
            }
        })
        .unwrap();
    }
}

#[test]
fn atomics_reductions_and_collectives_across_pes() {
    let w = World::new(4, 1 << 16);
    let (counter, x, sum, all) = (
        w.alloc::<u64>(1),
        w.alloc::<i32>(2),
        w.alloc::<i32>(2),
        w.alloc::<i32>(8),
    );
    w.run(2, 32, 5, || {
        // SAFETY: symmetric buffers of this test; the collectives are reached by one block
        // per PE (block 0), every thread of it.
        unsafe {
            shmem_device::amo::atomic_add(counter.at(0), 1u64, 0);
            if block_idx_x() == 0 {
                if thread_idx_x() == 0 {
                    x.at(0).write(my_pe());
                    x.at(1).write(10 * my_pe());
                }
                sync_threads();
                reduce(Block, Team::WORLD, Sum, sum.sym(), x.sym()).unwrap();
                fcollect(Block, Team::WORLD, all.sym(), x.sym()).unwrap();
            }
        }
    })
    .unwrap();
    assert_eq!(counter.read(0)[0], 4 * 2 * 32);
    for pe in 0..4 {
        assert_eq!(sum.read(pe), [6, 60]);
        assert_eq!(all.read(pe), [0, 0, 1, 10, 2, 20, 3, 30]);
    }
}

/// `alltoall` picks NVSHMEM's int64, int32 or byte-wise function by the element's alignment:
/// each gives every PE block `j` of PE `j`'s source.
#[test]
fn alltoall_of_8_4_and_1_byte_elements() {
    let w = World::new(3, 1 << 16);
    let (s64, d64) = (w.alloc::<u64>(6), w.alloc::<u64>(6));
    let (s32, d32) = (w.alloc::<u32>(9), w.alloc::<u32>(9));
    let (s8, d8) = (w.alloc::<u8>(6), w.alloc::<u8>(6));
    w.run(1, 32, 5, || {
        // SAFETY: symmetric buffers of this test, lengths divisible by the 3 PEs; one block
        // per PE, every thread of it calls each collective.
        unsafe {
            let me = my_pe() as usize;
            if thread_idx_x() == 0 {
                for i in 0..9 {
                    if i < 6 {
                        s64.at(i).write((100 * me + i) as u64);
                        s8.at(i).write((10 * me + i) as u8);
                    }
                    s32.at(i).write((1000 * me + i) as u32);
                }
            }
            sync_threads();
            shmem_device::coll::alltoall(Block, Team::WORLD, d64.sym(), s64.sym()).unwrap();
            shmem_device::coll::alltoall(Block, Team::WORLD, d32.sym(), s32.sym()).unwrap();
            shmem_device::coll::alltoall(Block, Team::WORLD, d8.sym(), s8.sym()).unwrap();
        }
    })
    .unwrap();
    for pe in 0..3u32 {
        // Block `j` of the destination is block `pe` of PE `j`'s source.
        let want = |per: usize, scale: usize| -> Vec<usize> {
            (0..3 * per)
                .map(|i| scale * (i / per) + pe as usize * per + i % per)
                .collect()
        };
        let got64: Vec<usize> = d64.read(pe).iter().map(|&v| v as usize).collect();
        let got32: Vec<usize> = d32.read(pe).iter().map(|&v| v as usize).collect();
        let got8: Vec<usize> = d8.read(pe).iter().map(|&v| v as usize).collect();
        assert_eq!(got64, want(2, 100), "u64 (int64) alltoall on PE {pe}");
        assert_eq!(got32, want(3, 1000), "u32 (int32) alltoall on PE {pe}");
        assert_eq!(got8, want(2, 10), "u8 (byte-wise) alltoall on PE {pe}");
    }
}

#[test]
fn signals_add_up() {
    let w = World::new(3, 1 << 16);
    let sig = w.alloc::<u64>(1);
    w.run(1, 32, 4, || {
        if thread_idx_x() == 0 {
            // SAFETY: a symmetric signal word; PEs 1 and 2 add to PE 0's, twice each.
            unsafe {
                if my_pe() == 0 {
                    assert_eq!(signal_wait_until(sig.at(0), Cmp::Ge, 4), 4);
                } else {
                    shmem_device::signal::signal_op(sig.at(0), 1, SignalOp::Add, 0);
                    shmem_device::signal::signal_op(sig.at(0), 1, SignalOp::Add, 0);
                }
            }
        }
    })
    .unwrap();
    assert_eq!(sig.read(0), [4]);
}

#[test]
fn a_wait_no_pe_ends_is_reported_with_its_pe_and_site() {
    let w = World::new(2, 1 << 16);
    let sig = w.alloc::<u64>(1);
    let e = w
        .run(1, 32, 3, || {
            if my_pe() == 1 && thread_idx_x() == 0 {
                // SAFETY: a symmetric word nobody signals.
                unsafe { signal_wait_until(sig.at(0), Cmp::Ge, 1) };
            }
        })
        .unwrap_err();
    assert!(
        e.message.contains("PE 1 block 0 thread 0: polls memory at"),
        "{e}"
    );
    assert!(e.message.contains("tests/sim.rs"), "{e}");
}

#[test]
fn a_barrier_only_some_pes_reach_is_reported() {
    let w = World::new(3, 1 << 16);
    let e = w
        .run(1, 32, 8, || {
            if thread_idx_x() == 0 && my_pe() != 2 {
                // SAFETY: deliberately reached by PEs 0 and 1 only.
                unsafe { barrier_all(Thread) };
            }
        })
        .unwrap_err();
    assert!(
        e.message
            .contains("PE 0 block 0 thread 0: nvshmem_barrier_all at"),
        "{e}"
    );
    assert!(
        e.message
            .contains("PE 1 block 0 thread 0: nvshmem_barrier_all at"),
        "{e}"
    );
    assert!(!e.message.contains("PE 2"), "{e}");
}

#[test]
fn blocking_puts_of_a_block() {
    let w = World::new(2, 1 << 16);
    let dst = w.alloc::<u16>(1000);
    let src: Vec<u16> = (0..1000).collect();
    w.run(1, 128, 2, || {
        // SAFETY: a symmetric buffer; each PE writes the other's.
        unsafe {
            put(Block, dst.sym(), local(&src), 1 - my_pe());
            if thread_idx_x() == 0 {
                quiet();
            }
            barrier_all(Block);
        }
    })
    .unwrap();
    assert_eq!(dst.read(0), src);
    assert_eq!(dst.read(1), src);
}

#[test]
fn dynamic_shared_memory_is_each_blocks_own() {
    use shmem_device::scoped::Cta;
    use shmem_device::shared;
    use shmem_device::sim::{Shape, World};
    let seen: Vec<AtomicU32> = (0..3 * 64).map(|_| AtomicU32::new(0)).collect();
    let world = World::new(1, 1 << 12);
    world
        .run_shape(Shape::linear(3, 64).with_shared(64), 11, || {
            assert_eq!(shared::dynamic_bytes(), 64);
            assert!(shared::dynamic::<u32>(17).is_none(), "17 words in 64 bytes");
            let ready = shared::dynamic::<u32>(16).expect("16 words in 64 bytes");
            let (b, t) = (block_idx_x(), thread_idx_x());
            if t == 0 {
                // SAFETY: the block's word 1, before anyone writes it: the fill shows.
                assert_eq!(unsafe { ready.wrapping_add(1).read() }, 0xa5a5_a5a5);
                // SAFETY: word 0 is written by thread 0 alone, then read under the acquire.
                unsafe { scoped::store_release(Cta, ready, b + 1) };
            } else {
                // SAFETY: as above.
                while unsafe { scoped::load_acquire(Cta, ready) } != b + 1 {}
            }
            // SAFETY: every thread has seen word 0 (thread 0 wrote it before its release).
            let v = unsafe { ready.read() };
            seen[global_idx_x()].store(v, Ordering::Relaxed);
        })
        .expect("no deadlock");
    for (i, v) in seen.iter().enumerate() {
        assert_eq!(v.load(Ordering::Relaxed), i as u32 / 64 + 1, "thread {i}");
    }
}
