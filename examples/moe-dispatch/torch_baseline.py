"""The PyTorch baseline of the MoE benchmark: dispatch and combine as a PyTorch user writes
them with NCCL, on the same GPUs and the same routing as the Rust kernels.

dispatch: each PE works out how many tokens go to each PE, exchanges the counts
(all_to_all_single), reads them on the host (the splits must be Python ints), permutes its
tokens into destination order (index_select) and sends them with all_to_all_single and exact
splits; the routing (ids and weights) travels the same way, as the receiver needs it.
combine: each received row's expert outputs are summed with the routing weights (index_add_
in f32, then bf16), the sums travel back with the reverse splits and are added into token
order (index_add_ in f32, then bf16): the same algorithm as the Rust kernels.

Times are wall-clock from a common start (barrier, synchronize) to the end of the GPU work
(synchronize), the slowest rank, median over the repetitions: the host round trip is part
of this algorithm, so it is part of its time.

usage: torchrun --nproc_per_node N torch_baseline.py [--tokens 128,4096] [--experts 64,256]
       [--hidden 7168] [--top-k 8] [--reps 20] [--seed S]
Prints one `RESULT {json}` line per configuration (rank 0).
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

MASK = (1 << 64) - 1


def mix(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def route_uniform(seed, pe, tokens, experts, top_k):
    """src/routing.rs's `route(.., Distribution::Uniform)`: the same expert ids."""
    out = []
    for t in range(tokens):
        state = (seed ^ (pe << 48) ^ ((t * 0x2545F4914F6CDD1D) & MASK)) & MASK
        ids = []
        while len(ids) < top_k:
            state = (state + 0x9E3779B97F4A7C15) & MASK
            e = mix(state) % experts
            if e not in ids:
                ids.append(e)
        out.append(ids)
    return out


class Baseline:
    """Dispatch and combine with NCCL's all_to_all_single and exact splits (module
    documentation), for this rank's tokens ``x``, expert ids ``topk`` (int64) and
    ``weights``; ``L`` experts per rank. Also used by ``python/bench/bench_moe.py``."""

    def __init__(self, x, topk, weights, L, rank, world, group=None):
        self.x, self.topk, self.weights = x, topk, weights
        self.L, self.rank, self.world, self.group = L, rank, world, group
        self.tokens, self.H, self.K = x.shape[0], x.shape[1], topk.shape[1]
        self.dev = x.device

    def dispatch(self):
        x, topk, L, dev, g = self.x, self.topk, self.L, self.dev, self.group
        dest = topk // L
        mask = torch.zeros(self.tokens, self.world, dtype=torch.bool, device=dev)
        mask.scatter_(1, dest, True)
        send_counts = mask.sum(0)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=g)
        idx = mask.t().nonzero()[:, 1]  # destination-major, tokens in order
        send = x.index_select(0, idx)
        meta = torch.cat([topk.to(torch.int32), self.weights.view(torch.int32)], 1).index_select(0, idx)
        ss, rs = send_counts.tolist(), recv_counts.tolist()  # host round trip
        recv = torch.empty(sum(rs), self.H, dtype=x.dtype, device=dev)
        dist.all_to_all_single(recv, send, rs, ss, group=g)
        recv_meta = torch.empty(sum(rs), 2 * self.K, dtype=torch.int32, device=dev)
        dist.all_to_all_single(recv_meta, meta, rs, ss, group=g)
        return recv, recv_meta, (idx, ss, rs)

    def expert_layer(self, recv, recv_meta):
        """The stand-in expert layer's outputs, one row per (received row, local expert),
        with the pair's row and weight (not timed, as in the Rust run)."""
        K, L = self.K, self.L
        ids, w = recv_meta[:, :K], recv_meta[:, K:].view(torch.float32)
        local = (ids >= 0) & (ids // L == self.rank)
        pair_row = local.nonzero()[:, 0]
        return recv.index_select(0, pair_row), pair_row, w[local]

    def combine(self, y_pairs, pair_row, pair_w, rows, handle):
        idx, ss, rs = handle
        dev, H = self.dev, self.H
        # The weighted sum of each received row's expert outputs (f32, then bf16).
        y = torch.zeros(rows, H, dtype=torch.float32, device=dev)
        y.index_add_(0, pair_row, y_pairs.float() * pair_w[:, None])
        y = y.to(torch.bfloat16)
        back = torch.empty(len(idx), H, dtype=y.dtype, device=dev)
        dist.all_to_all_single(back, y, ss, rs, group=self.group)
        out = torch.zeros(self.tokens, H, dtype=torch.float32, device=dev)
        out.index_add_(0, idx, back.float())
        return out.to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="128,4096")
    ap.add_argument("--experts", default="64,256")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0x5EED)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)

    def slowest(x):
        t = torch.tensor([x], device=dev, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    for experts in map(int, a.experts.split(",")):
        for tokens in map(int, a.tokens.split(",")):
            L, H, K = experts // world, a.hidden, a.top_k
            topk = torch.tensor(route_uniform(a.seed, rank, tokens, experts, K), dtype=torch.int64, device=dev)
            weights = torch.rand(tokens, K, device=dev, dtype=torch.float32)
            x = torch.randn(tokens, H, device=dev, dtype=torch.bfloat16)

            base = Baseline(x, topk, weights, L, rank, world)

            def timed(f):
                dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                r = f()
                torch.cuda.synchronize()
                return r, (time.perf_counter() - t0) * 1e6

            dts, cts = [], []
            for rep in range(a.reps + 3):
                (recv, recv_meta, handle), dt = timed(base.dispatch)
                y_pairs, pair_row, pair_w = base.expert_layer(recv, recv_meta)
                _, ct = timed(lambda: base.combine(y_pairs, pair_row, pair_w, len(recv), handle))
                if rep >= 3:
                    dts.append(slowest(dt))
                    cts.append(slowest(ct))
            # Cross-GPU bytes, the most any rank sends (token rows only, like the Rust report).
            dest = topk // L
            mask = torch.zeros(tokens, world, dtype=torch.bool, device=dev)
            mask.scatter_(1, dest, True)
            mask[:, rank] = False
            sent = torch.tensor([mask.sum().item() * H * 2], device=dev, dtype=torch.float64)
            recv_rows = mask.sum(0).to(torch.float64)
            dist.all_reduce(recv_rows)
            dist.all_reduce(sent, op=dist.ReduceOp.MAX)
            if rank == 0:
                print("RESULT " + json.dumps({
                    "impl": "torch", "tokens": tokens, "experts": experts, "hidden": H, "top_k": K,
                    "n_pes": world, "torch_dispatch_us": statistics.median(dts),
                    "torch_combine_us": statistics.median(cts), "dispatch_bytes": int(sent.item()),
                    "combine_bytes": int(recv_rows.max().item() * H * 2), "reps": a.reps,
                    "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
