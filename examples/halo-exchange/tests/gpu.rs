//! The halo exchange on GPUs, checked point for point against the CPU reference.
//!
//! Opt in with `SHMEM_GPU_TESTS=1` (kernels from `SHMEM_PTX_DIR`, default `target/ptx`). Each
//! test runs on the PE count it names, through `shmem_host::launcher::gpu_test`. With
//! `SHMEM_HALO_CUBIN` set to the cubin of `cuda/halo.cu` (`cuda/build.sh`), the CUDA C++
//! reference kernels are checked the same way; without it, those tests say they were skipped.
//!
//! Every solve uses `--verify`'s check: each PE compares its slab of the final grid with the
//! CPU reference bit for bit (same operations in the same order), and the residuals (summed
//! in another order on the GPU) to 1e-9 relative.

use halo_exchange::host::{Dtype, Implementation, Options, Variant, run};
use shmem_host::Shmem;
use shmem_host::launcher::gpu_test;
use std::path::PathBuf;

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

/// Solves `nx × ny` for `iters` iterations with every variant (and `Auto`, which runs the
/// one its trial timed faster) and type, and checks each.
fn check(rt: &Shmem, nx: u32, ny: u32, iters: u32, imp: &Implementation) {
    for dtype in [Dtype::F32, Dtype::F64] {
        for variant in [Variant::Persistent, Variant::PerIteration, Variant::Auto] {
            let mut o = Options::new(nx, ny, ptx_dir());
            (o.iters, o.warmup, o.check_every) = (iters, 3, 7);
            (o.dtype, o.variant, o.verify) = (dtype, variant, true);
            o.implementation = imp.clone();
            let out = run(rt, &o).unwrap_or_else(|e| panic!("{o:?}: {e}"));
            let what = format!("{nx}x{ny} {dtype:?} {variant:?} {imp:?} PE {}", rt.my_pe());
            assert_eq!(
                out.mismatches,
                Some(0),
                "{what}: points differ from the CPU"
            );
            assert!(out.residual_error.unwrap() < 1e-9, "{what}: {out:?}");
            assert_eq!(out.residuals.len(), (iters / 7) as usize, "{what}");
            assert!(
                out.residuals.iter().all(|(_, r)| r.is_finite() && *r > 0.0),
                "{what}"
            );
            match (variant, out.trial_seconds_per_iter) {
                (Variant::Auto, Some([p, i])) => {
                    assert!(p > 0.0 && i > 0.0, "{what}: {p} {i}");
                    let faster = if p <= i {
                        Variant::Persistent
                    } else {
                        Variant::PerIteration
                    };
                    assert_eq!(out.variant, faster, "{what}: trial {p} {i}");
                }
                (Variant::Auto, None) => panic!("{what}: no trial"),
                (v, t) => assert_eq!((out.variant, t), (v, None), "{what}"),
            }
            println!(
                "{what}: ok, {:?} on {} blocks, residual {:.3e}, trial {:?}",
                out.variant, out.launch.0, out.residuals[0].1, out.trial_seconds_per_iter
            );
        }
    }
}

fn rust() -> Implementation {
    Implementation::Rust { ptx_dir: ptx_dir() }
}

#[test]
fn one_pe_matches_the_cpu() {
    gpu_test("one_pe_matches_the_cpu", Some(1), |rt| {
        check(rt, 130, 97, 40, &rust()); // f32 rows of 130: element by element
        check(rt, 128, 97, 40, &rust()); // rows of whole 16-byte chunks
    });
}

#[test]
fn two_pes_match_the_cpu_on_uneven_grids() {
    gpu_test("two_pes_match_the_cpu_on_uneven_grids", Some(2), |rt| {
        check(rt, 130, 97, 40, &rust()); // 95 interior rows: 48 + 47
        check(rt, 64, 203, 29, &rust()); // tall, odd iteration count
        check(rt, 257, 257, 50, &rust()); // square
    });
}

