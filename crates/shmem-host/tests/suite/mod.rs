//! The device-API suite, written once: each function is one PE's part of a test (allocate,
//! load, launch, check against `suite_common::expect`), run by every PE. `tests/gpu.rs` runs
//! them on GPUs (one process per PE, `SHMEM_GPU_TESTS=1`), `tests/suite_sim.rs` on the CPU
//! simulator (one thread per PE, in CI). `simulated_cases!` and `gpu_only_cases!` list them.

#![allow(dead_code, unused_macros, unused_imports)]

use shmem_host::{Error, LaunchConfig, Module, SharedCarveout, Shmem, StreamRef, SymBuffer};
use std::path::PathBuf;
use suite_common::expect;
use suite_common::*;

/// Where `cargo xtask build-ptx` put the kernels (not read under the simulator).
pub fn ptx_dir() -> PathBuf {
    shmem_host::module::ptx_dir_or(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ptx"),
    )
}

fn filled<'rt, T: Copy + Default + 'static>(
    rt: &'rt Shmem,
    len: usize,
    f: impl Fn(usize) -> T,
) -> SymBuffer<'rt, T> {
    let b = rt.alloc::<T>(len).unwrap();
    b.copy_from(&(0..len).map(f).collect::<Vec<_>>()).unwrap();
    b
}

/// The cases that run on the simulator too, each with the fewest PEs it means something
/// with: `$m! { name: pes, ... }` for a harness macro `$m`.
macro_rules! simulated_cases {
    ($m:ident) => {
        $m! {
            ring: 1,
            rma_p_g: 1,
            rma_bulk: 1,
            rma_small: 1,
            rma_warp: 1,
            group_entry: 1,
            signals: 1,
            waits: 1,
            atomics: 1,
            ordering: 1,
            barriers: 1,
            collectives: 1,
            peer_memory: 1,
            block_shared: 1,
            block_votes: 1,
            named_barriers: 1,
            grid_sync_rounds: 1,
            dependent_launch: 1,
            shared_beyond_default: 1,
            vec16: 1,
            bulk_copies: 2,
            fp8_convert: 1,
            bf16_convert: 1,
            unequal_allocation_fails_on_every_pe: 2,
            graph_replays_launches_and_barriers: 1,
            teams: 1,
            a_wait_past_its_bound_reports: 1,
            a_grid_barrier_past_its_bound_reports: 1,
            an_acquire_wait_past_its_bound_reports: 1,
        }
    };
}

/// The cases that need a GPU: what reads built files (missing and newer modules, embedded
/// cubins), occupancy limits, and a kernel that traps.
macro_rules! gpu_only_cases {
    ($m:ident) => {
        $m! {
            collective_grid_too_large_is_refused: 2,
            bad_input_is_refused: 2,
            embedded_module: 2,
            kernel_panic_traps_and_is_reported: 2,
            user_streams_cudarc_copies_and_events: 2,
            registered_device_memory_is_a_put_source: 2,
            a_program_wide_bound_reports: 2,
            a_held_stream_runs_on_release: 1,
        }
    };
}

pub(crate) use {gpu_only_cases, simulated_cases};

pub fn ring(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let received = filled(rt, 1, |_| -1i32);
    let m = rt.load_module(&ptx_dir(), "ring-kernels").unwrap();
    let k = m.kernel::<ring_kernels::ring>().unwrap();
    assert!(!k.is_collective());
    rt.barrier_all().unwrap();
    // SAFETY: every PE launches it once; `received` is symmetric.
    unsafe { k.launch(LaunchConfig::linear(2, 64), (&received,)).unwrap() };
    rt.barrier_all().unwrap();
    assert_eq!(received.to_vec().unwrap(), vec![(me + n - 1) % n]);
}

