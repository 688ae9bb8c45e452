#!/usr/bin/env python3
"""Per-block `%globaltimer` stamps of the MoE rounds: a diagnostic build, never committed.

The stamps of the fiftieth to fifty-second sessions took `fetch_max` on twelve words from
every block and warp; they added about 6.6 µs to a throughput round and 2.7 µs to a
low-latency one (BENCHMARKS.md, fifty-third session, "What the stamps cost"). These are plain
stores, each block's thread 0 into its own slot, and cost 0-0.5 µs a round:

- the layout's blocks: start and end (their units done); its last block: its exchange's end;
- the dispatch's blocks: start, rows done (the copying warp's last bulk store complete; the
  `bf16` paths), end; the copying warp's first bulk loads issued, in throughput mode its
  slot wait returned (`wait_slots`), and its first piece landed (the first slot's barrier);
  block 0: the round's end (every block arrived);
- the combine's first thread prints one line a round, `Q` and 22 values in ns from the
  round's first block: layout start, its blocks' end p50 and last, its exchange's end (its
  last block's warp 0; since the seventy-second session the block's warps share the
  offsets, and this is warp 0's share; built with `MOE_SLOTSTAMP`, the time the layout's
  destination units have placed every row instead: each such unit's release of its slots
  stamps the word, the last one last, seventy-third session); the dispatch's blocks' start
  min / p10 / p50 / p90 / last; rows done p10 / p50 / p90 / last;
  its blocks' end p50 / last; the round's end; first loads issued, slot wait returned and
  first piece landed, p50 / last each (percentiles in 250 ns buckets; 0 where no block
  stamped). (The seventy-first session added the last three pairs, where one stamp had
  taken the slot wait's return.)
- and a second line, `R` and 12 values (seventy-fourth session): the layout's destination
  units' scan done, lookback done and slots released, its expert units' scan done and
  lookback done (p50 and last each, a block's latest warp), its last block's start, and the
  throughput metadata's return from `pdl::wait` (block 0). The experts' lookback reads 0
  with the segment layout (`moe_layout_segments` for `bf16` then; since the eighty-second
  session `moe_layout` for both types), whose expert units do not wait for each other (only
  each column's last unit does, unstamped).

Use, in a scratch worktree (the patch asserts each place it changes, so it fails loudly when
the kernels have moved on):

    git worktree add /tmp/stamps HEAD
    python3 scripts/probes/moe_stamps.py apply /tmp/stamps/examples/moe-dispatch/src/kernels.rs
    (cd /tmp/stamps && MOE_DIAG=1 cargo xtask build-ptx --arch sm_90 --require-ptxas --out /tmp/stamps-ptx moe-dispatch)
    # on the GPU machine, with that directory carried:
    SHMEM_PTX_DIR=.../stamps-ptx moe_dispatch --pes 1 --compare moe.cubin --tokens 4096 \
        --dtype bf16 --mode throughput --hold-stream --no-verify --reps 3 --rounds 12 > q.log
    python3 scripts/probes/moe_stamps.py summary q.log

`CEILINGS` below adds five switches, each compiled in only where its variable is set at
the build (`MOE_SKIP`, `MOE_NOWAIT`, `MOE_NOMETA`, `MOE_DESTONLY`, `MOE_EXPERTONLY`;
BENCHMARKS.md, seventieth and seventy-first sessions).

The line is printed in every `--compare` round, so its twin's rounds, which print nothing,
still run beside it; the combine's own time is not meaningful in such a build.
"""
import re
import statistics
import sys

