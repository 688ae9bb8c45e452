//! Whole programs on the CPU simulator (`shmem_host::sim`): PEs as threads of this process,
//! the same host API as on GPUs (collective allocation, typed launches, barriers), and each
//! misuse reported with a clear error instead of a hang.

#![cfg(feature = "sim")]

use shmem_device::prelude::*;
use shmem_host::{Error, LaunchConfig, Result, Shmem, sim};
use std::path::Path;

/// Each thread records where it is: `(thread_idx, block_idx, block_dim, grid_dim)` as 12
/// words at its global linear index.
///
/// # Safety
/// `out` holds 12 words per thread of the launch.
#[shmem_kernel]
pub unsafe fn positions(out: SymSlice<u32>) {
    let (t, b, bd, gd) = (thread_idx(), block_idx(), block_dim(), grid_dim());
    let block = (b.z * gd.y + b.y) * gd.x + b.x;
    let global = block * (bd.x * bd.y * bd.z) + thread_rank_in_block();
    let words = [
        t.x, t.y, t.z, b.x, b.y, b.z, bd.x, bd.y, bd.z, gd.x, gd.y, gd.z,
    ];
    for (k, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the caller's contract; each thread writes its own words.
        unsafe { out.at(global as usize * 12 + k).write(w) };
    }
}

/// PE 0's thread 0 waits for a signal that nobody sends.
///
/// # Safety
/// `sig` is a symmetric word.
#[shmem_kernel]
pub unsafe fn waits_forever(sig: Sym<u64>) {
    if my_pe() == 0 && thread_idx_x() == 0 {
        // SAFETY: a symmetric word of this PE.
        unsafe { wait_until(sig, Cmp::Ge, 1u64) };
    }
}

/// Puts to PE `pe`, which may not exist.
///
/// # Safety
/// `dst` is a symmetric word.
#[shmem_kernel]
pub unsafe fn put_to(dst: Sym<u32>, pe: i32) {
    if thread_idx_x() == 0 {
        // SAFETY: the caller's contract on `dst`; `pe` is checked by NVSHMEM's rules (the
        // simulator reports one out of range).
        unsafe { p(dst, 1u32, pe) };
        quiet();
    }
}

fn no_ptx() -> &'static Path {
    Path::new("/nonexistent/ptx")
}

#[test]
fn the_ring_program_on_1_2_and_4_pes() {
    for n in [1u32, 2, 4] {
        let got = sim::run(n, || {
            let rt = Shmem::init()?;
            let received = rt.alloc::<i32>(1)?;
            received.copy_from(&[-1])?;
            // Nothing is read from the directory under the simulator.
            let module = rt.load_module(no_ptx(), "ring-kernels")?;
            let ring = module.kernel::<ring_kernels::ring>()?;
            rt.barrier_all()?;
            // SAFETY: every PE launches it; `received` is a symmetric i32.
            unsafe { ring.launch(LaunchConfig::linear(2, 32), (&received,))? };
            rt.barrier_all()?;
            Ok(received.to_vec()?[0])
        })
        .unwrap();
        let want: Vec<i32> = (0..n as i32)
            .map(|pe| (pe + n as i32 - 1) % n as i32)
            .collect();
        assert_eq!(got, want, "{n} PEs");
    }
}

#[test]
fn three_dimensional_grids_number_threads_as_cuda_does() {
    let (grid, block) = ((2u32, 3u32, 1u32), (4u32, 2u32, 2u32));
    let threads = (grid.0 * grid.1 * grid.2 * block.0 * block.1 * block.2) as usize;
    let got = sim::run(2, || {
        let rt = Shmem::init()?;
        let out = rt.alloc::<u32>(threads * 12)?;
        let m = rt.load_module(no_ptx(), env!("CARGO_PKG_NAME"))?;
        let k = m.kernel::<positions>()?;
        let cfg = LaunchConfig {
            grid,
            block,
            ..LaunchConfig::linear(1, 1)
        };
        // SAFETY: 12 words per thread.
        unsafe { k.launch(cfg, (&out,))? };
        out.to_vec()
    })
    .unwrap();
    for words in &got {
        for g in 0..threads as u32 {
            let per_block = block.0 * block.1 * block.2;
            let (b, t) = (g / per_block, g % per_block);
            let want = [
                t % block.0,
                t / block.0 % block.1,
                t / (block.0 * block.1),
                b % grid.0,
                b / grid.0 % grid.1,
                b / (grid.0 * grid.1),
                block.0,
                block.1,
                block.2,
                grid.0,
                grid.1,
                grid.2,
            ];
            let at = g as usize * 12;
            assert_eq!(words[at..at + 12], want, "thread {g}");
        }
    }
}

