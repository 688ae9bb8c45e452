//! The device-API suite on the CPU simulator (`shmem_device::sim`) at 1, 2 and 4 PEs: the
//! same kernels, launch shapes and expected results (`suite_common::expect`) as the GPU suite
//! in `crates/shmem-host/tests/gpu.rs`, with puts landing late and in a seeded order.

use api_suite_kernels as k;
use shmem_device::sim::{SimBuffer, World};
use std::sync::Arc;
use suite_common::expect;
use suite_common::*;

const PES: [u32; 3] = [1, 2, 4];

/// A symmetric buffer whose element `i` on PE `pe` is `f(pe, i)`.
fn filled<T: Copy>(w: &Arc<World>, len: usize, f: impl Fn(i32, usize) -> T) -> SimBuffer<T> {
    let b = w.alloc::<T>(len);
    for pe in 0..w.n_pes() {
        b.write(pe, &(0..len).map(|i| f(pe as i32, i)).collect::<Vec<_>>());
    }
    b
}

/// Runs `kernel` on every PE of a fresh `n`-PE world built by `setup`, then `check`s each PE.
fn suite<B>(
    n: u32,
    grid: (u32, u32),
    setup: impl Fn(&Arc<World>) -> B,
    kernel: impl Fn(&B) + Sync,
    check: impl Fn(&B, i32, i32),
) where
    B: Sync,
{
    let w = World::new(n, 1 << 20);
    let b = setup(&w);
    w.run(grid.0, grid.1, 17 + u64::from(n), || kernel(&b))
        .unwrap_or_else(|e| panic!("{n} PEs: {e}"));
    for pe in 0..n as i32 {
        check(&b, pe, n as i32);
    }
}

#[test]
fn rma_p_g() {
    for n in PES {
        suite(
            n,
            (1, 32),
            |w| {
                (
                    filled(w, 10, expect::p_g_source),
                    w.alloc::<u64>(10),
                    w.alloc::<u64>(10),
                )
            },
            // SAFETY: every PE runs it; buffers are symmetric with 10 elements.
            |(src, dst, got)| unsafe { k::rma_p_g(src.sym(), dst.sym(), got.sym()) },
            |(_, dst, got), me, n| {
                let (dst, got) = (dst.read(me as u32), got.read(me as u32));
                for (k, ty) in P_G_TYPES.iter().enumerate() {
                    let (want_dst, want_got) = expect::p_g(me, n, k);
                    assert_eq!(
                        (dst[k], got[k]),
                        (want_dst, want_got),
                        "{n} PEs, PE {me}: p/g of {ty}"
                    );
                }
            },
        );
    }
}

#[test]
fn rma_bulk() {
    let len = BULK_CASE * BULK_CASES;
    for n in PES {
        suite(
            n,
            (1, 128),
            |w| {
                (
                    filled(w, len, |pe, i| pattern(pe, i) as u32),
                    w.alloc::<u32>(len),
                )
            },
            // SAFETY: one block of 128 threads on every PE; buffers hold every case.
            |(src, dst)| unsafe { k::rma_bulk(src.sym(), dst.sym()) },
            |(_, dst), me, n| {
                for (i, v) in dst.read(me as u32).iter().enumerate() {
                    assert_eq!(*v, expect::bulk(me, n, i), "{n} PEs, PE {me}: element {i}");
                }
            },
        );
    }
}

#[test]
fn signals() {
    let len = SIGNAL_CASE * SIGNAL_CASES;
    for n in PES {
        suite(
            n,
            (1, 64),
            |w| {
                (
                    filled(w, len, pattern),
                    w.alloc::<u64>(len),
                    w.alloc::<u64>(14),
                    w.alloc::<u64>(14),
                )
            },
            // SAFETY: one block of 64 threads on every PE; buffers sized as the kernel states.
            |(src, dst, sig, got)| unsafe {
                k::signals(src.sym(), dst.sym(), sig.sym(), got.sym())
            },
            |(_, dst, sig, got), me, n| {
                for (i, v) in dst.read(me as u32).iter().enumerate() {
                    assert_eq!(
                        *v,
                        expect::signals_dst(me, n, i),
                        "{n} PEs, PE {me}: data {i}"
                    );
                }
                let (sig, got) = (sig.read(me as u32), got.read(me as u32));
                for c in 0..14 {
                    assert_eq!(
                        (sig[c], got[c]),
                        (expect::signals_sig(c), expect::signals_sig(c)),
                        "{n} PEs, PE {me}: case {c}"
                    );
                }
            },
        );
    }
}

#[test]
fn waits() {
    for n in PES {
        suite(
            n,
            (1, 32),
            |w| {
                (
                    w.alloc::<i32>(4),
                    w.alloc::<i64>(4),
                    w.alloc::<u32>(4),
                    w.alloc::<u64>(4),
                    filled(w, 4, |_, i| if i < 3 { 1i32 } else { 0 }),
                    w.alloc::<u64>(4 * WAIT_RESULTS),
                )
            },
            // SAFETY: thread 0 of every PE works; 4-element symmetric variables.
            |(a, b, c, d, status, got)| unsafe {
                k::waits(a.sym(), b.sym(), c.sym(), d.sym(), status.sym(), got.sym())
            },
            |(a, _, _, d, _, got), me, n| {
                let got = got.read(me as u32);
                for t in 0..4 {
                    assert_eq!(
                        &got[t * WAIT_RESULTS..(t + 1) * WAIT_RESULTS],
                        &expect::WAITS,
                        "{n} PEs, PE {me}, type {t}"
                    );
                }
                assert_eq!(a.read(me as u32), [1, 2, 3, 4]);
                assert_eq!(d.read(me as u32), [1, 2, 3, 4]);
            },
        );
    }
}

