//! The front ([`moe_dispatch::host::front`]) on the CPU simulator: the caller's tokens in,
//! the received rows by local expert out, the caller's expert outputs combined back; in both
//! modes, with full and short calls, several calls on one buffer, and a graph of a call.

use moe_dispatch::host::front::{Config, Front, FrontKernels};
use moe_dispatch::host::{Dtype, Mode};
use moe_dispatch::kernels::{Gather, Shape, Stage};
use moe_dispatch::reference::{self, Inputs};
use moe_dispatch::routing::{Distribution, route, tokens};
use moe_dispatch::{bf16, expert_scale, fp8, host};
use shmem_device::DevicePtr;
use shmem_device::fp8::e4m3_to_f32;
use shmem_host::{Shmem, StreamRef, sim};

const SEED: u64 = 0xf0;

fn ptr<T>(v: &mut [T]) -> DevicePtr<T> {
    // SAFETY: host memory stands for device memory under the simulator; the vectors outlive
    // the calls (the simulator runs each launch to its end before returning).
    unsafe { DevicePtr::from_raw(v.as_mut_ptr()) }
}

/// This crate's kernels (run from the program's own build on the simulator).
fn kernels(rt: &Shmem) -> shmem_host::Result<shmem_host::Module<'_>> {
    host::load(
        rt,
        &shmem_host::Implementation::Rust {
            ptx_dir: Default::default(),
        },
    )
}

/// What one PE saw: rows per local expert, and combine's differences from the CPU.
#[derive(Debug)]
struct Seen {
    rows: usize,
    diffs: usize,
    padding_zero: bool,
}

/// One call on `front`: this PE's `t` tokens (seed `call`), a dispatch, the stand-in experts
/// on the received rows (what the caller's layer would do), a combine; checked against the
/// CPU reference.
fn call(
    rt: &Shmem,
    front: &Front<'_>,
    k: &FrontKernels<'_>,
    t: u32,
    call: u64,
    graph: bool,
) -> shmem_host::Result<Seen> {
    let c = front.config();
    let (me, n) = (rt.my_pe() as u32, rt.n_pes() as u32);
    let seed = SEED ^ call;
    let mut x = tokens(seed, me, t, c.hidden);
    let r = route(seed, me, t, c.experts, c.top_k, Distribution::Uniform);
    let (mut topk, mut w) = (r.topk.clone(), r.weights.clone());
    let h = c.hidden as usize;
    let slots = front.pair_slots();
    let (l_n, _) = front.layout_dims();
    let mut recv = vec![0u16; slots * h];
    let mut scales = vec![0f32; slots * h / fp8::GROUP];
    let mut layout = vec![0i32; 2 * l_n * n as usize];
    let mut y = vec![0u16; slots * h];
    let mut out = vec![0xffffu16; c.max_tokens as usize * h];
    let stage = Stage {
        x: ptr(&mut x),
        topk: ptr(&mut topk),
        weights: ptr(&mut w),
        tokens: u64::from(t),
    };
    let gather = Gather {
        x: ptr(&mut recv),
        scales: ptr(&mut scales),
        layout: ptr(&mut layout),
    };
    let handle = if graph {
        let mut handle = None;
        let g = rt.capture(StreamRef::Runtime, |cap| {
            // SAFETY: the vectors above outlive the replay below.
            handle = Some(unsafe { front.dispatch(k, stage, gather, cap.enqueue())? });
            Ok(())
        })?;
        g.launch()?;
        handle.unwrap()
    } else {
        // SAFETY: as above.
        unsafe { front.dispatch(k, stage, gather, rt.on(StreamRef::Runtime))? }
    };
    assert_eq!(handle.tokens(), t);
    // The caller's experts: local expert `l`'s rows from source `s` are `count` rows from
    // `offset`; an FP8 row is `h` bytes, times its group's scale.
    let bytes: Vec<u8> = recv.iter().flat_map(|v| v.to_le_bytes()).collect();
    let value = |p: usize, i: usize| match c.dtype {
        Dtype::Bf16 => bf16::to_f32(recv[p * h + i]),
        Dtype::Fp8 => e4m3_to_f32(bytes[p * h + i]) * scales[p * (h / fp8::GROUP) + i / fp8::GROUP],
    };
    let mut rows = 0;
    for l in 0..l_n {
        for s in 0..n as usize {
            let (count, offset) = (
                layout[l * n as usize + s],
                layout[(l_n + l) * n as usize + s],
            );
            for p in offset as usize..(offset + count) as usize {
                let scale = expert_scale(me * l_n as u32 + l as u32);
                for i in 0..h {
                    y[p * h + i] = bf16::from_f32(value(p, i) * scale);
                }
            }
            rows += count as usize;
        }
    }
    // SAFETY: as above.
    unsafe {
        front.combine(
            k,
            handle,
            ptr(&mut y),
            ptr(&mut out),
            rt.on(StreamRef::Runtime),
        )?
    };
    rt.barrier_all()?;
    let shape = Shape {
        tokens: t,
        hidden: c.hidden,
        experts: c.experts,
        top_k: c.top_k,
        n_pes: n,
        capacity: u32::MAX,
        round: 1,
        mode: 0,
        dtype: match c.dtype {
            Dtype::Bf16 => moe_dispatch::kernels::DTYPE_BF16,
            Dtype::Fp8 => moe_dispatch::kernels::DTYPE_FP8,
        },
        read_once: 0,
        mapped: 0,
    };
    let kept: Vec<bool> = r.topk.iter().map(|&e| e >= 0).collect();
    let want = reference::combine(&Inputs { x, routing: r }, &kept, &shape);
    let (diffs, _) = reference::compare(&out[..t as usize * h], &want);
    Ok(Seen {
        rows,
        diffs,
        padding_zero: out[t as usize * h..].iter().all(|&v| v == 0),
    })
}