#[test]
fn unequal_allocation_fails_on_every_pe_and_allocates_nothing() {
    let got = sim::run(3, || {
        let rt = Shmem::init()?;
        let e = rt
            .alloc::<u8>(100 + rt.my_pe() as usize)
            .err()
            .expect("unequal sizes are an error");
        let text = e.to_string();
        assert!(
            matches!(
                e,
                Error::UnequalAllocation {
                    min: 100,
                    max: 102,
                    ..
                }
            ),
            "{text}"
        );
        // The heap is untouched: the next allocation starts at the bottom.
        let b = rt.alloc::<u8>(8)?;
        let bottom = b.peer_device_ptr(rt.my_pe())?;
        drop(b);
        let c = rt.alloc::<u8>(8)?;
        assert_eq!(
            c.peer_device_ptr(rt.my_pe())?,
            bottom,
            "freed space is reused"
        );
        // Every PE's copy is at the same offset of its own heap.
        let mine = c.device_ptr();
        let peer = c.peer_device_ptr((rt.my_pe() + 1) % 3)?.expect("mapped");
        assert_ne!(mine, peer);
        Ok(text)
    })
    .unwrap();
    assert!(got[0].contains("this PE asked for 100 bytes, others between 100 and 102"));
}

#[test]
fn a_failing_pe_is_named_and_stops_the_others() {
    let e = sim::run(3, || {
        let rt = Shmem::init()?;
        if rt.my_pe() == 1 {
            return Err(Error::Invalid("PE 1 gives up".into()));
        }
        rt.barrier_all()
    })
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("PE 1 failed: PE 1 gives up"), "{e}");
    assert!(e.contains("2 other PE(s) stopped after it"), "{e}");

    let e = sim::run(2, || {
        let rt = Shmem::init()?;
        if rt.my_pe() == 0 {
            panic!("bad index");
        }
        let _b = rt.alloc::<u8>(1)?;
        Ok(())
    })
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("PE 0 panicked: bad index"), "{e}");
}

#[test]
fn a_pe_that_returns_early_is_reported_to_the_one_waiting() {
    let got = sim::run(2, || {
        let rt = Shmem::init()?;
        if rt.my_pe() == 0 {
            return Ok(String::new());
        }
        Ok(rt.barrier_all().unwrap_err().to_string())
    })
    .unwrap();
    let e = &got[1];
    assert!(
        e.contains("PE 0 returned while PE 1 waits for every PE in barrier_all"),
        "{e}"
    );
}

#[test]
fn different_collective_calls_are_an_error_naming_each() {
    let got = sim::run(2, || {
        let rt = Shmem::init()?;
        let e = if rt.my_pe() == 0 {
            rt.barrier_all().unwrap_err()
        } else {
            rt.alloc::<u32>(4).err().expect("mismatch")
        };
        Ok(e.to_string())
    })
    .unwrap();
    for e in got {
        assert!(
            e.contains("PE 0 in barrier_all, PE 1 in alloc") && e.contains("same order"),
            "{e}"
        );
    }
}

#[test]
fn a_deadlocked_launch_reports_the_site_and_how_to_rerun_it() {
    let got = sim::run(2, || {
        let rt = Shmem::init()?;
        let sig = rt.alloc::<u64>(1)?;
        let m = rt.load_module(no_ptx(), env!("CARGO_PKG_NAME"))?;
        let k = m.kernel::<waits_forever>()?;
        // SAFETY: a symmetric word.
        let e = unsafe { k.launch(LaunchConfig::linear(1, 32), (&sig,)) }.unwrap_err();
        Ok(e.to_string())
    })
    .unwrap();
    let e = &got[0];
    assert_eq!(got[0], got[1], "both PEs get the same report");
    assert!(
        e.contains("simulated launch 0 of `waits_forever` failed: deadlock"),
        "{e}"
    );
    assert!(e.contains("PE 0 block 0 thread 0: polls memory at"), "{e}");
    assert!(e.contains("tests/sim.rs"), "{e}");
    assert!(e.contains("SHMEM_SIM_SEED=0x5eed"), "{e}");
}

#[test]
fn a_pe_out_of_range_in_a_kernel_fails_the_launch() {
    let got = sim::run(2, || {
        let rt = Shmem::init()?;
        assert!(rt.check_pe(2).is_err() && rt.check_pe(1).is_ok());
        let dst = rt.alloc::<u32>(1)?;
        let m = rt.load_module(no_ptx(), env!("CARGO_PKG_NAME"))?;
        let k = m.kernel::<put_to>()?;
        // SAFETY: a symmetric word; PE 5 does not exist, which is the point.
        let e = unsafe { k.launch(LaunchConfig::linear(1, 32), (&dst, 5)) }.unwrap_err();
        Ok(e.to_string())
    })
    .unwrap();
    assert!(
        got[0].contains("panicked: PE 5 out of range (0..2)"),
        "{}",
        got[0]
    );
}

