"""Joins the MoE benchmark's RESULT lines (moe_dispatch --compare, torch_baseline.py) into a
Markdown table: Rust, CUDA C++ and PyTorch times, the Rust/C++ ratio, the speed-up over
PyTorch, and cross-GPU GB/s as a share of the copy-engine peer bandwidth of the same run.

usage: summarize.py COMPARE.log TORCH.log > table.md
"""

import json
import sys


def results(path):
    out = []
    try:
        for line in open(path):
            i = line.find("RESULT {")
            if i >= 0:
                try:
                    out.append(json.loads(line[i + 7:]))
                except json.JSONDecodeError:
                    pass  # a line that only mentions RESULT (a traceback's source line)
    except FileNotFoundError:
        pass
    return out


def main():
    ours, torch = results(sys.argv[1]), results(sys.argv[2])
    ce = next((r["ce_gbps"] for r in ours if "ce_gbps" in r), None)
    tb = {(r["tokens"], r["experts"]): r for r in torch}
    n = next((r["n_pes"] for r in ours if "n_pes" in r), "?")
    print(f"{n} PEs; copy-engine peer bandwidth (PE 0 -> PE 1, 256 MiB): "
          f"{ce:.1f} GB/s" if ce else f"{n} PEs; copy-engine bandwidth not measured")
    print()
    print("GB/s: token bytes that cross between GPUs (the most any PE sends) / time; "
          "% CE: that rate over the copy-engine bandwidth. vs torch: PyTorch time / Rust time.")
    print()
    print("| phase | mode | tokens | experts | Rust us | C++ us | Rust/C++ | PyTorch us | vs torch | Rust GB/s | % CE | check |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for phase in ("dispatch", "combine"):
        for r in ours:
            if "mode" not in r:
                continue
            t = tb.get((r["tokens"], r["experts"]))
            rust, cuda = r[f"rust_{phase}_us"], r[f"cuda_{phase}_us"]
            gbps = r[f"{phase}_bytes"] / (rust * 1e-6) / 1e9
            tt = t[f"torch_{phase}_us"] if t else None
            print(f"| {phase} | {r['mode']} | {r['tokens']} | {r['experts']} | {rust:.2f} | {cuda:.2f} "
                  f"| {rust / cuda:.3f} | {f'{tt:.1f}' if tt else '-'} | {f'{tt / rust:.2f}x' if tt else '-'} "
                  f"| {gbps:.1f} | {f'{100 * gbps / ce:.0f}%' if ce else '-'} | {'ok' if r['check_ok'] else 'FAILED'} |")
    if torch:
        print()
        print(f"PyTorch {torch[0]['torch']}, NCCL {torch[0]['nccl']}, {torch[0]['reps']} repetitions.")


if __name__ == "__main__":
    main()
