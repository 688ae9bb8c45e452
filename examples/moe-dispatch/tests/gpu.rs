//! MoE dispatch and combine on GPUs, checked against the CPU reference.
//!
//! Opt in with `SHMEM_GPU_TESTS=1` (kernels from `SHMEM_PTX_DIR`, default `target/ptx`).
//! Each test runs on the PE count it names (`None`: one per GPU, or `SHMEM_GPU_PES`),
//! through `shmem_host::launcher::gpu_test`. With `SHMEM_MOE_CUBIN` set to the cubin of
//! `cuda/moe.cu` (`cuda/build.sh`), the CUDA C++ kernels are checked the same way; without
//! it, that test says it was skipped.
//!
//! Every run checks its last round on every PE: each (token, destination PE) arrived exactly
//! once, bit for bit, with its weights and nothing else; each kept pair has one slot in its
//! (expert, source) range pointing back at its row; drops are exactly what the capacity
//! implies; and the combined tokens are within bf16 rounding of the CPU (the Rust kernels
//! are also asserted bit-exact: same operations in the same order).

use moe_dispatch::host::{Dtype, Implementation, Mode, Options, run};
use moe_dispatch::routing::Distribution;
use shmem_host::Shmem;
use shmem_host::launcher::gpu_test;
use std::path::PathBuf;

fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

/// Runs `o` in both modes and asserts the check; returns the pairs dropped per round on
/// this PE for each mode.
fn check(rt: &Shmem, o: &Options, bit_exact: bool) -> [u64; 2] {
    let mut dropped = [0; 2];
    for (i, mode) in [Mode::LowLatency, Mode::Throughput].into_iter().enumerate() {
        let mut o = o.clone();
        (o.mode, o.verify) = (mode, true);
        let out = run(rt, &o).unwrap_or_else(|e| panic!("{o:?}: {e}"));
        let ch = out.check.clone().unwrap();
        let what = format!(
            "PE {} {:?} {} T {} H {} E {} K {} {:?} cap {:?}",
            rt.my_pe(),
            mode,
            o.dtype.name(),
            o.tokens,
            o.hidden,
            o.experts,
            o.top_k,
            o.dist,
            o.capacity
        );
        assert!(
            ch.dispatch.problems.is_empty(),
            "{what}: {:#?}",
            ch.dispatch.problems
        );
        assert!(
            ch.ok(),
            "{what}: combine differs in {} values, worst {}",
            ch.combine_diffs,
            ch.combine_worst
        );
        if bit_exact {
            assert_eq!(ch.combine_diffs, 0, "{what}: combine not bit-exact");
        }
        assert!(
            !(o.probe_peers && out.mapped),
            "{what}: --probe-peers ran the mapped kernels"
        );
        println!(
            "{what}: ok, {} rows {} pairs arrived, {} dropped here, {} combine values differ, grids {:?}, {} kernels",
            ch.dispatch.rows,
            ch.dispatch.pairs,
            ch.dispatch.dropped,
            ch.combine_diffs,
            out.launch,
            if out.mapped { "mapped" } else { "probed" }
        );
        dropped[i] = out.dropped_per_round;
    }
    dropped
}

fn small(tokens: u32, hidden: u32, experts: u32, top_k: u32) -> Options {
    let mut o = Options::new(tokens, ptx_dir());
    (o.hidden, o.experts, o.top_k, o.rounds, o.warmup) = (hidden, experts, top_k, 3, 2);
    o
}

#[test]
fn one_pe_delivers_to_itself() {
    gpu_test("one_pe_delivers_to_itself", Some(1), |rt| {
        check(rt, &small(77, 64, 8, 3), true);
    });
}

#[test]
fn uniform_routing_exactly_once() {
    gpu_test("uniform_routing_exactly_once", None, |rt| {
        check(rt, &small(100, 72, 16, 4), true); // 100 tokens: not a multiple of a warp
        check(rt, &small(300, 128, 32, 8), true);
    });
}

#[test]
fn skewed_and_sparse_routing() {
    gpu_test("skewed_and_sparse_routing", None, |rt| {
        for dist in [Distribution::Skewed, Distribution::Sparse] {
            let mut o = small(257, 64, 32, 6);
            o.dist = dist;
            let d = check(rt, &o, true);
            assert_eq!(d, [0, 0], "nothing dropped without a capacity");
        }
    });
}

#[test]
fn capacity_drops_are_counted_and_reported() {
    gpu_test("capacity_drops_are_counted_and_reported", None, |rt| {
        let mut o = small(400, 64, 16, 4);
        (o.dist, o.capacity) = (Distribution::Skewed, Some(20));
        let dropped = check(rt, &o, true);
        // Skewed routing sends about a third of the choices to experts 0-3: far over 20.
        assert!(
            dropped.iter().all(|&d| d > 0),
            "PE {}: {dropped:?}",
            rt.my_pe()
        );
    });
}

#[test]
fn deepseek_shape_small_batch() {
    gpu_test("deepseek_shape_small_batch", None, |rt| {
        let mut o = small(128, 7168, 256, 8);
        o.rounds = 5;
        check(rt, &o, true);
    });
}