MODULE = r"""
/// DIAGNOSTIC (not committed): per-block `%globaltimer` stamps by plain stores, summarised
/// and printed by the combine's thread 0 of block 0 (no atomics on shared words).
pub mod diag {
    const NB: usize = 1024;
    static mut DS: [[u64; 6]; NB] = [[0; 6]; NB];
    static mut LS: [[u64; 8]; NB] = [[0; 8]; NB];
    static mut G: [u64; 4] = [0; 4];
    static mut ARGS: [u64; 22] = [0; 22];
    static mut XA: [u64; 12] = [0; 12];
    static mut H: [u32; 256] = [0; 256];
    #[inline(always)]
    fn now() -> u64 {
        shmem_device::thread::global_timer_ns()
    }
    #[inline(always)]
    pub fn d(i: usize) {
        let b = shmem_device::thread::block_idx_x() as usize;
        if b < NB {
            unsafe { core::ptr::write_volatile(&raw mut DS[b][i], now()) };
        }
    }
    #[inline(always)]
    pub fn l(i: usize) {
        let b = shmem_device::thread::block_idx_x() as usize;
        if b < NB {
            unsafe { core::ptr::write_volatile(&raw mut LS[b][i], now()) };
        }
    }
    #[inline(always)]
    pub fn g(i: usize) {
        unsafe { core::ptr::write_volatile(&raw mut G[i], now()) };
    }
    /// Percentile `p` (0..=100) of the values `v(b)` that are set, in 250 ns buckets from `base`.
    #[inline(never)]
    fn pct(base: u64, p: u32, set: impl Fn(usize) -> u64) -> u64 {
        unsafe {
            let h = &raw mut H;
            for i in 0..256 {
                (*h)[i] = 0;
            }
            let mut n = 0u32;
            for b in 0..NB {
                let v = set(b);
                if v != 0 {
                    let k = (((v.saturating_sub(base)) / 250) as usize).min(255);
                    (*h)[k] += 1;
                    n += 1;
                }
            }
            if n == 0 {
                return 0;
            }
            let want = (n * p).div_ceil(100).max(1);
            let mut acc = 0u32;
            for k in 0..256 {
                acc += (*h)[k];
                if acc >= want {
                    return k as u64 * 250;
                }
            }
            255 * 250
        }
    }
    #[inline(never)]
    pub fn print() {
        unsafe {
            let ds = &raw mut DS;
            let ls = &raw mut LS;
            let mut base = u64::MAX;
            for b in 0..NB {
                for v in [(*ds)[b][0], (*ls)[b][0]] {
                    if v != 0 && v < base {
                        base = v;
                    }
                }
            }
            if base == u64::MAX {
                return;
            }
            let mx = |f: &dyn Fn(usize) -> u64| {
                let mut m = 0;
                for b in 0..NB {
                    let v = f(b);
                    if v > m {
                        m = v;
                    }
                }
                m.saturating_sub(base)
            };
            let mn = |f: &dyn Fn(usize) -> u64| {
                let mut m = u64::MAX;
                for b in 0..NB {
                    let v = f(b);
                    if v != 0 && v < m {
                        m = v;
                    }
                }
                if m == u64::MAX { 0 } else { m - base }
            };
            let a = &raw mut ARGS;
            let ls0 = |b: usize| (*ls)[b][0];
            let ls1 = |b: usize| (*ls)[b][1];
            let d0 = |b: usize| (*ds)[b][0];
            let d1 = |b: usize| (*ds)[b][1];
            let d2 = |b: usize| (*ds)[b][2];
            let d3 = |b: usize| (*ds)[b][3];
            let d4 = |b: usize| (*ds)[b][4];
            let d5 = |b: usize| (*ds)[b][5];
            let g = &raw mut G;
            let vals = [
                mn(&ls0),
                pct(base, 50, ls1),
                mx(&ls1),
                (*g)[0].saturating_sub(base),
                mn(&d0),
                pct(base, 10, d0),
                pct(base, 50, d0),
                pct(base, 90, d0),
                mx(&d0),
                pct(base, 10, d1),
                pct(base, 50, d1),
                pct(base, 90, d1),
                mx(&d1),
                pct(base, 50, d2),
                mx(&d2),
                (*g)[1].saturating_sub(base),
                pct(base, 50, d3),
                mx(&d3),
                pct(base, 50, d4),
                mx(&d4),
                pct(base, 50, d5),
                mx(&d5),
            ];
            for i in 0..22 {
                (*a)[i] = vals[i];
            }
            // The layout's own steps (`R`): its units' scans, lookbacks and slot releases,
            // p50 and last each; its last block's start; the throughput metadata's
            // `pdl::wait` (block 0's warp 1).
            let lx = |i: usize| move |b: usize| (*ls)[b][i];
            let extra = [
                pct(base, 50, lx(2)), mx(&lx(2)),
                pct(base, 50, lx(3)), mx(&lx(3)),
                pct(base, 50, lx(4)), mx(&lx(4)),
                pct(base, 50, lx(5)), mx(&lx(5)),
                pct(base, 50, lx(6)), mx(&lx(6)),
                (*g)[2].saturating_sub(base), (*g)[3].saturating_sub(base),
            ];
            let xa = &raw mut XA;
            for i in 0..12 {
                (*xa)[i] = extra[i];
            }
            shmem_device::sys::vprintf(
                c"R %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n".as_ptr().cast(),
                xa.cast_const().cast(),
            );
            for b in 0..NB {
                (*ds)[b] = [0; 6];
                (*ls)[b] = [0; 8];
            }
            (*g) = [0; 4];
            shmem_device::sys::vprintf(
                c"Q %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n".as_ptr().cast(),
                a.cast_const().cast(),
            );
        }
    }
}
"""

