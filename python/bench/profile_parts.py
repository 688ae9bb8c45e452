"""The host time of each Python piece of the front's fast path, timed alone in a loop on
CUDA tensors (128 tokens, hidden 7168, 64 experts, top-8), then whole calls:
``torchrun --nproc_per_node 1 python/bench/profile_parts.py``. Complements
``profile_calls.py`` (cProfile of whole calls, and the native calls alone)."""

import time

import torch

import shmem_rs
from shmem_rs import _raw_stream

shmem_rs.init()
H, E, K, T = 7168, 64, 8, 128
buf = shmem_rs.MoeBuffer(H, E, K, T)
dev = torch.device("cuda", torch.cuda.current_device())
x = torch.randn(T, H, device="cuda").to(torch.bfloat16)
idx = torch.rand(T, E, device="cuda").topk(K, dim=1).indices.to(torch.int32)
idx64 = idx.to(torch.int64)
w = torch.rand(T, K, device="cuda")
def t(name, f, n=2000):
    for _ in range(50): f()
    a = time.perf_counter()
    for _ in range(n): f()
    b = time.perf_counter()
    print(f"{name:45s} {1e6*(b-a)/n:7.2f} us")
lay = torch.empty((2, buf.num_local_experts, buf.num_pes), dtype=torch.int32, device=dev)
out = torch.empty((T, H), dtype=torch.bfloat16, device=dev)
t("x.device != dev", lambda: x.device != dev)
t("x.dtype != bf16", lambda: x.dtype != torch.bfloat16)
t("idx.shape != (T, K)", lambda: idx.shape != (T, K))
t("x.is_contiguous()", lambda: x.is_contiguous())
t("x.data_ptr()", lambda: x.data_ptr())
t("idx.to(int32) (int32)", lambda: idx.to(torch.int32))
t("idx.to(int32) (int64)", lambda: idx64.to(torch.int32))
t("w.contiguous()", lambda: w.contiguous())
t("torch.empty recv", lambda: torch.empty((buf.pair_slots, H), dtype=torch.bfloat16, device=dev))
t("torch.empty layout", lambda: torch.empty((2, buf.num_local_experts, buf.num_pes), dtype=torch.int32, device=dev))
t("layout[0]", lambda: lay[0])
t("layout.unbind(0)", lambda: lay.unbind(0))
t("out[:T]", lambda: out[:T])
t("_raw_stream(dev)", lambda: _raw_stream(dev))
t("buf._fast(x, idx, w) (whole dispatch)", lambda: buf._fast(x, idx, w), n=300)
r, c, h = buf.dispatch(x, idx, w)
t("buf.dispatch(x, idx, w)", lambda: buf.dispatch(x, idx, w), n=300)
t("buf.dispatch(x, idx64, w)", lambda: buf.dispatch(x, idx64, w), n=300)
def step():
    r, c, h = buf.dispatch(x, idx, w)
    return buf.combine(r, h)
t("dispatch + combine", step, n=300)
torch.cuda.synchronize()
