//! The MoE kernels on the CPU simulator (`shmem_device::sim`): both modes, 2, 4 and 8 PEs,
//! uniform, skewed and sparse routing, a capacity that drops, two rounds on the same
//! buffers (uniform, 2 PEs); each checked with the same exactly-once checker and CPU combine as the GPU runs.
//! Remote writes land late and in a seeded random order in the simulator, so a missing
//! signal or quiet in the kernels' protocol would show as stale or missing rows here.

use ::moe_dispatch::kernels::{
    self as k, Bufs, DTYPE_BF16, DTYPE_FP8, DispatchPath, MODE_LOW_LATENCY, MODE_THROUGHPUT, Shape,
};
use ::moe_dispatch::reference::{self, Inputs, Received};
use ::moe_dispatch::routing::{Distribution, route, tokens};
use shmem_device::sim::{SimBuffer, World};
use shmem_device::{DevicePtr, Sym};
use std::sync::Arc;

/// Makes the simulated allocations behind `Bufs` from the crate's buffer list, and the
/// conversion for the calling simulated thread's PE.
macro_rules! held {
    ($($(#[$doc:meta])* $name:ident: $t:ty $(as $local:ident)? = $len:expr;)*) => {
        struct Held { $($name: SimBuffer<$t>,)* }
        impl Held {
            fn alloc(w: &Arc<World>, lens: &k::Lens) -> Held {
                Held { $($name: w.alloc(lens.$name),)* }
            }
            fn bufs(&self) -> Bufs {
                // SAFETY: each is a live simulated symmetric allocation of its type.
                Bufs { $($name: unsafe { held!(@handle self.$name.sym().as_ptr() $(, $local)?) },)* }
            }
        }
    };
    (@handle $p:expr) => { Sym::from_raw($p) };
    (@handle $p:expr, local) => { DevicePtr::from_raw($p) };
}
::moe_dispatch::moe_buffers!(held);

/// The text of `cuda/moe.cu` between the first `start` and the next `end` after it.
fn twin_between(start: &str, end: &str) -> &'static str {
    include_str!("../cuda/moe.cu")
        .split_once(start)
        .and_then(|(_, r)| r.split(end).next())
        .unwrap_or_else(|| panic!("`{start}` in cuda/moe.cu"))
}

/// The CUDA C++ twin takes the same `struct Bufs`: the same fields in the same order.
#[test]
fn the_cuda_twin_names_every_buffer_in_order() {
    let names: Vec<&str> = twin_between("struct Bufs {", "};")
        .split(';')
        .flat_map(|decl| decl.split(','))
        .filter_map(|part| {
            let name = part.trim().rsplit(['*', ' ']).next()?.trim();
            (!name.is_empty()).then_some(name)
        })
        .collect();
    assert_eq!(names, k::BUFFER_NAMES);
}

/// The twin declares every kernel of `kernels!` (each dispatch and the combine in both
/// sets, the layouts, the experts), by the same name: the host loads them all from either
/// module. The front's `moe_stage` and `moe_gather` are Rust's alone.
#[test]
fn the_cuda_twin_declares_every_kernel() {
    let rust: std::collections::BTreeSet<&str> = include_str!("../src/kernels.rs")
        .split_once("\nkernels! {")
        .expect("the kernels! invocation")
        .1
        .lines()
        .take_while(|l| *l != "}")
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter_map(|l| l.split_once(" => "))
        .map(|(name, _)| name.trim().split('(').next().unwrap_or("").trim())
        .collect();
    let twin: std::collections::BTreeSet<&str> = include_str!("../cuda/moe.cu")
        .lines()
        .filter_map(|l| l.strip_prefix("extern \"C\" __global__ void "))
        .map(|r| {
            let r = r
                .strip_prefix("__maxnreg__(")
                .map_or(r, |r| r.split_once(") ").unwrap().1);
            r.split('(').next().unwrap_or("").trim()
        })
        .collect();
    assert!(
        rust.len() >= 16 && rust.contains("moe_combine_mapped"),
        "{rust:?}"
    );
    assert_eq!(twin, rust);
}

/// The twin's `Shape` has the Rust one's fields, in its order (the kernels take it by
/// value: a field missing on one side shifts every later one). The pattern names every
/// field, so a new one fails to compile here until it is listed.
#[test]
fn the_cuda_twin_shape_has_every_field_in_order() {
    let _every_field = |s: Shape| {
        let Shape {
            tokens: _,
            hidden: _,
            experts: _,
            top_k: _,
            n_pes: _,
            capacity: _,
            round: _,
            mode: _,
            dtype: _,
            read_once: _,
            mapped: _,
        } = s;
    };
    let rust = [
        "tokens",
        "hidden",
        "experts",
        "top_k",
        "n_pes",
        "capacity",
        "round",
        "mode",
        "dtype",
        "read_once",
        "mapped",
    ];
    assert_eq!(std::mem::size_of::<Shape>(), 4 * rust.len());
    let twin: Vec<&str> = twin_between("struct Shape {", "};")
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .flat_map(|l| l.trim().trim_start_matches("uint32_t").split([',', ';']))
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .collect();
    assert_eq!(twin, rust);
}

/// The twin's constants that the Rust kernels' buffers and signals depend on: its layout
/// scans in units of [`LAYOUT_SEGMENT`](k::LAYOUT_SEGMENT) chunks of
/// [`LAYOUT_CHUNK`](k::LAYOUT_CHUNK) tokens (the host driver sizes `scratch` and the
/// layout's grid for them) and its expert columns poll with the same backoff
/// ([`LOOKBACK_SLEEP_NS`](k::LOOKBACK_SLEEP_NS)), its stand-in experts load
/// [`EXPERT_CHUNKS`](k::EXPERT_CHUNKS) chunks a lane at a time, its `work` words and signal words are where the Rust kernels'
/// are, and a grid's arrival is the same [`ARRIVAL`](k::ARRIVAL).
#[test]
fn the_cuda_twin_uses_the_same_constants() {
    let chunk = twin_between("constexpr size_t LAYOUT_CHUNK = ", ";");
    assert_eq!(chunk.trim(), k::LAYOUT_CHUNK.to_string());
    let segment = twin_between("constexpr size_t LAYOUT_SEGMENT = ", ";");
    assert_eq!(segment.trim(), k::LAYOUT_SEGMENT.to_string());
    let sleep = twin_between("constexpr unsigned LOOKBACK_SLEEP_NS = ", ";");
    assert_eq!(sleep.trim(), k::LOOKBACK_SLEEP_NS.to_string());
    let work = twin_between("enum : size_t { LAYOUT_BARRIER", "}");
    assert_eq!(
        work.trim(),
        format!("= {}, ROW_CURSORS = {}", k::LAYOUT_BARRIER, k::ROW_CURSORS)
    );
    let signals = twin_between("enum : size_t { SIG_DISPATCH", "}");
    assert_eq!(
        signals.trim(),
        format!(
            "= {}, SIG_COMBINE = {}, SIG_COUNTS = {}, SIG_SLOTS = {}, SIG_RESERVED = {}",
            k::SIG_DISPATCH,
            k::SIG_COMBINE,
            k::SIG_COUNTS,
            k::SIG_SLOTS,
            k::SIG_RESERVED
        )
    );
    assert_eq!(k::SIG_RESERVED + 1, k::SIGNAL_WORDS);
    let stride = twin_between("constexpr size_t COUNTER_STRIDE = ", ";");
    assert_eq!(stride.trim(), k::COUNTER_STRIDE.to_string());
    let experts = twin_between("constexpr size_t EXPERT_CHUNKS = ", ";");
    assert_eq!(experts.trim(), k::EXPERT_CHUNKS.to_string());
    let arrival = twin_between("constexpr uint64_t ARRIVAL = 1ull << ", ";");
    assert_eq!(1u64 << arrival.trim().parse::<u32>().unwrap(), k::ARRIVAL);
    for (name, v) in [
        ("BULK_SLOTS", k::BULK_SLOTS as u32),
        ("BULK_PIECE", k::BULK_PIECE),
        ("BULK_HEADER", k::BULK_HEADER),
        ("RESERVE_EXPERTS", k::RESERVE_EXPERTS),
        ("RESERVE_PAIRS", k::RESERVE_PAIRS),
        ("EARLY_COUNTS_TOKENS", k::EARLY_COUNTS_TOKENS),
        ("FP8_RESERVE_PAIRS", k::FP8_RESERVE_PAIRS),
        ("ROLE_META_SHARE", k::ROLE_META_SHARE),
        ("ROLE_RESERVE_FROM", k::ROLE_RESERVE_FROM),
        ("TP_META_SHARE", k::TP_META_SHARE),
    ] {
        let twin = twin_between(&format!("constexpr uint32_t {name} = "), ";");
        assert_eq!(twin.trim(), v.to_string(), "{name}");
    }
}

/// Blocks of every simulated launch of [`run_case`].
const SIM_BLOCKS: u32 = 2;

struct Case {
    n: u32,
    tokens: u32,
    hidden: u32,
    experts: u32,
    top_k: u32,
    dist: Distribution,
    capacity: Option<u32>,
    dtype: u32,
    /// Whether peers' memory is mapped (NVLink); unmapped, the kernels take the paths
    /// between nodes (puts from staging rows).
    peers_mapped: bool,
}

/// Runs `rounds` rounds of `c` in `mode` and checks each against the CPU, every launch on
/// [`SIM_BLOCKS`] blocks of 64 threads.
fn run_case(c: &Case, mode: u32, seed: u64, rounds: u32) {
    run_case_on(c, mode, seed, rounds, (SIM_BLOCKS, 64));
}

/// [`run_case`] with every launch on `grid`: (blocks, threads a block).
fn run_case_on(c: &Case, mode: u32, seed: u64, rounds: u32, grid: (u32, u32)) {
    let n = c.n;
    let cap = c.capacity.unwrap_or(if mode == MODE_LOW_LATENCY {
        c.tokens
    } else {
        c.tokens * n
    });
    let w = World::new(n, 64 << 20);
    w.set_peers_mapped(c.peers_mapped);
    let lens = Shape {
        tokens: c.tokens,
        hidden: c.hidden,
        experts: c.experts,
        top_k: c.top_k,
        n_pes: n,
        capacity: cap,
        round: 0,
        mode,
        dtype: c.dtype,
        read_once: 0,
        mapped: 0,
    }
    .lens();
    let hd = Held::alloc(&w, &lens);
    let inputs: Vec<Inputs> = (0..n)
        .map(|pe| Inputs {
            x: tokens(seed, pe, c.tokens, c.hidden),
            routing: route(seed, pe, c.tokens, c.experts, c.top_k, c.dist),
        })
        .collect();
    for (pe, inp) in inputs.iter().enumerate() {
        hd.x.write(pe as u32, &inp.x);
        hd.topk.write(pe as u32, &inp.routing.topk_buffer());
        hd.weights.write(pe as u32, &inp.routing.weights);
    }
    let w: &Arc<World> = &w;
    for round in 1..=rounds {
        let s = Shape {
            tokens: c.tokens,
            hidden: c.hidden,
            experts: c.experts,
            top_k: c.top_k,
            n_pes: n,
            capacity: cap,
            round,
            mode,
            dtype: c.dtype,
            // Both of the combine's loads, a round each.
            read_once: round % 2,
            // Where every PE is mapped, both kernel sets: the `Mapped` ones in alternate
            // rounds, starting in round 1 or 2 by the seed (so that each meets both the bulk
            // and the register kernels across the tests).
            mapped: u32::from(c.peers_mapped && (seed + u64::from(round)).is_multiple_of(2)),
        };
        // The `bf16` dispatches by bulk copies in odd rounds (given their shared memory),
        // through registers in even ones.
        let shared = if round % 2 == 1 {
            s.dispatch_shared_bytes()
        } else {
            0
        };
        let launch = |what: &str, kernel: unsafe fn(Bufs, Shape), shared: u32| {
            let grid = shmem_device::sim::Shape::linear(grid.0, grid.1).with_shared(shared);
            w.run_shape(grid, seed * 10 + u64::from(round), || {
                // SAFETY: every PE launches the kernels of a round in order, with the shape
                // and buffers they document (all simulated threads are co-resident).
                unsafe { kernel(hd.bufs(), s) }
            })
            .unwrap_or_else(|err| {
                panic!(
                    "{what}, round {round}, mode {mode}, dtype {}, {n} PEs: {err}",
                    c.dtype
                )
            });
        };
        if mode == MODE_THROUGHPUT {
            launch("layout", k::moe_layout, 0);
        }
        launch(
            "dispatch",
            match (
                s.dispatch_path(),
                s.dispatch_by_registers(grid.1, shared),
                s.mapped(),
            ) {
                (DispatchPath::LowLatency, false, false) => k::moe_dispatch,
                (DispatchPath::LowLatency, true, false) => k::moe_dispatch_registers,
                (DispatchPath::Throughput, false, false) => k::moe_dispatch_throughput,
                (DispatchPath::Throughput, true, false) => k::moe_dispatch_throughput_registers,
                (DispatchPath::Fp8LowLatency, _, false) => k::moe_dispatch_fp8,
                (DispatchPath::Fp8Throughput, _, false) => k::moe_dispatch_fp8_throughput,
                (DispatchPath::LowLatency, false, true) => k::moe_dispatch_mapped,
                (DispatchPath::LowLatency, true, true) => k::moe_dispatch_registers_mapped,
                (DispatchPath::Throughput, false, true) => k::moe_dispatch_throughput_mapped,
                (DispatchPath::Throughput, true, true) => {
                    k::moe_dispatch_throughput_registers_mapped
                }
                (DispatchPath::Fp8LowLatency, _, true) => k::moe_dispatch_fp8_mapped,
                (DispatchPath::Fp8Throughput, _, true) => k::moe_dispatch_fp8_throughput_mapped,
            },
            shared,
        );
        launch("experts", k::moe_experts, 0);
        let combine = if s.mapped() {
            k::moe_combine_mapped
        } else {
            k::moe_combine
        };
        launch("combine", combine, 0);
        for pe in 0..n {
            // Every PE's grid has arrived at both signal words `ARRIVAL` a round, whichever of
            // its blocks added it (at its own PE the dispatch's blocks whose counts block 0
            // reads back, or block 0 alone), and the early counts' word is back at zero.
            let sig = hd.signals.read(pe);
            let all = u64::from(round) * u64::from(n) * k::ARRIVAL;
            assert_eq!(
                (
                    sig[k::SIG_DISPATCH],
                    sig[k::SIG_COMBINE],
                    sig[k::SIG_RESERVED]
                ),
                (all, all, 0),
                "mode {mode} round {round} PE {pe}: signal words"
            );
            let got = Received {
                recv_count: hd.recv_count.read(pe),
                recv_src: hd.recv_src.read(pe),
                recv_pair: hd.recv_pair.read(pe),
                recv_w: hd.recv_w.read(pe),
                recv_x: hd.recv_x.read(pe),
                expert_count: hd.expert_count.read(pe),
                expert_offset: hd.expert_offset.read(pe),
                expert_rows: hd.expert_rows.read(pe),
            };
            let rep = reference::check_dispatch(pe, &s, &inputs, &got);
            assert!(
                rep.problems.is_empty(),
                "mode {mode} round {round} PE {pe}: {:#?}",
                rep.problems
            );
            let kept: Vec<bool> = hd.send_pair.read(pe).iter().map(|&p| p >= 0).collect();
            let want = reference::combine(&inputs[pe as usize], &kept, &s);
            assert_eq!(
                reference::compare(&hd.out.read(pe), &want),
                (0, 0.0),
                "mode {mode} round {round} PE {pe}: combine"
            );
        }
    }
}

#[test]
fn both_modes_on_two_pes() {
    for dist in [
        Distribution::Uniform,
        Distribution::Skewed,
        Distribution::Sparse,
    ] {
        let c = Case {
            n: 2,
            tokens: 21,
            hidden: 16,
            experts: 8,
            top_k: 3,
            dist,
            capacity: None,
            dtype: DTYPE_BF16,
            peers_mapped: true,
        };
        let rounds = if dist == Distribution::Uniform { 2 } else { 1 };
        run_case(&c, MODE_LOW_LATENCY, 1, rounds);
        run_case(&c, MODE_THROUGHPUT, 2, rounds);
    }
}

/// Also `K = 4`: the layout reads a token's choices 16 bytes at a time (the others here
/// take `K = 2, 3`, one word at a time).
#[test]
fn four_pes_and_a_capacity_that_drops() {
    let c = Case {
        n: 4,
        tokens: 24,
        hidden: 8,
        experts: 8,
        top_k: 4,
        dist: Distribution::Skewed,
        capacity: Some(3),
        dtype: DTYPE_BF16,
        peers_mapped: true,
    };
    run_case(&c, MODE_LOW_LATENCY, 3, 1);
    run_case(&c, MODE_THROUGHPUT, 4, 1);
}

#[test]
fn eight_pes() {
    // One expert per PE: every token goes to up to three PEs of eight.
    let c = Case {
        n: 8,
        tokens: 10,
        hidden: 8,
        experts: 8,
        top_k: 3,
        dist: Distribution::Uniform,
        capacity: None,
        dtype: DTYPE_BF16,
        peers_mapped: true,
    };
    run_case(&c, MODE_LOW_LATENCY, 6, 1);
    run_case(&c, MODE_THROUGHPUT, 7, 1);
}

/// Rows longer than one bulk copy ([`BULK_PIECE`](k::BULK_PIECE)): the low-latency `bf16`
/// dispatch moves each in two pieces, the second shorter (7232 values: 14336 bytes, then 128),
/// through its three slots, so that the slots' barriers go through both parities; the
/// second round copies through registers.
#[test]
fn rows_past_a_bulk_piece() {
    let c = Case {
        n: 2,
        tokens: 5,
        hidden: 7232,
        experts: 4,
        top_k: 2,
        dist: Distribution::Uniform,
        capacity: None,
        dtype: DTYPE_BF16,
        peers_mapped: true,
    };
    run_case(&c, MODE_LOW_LATENCY, 17, 2);
}

/// More experts than a warp has lanes, each PE's spanning a boundary of 32 (`L = 40`): the
/// layout's segmented scan carries a PE's kept pairs from one 32 experts to the next; with
/// a capacity that drops, and more tokens than two units of the layout's scan
/// ([`LAYOUT_SEGMENT`](k::LAYOUT_SEGMENT) chunks of [`LAYOUT_CHUNK`](k::LAYOUT_CHUNK)), so
/// that a unit waits for the column's earlier ones; at top-6 (each lane's choices loaded a
/// word at a time, all the unit's together) and top-12 (16-byte loads, a chunk at a time).
#[test]
fn experts_past_a_warp_and_tokens_past_a_unit() {
    let mut c = Case {
        n: 2,
        tokens: (k::LAYOUT_CHUNK * k::LAYOUT_SEGMENT) as u32 * 2 + 5,
        hidden: 8,
        experts: 80,
        top_k: 6,
        dist: Distribution::Skewed,
        capacity: Some(9),
        dtype: DTYPE_BF16,
        peers_mapped: true,
    };
    run_case(&c, MODE_THROUGHPUT, 8, 2);
    run_case(&c, MODE_LOW_LATENCY, 9, 1);
    c.top_k = 12;
    run_case(&c, MODE_THROUGHPUT, 10, 1);
}

/// The FP8 dispatch: every received row is the CPU's quantisation bit for bit, and the
/// combine of the dequantised tokens equals the CPU's; both modes, 2 PEs over two rounds and
/// 4 PEs with capacity drops. In low-latency mode, on two blocks, the metadata block's 19
/// tokens have their pair slots reserved at once where the launch gives the table (odd
/// rounds), 11 tokens take an atomic a pair.
#[test]
fn fp8_dispatch_sends_the_quantised_rows() {
    let mut c = Case {
        n: 2,
        tokens: 19,
        hidden: 256,
        experts: 8,
        top_k: 3,
        dist: Distribution::Uniform,
        capacity: None,
        dtype: DTYPE_FP8,
        peers_mapped: true,
    };
    assert!(c.tokens >= k::ROLE_RESERVE_FROM);
    run_case(&c, MODE_LOW_LATENCY, 11, 2);
    run_case(&c, MODE_THROUGHPUT, 12, 2);
    (c.n, c.hidden, c.dist, c.capacity) = (4, 128, Distribution::Skewed, Some(3));
    run_case(&c, MODE_LOW_LATENCY, 13, 1);
    run_case(&c, MODE_THROUGHPUT, 14, 1);
    // Rows of several batches: a 2560-value row is three low-latency units of 1024 values
    // (the last one partial) and two throughput batches of 64 threads.
    (c.n, c.tokens, c.hidden, c.capacity) = (2, 11, 2560, None);
    assert!(c.tokens < k::ROLE_RESERVE_FROM * 2);
    run_case(&c, MODE_LOW_LATENCY, 17, 1);
    run_case(&c, MODE_THROUGHPUT, 18, 1);
}

/// The FP8 dispatch of `mode`, split by role, on other grids: two blocks of one warp, the
/// least it takes ([`DispatchPath::min_blocks`]), one sending the metadata, one copying; and
/// 17 (seeds `seed`, `seed + 1`); there also with peers unmapped (`seed + 2`). 19 tokens over
/// 2 PEs.
fn fp8_on_two_blocks_and_on_many(mode: u32, seed: u64) {
    let c = Case {
        n: 2,
        tokens: 19,
        hidden: 384,
        experts: 8,
        top_k: 3,
        dist: Distribution::Skewed,
        capacity: None,
        dtype: DTYPE_FP8,
        peers_mapped: true,
    };
    run_case_on(&c, mode, seed, 2, (2, 32));
    run_case_on(&c, mode, seed + 1, 2, (17, 32));
    let c = Case {
        peers_mapped: false,
        ..c
    };
    run_case_on(&c, mode, seed + 2, 2, (17, 32));
}

/// The low-latency FP8 dispatch on other grids ([`fp8_on_two_blocks_and_on_many`]): of 17
/// blocks the first two send the metadata (tokens `0, 2, 4, ...` and `1, 3, 5, ...`, 10 and
/// 9 of them, reserved at once in odd rounds), while 15 copy.
#[test]
fn fp8_low_latency_on_one_block_and_on_many() {
    assert_eq!(DispatchPath::Fp8LowLatency.min_blocks(), 2);
    assert_eq!(17 / k::ROLE_META_SHARE, 2);
    fp8_on_two_blocks_and_on_many(MODE_LOW_LATENCY, 21);
}

/// The throughput FP8 dispatch on other grids ([`fp8_on_two_blocks_and_on_many`]): of two
/// blocks the first copies and the last sends the metadata once the layout is out; of 17 the
/// last four send it at 2 PEs (tokens `0, 4, 8, ...` to `3, 7, 11, ...`, each warp's next
/// token's choices loaded ahead), while 13 copy.
#[test]
fn fp8_throughput_split_by_role_on_two_blocks_and_on_many() {
    assert_eq!(DispatchPath::Fp8Throughput.min_blocks(), 2);
    assert_eq!(k::tp_meta_blocks(17, 2), 4);
    fp8_on_two_blocks_and_on_many(MODE_THROUGHPUT, 31);
}

/// Peers' memory unmapped (PEs on different nodes: `nvshmem_ptr` null): the FP8 dispatch
/// puts its staged rows and the combine its staged sums, in both modes and both dtypes.
#[test]
fn unmapped_peers_take_the_put_paths() {
    for dtype in [DTYPE_BF16, DTYPE_FP8] {
        let c = Case {
            n: 2,
            tokens: 13,
            hidden: 128,
            experts: 4,
            top_k: 2,
            dist: Distribution::Uniform,
            capacity: None,
            dtype,
            peers_mapped: false,
        };
        run_case(&c, MODE_LOW_LATENCY, 15, 2);
        run_case(&c, MODE_THROUGHPUT, 16, 1);
    }
}

/// The [`k::Mapped`] kernels, launched where a peer is not mapped after all, stop with a
/// clear panic instead of storing anywhere; the host reads `Shape::mapped` from the buffers
/// (`the_host_driver_runs_on_simulated_pes` runs both sets through it).
#[test]
fn mapped_kernels_refuse_unmapped_peers() {
    let s = small_shape(DTYPE_BF16);
    let w = World::new(2, 16 << 20);
    w.set_peers_mapped(false);
    let hd = Held::alloc(&w, &s.lens());
    for pe in 0..2 {
        let r = route(5, pe, s.tokens, s.experts, s.top_k, Distribution::Uniform);
        hd.topk.write(pe, &r.topk_buffer());
    }
    for (kernel, dtype, shared) in [
        (
            k::moe_dispatch_mapped as unsafe fn(Bufs, Shape),
            DTYPE_BF16,
            s.dispatch_shared_bytes(),
        ),
        (k::moe_dispatch_registers_mapped, DTYPE_BF16, 0),
        (k::moe_dispatch_fp8_mapped, DTYPE_FP8, 0),
        (k::moe_combine_mapped, DTYPE_BF16, 0),
    ] {
        // SAFETY: the buffers are sized for `s`; the kernel stops at its first peer address.
        unsafe {
            refused(
                &w,
                (kernel, &hd, Shape { dtype, ..s }),
                (2, 64, shared),
                "launched where some PE's memory is not mapped here",
            )
        };
    }
}

/// The low-latency FP8 dispatch kernels assume the shape the host checked
/// (`Shape::assume_checked`), so that their divisions by its sizes take no test for zero; the
/// simulator checks the assumption: a shape with no choices, no capacity, or fewer experts
/// than PEs stops both kernels with a clear panic at their entry. The host refuses each
/// (`bad_options_are_refused`, GPU suite).
#[test]
fn the_fp8_dispatch_refuses_a_shape_the_host_refuses() {
    let s = small_shape(DTYPE_FP8);
    let w = World::new(2, 16 << 20);
    let hd = Held::alloc(&w, &s.lens());
    for bad in [
        Shape { top_k: 0, ..s },
        Shape { capacity: 0, ..s },
        Shape { experts: 1, ..s },
    ] {
        for kernel in [
            k::moe_dispatch_fp8 as unsafe fn(Bufs, Shape),
            k::moe_dispatch_fp8_mapped,
        ] {
            // SAFETY: the buffers are sized for `s`, which `bad` shrinks; the kernel stops at
            // its entry.
            unsafe {
                refused(
                    &w,
                    (kernel, &hd, bad),
                    (2, 64, 0),
                    "a MoE kernel was launched with a shape the host refuses",
                )
            };
        }
    }
}

/// The refusal tests' shape: 8 tokens of `dtype` on 2 PEs, low-latency, every PE mapped.
fn small_shape(dtype: u32) -> Shape {
    Shape {
        tokens: 8,
        hidden: 128,
        experts: 4,
        top_k: 2,
        n_pes: 2,
        capacity: 16,
        round: 1,
        mode: MODE_LOW_LATENCY,
        dtype,
        read_once: 0,
        mapped: 1,
    }
}

/// Runs `kernel` on `w` over `grid` (blocks, threads, shared bytes) and asserts that it
/// stops with a panic whose message contains `msg`.
///
/// # Safety
/// `hd` holds buffers sized for `s`; the kernel stops before it touches anything else.
unsafe fn refused(
    w: &Arc<World>,
    (kernel, hd, s): (unsafe fn(Bufs, Shape), &Held, Shape),
    grid: (u32, u32, u32),
    msg: &str,
) {
    let shape = shmem_device::sim::Shape::linear(grid.0, grid.1).with_shared(grid.2);
    // SAFETY: the caller's contract.
    let err = w
        .run_shape(shape, 1, || unsafe { kernel(hd.bufs(), s) })
        .expect_err("the kernel should stop with a panic");
    assert!(err.to_string().contains(msg), "{err}");
}

/// The `bf16` dispatch kernels by bulk copies stop with a clear panic when launched as their
/// register kernels should be ([`Shape::dispatch_by_registers`]: one warp a block, or less
/// than their shared memory); both register kernels run such launches (the other tests'
/// even rounds, and [`run_case_on`] on blocks of 32 threads here).
#[test]
fn bulk_kernels_refuse_the_register_kernels_launches() {
    let c = Case {
        n: 2,
        tokens: 9,
        hidden: 64,
        experts: 4,
        top_k: 2,
        dist: Distribution::Uniform,
        capacity: None,
        dtype: DTYPE_BF16,
        peers_mapped: true,
    };
    for mode in [MODE_LOW_LATENCY, MODE_THROUGHPUT] {
        run_case_on(&c, mode, 21, 2, (3, 32));
    }
    let s = Shape {
        tokens: c.tokens,
        hidden: c.hidden,
        experts: c.experts,
        top_k: c.top_k,
        n_pes: 1,
        capacity: c.tokens,
        round: 1,
        mode: MODE_LOW_LATENCY,
        dtype: DTYPE_BF16,
        read_once: 0,
        mapped: 0,
    };
    let need = s.dispatch_shared_bytes();
    assert!(s.dispatch_by_registers(32, need) && s.dispatch_by_registers(64, need - 16));
    assert!(!s.dispatch_by_registers(64, need));
    let fp8 = Shape {
        dtype: DTYPE_FP8,
        ..s
    };
    assert!(!fp8.dispatch_by_registers(32, 0));
    let w = World::new(1, 16 << 20);
    let hd = Held::alloc(&w, &s.lens());
    for (kernel, mode, grid) in [
        (
            k::moe_dispatch as unsafe fn(Bufs, Shape),
            MODE_LOW_LATENCY,
            (2, 32, need),
        ),
        (k::moe_dispatch, MODE_LOW_LATENCY, (2, 64, 0)),
        (k::moe_dispatch_throughput, MODE_THROUGHPUT, (2, 32, need)),
    ] {
        // SAFETY: the buffers are sized for `s`; the launch is refused before it touches them.
        unsafe {
            refused(
                &w,
                (kernel, &hd, Shape { mode, ..s }),
                grid,
                "needs more than one warp a block and its shared memory",
            )
        };
    }
}

/// The example's own host driver (`host::run`: buffers, layout and launch shapes, rounds,
/// timing marks, the exactly-once check and the CPU combine) on simulated PEs, as
/// `moe_dispatch` runs without a GPU: both modes, 2 and 4 PEs, with capacity drops.
#[test]
fn the_host_driver_runs_on_simulated_pes() {
    use ::moe_dispatch::host::{Dtype, Mode, Options, run};
    use shmem_host::{Shmem, sim};
    for (n, mode, capacity, dtype) in [
        (2, Mode::LowLatency, None, Dtype::Bf16),
        (2, Mode::Throughput, None, Dtype::Bf16),
        (4, Mode::LowLatency, Some(2), Dtype::Bf16),
        (4, Mode::Throughput, Some(5), Dtype::Bf16),
        (2, Mode::LowLatency, Some(3), Dtype::Fp8),
    ] {
        let outcomes = sim::run(n, || {
            let rt = Shmem::init()?;
            let mut o = Options::new(16, "/nonexistent".into());
            (o.hidden, o.experts, o.top_k, o.threads, o.blocks) = (32, 8, 3, 32, Some(2));
            if dtype == Dtype::Fp8 {
                // A scale a group of 128 values.
                (o.hidden, o.dtype) = (128, dtype);
            }
            (o.rounds, o.warmup, o.verify) = (1, 1, true);
            (o.mode, o.capacity) = (mode, capacity);
            // The simulated PEs are mapped: the `Mapped` kernels, but at 4 PEs those that
            // look each PE up, as asked.
            o.probe_peers = n == 4;
            run(&rt, &o)
        })
        .unwrap_or_else(|e| panic!("{n} PEs {mode:?}: {e}"));
        let dropped: u64 = outcomes.iter().map(|o| o.dropped_per_round).sum();
        for (pe, out) in outcomes.iter().enumerate() {
            let check = out.check.as_ref().expect("verified");
            assert!(
                check.ok() && check.combine_diffs == 0,
                "{n} PEs {mode:?} PE {pe}: {:?}",
                check.dispatch.problems
            );
            assert_eq!(out.timings.len(), 1);
            assert_eq!(
                out.mapped,
                n != 4,
                "{n} PEs {mode:?} PE {pe}: the kernel set"
            );
        }
        assert_eq!(
            dropped > 0,
            capacity.is_some(),
            "{n} PEs {mode:?}: drops {dropped}"
        );
    }
}

/// One round captured into a graph (a fill of the signal words, the barriers, the
/// launches) and replayed: the same combined tokens as the eager rounds, bit for bit, and
/// correct against the CPU, in both modes, through the host driver on 2 simulated PEs.
#[test]
fn a_round_captured_in_a_graph_replays_like_eager_rounds() {
    use ::moe_dispatch::host::{Mode, Options, run};
    use shmem_host::{Shmem, sim};
    for mode in [Mode::LowLatency, Mode::Throughput] {
        let outcomes = sim::run(2, || {
            let rt = Shmem::init()?;
            let mut o = Options::new(12, std::path::PathBuf::new());
            (o.hidden, o.experts, o.top_k, o.threads) = (16, 4, 2, 32);
            (o.rounds, o.warmup, o.verify, o.graph_replays, o.mode) = (2, 0, true, 3, mode);
            run(&rt, &o)
        })
        .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        for (pe, out) in outcomes.iter().enumerate() {
            assert!(out.check.as_ref().unwrap().ok(), "{mode:?} PE {pe} eager");
            let g = out.graph.as_ref().unwrap();
            assert!(
                g.identical,
                "{mode:?} PE {pe}: replays differ from eager rounds"
            );
            assert!(g.check.as_ref().unwrap().ok(), "{mode:?} PE {pe}: replays");
            let launches = if mode == Mode::Throughput { 4 } else { 3 };
            assert_eq!(
                g.graph_len,
                3 + launches,
                "fill, two barriers, the launches"
            );
            assert_eq!(g.replays, 3);
        }
    }
}

/// Bytes a round moves: at 1 PE nothing crosses and every token reaches its own PE once;
/// at 2 PEs all received bytes (own rows too) are at least the cross-GPU bytes and at most
/// every token to every PE. An FP8 dispatch moves the same rows at `H + H/32` bytes each.
/// The memory floor at 1 PE: the dispatch reads and writes every token, the combine reads
/// the 40 x 2 pairs' rows and writes every token.
#[test]
fn cross_gpu_and_all_received_bytes() {
    use ::moe_dispatch::host::{Dtype, Moe, Options};
    use shmem_host::{Shmem, sim};
    for n in [1u32, 2] {
        let got = sim::run(n, || {
            let rt = Shmem::init()?;
            let mut o = Options::new(40, std::path::PathBuf::new());
            (o.hidden, o.experts, o.top_k) = (128, 4, 2);
            let bf16 = Moe::new(&rt, &o)?;
            let mem = bf16.memory_bytes();
            let bf16 = (bf16.cross_bytes(), bf16.received_bytes());
            o.dtype = Dtype::Fp8;
            let fp8 = Moe::new(&rt, &o)?;
            let fmem = fp8.memory_bytes();
            Ok((bf16, (fp8.cross_bytes(), fp8.received_bytes()), (mem, fmem)))
        })
        .unwrap();
        let (row, q) = (128 * 2, 128 + 4);
        for ((cross, all), (fcross, fall), (mem, fmem)) in got {
            assert_eq!(mem, (40 * 2 * row, (40 * 2 + 40) * row));
            assert_eq!(fmem, (40 * (row + q), mem.1), "the combine stays bf16");
            if n == 1 {
                assert_eq!(cross, (0, 0));
                assert_eq!(all, (40 * row, 40 * row));
            } else {
                assert!(all.0 >= cross.0 && all.1 >= cross.1, "{all:?} {cross:?}");
                assert!(all.0 <= 2 * 40 * row && all.0 > cross.0, "{all:?}");
            }
            assert_eq!((fcross.0 * row, fall.0 * row), (cross.0 * q, all.0 * q));
            assert_eq!(
                (fcross.1, fall.1),
                (cross.1, all.1),
                "the combine stays bf16"
            );
        }
    }
}
