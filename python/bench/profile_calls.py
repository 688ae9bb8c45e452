"""Where the host time of a dispatch + combine goes (rank 0, cProfile over --calls calls),
and the native calls alone: ``torchrun --nproc_per_node 1 python/bench/profile_calls.py``."""

import cProfile
import pstats
import sys
import time

import torch

import shmem_rs


def main(tokens=128, calls=200):
    shmem_rs.init()
    H, E, K = 7168, 64, 8
    buf = shmem_rs.MoeBuffer(H, E, K, tokens)
    x = torch.randn(tokens, H, device="cuda").to(torch.bfloat16)
    idx = torch.rand(tokens, E, device="cuda").topk(K, dim=1).indices.to(torch.int32)
    w = torch.rand(tokens, K, device="cuda")

    def step():
        recv, counts, h = buf.dispatch(x, idx, w)
        return buf.combine(recv, h)

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"host {1e6 * (t1 - t0) / calls:.1f} us per dispatch+combine, to the GPU's end {1e6 * (t2 - t0) / calls:.1f} us")
    # The native calls alone, on fixed outputs.
    recv = torch.empty(buf.pair_slots, H, dtype=torch.bfloat16, device="cuda")
    lay = torch.empty(2 * buf.num_local_experts * buf.num_pes, dtype=torch.int32, device="cuda")
    out = torch.empty(tokens, H, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.current_stream().cuda_stream
    n = buf._n
    # x, topk, weights, tokens, rows, scales (none: bf16), layout, stream.
    args = (x.data_ptr(), idx.data_ptr(), w.data_ptr(), tokens, recv.data_ptr(), 0, lay.data_ptr(), s)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        h = n.dispatch(*args)
    t1 = time.perf_counter()
    for _ in range(calls):
        h = n.dispatch(*args)
        n.combine(h, recv.data_ptr(), out.data_ptr(), s)
    t2 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"native dispatch {1e6 * (t1 - t0) / calls:.1f} us, native dispatch+combine {1e6 * (t2 - t1) / calls:.1f} us")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        step()
    pr.disable()
    torch.cuda.synchronize()
    pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(18)
    buf.close()
    shmem_rs.finalize()


if __name__ == "__main__":
    main()