#[test]
fn two_pes_with_one_row_each() {
    gpu_test("two_pes_with_one_row_each", Some(2), |rt| {
        check(rt, 40, 4, 21, &rust());
        check(rt, 33, 5, 14, &rust()); // 2 + 1 rows
    });
}

#[test]
fn more_blocks_than_rows_and_the_fewest_blocks() {
    gpu_test(
        "more_blocks_than_rows_and_the_fewest_blocks",
        Some(2),
        |rt| {
            for blocks in [3, 64] {
                let mut o = Options::new(300, 50, ptx_dir());
                (o.iters, o.warmup, o.check_every, o.verify) = (25, 0, 5, true);
                (o.blocks, o.threads) = (Some(blocks), 64);
                for variant in [Variant::Persistent, Variant::PerIteration] {
                    o.variant = variant;
                    let out = run(rt, &o).unwrap();
                    assert_eq!(out.mismatches, Some(0), "{blocks} blocks {variant:?}");
                    assert_eq!(out.launch, (blocks, 64));
                }
            }
        },
    );
}

#[test]
fn bad_options_are_refused() {
    gpu_test("bad_options_are_refused", Some(2), |rt| {
        let mut o = Options::new(16, 3, ptx_dir()); // one interior row for two PEs
        let e = run(rt, &o).unwrap_err().to_string();
        assert!(e.contains("cannot be split over 2 PEs"), "{e}");
        (o.ny, o.threads) = (16, 48);
        let e = run(rt, &o).unwrap_err().to_string();
        assert!(e.contains("multiple of 32"), "{e}");
    });
}

#[test]
fn cuda_reference_matches_the_cpu() {
    let Some(cubin) = std::env::var_os("SHMEM_HALO_CUBIN") else {
        eprintln!("skipped cuda_reference_matches_the_cpu: set SHMEM_HALO_CUBIN (cuda/build.sh)");
        return;
    };
    gpu_test("cuda_reference_matches_the_cpu", Some(2), |rt| {
        let imp = Implementation::Cuda {
            cubin: PathBuf::from(&cubin),
        };
        check(rt, 130, 97, 40, &imp);
        check(rt, 256, 97, 40, &imp);
        check(rt, 40, 4, 21, &imp);
    });
}

/// 100 iterations captured into a CUDA graph on a stream of the program's own and
/// replayed 1000 times: the grid after 100 000 iterations is the eager solve's, bit for
/// bit (both equal the CPU reference), and so are the last replay's residuals; both
/// variants.
#[test]
fn a_graph_of_100_iterations_replays_1000_times_like_eager_launches() {
    gpu_test(
        "a_graph_of_100_iterations_replays_1000_times_like_eager_launches",
        None,
        |rt| {
            for variant in [Variant::PerIteration, Variant::Persistent] {
                let mut o = Options::new(66, 66, ptx_dir());
                (o.iters, o.warmup, o.check_every) = (100_000, 10, 50);
                (o.variant, o.verify, o.graph) = (variant, true, 100);
                let graph = run(rt, &o).unwrap_or_else(|e| panic!("{variant:?} graph: {e}"));
                o.graph = 0;
                let eager = run(rt, &o).unwrap_or_else(|e| panic!("{variant:?} eager: {e}"));
                let what = format!("{variant:?} PE {}", rt.my_pe());
                assert_eq!(graph.mismatches, Some(0), "{what}: graph");
                assert_eq!(eager.mismatches, Some(0), "{what}: eager");
                assert!(graph.residual_error.unwrap() < 1e-9, "{what}: {graph:?}");
                assert_eq!(
                    graph.residuals[..],
                    eager.residuals[eager.residuals.len() - 2..],
                    "{what}"
                );
                println!(
                    "{what}: 1000 replays of 100 iterations match eager and the CPU; per iteration eager {:.2} us, graph {:.2} us",
                    eager.seconds_per_iter * 1e6,
                    graph.seconds_per_iter * 1e6
                );
            }
        },
    );
}