LINE = re.compile(r"(?:^|\] )Q ((?:\d+ ){21}\d+)")
RLINE = re.compile(r"(?:^|\] )R ((?:\d+ ){11}\d+)")
RNAMES = ["destinations' scan p50", "last", "their lookback p50", "last", "their release p50", "last",
          "experts' scan p50", "last", "their lookback p50", "last", "last block starts",
          "metadata's pdl::wait returns"]
NAMES = ["layout start", "layout blocks end p50", "layout blocks end last", "layout exchange end",
         "dispatch start min", "p10", "p50", "p90", "last", "rows done p10", "p50", "p90", "last",
         "dispatch end p50", "last", "round end", "first loads issued p50", "last",
         "slot wait returned p50", "last", "first piece landed p50", "last"]


# The places the stamps go: (text of the kernels, the same text with the stamp).
PLACES = [
("""            for k in 0..steps.min(slots - 1) {
                load(k);
            }""","""            for k in 0..steps.min(slots - 1) {
                load(k);
            }
            if DIAG && lane == 0 {
                diag::d(3);
            }"""),
("""            if tp {
                wait_slots(b, s);
            }
            // This lane's choice of the row being copied""","""            if tp {
                wait_slots(b, s);
                if DIAG && lane == 0 {
                    diag::d(4);
                }
            }
            // This lane's choice of the row being copied"""),
("""                bar(k % slots).wait(k / slots % 2);
""","""                bar(k % slots).wait(k / slots % 2);
                if DIAG && k == 0 && lane == 0 {
                    diag::d(5);
                }
"""),
("""    shmem_device::pdl::launch_dependents();
    let (me, n, e_n, k_n) = (my_pe() as u32, s.n_pes, s.experts, s.top_k as usize);""","""    shmem_device::pdl::launch_dependents();
    if DIAG && thread_idx_x() == 0 {
        diag::l(0);
    }
    let (me, n, e_n, k_n) = (my_pe() as u32, s.n_pes, s.experts, s.top_k as usize);"""),
("""            last = scoped::fetch_add(Gpu, count, 1u32) + 1 == grid_dim_x();
            if last {
                scoped::store_relaxed(Gpu, count, 0u32);
                scoped::store_relaxed(Gpu, generation, tag() as u32);
            }
        }
    }""","""            last = scoped::fetch_add(Gpu, count, 1u32) + 1 == grid_dim_x();
            if last {
                scoped::store_relaxed(Gpu, count, 0u32);
                scoped::store_relaxed(Gpu, generation, tag() as u32);
            }
        }
        if DIAG {
            diag::l(1);
        }
    }"""),
("""    if w == 0 && lane < n {
        // SAFETY: `lane < n`.
        unsafe { st(b.recv_count, lane as usize, rows) };
    }
}""","""    if w == 0 && lane < n {
        // SAFETY: `lane < n`.
        unsafe { st(b.recv_count, lane as usize, rows) };
    }
    if DIAG && lane == 0 && w == 0 && option_env!("MOE_SLOTSTAMP").is_none() {
        diag::g(0);
    }
}"""),
("""                if lane == 0 {
                    scoped::add_release(Gpu, b.signals.wrapping_add(SIG_SLOTS), 1u64);
                }""","""                if lane == 0 {
                    scoped::add_release(Gpu, b.signals.wrapping_add(SIG_SLOTS), 1u64);
                    if DIAG {
                        diag::l(4);
                    }
                    if DIAG && option_env!("MOE_SLOTSTAMP").is_some() {
                        diag::g(0);
                    }
                }"""),
("""        let tag = tag();
        // SAFETY: `unit < scratch_len`""","""        if DIAG && lane == 0 {
            diag::l(if col >= e_n { 2 } else { 5 });
        }
        let tag = tag();
        // SAFETY: `unit < scratch_len`"""),
("""            let before = warp_sum(before);
""","""            let before = warp_sum(before);
            if DIAG && lane == 0 {
                diag::l(if col >= e_n { 3 } else { 6 });
            }
"""),
("""    if !sync_threads_or(last) {
        return;
    }
""","""    if !sync_threads_or(last) {
        return;
    }
    if DIAG && thread_idx_x() == 0 {
        diag::g(2);
    }
"""),
("""            if tp {
                shmem_device::pdl::wait();
            }
            let (meta, rank)""","""            if tp {
                shmem_device::pdl::wait();
                if DIAG && lane == 0 && block_idx_x() == 0 && w == 1 {
                    diag::g(3);
                }
            }
            let (meta, rank)"""),
("""    let s = Shape { mode, dtype, ..s };
    let tp = s.mode == MODE_THROUGHPUT;
    let n = s.n_pes;""","""    let s = Shape { mode, dtype, ..s };
    let tp = s.mode == MODE_THROUGHPUT;
    let n = s.n_pes;
    if DIAG && thread_idx_x() == 0 {
        diag::d(0);
    }"""),
("""    unsafe { arrive_block(b, sig, n, own) };
    if thread_idx_x() == 0 && block_idx_x() == 0 {
        // SAFETY: as above.
        unsafe { wait_arrivals(sig, s.round, n) };""","""    unsafe { arrive_block(b, sig, n, own) };
    if DIAG && thread_idx_x() == 0 {
        diag::d(2);
    }
    if thread_idx_x() == 0 && block_idx_x() == 0 {
        // SAFETY: as above.
        unsafe { wait_arrivals(sig, s.round, n) };
        if DIAG {
            diag::g(1);
        }"""),
("""unsafe fn combine(b: Bufs, s: Shape) {
    // SAFETY: the caller's contract.
    unsafe {""","""unsafe fn combine(b: Bufs, s: Shape) {
    if DIAG && block_idx_x() == 0 && thread_idx_x() == 0 {
        diag::print();
    }
    // SAFETY: the caller's contract.
    unsafe {"""),
("""            if !early_counts(s) {
                count_rows(b, lane, rows);
            }
            if lane == 0 {
                bulk::wait_all();
            }""","""            if !early_counts(s) {
                count_rows(b, lane, rows);
            }
            if lane == 0 {
                bulk::wait_all();
                if DIAG {
                    diag::d(1);
                }
            }"""),
]