/// Every PE's received rows, summed, are the pairs routed to it; every combined token
/// equals the CPU's, bit for bit; rows past a short call's tokens are zero. BF16 and FP8.
#[test]
fn the_callers_tokens_go_out_and_their_expert_outputs_come_back() {
    for (mode, dtype) in [
        (Mode::LowLatency, Dtype::Bf16),
        (Mode::Throughput, Dtype::Bf16),
        (Mode::LowLatency, Dtype::Fp8),
        (Mode::Throughput, Dtype::Fp8),
    ] {
        // Rows of 2176 values: a lane copies two batches of `EXPERT_CHUNKS` chunks and a
        // tail (`bf16`), or one batch and a tail (FP8's 136 chunks of `e4m3`).
        let hidden = 2176;
        let seen = sim::run(2, || {
            let rt = Shmem::init()?;
            let module = kernels(&rt)?;
            let k = FrontKernels::new(&module)?;
            let mut cfg = Config::new(hidden, 4, 2, 12);
            // One warp a block, but two for FP8: its first warp sends the metadata while
            // the others copy.
            let threads = if dtype == Dtype::Fp8 { 64 } else { 32 };
            (cfg.mode, cfg.threads, cfg.dtype) = (mode, threads, dtype);
            let front = Front::new(&rt, cfg)?;
            let me = rt.my_pe() as u32;
            // Full calls, a short call (different per PE), a graph of a call, a full call.
            let plan = [
                (12, false),
                (12, false),
                (5 + me * 3, false),
                (12, true),
                (12, false),
            ];
            let mut seen = Vec::new();
            for (i, &(t, graph)) in plan.iter().enumerate() {
                seen.push(call(&rt, &front, &k, t, i as u64, graph)?);
            }
            Ok(seen)
        })
        .unwrap_or_else(|e| panic!("{mode:?} {dtype:?}: {e}"));
        for (i, _) in seen[0].iter().enumerate() {
            let total: usize = seen.iter().map(|s| s[i].rows).sum();
            let want: usize = (0..2u32)
                .map(|pe| {
                    let t = [12, 12, 5 + pe * 3, 12, 12][i];
                    route(SEED ^ i as u64, pe, t, 4, 2, Distribution::Uniform)
                        .topk
                        .iter()
                        .filter(|&&e| e >= 0)
                        .count()
                })
                .sum();
            assert_eq!(
                total, want,
                "{mode:?} {dtype:?} call {i}: every pair received once"
            );
            for (pe, s) in seen.iter().enumerate() {
                assert_eq!(
                    s[i].diffs, 0,
                    "{mode:?} {dtype:?} call {i} PE {pe}: combine"
                );
                assert!(
                    s[i].padding_zero,
                    "{mode:?} {dtype:?} call {i} PE {pe}: rows past the tokens"
                );
            }
        }
    }
}

/// Too many tokens, and a combine whose dispatch was replaced, are errors that name the
/// problem.
#[test]
fn misuse_is_refused() {
    let errs = sim::run(1, || {
        let rt = Shmem::init()?;
        let module = kernels(&rt)?;
        let k = FrontKernels::new(&module)?;
        let front = Front::new(&rt, Config::new(16, 4, 2, 4))?;
        let mut x = vec![0u16; 8 * 16];
        let (mut topk, mut w) = (vec![-1i32; 16], vec![0f32; 16]);
        let (mut recv, mut lay, mut out) = (
            vec![0u16; front.pair_slots() * 16],
            vec![0i32; 8],
            vec![0u16; 64],
        );
        let mut stage = |t: u64| Stage {
            x: ptr(&mut x),
            topk: ptr(&mut topk),
            weights: ptr(&mut w),
            tokens: t,
        };
        let s5 = stage(5);
        let s4 = stage(4);
        let gather = Gather {
            x: ptr(&mut recv),
            // SAFETY: a BF16 dispatch writes no scales.
            scales: unsafe { DevicePtr::from_raw(std::ptr::null_mut()) },
            layout: ptr(&mut lay),
        };
        let on = || rt.on(StreamRef::Runtime);
        // SAFETY: host memory that outlives the calls.
        unsafe {
            let too_many = front.dispatch(&k, s5, gather, on()).unwrap_err();
            let first = front.dispatch(&k, s4, gather, on())?;
            let _second = front.dispatch(&k, s4, gather, on())?;
            let stale = front
                .combine(&k, first, ptr(&mut recv), ptr(&mut out), on())
                .unwrap_err();
            Ok((too_many.to_string(), stale.to_string()))
        }
    })
    .unwrap();
    let (too_many, stale) = &errs[0];
    assert!(too_many.contains("5 tokens, more than the 4"), "{too_many}");
    assert!(stale.contains("dispatch 2 has run since"), "{stale}");
}