#[test]
fn launches_with_different_shapes_are_an_error() {
    let got = sim::run(2, || {
        let rt = Shmem::init()?;
        let dst = rt.alloc::<u32>(1)?;
        let m = rt.load_module(no_ptx(), env!("CARGO_PKG_NAME"))?;
        let k = m.kernel::<put_to>()?;
        let blocks = 1 + rt.my_pe() as u32;
        // SAFETY: a symmetric word, a valid PE.
        let e = unsafe { k.launch(LaunchConfig::linear(blocks, 32), (&dst, 0)) }.unwrap_err();
        Ok(e.to_string())
    })
    .unwrap();
    assert!(got[0].contains("with one shape"), "{}", got[0]);
}

#[test]
fn what_needs_a_gpu_is_a_clear_error() {
    sim::run(2, || -> Result<()> {
        let rt = Shmem::init()?;
        assert!(rt.is_simulated());
        assert_eq!(rt.version(), sim::NVSHMEM_VERSION);
        for e in [
            rt.stream().expect_err("no stream").to_string(),
            rt.context().expect_err("no context").to_string(),
            // SAFETY: never loaded: the simulator refuses CUDA C++ modules.
            unsafe { rt.load_cuda_module(Path::new("k.cubin")) }
                .err()
                .expect("no cubins")
                .to_string(),
            shmem_host::measure::copy_engine_peer_bandwidth(&rt, 1)
                .unwrap_err()
                .to_string(),
            shmem_host::measure::device_copy_seconds(&rt, 1 << 20, 1, true)
                .unwrap_err()
                .to_string(),
        ] {
            assert!(e.starts_with("simulator: "), "{e}");
        }
        let again = Shmem::init().expect_err("one runtime per PE").to_string();
        assert!(again.contains("has started its runtime already"), "{again}");
        Ok(())
    })
    .unwrap();
    let e = sim::run(0, || Ok(())).unwrap_err().to_string();
    assert!(e.contains("0 PEs"), "{e}");
}

#[test]
fn timing_marks_and_min_max_work_on_the_simulator() {
    let got = sim::run(3, || {
        let rt = Shmem::init()?;
        let a = rt.mark()?;
        let b = rt.mark()?;
        b.synchronize()?;
        assert!(b.seconds_since(&a)? >= 0.0);
        rt.min_max(10 * i64::from(rt.my_pe()) - 5)
    })
    .unwrap();
    assert_eq!(got, vec![(-5, 15); 3]);
}

/// The error of asking the module `load` gives for the ring kernel, on one simulated PE.
fn ring_refused(
    load: impl for<'a> Fn(&'a Shmem) -> Result<shmem_host::Module<'a>> + Sync,
) -> String {
    let got = sim::run(1, || {
        let rt = Shmem::init()?;
        let m = load(&rt)?;
        Ok(m.kernel::<ring_kernels::ring>()
            .err()
            .map(|e| e.to_string()))
    })
    .unwrap();
    got[0].clone().expect("refused")
}

/// A typo in the crate name, or a kernel asked of the wrong module, fails on the simulator
/// as it would on a GPU (where the manifest would not list it).
#[test]
fn a_kernel_of_another_crate_is_refused() {
    let e = ring_refused(|rt| rt.load_module(no_ptx(), "ring-kernelz"));
    assert!(
        e.contains("defined in crate `ring-kernels`") && e.contains("`ring-kernelz`"),
        "{e}"
    );
}

/// An embedded build whose manifest does not match the program's kernel (a stale build) is
/// refused on the simulator as on a GPU.
#[test]
fn an_embedded_build_that_does_not_match_the_kernel_is_refused() {
    const MANIFEST: &str = r#"{"format": 1, "crate": "ring-kernels", "arch": "sm_90",
        "ptx_isa": "8.5", "ptx": "ring-kernels.ptx", "nvshmem_version": "3.4.5",
        "nvshmem_bitcode": "", "toolchain": "", "ptxas_verified": false, "cubin": null,
        "kernels": [{"name": "ring", "collective": false, "collective_because": [],
        "params": [{"name": "received", "type": "Sym<i64>", "size": 8, "align": 8}]}],
        "fingerprint": ""}"#;
    static STALE: shmem_host::EmbeddedKernels = shmem_host::EmbeddedKernels {
        crate_name: "ring-kernels",
        builds: &[shmem_host::EmbeddedBuild {
            manifest: MANIFEST,
            ptx: b"",
            cubin: None,
        }],
    };
    let e = ring_refused(|rt| rt.load_embedded(&STALE));
    assert!(
        e.contains("changed since module `ring-kernels` was built") && e.contains("Sym<i64>"),
        "{e}"
    );
}