pub fn rma_p_g(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::rma_p_g>().unwrap();
    let src = rt.alloc::<u64>(10).unwrap();
    let mine: Vec<u64> = (0..10).map(|k| expect::p_g_source(me, k)).collect();
    src.copy_from(&mine).unwrap();
    let dst = rt.alloc::<u64>(10).unwrap();
    let got = rt.alloc::<u64>(10).unwrap();
    rt.barrier_all().unwrap();
    // SAFETY: every PE launches it; buffers are symmetric with 10 elements.
    unsafe {
        k.launch(LaunchConfig::linear(1, 32), (&src, &dst, &got))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let (dst, got) = (dst.to_vec().unwrap(), got.to_vec().unwrap());
    for (k, ty) in P_G_TYPES.iter().enumerate() {
        let (want_dst, want_got) = expect::p_g(me, n, k);
        assert_eq!(dst[k], want_dst, "p of {ty}");
        assert_eq!(got[k], want_got, "g of {ty}");
    }
}

/// The RMA cases' common run on every PE: `src[i] = pattern(me, i)` and a zeroed `dst`, `len`
/// `u32`s each; `launch(module, src, dst)` between two barriers; then every element of `dst`
/// against `want(me, n, i)`, a mismatch named by `what(i)`.
fn rma_case(
    rt: &Shmem,
    len: usize,
    launch: impl FnOnce(&Module<'_>, &SymBuffer<'_, u32>, &SymBuffer<'_, u32>),
    want: fn(i32, i32, usize) -> u32,
    what: impl Fn(usize) -> String,
) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let src = filled(rt, len, |i| pattern(me, i) as u32);
    let dst = rt.alloc::<u32>(len).unwrap();
    rt.barrier_all().unwrap();
    launch(&m, &src, &dst);
    rt.barrier_all().unwrap();
    let dst = dst.to_vec().unwrap();
    for (i, v) in dst.iter().enumerate() {
        assert_eq!(*v, want(me, n, i), "element {i} ({})", what(i));
    }
}

pub fn rma_bulk(rt: &Shmem) {
    rma_case(
        rt,
        BULK_CASE * BULK_CASES,
        |m, src, dst| {
            let k = m.kernel::<api_suite_kernels::rma_bulk>().unwrap();
            // SAFETY: one block of 128 threads on every PE; buffers hold every case.
            unsafe { k.launch(LaunchConfig::linear(1, 128), (src, dst)).unwrap() };
        },
        expect::bulk,
        |i| format!("case {}", i / BULK_CASE),
    );
}

pub fn group_entry(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let b = ENTRY_THREADS;
    let src = filled(rt, entry_len(b), |i| pattern(me, i) as u32);
    let dst = filled(rt, entry_len(b), |i| ENTRY_OLD + i as u32);
    let got = rt.alloc::<u32>(entry_got_len(b)).unwrap();
    let sig = filled(rt, 2, |_| 0u64);
    let k = m.kernel::<api_suite_kernels::group_entry>().unwrap();
    rt.barrier_all().unwrap();
    // SAFETY: one block of `ENTRY_THREADS` on every PE; the buffers have the kernel's sizes.
    unsafe {
        k.launch(LaunchConfig::linear(1, b as u32), (&src, &dst, &got, &sig))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let (dst, got) = (dst.to_vec().unwrap(), got.to_vec().unwrap());
    assert_eq!(
        sig.to_vec().unwrap(),
        [ENTRY_SIGNAL, ENTRY_SIGNAL + 1],
        "the put-signals' words"
    );
    let (r, w) = (4 * b, ENTRY_WARP);
    let region = |i: usize| match i {
        _ if i < r => "block put",
        _ if i < 2 * r => "block get",
        _ if i < 2 * r + w => "warp put",
        _ if i < 2 * r + 2 * w => "warp get",
        _ if i < 3 * r + 2 * w => "block put-signal",
        _ => "warp put-signal",
    };
    for (i, v) in dst.iter().enumerate() {
        let (want, _) = expect::group_entry(me, n, b, i);
        assert_eq!(
            *v,
            want,
            "dst[{i}] ({}): the group's own writes before the call",
            region(i)
        );
    }
    for (i, v) in got.iter().enumerate() {
        if let (_, Some(want)) = expect::group_entry(me, n, b, i) {
            let what = if i < 4 * b { "block get" } else { "warp get" };
            assert_eq!(
                *v, want,
                "got[{i}] ({what}): a read before the call saw the get's data"
            );
        }
    }
}

pub fn rma_small(rt: &Shmem) {
    rma_case(
        rt,
        SMALL_CASES * SMALL_SLOT,
        |m, src, dst| {
            let k = m.kernel::<api_suite_kernels::rma_small>().unwrap();
            // SAFETY: one block on every PE; buffers hold every case; `SMALL_MAX` lengths.
            unsafe {
                k.launch(LaunchConfig::linear(1, 32), (src, dst, SMALL_MAX as u32))
                    .unwrap()
            };
        },
        expect::small,
        |i| {
            let case = i / SMALL_SLOT;
            format!("op {}, {} elements", case / SMALL_MAX, case % SMALL_MAX + 1)
        },
    );
}

pub fn rma_warp(rt: &Shmem) {
    rma_case(
        rt,
        WARP_CASES * WARP_SLOT,
        |m, src, dst| {
            let k = m.kernel::<api_suite_kernels::rma_warp>().unwrap();
            // SAFETY: one block of 64 threads on every PE; buffers hold every case; every
            // length.
            unsafe {
                k.launch(
                    LaunchConfig::linear(1, 64),
                    (src, dst, WARP_LENS.len() as u32),
                )
                .unwrap()
            };
        },
        expect::warp,
        |i| {
            let case = i / WARP_SLOT;
            let k = case % WARP_LENS.len();
            format!("op {}, {} elements", case / WARP_LENS.len(), WARP_LENS[k])
        },
    );
}

pub fn signals(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let len = SIGNAL_CASE * SIGNAL_CASES;
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::signals>().unwrap();
    assert!(
        k.is_collective() || rt.is_simulated(),
        "the manifest says collective"
    );
    let src = filled(rt, len, |i| pattern(me, i));
    let dst = rt.alloc::<u64>(len).unwrap();
    let sig = rt.alloc::<u64>(14).unwrap();
    let got = rt.alloc::<u64>(14).unwrap();
    rt.barrier_all().unwrap();
    // SAFETY: one block of 64 threads on every PE; buffers sized as the kernel states.
    unsafe {
        k.launch(LaunchConfig::linear(1, 64), (&src, &dst, &sig, &got))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let (dst, sig, got) = (
        dst.to_vec().unwrap(),
        sig.to_vec().unwrap(),
        got.to_vec().unwrap(),
    );
    for (i, v) in dst.iter().enumerate() {
        assert_eq!(*v, expect::signals_dst(me, n, i), "data element {i}");
    }
    for c in 0..14 {
        assert_eq!(sig[c], expect::signals_sig(c), "signal word {c}");
        assert_eq!(
            got[c],
            expect::signals_sig(c),
            "value seen by the wait, case {c}"
        );
    }
}

pub fn waits(rt: &Shmem) {
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::waits>().unwrap();
    let (a, b, c, d) = (
        rt.alloc::<i32>(4).unwrap(),
        rt.alloc::<i64>(4).unwrap(),
        rt.alloc::<u32>(4).unwrap(),
        rt.alloc::<u64>(4).unwrap(),
    );
    let status = filled(rt, 4, |i| if i < 3 { 1i32 } else { 0 });
    let got = rt.alloc::<u64>(4 * WAIT_RESULTS).unwrap();
    rt.barrier_all().unwrap();
    // SAFETY: thread 0 of every PE works; 4-element symmetric variables.
    unsafe {
        k.launch(LaunchConfig::linear(1, 32), (&a, &b, &c, &d, &status, &got))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let got = got.to_vec().unwrap();
    for (t, ty) in ["i32", "i64", "u32", "u64"].iter().enumerate() {
        assert_eq!(
            &got[t * WAIT_RESULTS..(t + 1) * WAIT_RESULTS],
            &expect::WAITS,
            "{ty}"
        );
    }
    assert_eq!(a.to_vec().unwrap(), vec![1, 2, 3, 4]);
    assert_eq!(d.to_vec().unwrap(), vec![1, 2, 3, 4]);
}

pub fn atomics(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::atomics>().unwrap();
    let (a, b, c, d) = (
        rt.alloc::<i32>(2).unwrap(),
        rt.alloc::<i64>(2).unwrap(),
        rt.alloc::<u32>(2).unwrap(),
        rt.alloc::<u64>(2).unwrap(),
    );
    let (e, f) = (rt.alloc::<f32>(1).unwrap(), rt.alloc::<f64>(1).unwrap());
    let counter = rt.alloc::<u64>(1).unwrap();
    let got = rt
        .alloc::<u64>(4 * AMO_INT_RESULTS + 2 * AMO_FLOAT_RESULTS)
        .unwrap();
    let cfg = LaunchConfig::linear(4, 128);
    rt.barrier_all().unwrap();
    // SAFETY: same shape on every PE; zeroed symmetric variables.
    unsafe {
        k.launch(cfg, (&a, &b, &c, &d, &e, &f, &counter, &got))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let got = got.to_vec().unwrap();
    let bits32 = |x: u64| x as u32 as u64;
    for (t, ty) in ["i32", "i64", "u32", "u64"].iter().enumerate() {
        let want: Vec<u64> = expect::AMO_INT
            .iter()
            .map(|v| if t % 2 == 0 { bits32(*v) } else { *v })
            .collect();
        assert_eq!(
            &got[t * AMO_INT_RESULTS..(t + 1) * AMO_INT_RESULTS],
            &want[..],
            "{ty}"
        );
    }
    let fbase = 4 * AMO_INT_RESULTS;
    assert_eq!(&got[fbase..fbase + 3], &expect::amo_float::<f32>(), "f32");
    assert_eq!(
        &got[fbase + 3..fbase + 6],
        &expect::amo_float::<f64>(),
        "f64"
    );
    assert_eq!(a.to_vec().unwrap(), vec![3, 1]);
    assert_eq!(d.to_vec().unwrap(), vec![3, 1]);
    if me == 0 {
        assert_eq!(
            counter.to_vec().unwrap(),
            vec![4 * 128 * n as u64],
            "contended fetch-add counter"
        );
    }
}

pub fn ordering(rt: &Shmem) {
    let me = rt.my_pe();
    let l = ORDER_LEN;
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::ordering>().unwrap();
    let data = filled(rt, 3 * l, |i| if i >= 2 * l { pattern(me, i) } else { 0 });
    let flags = rt.alloc::<u64>(2).unwrap();
    let got = filled(rt, 2, |_| u64::MAX);
    rt.barrier_all().unwrap();
    // SAFETY: thread 0 of every PE works; buffers sized as the kernel states.
    unsafe {
        k.launch(LaunchConfig::linear(1, 32), (&data, &flags, &got))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    assert_eq!(
        got.to_vec().unwrap(),
        vec![0, 0],
        "elements not yet visible after fence+flag, quiet+flag"
    );
}

pub fn barriers(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::barriers>().unwrap();
    assert!(
        k.is_collective() || rt.is_simulated(),
        "the manifest says collective"
    );
    let slots = rt.alloc::<u64>(BARRIER_PHASES).unwrap();
    let got = rt.alloc::<u64>(BARRIER_PHASES + 6).unwrap();
    rt.barrier_all().unwrap();
    // SAFETY: one block of 64 threads on every PE, launched collectively.
    unsafe {
        k.launch(LaunchConfig::linear(1, 64), (&slots, &got))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let got = got.to_vec().unwrap();
    for (i, v) in got.iter().enumerate() {
        assert_eq!(*v, expect::barriers(me, n, i), "result {i}");
    }
}

pub fn collectives(rt: &Shmem) {
    use coll_layout::*;
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let m = rt
        .load_module(&ptx_dir(), "collectives-suite-kernels")
        .unwrap();
    let k = m
        .kernel::<collectives_suite_kernels::collectives>()
        .unwrap();
    let len = ALLTOALL + ALLTOALL_LEN * n as usize;
    let src = filled(rt, len, |i| pattern(me, i));
    let dst = filled(rt, len, |_| u64::MAX);
    let rl = 7 * REDUCE_LEN;
    let isrc = filled(rt, rl, |i| expect::reduce_input(me, i));
    let idst = rt.alloc::<i32>(rl).unwrap();
    let fsrc = filled(rt, REDUCE_LEN, |i| expect::reduce_input(me, i) as f64 + 0.5);
    let fdst = rt.alloc::<f64>(REDUCE_LEN).unwrap();
    rt.barrier_all().unwrap();
    // SAFETY: one block on every PE, all threads call; buffers sized as stated.
    unsafe {
        k.launch(
            LaunchConfig::linear(1, 128),
            (&src, &dst, &isrc, &idst, &fsrc, &fdst),
        )
        .unwrap()
    };
    rt.barrier_all().unwrap();
    let dst = dst.to_vec().unwrap();
    for (i, v) in dst.iter().enumerate() {
        if let Some(want) = expect::collectives_dst(me, n, i) {
            assert_eq!(*v, want, "dst[{i}] (broadcast/fcollect/alltoall)");
        }
    }
    let idst = idst.to_vec().unwrap();
    for (i, v) in idst.iter().enumerate() {
        assert_eq!(
            *v,
            expect::reduce_i32(n, i),
            "i32 reduction {} element {}",
            ["sum", "prod", "min", "max", "and", "or", "xor"][i / REDUCE_LEN],
            i % REDUCE_LEN
        );
    }
    let fdst = fdst.to_vec().unwrap();
    for (i, v) in fdst.iter().enumerate() {
        assert_eq!(*v, expect::reduce_f64(n, i), "f64 sum element {i}");
    }
}

pub fn peer_memory(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::peer_memory>().unwrap();
    let data = rt.alloc::<u64>(PEER_LEN).unwrap();
    let flag = rt.alloc::<u32>(1).unwrap();
    let counter = rt.alloc::<u64>(5).unwrap();
    let got = filled(rt, 4, |_| u64::MAX);
    rt.barrier_all().unwrap();
    // SAFETY: one block of 64 threads on every PE; all PEs on this node.
    unsafe {
        k.launch(LaunchConfig::linear(1, 64), (&data, &flag, &counter, &got))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    assert_eq!(
        got.to_vec().unwrap(),
        vec![1, 1, 0, 0],
        "[reachable, own address, mismatches, old CAS value]"
    );
    let c = counter.to_vec().unwrap();
    let prev = (me + n - 1) % n;
    assert_eq!(&c[2..], &[prev as u64 + 1, 42, 64]);
    if me == 0 {
        assert_eq!(&c[..2], &[n as u64, 2 * n as u64]);
    }
}

/// The values [`fp8_convert`] converts: every `e4m3` value and its negation, the midpoints
/// between neighbouring codes (ties) and the `f32`s either side of each, values past the
/// largest, infinities, NaN and the smallest magnitudes.
fn fp8_values() -> Vec<f32> {
    use shmem_device::fp8::e4m3_to_f32;
    let mut v = vec![
        448.0,
        449.0,
        464.0,
        480.0,
        1e30,
        f32::INFINITY,
        f32::NAN,
        1e-30,
    ];
    v.extend([-0.0, 0.0, 2f32.powi(-10), 3.0 * 2f32.powi(-11)]);
    for b in 0..0x7fu8 {
        let x = e4m3_to_f32(b);
        v.push(x);
        if b < 0x7e {
            let mid = (x + e4m3_to_f32(b + 1)) / 2.0;
            let bits = mid.to_bits();
            v.extend([mid, f32::from_bits(bits - 1), f32::from_bits(bits + 1)]);
        }
    }
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v.resize(v.len().next_multiple_of(4), 1.0);
    v
}

pub fn fp8_convert(rt: &Shmem) {
    use shmem_device::fp8::{e4m3_from_f32, e4m3_to_f32};
    let vals = fp8_values();
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::fp8_convert>().unwrap();
    let input = filled(rt, vals.len(), |i| vals[i].to_bits());
    let (enc4, enc2) = (
        rt.alloc::<u32>(vals.len() / 4).unwrap(),
        rt.alloc::<u32>(vals.len() / 2).unwrap(),
    );
    let dec = rt.alloc::<u32>(256).unwrap();
    // SAFETY: the buffers have the lengths the kernel's contract asks for.
    unsafe {
        k.launch(LaunchConfig::linear(2, 64), (&input, &enc4, &enc2, &dec))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let e = |i: usize| e4m3_from_f32(vals[i]);
    for (i, got) in enc4.to_vec().unwrap().into_iter().enumerate() {
        let want = u32::from_le_bytes([0, 1, 2, 3].map(|j| e(4 * i + j)));
        assert_eq!(got, want, "e4m3x4_from_f32({:?})", &vals[4 * i..4 * i + 4]);
    }
    for (i, got) in enc2.to_vec().unwrap().into_iter().enumerate() {
        let want = u32::from(e(2 * i + 1)) << 8 | u32::from(e(2 * i));
        assert_eq!(
            got,
            want,
            "e4m3x2_from_f32({}, {})",
            vals[2 * i + 1],
            vals[2 * i]
        );
    }
    for (c, got) in dec.to_vec().unwrap().into_iter().enumerate() {
        let (got, want) = (f32::from_bits(got), e4m3_to_f32(c as u8));
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "e4m3x4_to_f32: code {c:#04x} gave {got} ({:#010x}), not {want}",
            got.to_bits()
        );
    }
}

/// The values [`bf16_convert`] converts: every `bf16` value widened, and for every eighth
/// one the midpoint to the next (a tie) and the `f32`s either side of it (which also spell
/// NaNs with payloads: each becomes `0x7fff`), and `f32` NaNs of other signs and payloads.
fn bf16_values() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u16::MAX).map(shmem_device::bf16::to_f32).collect();
    for b in (0..=u16::MAX).step_by(8) {
        let tie = u32::from(b) << 16 | 0x8000;
        v.extend([tie, tie - 1, tie + 1].map(f32::from_bits));
    }
    v.extend([0x7fc0_0001, 0xffc0_0000, 0x7f80_0001, 0xffff_ffff].map(f32::from_bits));
    v.resize(v.len().next_multiple_of(2), 1.0);
    v
}

pub fn bf16_convert(rt: &Shmem) {
    use shmem_device::bf16::from_f32;
    let vals = bf16_values();
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::bf16_convert>().unwrap();
    let input = filled(rt, vals.len(), |i| vals[i].to_bits());
    let packed = rt.alloc::<u32>(vals.len() / 2).unwrap();
    // SAFETY: `packed` holds a word for every two values.
    unsafe {
        k.launch(LaunchConfig::linear(4, 256), (&input, &packed))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    for (i, got) in packed.to_vec().unwrap().into_iter().enumerate() {
        let (lo, hi) = (vals[2 * i], vals[2 * i + 1]);
        let want = u32::from(from_f32(hi)) << 16 | u32::from(from_f32(lo));
        assert_eq!(
            got,
            want,
            "pack({lo:e} = {:#010x}, {hi:e} = {:#010x})",
            lo.to_bits(),
            hi.to_bits()
        );
    }
}

pub fn block_votes(rt: &Shmem) {
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::block_votes>().unwrap();
    // Blocks of 100 threads: the last warp partial.
    let (blocks, threads) = (3u32, 100u32);
    let got = filled(rt, (blocks * threads) as usize, |_| 0u32);
    // SAFETY: `got` holds a word a thread.
    unsafe {
        k.launch(LaunchConfig::linear(blocks, threads), (&got,))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let want: Vec<u32> = (0..blocks)
        .flat_map(|b| {
            let count = (0..threads).filter(|t| t % 3 == b % 3).count() as u32;
            (0..threads).map(move |_| count | 1 << 8 | 1 << 10)
        })
        .collect();
    assert_eq!(
        got.to_vec().unwrap(),
        want,
        "per thread: count | and(all) << 8 | and(one false) << 9 | or(one) << 10 | or(none) << 11"
    );
}

pub fn grid_sync_rounds(rt: &Shmem) {
    use api_suite_kernels::GRID_SYNC_ROUNDS as R;
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::grid_sync_rounds>().unwrap();
    let work = filled(rt, 2, |_| 0u32);
    // Two launches of different sizes on the same barrier words.
    for (launch, (blocks, threads)) in [(4u32, 64u32), (7, 32)].into_iter().enumerate() {
        let got = filled(rt, 2 * blocks as usize, |_| 0u32);
        // SAFETY: a cooperative launch; `got` holds two zeroed words a block; `work` the
        // barrier's two words, zeroed before the first launch.
        unsafe {
            k.launch(
                LaunchConfig::linear(blocks, threads).with_cooperative(true),
                (&got, &work),
            )
            .unwrap()
        };
        rt.barrier_all().unwrap();
        let want: Vec<u32> = (0..2 * blocks)
            .map(|i| if i < blocks { R } else { 0 })
            .collect();
        assert_eq!(
            got.to_vec().unwrap(),
            want,
            "launch {launch}: per block its last round, then the blocks it found behind"
        );
        let done = R * (launch as u32 + 1);
        assert_eq!(
            work.to_vec().unwrap(),
            [0, done],
            "the barrier's arrivals (reset) and its generation after launch {launch}"
        );
    }
}

pub fn dependent_launch(rt: &Shmem) {
    use api_suite_kernels::{pdl_first, pdl_second};
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let (first, second) = (
        m.kernel::<pdl_first>().unwrap(),
        m.kernel::<pdl_second>().unwrap(),
    );
    let (blocks, threads) = (4u32, 64u32);
    let len = (blocks * threads) as usize;
    let overlap = rt.dependent_launches_overlap();
    // The dependent launched the ordinary way and cooperatively.
    for cooperative in [false, true] {
        let (data, out) = (filled(rt, len, |_| 0u32), filled(rt, len, |_| 0u32));
        let (flag, seen) = (filled(rt, 1, |_| 0u32), filled(rt, 1, |_| 0u32));
        let cfg = LaunchConfig::linear(blocks, threads);
        // SAFETY: `data` and `out` hold a word a thread, `flag` and `seen` one word, zeroed;
        // the second launch follows the first on the runtime's stream, same shape.
        unsafe {
            first.launch(cfg, (&data, &flag, &seen)).unwrap();
            second
                .launch(
                    cfg.with_dependent_launch(true)
                        .with_cooperative(cooperative),
                    (&data, &flag, &out),
                )
                .unwrap();
        }
        rt.barrier_all().unwrap();
        let want: Vec<u32> = (0..len as u32).map(|i| 3 * i + 1).collect();
        assert_eq!(
            out.to_vec().unwrap(),
            want,
            "cooperative {cooperative}: the dependent read the first kernel's writes after \
             pdl::wait"
        );
        // A cooperative launch is never a dependent one.
        assert_eq!(
            seen.to_vec().unwrap(),
            [u32::from(overlap && !cooperative)],
            "cooperative {cooperative}: whether the dependent started while the first kernel \
             ran, where dependent_launches_overlap() = {overlap}"
        );
    }
}

pub fn named_barriers(rt: &Shmem) {
    use api_suite_kernels::NAMED_THREADS as T;
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::named_barriers>().unwrap();
    let blocks = 2u32;
    let got = filled(rt, (blocks * T) as usize, |_| 0u32);
    // SAFETY: blocks of `T` threads with a shared word a thread; `got` holds a word a thread.
    unsafe {
        k.launch(
            LaunchConfig::linear(blocks, T).with_shared_mem(4 * T),
            (&got,),
        )
        .unwrap()
    };
    rt.barrier_all().unwrap();
    let want: Vec<u32> = (0..blocks * T)
        .map(|i| match i % T {
            0..32 => 4,
            32..64 => 3,
            _ => 1,
        })
        .collect();
    assert_eq!(
        got.to_vec().unwrap(),
        want,
        "per thread: the group's reads right | the tile right << 1 | warp 0 went on << 2"
    );
}

pub fn shared_beyond_default(rt: &Shmem) {
    use api_suite_kernels::LARGE_SHARED_BYTES as B;
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m
        .kernel::<api_suite_kernels::shared_beyond_default>()
        .unwrap();
    let blocks = 2u32;
    let cfg = LaunchConfig::linear(blocks, 256).with_shared_mem(B);
    // As the kernel is, then with the SMs' most shared memory, then the driver's split again
    // (the attribute set anew each time): the same words.
    let carveouts = [
        None,
        Some(SharedCarveout::Percent(100)),
        Some(SharedCarveout::Default),
    ];
    let mut got = None;
    for carveout in carveouts {
        let words = filled(rt, 2 * blocks as usize, |_| 0u32);
        let cfg = match carveout {
            Some(c) => cfg.with_shared_carveout(c),
            None => cfg,
        };
        // SAFETY: launched with the shared memory the kernel fills; `words` holds two zeroed
        // words a block.
        unsafe { k.launch(cfg, (&words,)).unwrap() };
        rt.barrier_all().unwrap();
        assert_eq!(
            words.to_vec().unwrap(),
            [B, 0].repeat(blocks as usize),
            "carveout {carveout:?}: per block: [bytes given, words read wrong]"
        );
        got = Some(words);
    }
    let got = got.unwrap();
    // A carveout above 100 % is refused before the launch.
    // SAFETY: refused, so nothing runs.
    let e = unsafe {
        k.launch(
            cfg.with_shared_carveout(SharedCarveout::Percent(101)),
            (&got,),
        )
    }
    .unwrap_err();
    assert!(
        matches!(&e, Error::Invalid(m) if m.contains("carveout of 101 %")),
        "{e}"
    );
    if !rt.is_simulated() {
        // More than any GPU gives a block: refused before the launch, with the limit named.
        // SAFETY: refused, so nothing runs.
        let e = unsafe {
            k.launch(
                LaunchConfig::linear(1, 32).with_shared_mem(1 << 20),
                (&got,),
            )
        }
        .unwrap_err();
        assert!(
            matches!(&e, Error::Invalid(m) if m.contains("1048576 bytes of dynamic shared memory") && m.contains("at most")),
            "{e}"
        );
    }
}

pub fn vec16(rt: &Shmem) {
    use suite_common::VEC16_CHUNKS as C;
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::vec16>().unwrap();
    let words = 6 * 4 * C;
    // Regions 0-1 any bits, 2-3 `f32`s, 4-5 `f64`s (word pairs), each distinct.
    let f32_at = |w: usize| (w as f32 * 0.25 - 100.0).to_bits();
    let f64_at = |w: usize| (w as f64 * 0.125 - 1000.0).to_bits();
    let src_of = |w: usize| match w / (8 * C) {
        0 => (w as u32).wrapping_mul(0x9e37_79b9),
        1 => f32_at(w),
        _ => (f64_at(w / 2) >> (32 * (w % 2))) as u32,
    };
    let src = filled(rt, words, src_of);
    let dst = filled(rt, words, |_| 0u32);
    // SAFETY: both hold six regions of `C` chunks; one block of `C` threads.
    unsafe {
        k.launch(LaunchConfig::linear(1, C as u32), (&src, &dst))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let got = dst.to_vec().unwrap();
    for (w, &g) in got.iter().enumerate() {
        let lane = w % 4;
        let want = match w / (8 * C) {
            0 => src_of(w).wrapping_add(lane as u32 + 1),
            1 => (f32::from_bits(src_of(w)) + 0.5 * (lane + 1) as f32).to_bits(),
            _ => {
                let v = f64::from_bits(f64_at(w / 2)) + (lane / 2 + 1) as f64;
                (v.to_bits() >> (32 * (w % 2))) as u32
            }
        };
        assert_eq!(g, want, "dst[{w}] (region {}, lane {lane})", w / (4 * C));
    }
}

pub fn bulk_copies(rt: &Shmem) {
    use suite_common::BULK_COPY_BYTES as B;
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::bulk_copies>().unwrap();
    let (me, n) = (rt.my_pe() as usize, rt.n_pes() as usize);
    let byte = |pe: usize, i: usize| (i.wrapping_mul(131) ^ (pe * 77 + i / 251)) as u8;
    let src = filled(rt, B, |i| byte(me, i));
    let dst = filled(rt, B, |_| 0u8);
    rt.barrier_all().unwrap();
    let shared = api_suite_kernels::BULK_COPY_SHARED as u32;
    // SAFETY: both hold `BULK_COPY_BYTES` on every PE; one block, with the shared memory the
    // kernel uses; every PE launches it.
    unsafe {
        k.launch(
            LaunchConfig::linear(1, 32).with_shared_mem(shared),
            (&src, &dst),
        )
        .unwrap()
    };
    rt.barrier_all().unwrap();
    let from = (me + n - 1) % n;
    let got = dst.to_vec().unwrap();
    for (i, &g) in got.iter().enumerate() {
        assert_eq!(
            g,
            byte(from, i),
            "dst[{i}] (piece {}): PE {from}'s byte",
            i / suite_common::BULK_COPY_PIECE
        );
    }
}

pub fn block_shared(rt: &Shmem) {
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::block_shared>().unwrap();
    let bytes = (api_suite_kernels::SHARED_WORDS * 4) as u32;
    let (blocks, threads) = (3u32, 96u32);
    let got = filled(rt, 4 * blocks as usize, |_| 0u32);
    // SAFETY: `got` holds four words a block; the launch gives the shared memory it uses.
    unsafe {
        k.launch(
            LaunchConfig::linear(blocks, threads).with_shared_mem(bytes),
            (&got,),
        )
        .unwrap()
    };
    rt.barrier_all().unwrap();
    let want: Vec<u32> = (0..blocks)
        .flat_map(|_| [bytes, 1, 0, 3 * threads])
        .collect();
    assert_eq!(
        got.to_vec().unwrap(),
        want,
        "per block: [bytes given, one word more refused, words read wrong, threads counted \
         three times (fetch_add, add_relaxed, compare_swap)]"
    );
    // A launch with too little: the kernel sees the size and finds no room.
    let small = filled(rt, 4, |_| u32::MAX);
    // SAFETY: as above; the kernel writes only `got[0]` when the memory is too small.
    unsafe {
        k.launch(LaunchConfig::linear(1, 32).with_shared_mem(16), (&small,))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    assert_eq!(
        small.to_vec().unwrap(),
        vec![16, u32::MAX, u32::MAX, u32::MAX]
    );
}

pub fn unequal_allocation_fails_on_every_pe(rt: &Shmem) {
    let len = if rt.my_pe() == 0 { 100 } else { 200 };
    match rt.alloc::<u64>(len) {
        Err(Error::UnequalAllocation { mine, min, max }) => {
            assert_eq!((min, max), (800, 1600));
            assert_eq!(mine, len * 8);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("unequal sizes were accepted"),
    }
    // The heap is still usable afterwards.
    let ok = rt.alloc::<u64>(10).unwrap();
    assert_eq!(ok.len(), 10);
}

pub fn collective_grid_too_large_is_refused(rt: &Shmem) {
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::barriers>().unwrap();
    let slots = rt.alloc::<u64>(BARRIER_PHASES).unwrap();
    let got = rt.alloc::<u64>(BARRIER_PHASES + 6).unwrap();
    let cfg = LaunchConfig::linear(1_000_000, 64);
    let max = k.max_coresident_blocks(&cfg).unwrap();
    // SAFETY: refused before anything is launched.
    let e = unsafe { k.launch(cfg, (&slots, &got)) }.unwrap_err();
    assert!(
        matches!(e, Error::GridNotCoResident { max_blocks, .. } if max_blocks == max),
        "{e}"
    );
    println!("refused as expected: {e}");
}

pub fn bad_input_is_refused(rt: &Shmem) {
    let e = rt.check_pe(rt.n_pes()).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
    let e = rt
        .load_module(&ptx_dir(), "no-such-kernels")
        .err()
        .expect("missing module refused")
        .to_string();
    assert!(e.contains("no build of `no-such-kernels`"), "{e}");
    // A module linked against a newer NVSHMEM than this host library is refused.
    let newer = ptx_dir().with_file_name("ptx-nvshmem-3.8.0");
    if newer.is_dir() && rt.version() < (3, 8, 0) {
        let e = rt
            .load_module(&newer, "ring-kernels")
            .err()
            .expect("newer device library refused")
            .to_string();
        assert!(e.contains("linked against NVSHMEM 3.8.0"), "{e}");
        println!("refused as expected: {e}");
    }
    let b = rt.alloc::<u32>(4).unwrap();
    assert!(b.copy_from(&[1, 2, 3]).is_err());
    assert!(b.at(4).is_err());
}

pub fn embedded_module(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    // What a program gets from include_str!/include_bytes! of build-ptx's output.
    let dir = ptx_dir().join("sm_90");
    let manifest = std::fs::read_to_string(dir.join("ring-kernels.json")).unwrap();
    let cubin = std::fs::read(dir.join("ring-kernels.cubin")).unwrap();
    let m = rt.load_module_embedded(&manifest, &cubin, true).unwrap();
    let k = m.kernel::<ring_kernels::ring>().unwrap();
    let received = filled(rt, 1, |_| -1i32);
    rt.barrier_all().unwrap();
    // SAFETY: every PE launches it once; `received` is symmetric.
    unsafe { k.launch(LaunchConfig::linear(1, 32), (&received,)).unwrap() };
    rt.barrier_all().unwrap();
    assert_eq!(received.to_vec().unwrap(), vec![(me + n - 1) % n]);
    assert!(rt.load_module_embedded("{", &cubin, true).is_err());
}

pub fn kernel_panic_traps_and_is_reported(rt: &Shmem) {
    let m = rt.load_module(&ptx_dir(), "api-suite-kernels").unwrap();
    let k = m.kernel::<api_suite_kernels::bounds_check>().unwrap();
    let data = rt.alloc::<u32>(4).unwrap();
    // SAFETY: index 3 is in bounds.
    unsafe {
        k.launch(LaunchConfig::linear(1, 32), (&data, 3u32))
            .unwrap()
    };
    assert_eq!(data.to_vec().unwrap(), vec![0, 0, 0, 1]);
    // SAFETY: index 4 is out of bounds on purpose: the kernel panics and traps.
    unsafe {
        k.launch(LaunchConfig::linear(1, 32), (&data, 4u32))
            .unwrap()
    };
    let e = rt
        .synchronize()
        .expect_err("the trapped kernel must fail the stream");
    println!("PE {}: kernel trapped as expected: {e}", rt.my_pe());
    // The context is unusable after a trap; NVSHMEM cannot be finalized cleanly.
    std::process::exit(0);
}

/// Three launches of `count_next` and an on-stream barrier, captured on a user stream and
/// replayed 10 times, add 30 to every PE's counter, as 30 eager launches would; nothing
/// runs during the capture; host work inside a capture is `Error::Capture`, and the runtime
/// works normally after it.
pub fn graph_replays_launches_and_barriers(rt: &Shmem) {
    let counter = filled(rt, 1, |_| 0u64);
    let m = rt.load_module(&ptx_dir(), "host-suite-kernels").unwrap();
    let k = m.kernel::<host_suite_kernels::count_next>().unwrap();
    let cfg = LaunchConfig::linear(1, 32);
    rt.barrier_all().unwrap();
    for _ in 0..3 {
        // SAFETY: every PE launches it; `counter` is a symmetric word.
        unsafe { k.launch(cfg, (&counter,)).unwrap() };
    }
    rt.barrier_all().unwrap();
    assert_eq!(counter.to_vec().unwrap(), vec![3], "eager");

    let own = rt.new_stream().unwrap();
    let stream = own.as_ref();
    let graph = rt
        .capture(stream, |c| {
            for _ in 0..3 {
                // SAFETY: every PE captures and replays the same launches; `counter`
                // outlives the graph.
                unsafe { c.launch(&k, cfg, (&counter,))? };
            }
            c.barrier_all()
        })
        .unwrap();
    assert_eq!(graph.len(), 4);
    assert_eq!(
        counter.to_vec().unwrap(),
        vec![3],
        "nothing runs at capture"
    );
    // Every PE has read its counter before any replays into it: a replay adds to the next
    // PE's word (on two H200s a faster PE 0 replayed before PE 1 had read: 6).
    rt.barrier_all().unwrap();
    for _ in 0..10 {
        graph.launch().unwrap();
    }
    rt.wait_for(StreamRef::Runtime, &rt.mark_on(stream).unwrap())
        .unwrap();
    rt.barrier_all().unwrap();
    assert_eq!(
        counter.to_vec().unwrap(),
        vec![33],
        "10 replays of 3 launches"
    );

    let e = rt
        .capture(stream, |c| {
            // SAFETY: as above.
            unsafe { c.launch(&k, cfg, (&counter,))? };
            counter.copy_from(&[0])
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::Capture(m) if m.contains("copy to symmetric memory")),
        "{e}"
    );
    let e = rt.capture(stream, |_| rt.barrier_all()).unwrap_err();
    assert!(
        matches!(&e, Error::Capture(m) if m.contains("host barrier_all")),
        "{e}"
    );
    drop(graph);
    rt.barrier_all().unwrap();
    assert_eq!(
        counter.to_vec().unwrap(),
        vec![33],
        "refused captures ran nothing"
    );

    // A graph that starts from zero: every replay clears the word, meets the other PEs,
    // then counts once; an eager fill on the stream does the same outside a graph.
    let restart = rt
        .capture(stream, |c| {
            c.zero(&counter)?;
            c.barrier_all()?;
            // SAFETY: as above.
            unsafe { c.launch(&k, cfg, (&counter,))? };
            c.barrier_all()
        })
        .unwrap();
    assert_eq!(restart.len(), 4);
    assert_eq!(
        counter.to_vec().unwrap(),
        vec![33],
        "nothing runs at capture"
    );
    for _ in 0..5 {
        restart.launch().unwrap();
    }
    rt.wait_for(StreamRef::Runtime, &rt.mark_on(stream).unwrap())
        .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(
        counter.to_vec().unwrap(),
        vec![1],
        "every replay restarts at 0"
    );
    counter.zero_on(stream).unwrap();
    rt.wait_for(StreamRef::Runtime, &rt.mark_on(stream).unwrap())
        .unwrap();
    assert_eq!(counter.to_vec().unwrap(), vec![0], "a fill on the stream");
    drop(restart);
    rt.barrier_all().unwrap();
}

/// On two streams of the program's own: a cudarc copy into a symmetric buffer (viewed as a
/// `CudaSlice`), then a launch on the same stream that forwards it to the next PE; a second
/// stream waits for the first through an event and runs the on-stream barrier.
pub fn user_streams_cudarc_copies_and_events(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let len = 1000;
    let mut src = filled(rt, len, |_| 0u64);
    let dst = filled(rt, len, |_| 0u64);
    let m = rt.load_module(&ptx_dir(), "host-suite-kernels").unwrap();
    let k = m.kernel::<host_suite_kernels::forward>().unwrap();
    let ctx = rt.context().unwrap();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let value = |pe: i32, i: usize| (pe as u64) << 32 | i as u64;
    let mine: Vec<u64> = (0..len).map(|i| value(me, i)).collect();
    rt.barrier_all().unwrap();
    {
        let mut view = src.as_cuda_slice(&a).unwrap();
        a.memcpy_htod(&mine, &mut *view).unwrap();
    }
    // SAFETY: every PE launches it; `src`/`dst` are symmetric, of equal length.
    unsafe {
        k.launch(LaunchConfig::linear(4, 256).on_stream(&a), (&src, &dst))
            .unwrap()
    };
    let done = rt.mark_on((&a).into()).unwrap();
    rt.wait_for((&b).into(), &done).unwrap();
    rt.barrier_all_on((&b).into()).unwrap();
    b.synchronize().unwrap();
    let prev = (me + n - 1) % n;
    let got = dst.to_vec().unwrap();
    for (i, v) in got.into_iter().enumerate() {
        assert_eq!(v, 2 * value(prev, i) + 1, "dst[{i}] from PE {prev}");
    }
}

/// What `team_ops` reports on one PE for `team` (`None`: not a member): its
/// `[team.my_pe(), n_pes, world PE of team PE 0]` and the team-wide sum of `pe + 1`.
fn check_team_kernel(rt: &Shmem, team: Option<&shmem_host::Team<'_>>, members: &[i32], what: &str) {
    let m = rt.load_module(&ptx_dir(), "host-suite-kernels").unwrap();
    let k = m.kernel::<host_suite_kernels::team_ops>().unwrap();
    let info = filled(rt, 3, |_| i32::MIN);
    let x = filled(rt, 2, |i| (rt.my_pe() as i64 + 1) * (i as i64 + 1));
    let sum = filled(rt, 2, |_| -1i64);
    let handle = team.map_or(shmem_device::Team::INVALID, |t| t.handle());
    rt.barrier_all().unwrap();
    // SAFETY: every PE launches it, members with their team's handle and the others with
    // `INVALID`; `info` holds 3, `x` and `sum` 2 each.
    unsafe {
        k.launch(LaunchConfig::linear(1, 32), (handle, &info, &x, &sum))
            .unwrap()
    };
    rt.barrier_all().unwrap();
    let me = rt.my_pe();
    let (info, sum) = (info.to_vec().unwrap(), sum.to_vec().unwrap());
    match members.iter().position(|&p| p == me) {
        Some(i) => {
            let total: i64 = members.iter().map(|&p| p as i64 + 1).sum();
            assert_eq!(
                info,
                [i as i32, members.len() as i32, members[0]],
                "{what}: kernel's view"
            );
            assert_eq!(sum, [total, 2 * total], "{what}: kernel's reduction");
        }
        None => {
            assert_eq!(info, [-1, -1, -1], "{what}: a non-member's view");
            assert_eq!(sum, [-1, -1], "{what}: a non-member's sum is untouched");
        }
    }
}

/// Teams split on the host: the even PEs (strided) and a 2D split into rows of 2 and their
/// columns; each team's numbering and size on the host and in a kernel (the handle passed as
/// an argument), a team barrier, and team reductions, broadcast, fcollect and alltoall
/// enqueued on the runtime's stream, checked against the members' values.
pub fn teams(rt: &Shmem) {
    use shmem_host::team::{Max, Sum};
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let world = rt.team_world();
    assert_eq!((world.my_pe(), world.n_pes()), (me, n));

    let evens_members: Vec<i32> = (0..n).step_by(2).collect();
    let evens = world
        .split_strided(0, 2, evens_members.len() as i32)
        .unwrap();
    assert_eq!(
        evens.is_some(),
        me % 2 == 0,
        "only the even PEs are in the team"
    );
    let x = rt.alloc::<i64>(3).unwrap();
    x.copy_from(&[me as i64 + 1, -(me as i64), 7]).unwrap();
    let sum = filled(rt, 3, |_| 0i64);
    let max = filled(rt, 3, |_| 0i64);
    let from_root = filled(rt, 3, |_| 0i64);
    let one = filled(rt, 1, |_| me as i64);
    if let Some(t) = &evens {
        assert_eq!((t.my_pe(), t.n_pes()), (me / 2, evens_members.len() as i32));
        assert_eq!(t.world_pe(t.n_pes() - 1), evens_members.last().copied());
        assert_eq!(t.translate_pe(t.my_pe(), &world), Some(me));
        assert_eq!(t.world_pe(t.n_pes()), None, "out of range");
        let s = StreamRef::Runtime;
        t.barrier().unwrap();
        t.reduce_on(Sum, &sum, &x, s).unwrap();
        t.reduce_on(Max, &max, &x, s).unwrap();
        t.broadcast_on(&from_root, &x, t.n_pes() - 1, s).unwrap();
        let g = rt.alloc::<i64>(t.n_pes() as usize).unwrap();
        t.fcollect_on(&g, &one, s).unwrap();
        t.sync_on(s).unwrap();
        rt.synchronize().unwrap();
        let last = *evens_members.last().unwrap() as i64;
        let k = evens_members.len() as i64;
        let total: i64 = evens_members.iter().map(|&p| p as i64 + 1).sum();
        assert_eq!(
            sum.to_vec().unwrap(),
            [total, -(total - k), 7 * k],
            "team sum"
        );
        assert_eq!(max.to_vec().unwrap(), [last + 1, 0, 7], "team max");
        assert_eq!(
            from_root.to_vec().unwrap(),
            [last + 1, -last, 7],
            "team broadcast"
        );
        let want: Vec<i64> = evens_members.iter().map(|&p| p as i64).collect();
        assert_eq!(g.to_vec().unwrap(), want, "team fcollect");
        assert!(
            t.broadcast_on(&from_root, &x, t.n_pes(), s).is_err(),
            "root out of range"
        );
        assert!(t.alltoall_on(&sum, &one, s).is_err(), "unequal lengths");
    } else {
        // The collective allocation the members made inside their branch.
        let _g = rt.alloc::<i64>(evens_members.len()).unwrap();
        assert_eq!(
            sum.to_vec().unwrap(),
            [0, 0, 0],
            "a non-member's buffer is untouched"
        );
    }
    rt.barrier_all().unwrap();
    check_team_kernel(rt, evens.as_ref(), &evens_members, "even PEs");

    let xrange = n.min(2);
    let (row, col) = world.split_2d(xrange).unwrap();
    let row_members: Vec<i32> =
        (me / xrange * xrange..((me / xrange + 1) * xrange).min(n)).collect();
    let col_members: Vec<i32> = (me % xrange..n).step_by(xrange as usize).collect();
    assert_eq!(
        (row.my_pe(), row.n_pes()),
        (me % xrange, row_members.len() as i32),
        "row"
    );
    assert_eq!(
        (col.my_pe(), col.n_pes()),
        (me / xrange, col_members.len() as i32),
        "column"
    );
    let row_first_in_col = col_members.iter().position(|&p| p == row_members[0]);
    assert_eq!(
        row.translate_pe(0, &col),
        row_first_in_col.map(|i| i as i32)
    );
    let a2a_src = filled(rt, 2 * row.n_pes() as usize, |i| me as i64 * 100 + i as i64);
    let a2a_dst = filled(rt, 2 * row.n_pes() as usize, |_| -1i64);
    row.alltoall_on(&a2a_dst, &a2a_src, StreamRef::Runtime)
        .unwrap();
    row.reduce_on(Sum, &sum, &x, StreamRef::Runtime).unwrap();
    rt.synchronize().unwrap();
    let want: Vec<i64> = row_members
        .iter()
        .flat_map(|&p| (0..2).map(move |j| p as i64 * 100 + (2 * (me % xrange) + j) as i64))
        .collect();
    assert_eq!(a2a_dst.to_vec().unwrap(), want, "row alltoall");
    let row_total: i64 = row_members.iter().map(|&p| p as i64 + 1).sum();
    assert_eq!(sum.to_vec().unwrap()[0], row_total, "row sum");
    rt.barrier_all().unwrap();
    check_team_kernel(rt, Some(&col), &col_members, "column of a 2D split");
    drop((row, col));
    drop(evens);
    assert!(
        world.split_strided(0, 1, n + 1).is_err(),
        "a split larger than the team"
    );
    rt.barrier_all().unwrap();
}

/// A cudarc allocation registered with NVSHMEM (`Shmem::register_buffer`) is the source
/// of a block-scoped put to the next PE (GPU only: the simulator has no device memory).
pub fn registered_device_memory_is_a_put_source(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let len = 4096;
    let stream = rt.stream().unwrap();
    let mine: Vec<u64> = (0..len as u64).map(|i| (me as u64) << 40 | i).collect();
    let mut slice = stream.clone_htod(&mine).unwrap();
    let dst = filled(rt, len, |_| 0u64);
    let m = rt.load_module(&ptx_dir(), "host-suite-kernels").unwrap();
    let k = m.kernel::<host_suite_kernels::put_from>().unwrap();
    {
        let reg = rt.register_buffer(&mut slice).unwrap();
        assert_eq!(reg.len(), len);
        rt.barrier_all().unwrap();
        // SAFETY: every PE launches it; `reg` is registered and as long as `dst`; one block.
        unsafe {
            k.launch(LaunchConfig::linear(1, 256), (&reg, &dst))
                .unwrap()
        };
        rt.barrier_all().unwrap();
    }
    let prev = (me + n - 1) % n;
    let want: Vec<u64> = (0..len as u64).map(|i| (prev as u64) << 40 | i).collect();
    assert_eq!(
        dst.to_vec().unwrap(),
        want,
        "what the previous PE's registered memory held"
    );
}

/// The line of `wait_for_nobody`'s call of `what` (for the report's location).
fn host_suite_line(what: &str) -> u32 {
    let src = include_str!("../../../../examples/host-suite/src/lib.rs");
    1 + src
        .lines()
        .position(|l| l.trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("`{what}` is not in host-suite's lib.rs")) as u32
}

/// Checks the report of `wait_for_nobody` in `e` (the same text on both backends): who,
/// where, what, how long.
fn check_wait_report(e: &Error, waiter: i32, call: &str, kind: &str, bound_s: f64) {
    let text = e.to_string();
    let line = host_suite_line(call);
    for want in [
        format!("PE {waiter} block (0, 0, 0) thread (0, 0, 0): {kind} at "),
        format!("host-suite/src/lib.rs:{line}:"),
        format!("(bound {bound_s:.3} s) for the 8-byte word at "),
        "to become == 1; it holds 0".to_string(),
        "`wait_for_nobody`".to_string(),
    ] {
        assert!(text.contains(&want), "the report lacks {want:?}: {text}");
    }
    if let Error::WaitTimedOut { report, .. } = e {
        assert!(report.elapsed_ns as f64 * 1e-9 >= bound_s, "{text}");
    }
}

/// A signal nobody sends, waited for on the last PE with a 2 s bound of its own: the kernel
/// stops with a report naming the PE, the wait's source line, the word and the values, within
/// seconds; the other PEs' kernels end normally. On the simulator the run goes on, and a
/// program-wide bound (`set_wait_bound`) does the same for an unbounded `wait_until`.
pub fn a_wait_past_its_bound_reports(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let waiter = n - 1;
    let sig = filled(rt, 1, |_| 0u64);
    let m = rt.load_module(&ptx_dir(), "host-suite-kernels").unwrap();
    let k = m.kernel::<host_suite_kernels::wait_for_nobody>().unwrap();
    rt.barrier_all().unwrap();
    let start = std::time::Instant::now();
    // SAFETY: every PE launches it; `sig` is symmetric; the wait is bounded.
    let r = unsafe { k.launch(LaunchConfig::linear(1, 32), (&sig, waiter, 2000u64)) }
        .and_then(|()| rt.synchronize());
    let took = start.elapsed().as_secs_f64();
    let call = "signal_wait_until_within(sig";
    if rt.is_simulated() {
        let e = r.expect_err("the simulated launch fails on every PE");
        check_wait_report(&e, waiter, call, "signal_wait_until", 2.0);
    } else if me == waiter {
        let e = r.expect_err("the waiting PE's kernel stops");
        assert!(matches!(e, Error::WaitTimedOut { .. }), "{e}");
        check_wait_report(&e, waiter, call, "signal_wait_until", 2.0);
    } else {
        r.unwrap();
    }
    assert!(took < 10.0, "the report came after {took:.1} s");
    println!(
        "PE {me}: {}",
        if me == waiter { "reported" } else { "done" }
    );
    if !rt.is_simulated() {
        // The waiting PE's context is unusable after the trap; no PE waits for it.
        std::process::exit(0);
    }
    rt.set_wait_bound(Some(std::time::Duration::from_millis(500)));
    rt.barrier_all().unwrap();
    // SAFETY: as above; the program-wide bound ends the unbounded wait.
    let e = unsafe { k.launch(LaunchConfig::linear(1, 32), (&sig, waiter, 0u64)) }.unwrap_err();
    check_wait_report(&e, waiter, "wait_until(sig", "wait_until", 0.5);
    rt.set_wait_bound(None);
    rt.barrier_all().unwrap();
}

/// A program-wide bound set before the module loads (as `SHMEM_WAIT_TIMEOUT` does) ends an
/// unbounded `wait_until` on the last PE with the report (GPU: the bound is written into the
/// module at load).
pub fn a_program_wide_bound_reports(rt: &Shmem) {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let waiter = n - 1;
    let sig = filled(rt, 1, |_| 0u64);
    rt.set_wait_bound(Some(std::time::Duration::from_secs(2)));
    let m = rt.load_module(&ptx_dir(), "host-suite-kernels").unwrap();
    let k = m.kernel::<host_suite_kernels::wait_for_nobody>().unwrap();
    rt.barrier_all().unwrap();
    let start = std::time::Instant::now();
    // SAFETY: every PE launches it; `sig` is symmetric; the program-wide bound holds.
    let r = unsafe { k.launch(LaunchConfig::linear(1, 32), (&sig, waiter, 0u64)) }
        .and_then(|()| rt.synchronize());
    let took = start.elapsed().as_secs_f64();
    if me == waiter {
        let e = r.expect_err("the waiting PE's kernel stops");
        check_wait_report(&e, waiter, "wait_until(sig", "wait_until", 2.0);
    } else {
        r.unwrap();
    }
    assert!(took < 10.0, "the report came after {took:.1} s");
    println!(
        "PE {me}: {}",
        if me == waiter { "reported" } else { "done" }
    );
    std::process::exit(0);
}

/// Under a program-wide bound of 0.5 s, loads host-suite and runs `launch` with it: a
/// kernel whose wait, the call `call` in its source, is for a 4-byte word holding 1 to
/// become `>= 2`. Checks the report: `kind` at that line, the word, the values, the
/// `kernel`, within seconds. On a GPU the process then ends: the trap leaves the context
/// unusable.
fn expect_half_second_report(
    rt: &Shmem,
    launch: impl FnOnce(&Module) -> Result<(), Error>,
    (call, kind, kernel): (&str, &str, &str),
) {
    let me = rt.my_pe();
    // Before the load: on a GPU the bound is written into a module as it loads.
    rt.set_wait_bound(Some(std::time::Duration::from_millis(500)));
    let m = rt.load_module(&ptx_dir(), "host-suite-kernels").unwrap();
    let start = std::time::Instant::now();
    let e = launch(&m)
        .and_then(|()| rt.synchronize())
        .expect_err("the wait outlives its bound");
    let took = start.elapsed().as_secs_f64();
    let text = e.to_string();
    let line = host_suite_line(call);
    // On the simulator every PE's launch fails with the first report, which may be another
    // PE's; on GPUs each PE's kernel stops on its own.
    let who = if rt.is_simulated() {
        String::new()
    } else {
        format!("PE {me} ")
    };
    for want in [
        format!("{who}block (0, 0, 0) thread (0, 0, 0): {kind} at "),
        format!("host-suite/src/lib.rs:{line}:"),
        "(bound 0.500 s) for the 4-byte word at ".to_string(),
        "to become >= 2; it holds 1".to_string(),
        format!("`{kernel}`"),
    ] {
        assert!(text.contains(&want), "the report lacks {want:?}: {text}");
    }
    assert!(took < 10.0, "the report came after {took:.1} s");
    println!("PE {me}: reported");
    if !rt.is_simulated() {
        std::process::exit(0);
    }
    rt.set_wait_bound(None);
}

/// An acquire wait (`scoped::wait_acquire`) for a word nobody releases, under a program-wide
/// bound of 0.5 s: the wait stops the kernel with a report naming it, its source line, the
/// word and its values, within seconds.
pub fn an_acquire_wait_past_its_bound_reports(rt: &Shmem) {
    let word = filled(rt, 1, |_| 1u32);
    let launch = |m: &Module| {
        let k = m.kernel::<host_suite_kernels::acquire_for_nobody>()?;
        // SAFETY: a word in global memory that nothing writes; the program-wide bound ends
        // the wait.
        unsafe { k.launch(LaunchConfig::linear(1, 32), (&word,)) }
    };
    let call = "unsafe { shmem_device::scoped::wait_acquire(";
    expect_half_second_report(
        rt,
        launch,
        (call, "scoped::wait_acquire", "acquire_for_nobody"),
    );
}

/// A grid barrier that the grid's last block never reaches, under a program-wide bound of
/// 0.5 s: block 0's wait stops the kernel with a report naming the barrier, its source line,
/// the counter word and its values, within seconds. On the GPU a grid barrier reads the
/// bound through L1 (`ld.global.nc`, shmem-device's `BoundRead::Repeated`), which this
/// case is the one to exercise with a bound set.
pub fn a_grid_barrier_past_its_bound_reports(rt: &Shmem) {
    let counter = filled(rt, 1, |_| 0u32);
    let launch = |m: &Module| {
        let k = m.kernel::<host_suite_kernels::barrier_short_of_a_block>()?;
        let cfg = LaunchConfig::linear(2, 32).with_cooperative(true);
        // SAFETY: a zero word in global memory; 2 blocks, co-resident (a cooperative launch
        // is checked); the program-wide bound ends block 0's wait.
        unsafe { k.launch(cfg, (&counter,)) }
    };
    let call = "unsafe { shmem_device::scoped::grid_barrier(";
    expect_half_second_report(
        rt,
        launch,
        (call, "a grid barrier", "barrier_short_of_a_block"),
    );
}

/// `Shmem::hold`: what is enqueued on a held stream waits on the GPU until the release, then
/// runs; the runtime's own waits release every hold first instead of hanging.
pub fn a_held_stream_runs_on_release(rt: &Shmem) {
    let b = filled(rt, 1024, |i| i as u32 + 1);
    let hold = rt.hold(StreamRef::Runtime).unwrap();
    b.zero_on(StreamRef::Runtime).unwrap();
    let done = rt.mark().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !done.is_done().unwrap(),
        "work on a held stream ran before its release"
    );
    hold.release();
    done.synchronize().unwrap();
    assert!(done.is_done().unwrap());
    assert!(b.to_vec().unwrap().iter().all(|&v| v == 0));
    let _held = rt.hold(StreamRef::Runtime).unwrap();
    let later = rt.mark().unwrap();
    rt.synchronize().unwrap();
    assert!(later.is_done().unwrap());
}
