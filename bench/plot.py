#!/usr/bin/env python3
"""Draws shmem-bench's curves: plot.py BENCH_JSON [OUT_PNG]. Rust solid, CUDA C++ dashed."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else src.rsplit("/", 1)[0] + "/bench.png"
data = json.load(open(src))
pts = data["points"]
ceiling = data.get("ceiling_gbps", 0)
meta = data.get("meta", {})


def curve(ax, label, color, **sel):
    sel_pts = [p for p in pts if all(p[k] == v for k, v in sel.items())]
    sel_pts.sort(key=lambda p: p["bytes"])
    if not sel_pts:
        return
    x = [p["bytes"] for p in sel_pts]
    ax.plot(x, [p["rust"] for p in sel_pts], "-o", color=color, ms=3, label=f"{label} Rust")
    ax.plot(x, [p["cuda"] for p in sel_pts], "--x", color=color, ms=3, label=f"{label} C++")


fig, axes = plt.subplots(3, 3, figsize=(18, 15))
colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
panels = [
    ("put bandwidth, block scope, nosync", "put_bw", dict(scope="block", sync_each=False), "ctas"),
    ("put bandwidth, block scope, grid barrier each iteration", "put_bw", dict(scope="block", sync_each=True), "ctas"),
    ("get bandwidth, block scope, nosync", "get_bw", dict(scope="block", sync_each=False), "ctas"),
    ("put bandwidth by scope, 16 CTAs, nosync", "put_bw", dict(ctas=16, sync_each=False), "scope"),
    ("get bandwidth by scope, 16 CTAs, nosync", "get_bw", dict(ctas=16, sync_each=False), "scope"),
]
for ax, (title, test, sel, by) in zip(axes.flat, panels):
    values = sorted({p[by] for p in pts if p["test"] == test}, key=lambda v: (isinstance(v, str), v))
    for c, v in zip(colors, values):
        curve(ax, f"{by}={v}", c, test=test, **sel, **{by: v})
    if ceiling:
        ax.axhline(ceiling, color="gray", lw=1, ls=":", label=f"copy engine {ceiling:.0f} GB/s")
    ax.set(title=title, xscale="log", yscale="log", xlabel="bytes", ylabel="GB/s (1e9 B/s)")
    ax.legend(fontsize=7)

ax = axes.flat[5]
curve(ax, "p (32x1024 threads)", "tab:purple", test="p_bw")
ax.set(title="p bandwidth", xscale="log", yscale="log", xlabel="bytes", ylabel="GB/s")
ax.legend(fontsize=7)

ax = axes.flat[6]
for c, (test, scope) in zip(colors * 2, [(t, s) for t in ("put_lat", "get_lat") for s in ("thread", "warp", "block")]):
    curve(ax, f"{test} {scope}", c if test == "put_lat" else "tab:" + ["cyan", "olive", "brown"][["thread", "warp", "block"].index(scope)], test=test, scope=scope)
ax.set(title="put / get latency (one unit, completed by quiet)", xscale="log", yscale="log", xlabel="bytes", ylabel="us")
ax.legend(fontsize=6)

ax = axes.flat[7]
curve(ax, "put_signal ping-pong (one thread)", "tab:blue", test="put_signal_pingpong")
curve(ax, "alltoall (bytes one PE sends)", "tab:green", test="alltoall_lat")
curve(ax, "p (1024 threads)", "tab:purple", test="p_lat")
curve(ax, "g (1024 threads)", "tab:brown", test="g_lat")
for p in pts:
    if p["test"] == "signal_pingpong":
        ax.scatter([p["bytes"]], [p["rust"]], marker="o", label=f"{p['test']} Rust {p['rust']:.2f} us")
        ax.scatter([p["bytes"]], [p["cuda"]], marker="x", label=f"{p['test']} C++ {p['cuda']:.2f} us")
ax.set(title="round trips, p / g and collective latency", xscale="log", yscale="log", xlabel="bytes", ylabel="us")
ax.legend(fontsize=6)

ax = axes.flat[8]
for test, c in zip(["put_bw", "get_bw", "p_bw"], colors):
    sel = [p for p in pts if p["test"] == test]
    ax.scatter([p["bytes"] for p in sel], [p["ratio"] for p in sel], s=6, color=c, label=f"{test} (Rust/C++ bandwidth)")
sel = [p for p in pts if p["unit"] == "us"]
ax.scatter([p["bytes"] for p in sel], [1 / p["ratio"] for p in sel], s=6, color="tab:red", label="latencies (C++/Rust time)")
ax.axhline(1.0, color="gray", lw=1)
ax.axhline(0.98, color="gray", lw=1, ls=":")
ax.set(title="Rust relative to C++ (above 1: Rust faster)", xscale="log", xlabel="bytes", ylabel="ratio")
ax.legend(fontsize=7)

fig.suptitle(f"shmem-bench on {meta.get('device', '?')} x{meta.get('pes', '?')}, NVSHMEM {meta.get('nvshmem', '?')}, means of {meta.get('reps', '?')} launches")
fig.tight_layout()
fig.savefig(out, dpi=80)
print(f"wrote {out}")
