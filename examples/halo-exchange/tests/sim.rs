//! The halo-exchange kernels on the CPU simulator (`shmem_device::sim`), checked point for
//! point against the CPU reference: both variants, 1, 2, 4 and 8 PEs, with the residual
//! exchange. The same kernel functions the GPU runs, called on simulated threads; puts land
//! late and in a seeded random order, so a missing signal or quiet would show here.

use halo_exchange::kernels::{persistent_f32, step_f32};
use halo_exchange::{initial, max_rows, partition, reference, slab};
use shmem_device::Sym;
use shmem_device::sim::{SimBuffer, World};

/// The buffers of one solve, as the host driver lays them out.
struct Solve {
    world: std::sync::Arc<World>,
    a: SimBuffer<f32>,
    a_new: SimBuffer<f32>,
    sync: SimBuffer<u64>,
    work: SimBuffer<u32>,
    stats: SimBuffer<f64>,
    norms: SimBuffer<f64>,
}

fn setup(n: u32, nx: u32, ny: u32, checks: usize, seed: u64) -> Solve {
    let world = World::new(n, 1 << 20);
    let len = (max_rows(ny, n) as usize + 2) * nx as usize;
    let s = Solve {
        a: world.alloc(len),
        a_new: world.alloc(len),
        sync: world.alloc(3),
        work: world.alloc(2),
        stats: world.alloc(1 + checks),
        norms: world.alloc((n as usize * checks).max(1)),
        world,
    };
    for pe in 0..n {
        let (start, rows) = partition(ny, pe, n);
        let mut v = vec![0f32; len];
        for r in 0..rows as usize + 2 {
            for x in 0..nx as usize {
                v[r * nx as usize + x] =
                    initial(seed, nx, ny, start - 1 + r as u32, x as u32) as f32;
            }
        }
        s.a.write(pe, &v);
        s.a_new.write(pe, &v);
    }
    s
}

/// Compares every PE's slab of `result` and the residuals with the CPU.
fn check(s: &Solve, in_a_new: bool, nx: u32, ny: u32, iters: u32, check_every: u32, seed: u64) {
    let n = s.world.n_pes();
    let (want, want_res) = reference::solve::<f32>(seed, nx, ny, iters, check_every);
    for pe in 0..n {
        let got = if in_a_new {
            s.a_new.read(pe)
        } else {
            s.a.read(pe)
        };
        let (start, rows) = partition(ny, pe, n);
        let w = nx as usize;
        let mine = &got[w..(rows as usize + 1) * w];
        let theirs = &want[start as usize * w..(start + rows) as usize * w];
        let bad = mine.iter().zip(theirs).filter(|(a, b)| a != b).count();
        assert_eq!(bad, 0, "{n} PEs, PE {pe}: points differ from the CPU");
        let stats = s.stats.read(pe);
        for (k, r) in want_res.iter().enumerate() {
            assert!(
                (stats[1 + k] - r).abs() <= 1e-9 * r.abs(),
                "PE {pe} residual {k}"
            );
        }
    }
}

#[test]
fn persistent_kernel_matches_the_cpu_on_1_2_4_and_8_pes() {
    let (nx, ny, iters, every, seed) = (24u32, 14u32, 9u32, 3u32, 5u64);
    for n in [1u32, 2, 4, 8] {
        let s = setup(n, nx, ny, (iters / every) as usize, seed);
        s.world
            .run(3, 32, 100 + u64::from(n), || {
                let me = shmem_device::my_pe() as u32;
                // SAFETY: the buffers are laid out as the kernel documents, zeroed, and the
                // simulated grid is co-resident (every thread runs).
                unsafe {
                    persistent_f32(
                        Sym::from_raw(s.a.sym().as_ptr()),
                        Sym::from_raw(s.a_new.sym().as_ptr()),
                        s.sync.sym(),
                        s.work.sym(),
                        s.stats.sym(),
                        s.norms.sym(),
                        slab(nx, ny, me, n),
                        iters,
                        every,
                    )
                }
            })
            .unwrap_or_else(|e| panic!("{n} PEs: {e}"));
        check(&s, iters % 2 == 1, nx, ny, iters, every, seed);
    }
}

