"""The Python front's benchmark: ``shmem_rs.MoeBuffer.dispatch`` + ``combine`` from PyTorch,
eager and captured in a CUDA graph, against the PyTorch baseline (``all_to_all_single`` with
exact splits, ``examples/moe-dispatch/torch_baseline.py``) on the same routing.

For each token count, mode and dtype (``bf16``, ``fp8``: the dispatch sends e4m3 and
scales; the experts are then a fixed bf16 tensor, since the received rows are FP8), on
every rank:

- **eager, one call**: after a barrier and a synchronisation, CUDA events on torch's
  stream around ``dispatch`` and around ``combine`` (the experts are the identity:
  ``y = recv_x``), median over ``--reps`` calls, the slowest rank, and the host's time to
  issue that dispatch + combine (``host_us_first_call``: the first call after an idle
  wait, so it includes waking up);
- **eager, back to back**: ``--reps`` dispatch + combine calls issued without waiting: GPU
  time per step and the host's time per step (Python, the checks, the launches: the
  Python overhead per call when the GPU is faster);
- **graph**: dispatch + combine captured once with ``torch.cuda.graph`` and replayed
  ``--reps`` times back to back: GPU time and host time per replay; the replayed output
  is compared, bit for bit, with the eager one;
- **baseline** (``--baseline``; NCCL, so one rank per GPU): the same tokens through
  ``Baseline.dispatch`` / ``combine``, wall-clock from a common start as
  ``torch_baseline.py`` times it.

usage: torchrun --nproc_per_node N python/bench/bench_moe.py [--tokens 128,4096]
       [--modes low_latency,throughput] [--dtypes bf16,fp8] [--hidden 7168] [--experts 64] [--top-k 8]
       [--reps 20] [--baseline]
Prints one ``RESULT {json}`` line per configuration (rank 0).
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import shmem_rs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "moe-dispatch"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="128,4096")
    ap.add_argument("--modes", default="low_latency,throughput")
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--baseline", action="store_true")
    a = ap.parse_args()
    shmem_rs.init()
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device())
    H, E, K = a.hidden, a.experts, a.top_k
    L = E // world
    nccl = dist.new_group(backend="nccl") if a.baseline else None

    def slowest(v):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    for tokens in map(int, a.tokens.split(",")):
        g = torch.Generator(device=dev).manual_seed(1234 + rank)
        x = torch.randn(tokens, H, device=dev, generator=g).to(torch.bfloat16)
        idx = torch.rand(tokens, E, device=dev, generator=g).topk(K, dim=1).indices
        w = torch.rand(tokens, K, device=dev, generator=g).softmax(1)
        for mode, dtype in [(m, d) for m in a.modes.split(",") for d in a.dtypes.split(",")]:
            buf = shmem_rs.MoeBuffer(H, E, K, tokens, mode=mode, dtype=dtype)
            fixed_y = torch.ones(buf.pair_slots, H, dtype=torch.bfloat16, device=dev) if dtype == "fp8" else None

            def experts(recv):
                return recv if fixed_y is None else fixed_y

            stream = torch.cuda.current_stream()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            disp, comb, host = [], [], []
            for rep in range(a.reps + 3):
                dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                ev[0].record(stream)
                recv, counts, h = buf.dispatch(x, idx, w)
                ev[1].record(stream)
                out = buf.combine(experts(recv), h)
                ev[2].record(stream)
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                if rep >= 3:
                    disp.append(slowest(ev[0].elapsed_time(ev[1]) * 1e3))
                    comb.append(slowest(ev[1].elapsed_time(ev[2]) * 1e3))
                    host.append(slowest((t1 - t0) * 1e6))
            eager_out = out.clone()
            # Back to back, the host waiting only at the end: GPU and host time per call.
            dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            for _ in range(a.reps):
                recv, counts, h = buf.dispatch(x, idx, w)
                out = buf.combine(experts(recv), h)
            end.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            eager_us = slowest(start.elapsed_time(end) * 1e3 / a.reps)
            eager_host = slowest((t1 - t0) * 1e6 / a.reps)
            # A graph of one dispatch + combine (warmed up by the eager calls), replayed back
            # to back.
            graph = torch.cuda.CUDAGraph()
            dist.barrier()
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                g_recv, _, g_h = buf.dispatch(x, idx, w)
                g_out = buf.combine(experts(g_recv), g_h)
            torch.cuda.synchronize()
            dist.barrier()
            g_out.zero_()
            torch.cuda.synchronize()
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            for _ in range(a.reps):
                graph.replay()
            end.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            graph_us = slowest(start.elapsed_time(end) * 1e3 / a.reps)
            graph_host = slowest((t1 - t0) * 1e6 / a.reps)
            identical = bool(torch.equal(g_out.view(torch.int16), eager_out.view(torch.int16)))
            all_identical = slowest(0.0 if identical else 1.0) == 0.0
            del graph
            res = {
                "impl": "shmem_rs", "mode": mode, "dtype": dtype, "tokens": tokens, "hidden": H, "experts": E,
                "top_k": K, "n_pes": world, "reps": a.reps,
                "dispatch_us": statistics.median(disp), "combine_us": statistics.median(comb),
                "host_us_first_call": statistics.median(host),
                "eager_us_per_step": eager_us, "eager_host_us_per_step": eager_host,
                "graph_us_per_step": graph_us, "graph_host_us_per_step": graph_host,
                "graph_identical": all_identical, "dropped": buf.dropped(),
                "torch": torch.__version__,
            }
            buf.close()
            if nccl is not None and (mode, dtype) == (a.modes.split(",")[0], a.dtypes.split(",")[0]):
                from torch_baseline import Baseline

                base = Baseline(x, idx, w, L, rank, world, group=nccl)
                bd, bc = [], []
                for rep in range(a.reps + 3):
                    dist.barrier()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    recv_b, meta, hb = base.dispatch()
                    torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    yp, pr, pw = base.expert_layer(recv_b, meta)
                    dist.barrier()
                    torch.cuda.synchronize()
                    t2 = time.perf_counter()
                    base.combine(yp, pr, pw, len(recv_b), hb)
                    torch.cuda.synchronize()
                    t3 = time.perf_counter()
                    if rep >= 3:
                        bd.append(slowest((t1 - t0) * 1e6))
                        bc.append(slowest((t3 - t2) * 1e6))
                res["torch_dispatch_us"] = statistics.median(bd)
                res["torch_combine_us"] = statistics.median(bc)
            if rank == 0:
                print("RESULT " + json.dumps(res), flush=True)
    shmem_rs.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