#[test]
fn atomics() {
    for n in PES {
        suite(
            n,
            (4, 128),
            |w| {
                (
                    (
                        w.alloc::<i32>(2),
                        w.alloc::<i64>(2),
                        w.alloc::<u32>(2),
                        w.alloc::<u64>(2),
                    ),
                    (w.alloc::<f32>(1), w.alloc::<f64>(1)),
                    w.alloc::<u64>(1),
                    w.alloc::<u64>(4 * AMO_INT_RESULTS + 2 * AMO_FLOAT_RESULTS),
                )
            },
            // SAFETY: the same shape on every PE; zeroed symmetric variables.
            |((a, b, c, d), (e, f), counter, got)| unsafe {
                k::atomics(
                    a.sym(),
                    b.sym(),
                    c.sym(),
                    d.sym(),
                    e.sym(),
                    f.sym(),
                    counter.at(0),
                    got.sym(),
                )
            },
            |((a, _, _, d), _, counter, got), me, n| {
                let got = got.read(me as u32);
                for t in 0..4 {
                    let want: Vec<u64> = expect::AMO_INT
                        .iter()
                        .map(|v| if t % 2 == 0 { *v as u32 as u64 } else { *v })
                        .collect();
                    assert_eq!(
                        &got[t * AMO_INT_RESULTS..(t + 1) * AMO_INT_RESULTS],
                        &want[..],
                        "{n} PEs, PE {me}, type {t}"
                    );
                }
                let fbase = 4 * AMO_INT_RESULTS;
                assert_eq!(&got[fbase..fbase + 3], &expect::amo_float::<f32>(), "f32");
                assert_eq!(
                    &got[fbase + 3..fbase + 6],
                    &expect::amo_float::<f64>(),
                    "f64"
                );
                assert_eq!(a.read(me as u32), [3, 1]);
                assert_eq!(d.read(me as u32), [3, 1]);
                if me == 0 {
                    assert_eq!(
                        counter.read(0),
                        [4 * 128 * n as u64],
                        "contended fetch-add counter"
                    );
                }
            },
        );
    }
}

#[test]
fn ordering() {
    let l = ORDER_LEN;
    for n in PES {
        suite(
            n,
            (1, 32),
            |w| {
                (
                    filled(
                        w,
                        3 * l,
                        |pe, i| if i >= 2 * l { pattern(pe, i) } else { 0 },
                    ),
                    w.alloc::<u64>(2),
                    filled(w, 2, |_, _| u64::MAX),
                )
            },
            // SAFETY: thread 0 of every PE works; buffers sized as the kernel states.
            |(data, flags, got)| unsafe { k::ordering(data.sym(), flags.sym(), got.sym()) },
            |(_, _, got), me, n| {
                assert_eq!(
                    got.read(me as u32),
                    [0, 0],
                    "{n} PEs, PE {me}: elements not yet visible after fence+flag, quiet+flag"
                );
            },
        );
    }
}

#[test]
fn barriers() {
    for n in PES {
        suite(
            n,
            (1, 64),
            |w| {
                (
                    w.alloc::<u64>(BARRIER_PHASES),
                    w.alloc::<u64>(BARRIER_PHASES + 6),
                )
            },
            // SAFETY: one block of 64 threads on every PE (all simulated threads run at once).
            |(slots, got)| unsafe { k::barriers(slots.sym(), got.sym()) },
            |(_, got), me, n| {
                for (i, v) in got.read(me as u32).iter().enumerate() {
                    assert_eq!(
                        *v,
                        expect::barriers(me, n, i),
                        "{n} PEs, PE {me}: result {i}"
                    );
                }
            },
        );
    }
}

#[test]
fn peer_memory() {
    for n in PES {
        suite(
            n,
            (1, 64),
            |w| {
                (
                    w.alloc::<u64>(PEER_LEN),
                    w.alloc::<u32>(1),
                    w.alloc::<u64>(5),
                    filled(w, 4, |_, _| u64::MAX),
                )
            },
            // SAFETY: one block of 64 threads on every PE; every simulated PE is mapped.
            |(data, flag, counter, got)| unsafe {
                k::peer_memory(data.sym(), flag.sym(), counter.sym(), got.sym())
            },
            |(_, _, counter, got), me, n| {
                assert_eq!(
                    got.read(me as u32),
                    [1, 1, 0, 0],
                    "{n} PEs, PE {me}: [reachable, own address, mismatches, old CAS value]"
                );
                let c = counter.read(me as u32);
                let prev = (me + n - 1) % n;
                assert_eq!(&c[2..], &[prev as u64 + 1, 42, 64], "{n} PEs, PE {me}");
                if me == 0 {
                    assert_eq!(&c[..2], &[n as u64, 2 * n as u64], "{n} PEs");
                }
            },
        );
    }
}