/// Widths that take each path of the sweep: rows of whole 16-byte chunks with one strip
/// per thread (20), more chunk columns than interior threads so that a thread walks two
/// strips (260: 65 columns, 32 threads), and rows that are not whole chunks, swept element
/// by element (23). At 260 the edge rows give a thread 8 or 9 points: rounds of
/// `EDGE_POINTS` and one left over. The strips go three rows at a time and then one or
/// two: 1 row a strip at 20 × 9, 3 at 260 × 12, 5 at 20 × 56, 7 and 4 at 20 × 84.
#[test]
fn per_iteration_kernel_matches_the_cpu_on_2_pes() {
    for (nx, ny) in [(20u32, 9u32), (260, 12), (23, 9), (20, 56), (20, 84)] {
        per_iteration_on_2_pes(nx, ny);
    }
}

fn per_iteration_on_2_pes(nx: u32, ny: u32) {
    let (n, iters, every, seed) = (2u32, 6u32, 2u32, 9u64);
    let s = setup(n, nx, ny, (iters / every) as usize, seed);
    for e in 0..iters {
        let (src, dst) = if e % 2 == 0 {
            (&s.a, &s.a_new)
        } else {
            (&s.a_new, &s.a)
        };
        let check = if (e + 1) % every == 0 {
            ((e + 1) / every - 1) as i32
        } else {
            -1
        };
        s.world
            .run(3, 32, u64::from(e), || {
                let me = shmem_device::my_pe() as u32;
                // SAFETY: as above; epochs count up from 0 over the launches.
                unsafe {
                    step_f32(
                        Sym::from_raw(src.sym().as_ptr()),
                        Sym::from_raw(dst.sym().as_ptr()),
                        s.sync.sym(),
                        s.work.sym(),
                        s.stats.sym(),
                        s.norms.sym(),
                        slab(nx, ny, me, n),
                        u64::from(e),
                        check,
                    )
                }
            })
            .unwrap_or_else(|err| panic!("{nx}x{ny}, iteration {e}: {err}"));
    }
    check(&s, iters % 2 == 1, nx, ny, iters, every, seed);
}

/// The example's own host driver (`host::run`: collective allocation, module loading,
/// typed launches, barriers, timing marks, the check against the CPU) on simulated PEs, as
/// `halo_exchange` runs without a GPU: both variants, f32 and f64, 1 to 3 PEs.
#[test]
fn the_host_driver_runs_on_simulated_pes() {
    use halo_exchange::host::{Dtype, Options, Variant, run};
    use shmem_host::{Shmem, sim};
    for (n, variant, dtype) in [
        (1, Variant::Persistent, Dtype::F32),
        (2, Variant::Persistent, Dtype::F64),
        (2, Variant::PerIteration, Dtype::F32),
        (3, Variant::PerIteration, Dtype::F64),
    ] {
        let outcomes = sim::run(n, || {
            let rt = Shmem::init()?;
            let mut o = Options::new(20, 14, "/nonexistent".into());
            (o.iters, o.warmup, o.check_every, o.threads) = (6, 2, 2, 32);
            (o.variant, o.dtype, o.verify) = (variant, dtype, true);
            run(&rt, &o)
        })
        .unwrap_or_else(|e| panic!("{n} PEs {variant:?} {dtype:?}: {e}"));
        for (pe, out) in outcomes.iter().enumerate() {
            assert_eq!(out.mismatches, Some(0), "{n} PEs {variant:?}: PE {pe}");
            assert!(out.residual_error.unwrap() <= 1e-12, "PE {pe}");
            assert_eq!(out.residuals.len(), 3);
            assert!(out.seconds_per_iter > 0.0);
        }
    }
}