/// The FP8 dispatch (the `e4m3` conversion is the GPU's own instruction on sm_89+): every
/// received row equals the CPU's quantisation bit for bit, and the combine of the
/// dequantised tokens the CPU's; at DeepSeek's shape, and with capacity drops.
#[test]
fn fp8_dispatch_sends_the_cpu_quantisation() {
    gpu_test("fp8_dispatch_sends_the_cpu_quantisation", None, |rt| {
        let mut o = small(128, 7168, 256, 8);
        o.dtype = Dtype::Fp8;
        check(rt, &o, true);
        let mut o = small(300, 256, 16, 4);
        (o.dtype, o.dist, o.capacity) = (Dtype::Fp8, Distribution::Skewed, Some(20));
        let dropped = check(rt, &o, true);
        assert!(dropped.iter().all(|&d| d > 0), "{dropped:?}");
    });
}

#[test]
fn grid_shapes() {
    gpu_test("grid_shapes", None, |rt| {
        for (blocks, threads) in [(1, 32), (3, 96), (200, 512)] {
            let mut o = small(150, 64, 16, 5);
            (o.blocks, o.threads) = (Some(blocks), threads);
            check(rt, &o, true);
        }
        // 1024 threads: a clear error if a kernel needs more than 64 registers a thread.
        let mut o = small(150, 64, 16, 5);
        o.threads = 1024;
        match run(rt, &o) {
            Ok(out) => assert!(out.check.is_none() && out.launch[3].1 == 1024),
            Err(e) => assert!(e.to_string().contains("use fewer --threads"), "{e}"),
        }
    });
}

/// The kernels that look each PE up ([`Options::probe_peers`]) where every PE is mapped:
/// the other tests run the `Mapped` kernels there; these must give the same results (one
/// GPU, or PEs on one node, never take their put paths, which the simulator's tests run).
#[test]
fn probed_kernels_where_every_pe_is_mapped() {
    gpu_test("probed_kernels_where_every_pe_is_mapped", None, |rt| {
        for (dtype, threads) in [(Dtype::Bf16, 256), (Dtype::Bf16, 32), (Dtype::Fp8, 256)] {
            let mut o = small(200, 256, 16, 4);
            (o.dtype, o.threads, o.probe_peers) = (dtype, threads, true);
            check(rt, &o, true);
        }
    });
}

#[test]
fn bad_options_are_refused() {
    gpu_test("bad_options_are_refused", None, |rt| {
        let n = rt.n_pes() as u32;
        let mut o = small(10, 64, 7 * n + 1, 4);
        // Experts that do not divide evenly over the PEs (every count divides over one PE).
        if n > 1 {
            let e = run(rt, &o).unwrap_err().to_string();
            assert!(e.contains("spread evenly"), "{e}");
        }
        (o.experts, o.hidden) = (8 * n, 60);
        let e = run(rt, &o).unwrap_err().to_string();
        assert!(e.contains("multiple of 8"), "{e}");
        (o.hidden, o.top_k) = (64, 17);
        let e = run(rt, &o).unwrap_err().to_string();
        assert!(e.contains("top-k"), "{e}");
        (o.top_k, o.dtype) = (4, Dtype::Fp8);
        let e = run(rt, &o).unwrap_err().to_string();
        assert!(e.contains("multiple of 128"), "{e}");
    });
}

#[test]
fn cuda_reference_matches_the_cpu() {
    let Some(cubin) = std::env::var_os("SHMEM_MOE_CUBIN") else {
        eprintln!("skipped cuda_reference_matches_the_cpu: set SHMEM_MOE_CUBIN (cuda/build.sh)");
        return;
    };
    gpu_test("cuda_reference_matches_the_cpu", None, |rt| {
        let imp = Implementation::Cuda {
            cubin: PathBuf::from(&cubin),
        };
        for dist in [Distribution::Uniform, Distribution::Sparse] {
            let mut o = small(300, 128, 32, 8);
            (o.implementation, o.dist) = (imp.clone(), dist);
            check(rt, &o, false);
        }
        let mut o = small(300, 256, 32, 8);
        (o.implementation, o.dtype) = (imp.clone(), Dtype::Fp8);
        check(rt, &o, false);
        let mut o = small(400, 64, 16, 4);
        (o.implementation, o.dist, o.capacity) = (imp.clone(), Distribution::Skewed, Some(20));
        check(rt, &o, false);
        // And its kernels that look each PE up.
        let mut o = small(300, 128, 32, 8);
        (o.implementation, o.probe_peers) = (imp, true);
        check(rt, &o, false);
    });
}

/// A round captured into a CUDA graph on a stream of the program's own and replayed 1000
/// times gives the eager rounds' combined tokens, bit for bit, and passes the check
/// against the CPU, in both modes.
#[test]
fn a_round_in_a_graph_replays_1000_times_like_eager_rounds() {
    gpu_test(
        "a_round_in_a_graph_replays_1000_times_like_eager_rounds",
        None,
        |rt| {
            for mode in [Mode::LowLatency, Mode::Throughput] {
                let mut o = small(128, 1024, 16, 4);
                (o.mode, o.verify, o.graph_replays) = (mode, true, 1000);
                let out = run(rt, &o).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
                assert!(out.check.unwrap().ok(), "{mode:?}: eager");
                let g = out.graph.unwrap();
                assert!(g.identical, "{mode:?}: replays differ from eager rounds");
                assert!(g.check.as_ref().unwrap().ok(), "{mode:?}: replays");
                println!(
                    "PE {} {mode:?}: 1000 replays identical to eager; per round eager {:.2} us (host {:.2}), graph {:.2} us (host {:.2})",
                    rt.my_pe(),
                    g.eager.gpu_us,
                    g.eager.host_us,
                    g.graph.gpu_us,
                    g.graph.host_us
                );
            }
        },
    );
}