# Ceilings (seventieth session), compiled in only where their variable is set at the build
# (`MOE_SKIP=1 MOE_DIAG=1 cargo xtask build-ptx ...`); each makes the kernels wrong in
# general and only bounds what a change could give, on rounds whose routing does not change
# (the example's):
# - MOE_SKIP: from round 2 the layout does nothing but count the rows placed (round 1's
#   layout stands), and the throughput dispatch leaves `send_pair` as the layout wrote it
#   (ranks), where it wrote each pair's index over it: the next round's `send` then read an
#   index as a rank, dropped nearly every pair and counted each drop with an atomic on one
#   word. In a `--compare` call the twin's rounds rewrite `send_pair` between Rust's, so
#   take this ceiling from Rust's rounds alone (`moe_dispatch` without `--compare`): the
#   seventieth session's, taken in `--compare`, read 2-4 µs more a round than it does alone
#   (seventy-first session, runs 8-10). The combine then reads wrong rows, in bounds:
#   `--no-verify`;
# - MOE_NOWAIT: the throughput dispatches' rows do not wait for the slots (the `bf16`
#   copying warp; since the seventy-second session, also the FP8 block's first warp);
# - MOE_NOMETA: from round 2 the throughput `bf16` dispatch sends no metadata;
# - MOE_DESTONLY: from round 2 the layout scans only the destinations' columns (the expert
#   columns' ranks of round 1 stand, `send_pair` kept as under MOE_SKIP);
# - MOE_EXPERTONLY: from round 2 the layout scans only the experts' columns; it adds nothing
#   to the slots' count, so build it with MOE_NOWAIT (round 1's `send_slot` stands).
# (The last two: seventy-first session, runs 10-11. MOE_SKIP and MOE_NOWAIT on the
# throughput FP8 round, which the stamps do not mark: seventy-second session, run 4, its
# dispatch's time from the example's own line, Rust's rounds alone.)
CEILINGS = [
("""    let units = row_len * segs;
""", """    let units = if option_env!("MOE_DESTONLY").is_some() && s.round > 1 {
        n as usize * segs
    } else {
        row_len * segs
    };
"""),
("""    let mut u = gw as usize;
    while u < units {""", """    let mut u = gw as usize
        + if option_env!("MOE_EXPERTONLY").is_some() && s.round > 1 {
            n as usize * segs
        } else {
            0
        };
    while u < units {"""),
("""    if DIAG && thread_idx_x() == 0 {
        diag::l(0);
    }
""", """    if DIAG && thread_idx_x() == 0 {
        diag::l(0);
    }
    if option_env!("MOE_SKIP").is_some() && s.round > 1 {
        if thread_idx_x() == 0 {
            diag::l(1);
            if block_idx_x() == 0 {
                unsafe { scoped::add_release(Gpu, b.signals.wrapping_add(SIG_SLOTS), slot_units(s.tokens, s.n_pes)) };
                diag::g(0);
            }
        }
        return;
    }
"""),
("""            if tp {
                wait_slots(b, s);
                if DIAG && lane == 0 {""", """            if tp && option_env!("MOE_NOWAIT").is_none() {
                wait_slots(b, s);
                if DIAG && lane == 0 {"""),
("""            st(b.send_pair, q, pair);
        }
        if mine {""", """            if !(tp && (option_env!("MOE_SKIP").is_some() || option_env!("MOE_DESTONLY").is_some())) {
                st(b.send_pair, q, pair);
            }
        }
        if mine {"""),
("""            let mut u = w - 1;
            while u < count * n {""", """            let mut u = if tp && option_env!("MOE_NOMETA").is_some() && s.round > 1 { count * n } else { w - 1 };
            while u < count * n {"""),
("""            if tp && t0 == block_idx_x() as usize {
                if w == 0 {
                    wait_slots(b, s);
                }""", """            if tp && t0 == block_idx_x() as usize {
                if w == 0 && option_env!("MOE_NOWAIT").is_none() {
                    wait_slots(b, s);
                }"""),
]


