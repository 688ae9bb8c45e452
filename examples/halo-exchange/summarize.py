#!/usr/bin/env python3
"""Turns halo-results.jsonl (bench.sh) into the Markdown table of BENCHMARKS.md.

usage: summarize.py halo-results.jsonl
Times are medians (us per iteration); ratios are Rust time over C++ time (below 1: Rust
faster); "vs host" is host-driven time over Rust time; efficiency is T(1 GPU) / (2 T(2 GPUs)).
"""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def get(nx, pes, variant, dtype="F32"):
    for r in rows:
        if "rust_us" in r and r["nx"] == nx and r["pes"] == pes and r["variant"] == variant and r.get("dtype", "F32") == dtype:
            return r
    return None


def host(nx, pes):
    xs = [r["us"] for r in rows if r["variant"] == "HostDriven" and r["nx"] == nx and r["pes"] == pes]
    return med(xs)


sizes = sorted({r["nx"] for r in rows})
print("| grid (f32) | GPUs | Rust persistent | C++ persistent | ratio | Rust per-iteration | C++ per-iteration | ratio | host-driven | host / best Rust |")
print("|---|---|---|---|---|---|---|---|---|---|")
for nx in sizes:
    for pes in (2, 1):
        p, q = get(nx, pes, "Persistent"), get(nx, pes, "PerIteration")
        if not p or not q:
            continue
        rp, cp, rq, cq = med(p["rust_us"]), med(p["cuda_us"]), med(q["rust_us"]), med(q["cuda_us"])
        h = host(nx, pes)
        print(f"| {nx}² | {pes} | {rp:.2f} | {cp:.2f} | {rp / cp:.3f} | {rq:.2f} | {cq:.2f} | {rq / cq:.3f} | {h:.2f} | {h / min(rp, rq):.2f}× |")
print()
print("| grid (f32) | variant | Rust 1 GPU | Rust 2 GPUs | efficiency | C++ efficiency | host-driven efficiency |")
print("|---|---|---|---|---|---|---|")
for nx in sizes:
    for v in ("Persistent", "PerIteration"):
        one, two = get(nx, 1, v), get(nx, 2, v)
        if not one or not two:
            continue
        r1, r2 = med(one["rust_us"]), med(two["rust_us"])
        c1, c2 = med(one["cuda_us"]), med(two["cuda_us"])
        h1, h2 = host(nx, 1), host(nx, 2)
        print(f"| {nx}² | {v} | {r1:.2f} | {r2:.2f} | {r1 / (2 * r2):.3f} | {c1 / (2 * c2):.3f} | {h1 / (2 * h2):.3f} |")
for r in rows:
    if r.get("dtype") == "F64":
        print(f"\nf64 {r['nx']}² on {r['pes']} GPUs, {r['variant']}: Rust {med(r['rust_us']):.2f} us, C++ {med(r['cuda_us']):.2f} us, ratio {med(r['rust_us']) / med(r['cuda_us']):.3f}")