/// `Variant::Auto` times both kernels first and runs the faster: every PE reports the same
/// trial times and the same variant, the one with the smaller time, and the grid still
/// matches the CPU reference; a variant that was asked for runs without a trial.
#[test]
fn auto_runs_the_variant_its_trial_timed_faster_on_every_pe() {
    use halo_exchange::host::{Options, Variant, run};
    use shmem_host::{Shmem, sim};
    let outcomes = sim::run(3, || {
        let rt = Shmem::init()?;
        let mut o = Options::new(20, 14, "/nonexistent".into());
        (o.iters, o.warmup, o.check_every, o.threads) = (6, 1, 2, 32);
        (o.variant, o.verify) = (Variant::Auto, true);
        let auto = run(&rt, &o)?;
        o.variant = Variant::PerIteration;
        Ok((auto, run(&rt, &o)?))
    })
    .unwrap();
    let first = outcomes[0].0.trial_seconds_per_iter.expect("a trial");
    for (pe, (auto, fixed)) in outcomes.iter().enumerate() {
        assert_eq!(auto.mismatches, Some(0), "PE {pe}");
        let [p, i] = auto.trial_seconds_per_iter.expect("a trial");
        assert!(p > 0.0 && i > 0.0, "PE {pe}: {p} {i}");
        assert_eq!(
            [p, i],
            first,
            "PE {pe}: the slowest PE's times, the same everywhere"
        );
        let faster = if p <= i {
            Variant::Persistent
        } else {
            Variant::PerIteration
        };
        assert_eq!(auto.variant, faster, "PE {pe}");
        assert_eq!(fixed.variant, Variant::PerIteration, "PE {pe}");
        assert_eq!(fixed.trial_seconds_per_iter, None, "PE {pe}");
        assert_eq!(fixed.mismatches, Some(0), "PE {pe}");
    }
}

/// Iterations captured into a graph (a fill of the signal words, barriers, the launches)
/// and replayed give the eager solve's grid, bit for bit (both match the CPU reference),
/// and the residuals of the last replay; both variants, 2 PEs. A graph that does not fit
/// the iterations is refused.
#[test]
fn iterations_captured_in_a_graph_replay_like_eager_launches() {
    use halo_exchange::host::{Options, Variant, run};
    use shmem_host::{Shmem, sim};
    for variant in [Variant::PerIteration, Variant::Persistent] {
        let outcomes = sim::run(2, || {
            let rt = Shmem::init()?;
            let mut o = Options::new(20, 14, "/nonexistent".into());
            (o.iters, o.warmup, o.check_every, o.threads) = (40, 2, 5, 32);
            (o.variant, o.verify, o.graph) = (variant, true, 10);
            let graph = run(&rt, &o)?;
            o.graph = 0;
            let eager = run(&rt, &o)?;
            o.graph = 7;
            let odd = run(&rt, &o).unwrap_err().to_string();
            Ok((graph, eager, odd))
        })
        .unwrap_or_else(|e| panic!("{variant:?}: {e}"));
        for (pe, (graph, eager, odd)) in outcomes.iter().enumerate() {
            assert_eq!(graph.mismatches, Some(0), "{variant:?} PE {pe}: graph");
            assert_eq!(eager.mismatches, Some(0), "{variant:?} PE {pe}: eager");
            assert!(graph.residual_error.unwrap() <= 1e-12, "PE {pe}");
            let its: Vec<u32> = graph.residuals.iter().map(|r| r.0).collect();
            assert_eq!(its, [35, 40], "the last replay's checks");
            assert_eq!(graph.residuals[..], eager.residuals[6..], "PE {pe}");
            assert!(odd.contains("must be even"), "{odd}");
        }
    }
}

/// The interior's work: every interior row of every chunk column is in exactly one strip,
/// and no more strips than threads unless a row has more chunks than there are threads.
#[test]
fn strips_cover_the_interior_once() {
    use halo_exchange::kernels::strips;
    for (m, w, threads) in [
        (1, 1, 1),
        (7, 6, 32),
        (16380, 4096, 201_728),
        (4092, 1024, 201_728),
        (10, 65, 32),
        (1020, 256, 134_144),
    ] {
        let (height, count) = strips(m, w, threads);
        assert!(height >= 1 && count % w == 0, "{m} {w} {threads}");
        let bands = count / w;
        assert!(
            bands * height >= m && (bands - 1) * height < m,
            "{m} {w} {threads}"
        );
        assert!(count <= threads.max(w), "{m} {w} {threads}: {count} strips");
    }
}