def apply(p):
    s = open(p).read()
    places = [("use shmem_device::scoped::{self, Gpu};\n",
               "use shmem_device::scoped::{self, Gpu};\n\nconst DIAG: bool = option_env!(\"MOE_DIAG\").is_some();\n" + MODULE)]
    for old, new in places + PLACES + CEILINGS:
        if s.count(old) != 1:
            sys.exit("moe_stamps.py: the kernels have moved on; this place is not found once:\n" + old)
        s = s.replace(old, new)
    open(p, "w").write(s)


def summary(paths):
    for f in paths:
        rows = [list(map(int, m.group(1).split())) for m in map(LINE.search, open(f)) if m]
        rows = rows[3:]  # the first rounds warm up
        if not rows:
            print(f, "no stamps")
            continue
        med = [statistics.median(r[i] for r in rows) / 1000 for i in range(22)]
        print("%s (%d rounds, medians, µs): " % (f, len(rows)) + " | ".join("%s %.2f" % nv for nv in zip(NAMES, med)))
        extra = [list(map(int, m.group(1).split())) for m in map(RLINE.search, open(f)) if m][3:]
        if extra:
            med = [statistics.median(r[i] for r in extra) / 1000 for i in range(12)]
            print("  the layout: " + " | ".join("%s %.2f" % nv for nv in zip(RNAMES, med)))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "apply":
        apply(sys.argv[2] if len(sys.argv) > 2 else "examples/moe-dispatch/src/kernels.rs")
    elif len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2:])
    else:
        sys.exit("usage: moe_stamps.py apply [kernels.rs] | summary LOG...")
