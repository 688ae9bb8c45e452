"""A mixture-of-experts layer on shmem_rs: route, dispatch, run each local expert on its
rows, combine; checked against the same layer computed on one PE.

On GPUs:        torchrun --nproc_per_node N python/examples/moe_layer.py
Without a GPU:  python python/examples/moe_layer.py   (2 PEs on the CPU simulator, NumPy)
"""

import os

import numpy as np

import shmem_rs

HIDDEN, EXPERTS, TOP_K, TOKENS = 256, 8, 2, 64


def bf16(v):
    """float32 -> bf16 bits, round to nearest even."""
    b = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def f32(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def inputs(pe):
    """This PE's tokens and router output (top-k of a random score, softmax weights)."""
    rng = np.random.default_rng(pe)
    x = bf16(rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32))
    scores = rng.standard_normal((TOKENS, EXPERTS)).astype(np.float32)
    idx = np.argsort(-scores, axis=1)[:, :TOP_K].astype(np.int64)
    top = np.take_along_axis(scores, idx, 1)
    w = (np.exp(top) / np.exp(top).sum(1, keepdims=True)).astype(np.float32)
    return x, idx, w


def expert_gain(e):
    """Expert ``e`` of this toy layer multiplies by ``1 + e / 8``."""
    return np.float32(1 + e / 8)


def layer(torch=None):
    shmem_rs.init()
    me, n = shmem_rs.my_pe(), shmem_rs.n_pes()
    local = EXPERTS // n
    x, idx, w = inputs(me)
    buf = shmem_rs.MoeBuffer(HIDDEN, EXPERTS, TOP_K, TOKENS)
    if torch is not None:  # CUDA tensors on torch's stream
        to = lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda() if a.dtype == np.uint16 else torch.from_numpy(a).cuda()
        recv, counts, handle = buf.dispatch(to(x), to(idx), to(w))
        y = torch.zeros_like(recv)
        offsets = handle.offsets.cpu()
        for l, row in enumerate(counts.cpu()):
            for s, c in enumerate(row.tolist()):
                a = int(offsets[l, s])
                y[a : a + c] = (recv[a : a + c].float() * float(expert_gain(me * local + l))).to(torch.bfloat16)
        out = buf.combine(y, handle).cpu().view(torch.int16).numpy().view(np.uint16)
    else:  # NumPy arrays on the simulator
        recv, counts, handle = buf.dispatch(x, idx, w)
        y = np.zeros_like(recv)
        for l in range(local):
            for s in range(n):
                a, c = handle.offsets[l, s], counts[l, s]
                y[a : a + c] = bf16(f32(recv[a : a + c]) * expert_gain(me * local + l))
        out = buf.combine(y, handle)
    # The same layer on this PE alone, with the kernels' rounding: per destination PE a
    # float32 sum rounded to bf16, the parts added and rounded.
    want = np.zeros_like(out)
    for t in range(TOKENS):
        acc = np.zeros(HIDDEN, np.float32)
        for d in range(n):
            part = np.zeros(HIDDEN, np.float32)
            for k in range(TOP_K):
                if idx[t, k] // local == d:
                    part = part + w[t, k] * f32(bf16(f32(x[t]) * expert_gain(idx[t, k])))
            if (idx[t] // local == d).any():
                acc = acc + f32(bf16(part))
        want[t] = bf16(acc)
    ok = bool((out == want).all())
    print(f"PE {me}/{n} ({shmem_rs.backend()}): {int(counts.sum())} rows for its {local} experts, combine {'matches' if ok else 'DIFFERS FROM'} the one-PE layer")
    buf.close()
    return ok


if __name__ == "__main__":
    if "WORLD_SIZE" in os.environ and os.environ.get("SHMEM_SIM") != "1":
        import torch

        assert layer(torch), "combine differs"
        shmem_rs.finalize()
    else:
        assert all(shmem_rs.run(layer, 2)), "combine differs"
