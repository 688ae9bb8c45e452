"""The Python front on the CPU simulator (NumPy arrays, or CPU torch tensors where torch is
installed) and, with ``SHMEM_PY_GPU=1`` under torchrun, on GPUs (CUDA tensors).

Every check is against a pure reference (``reference.py``): exactly-once delivery of every
(token, expert) pair, and a combine equal, bit for bit, to the reference's rounding.
"""

import os

import numpy as np
import pytest

import shmem_rs

from reference import (
    bf16_to_f32,
    combine_reference,
    dequantize,
    e4m3_from_f32,
    e4m3_to_f32,
    expert_layer,
    f32_to_bf16,
    make_inputs,
    quantize,
)

GPU = os.environ.get("SHMEM_PY_GPU") == "1"

try:
    import torch
except ImportError:
    torch = None


def on_pes(fn, n=2):
    """``fn()`` on every PE: simulated PEs here, this torchrun rank on the GPU."""
    if GPU:
        import torch.distributed as dist

        shmem_rs.init()
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, fn())
        return every
    return shmem_rs.run(fn, n)


def to_lib(a, lib):
    """A NumPy array as the library under test takes it (bf16 bits stay uint16 in NumPy)."""
    if lib == "numpy":
        return a
    t = torch.from_numpy(a)
    if a.dtype == np.uint16:
        t = t.view(torch.int16).view(torch.bfloat16)
    return t.cuda() if GPU else t


def to_numpy(t):
    if isinstance(t, np.ndarray):
        return t
    t = t.cpu()
    if t.dtype == getattr(torch, "float8_e4m3fn", None):
        return t.view(torch.uint8).numpy()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().view(np.uint16) if t.dtype == torch.int16 else t.numpy()


LIBS = ["torch"] if GPU else (["numpy", "torch"] if torch is not None else ["numpy"])


def exchange(
    mode, lib, hidden=16, experts=8, top_k=3, max_tokens=12, tokens=None, calls=1, capacity=None, idx64=False, dtype="bf16"
):
    """Every PE dispatches its tokens, runs the stand-in experts on what it received,
    combines; returns what each PE saw, per call."""

    def pe():
        shmem_rs.init()
        me, n = shmem_rs.my_pe(), shmem_rs.n_pes()
        buf = shmem_rs.MoeBuffer(
            hidden, experts, top_k, max_tokens, mode=mode, capacity=capacity, threads=64, dtype=dtype
        )
        seen = []
        for c in range(calls):
            t = max_tokens if tokens is None else tokens(me, c)
            x, idx, w = make_inputs(me, c, t, hidden, experts, top_k)
            if idx64:
                idx = idx.astype(np.int64)
            recv, counts, handle = buf.dispatch(to_lib(x, lib), to_lib(idx, lib), to_lib(w, lib))
            scales_n = None
            if dtype == "fp8":
                recv, scales = recv
                assert recv.shape == (buf.pair_slots, hidden) and scales.shape == (buf.pair_slots, hidden // 128)
                scales_n = to_numpy(scales)
            recv_n, counts_n, offsets_n = to_numpy(recv), to_numpy(counts), to_numpy(handle.offsets)
            y = expert_layer(recv_n, counts_n, offsets_n, me, scales_n)
            out = buf.combine(to_lib(y, lib), handle)
            out_n = to_numpy(out)
            rows = {}
            for l in range(counts_n.shape[0]):
                for s in range(n):
                    for p in range(offsets_n[l, s], offsets_n[l, s] + counts_n[l, s]):
                        row = recv_n[p].tobytes() + (b"" if scales_n is None else scales_n[p].tobytes())
                        rows.setdefault((me * counts_n.shape[0] + l, s), []).append(row)
            seen.append(dict(pe=me, x=x, idx=idx, w=w, out=out_n, rows=rows, shape=tuple(out.shape)))
        dropped = buf.dropped()
        buf.close()
        return seen, dropped

    return on_pes(pe)


def check_all(results, hidden, experts, top_k, n, fp8=False):
    """Exactly-once delivery (over all PEs: each (token, expert) pair's row arrives once, at
    the expert's PE, as the token's bytes, or with ``fp8`` as the reference's quantisation)
    and the combine against the reference."""
    calls = len(results[0][0])
    for c in range(calls):
        per_pe = [r[0][c] for r in results]
        got = {}
        for s in per_pe:
            for key, rows in s["rows"].items():
                got.setdefault(key, []).extend(rows)
        want = {}
        for s in per_pe:
            sent = [r.tobytes() for r in s["x"]]
            if fp8:
                q, sc = quantize(s["x"])
                sent = [q[t].tobytes() + sc[t].tobytes() for t in range(len(q))]
            for t, ids in enumerate(s["idx"]):
                for e in ids:
                    if e >= 0:
                        want.setdefault((int(e), s["pe"]), []).append(sent[t])
        assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}, f"call {c}"
        for s in per_pe:
            ref = combine_reference(s["x"], s["idx"], s["w"], experts // n, n, fp8=fp8)
            assert s["shape"] == s["x"].shape, f"call {c} PE {s['pe']}: out shape"
            diff = np.nonzero(s["out"] != ref)
            assert diff[0].size == 0, f"call {c} PE {s['pe']}: {diff[0].size} values differ"


@pytest.mark.parametrize("mode", ["low_latency", "throughput"])
@pytest.mark.parametrize("lib", LIBS)
def test_dispatch_delivers_once_and_combine_matches_the_reference(mode, lib):
    res = exchange(mode, lib, calls=2)
    check_all(res, 16, 8, 3, len(res))


@pytest.mark.parametrize("mode", ["low_latency", "throughput"])
def test_short_and_unequal_calls(mode):
    # A different number of tokens per PE and per call, none at all included.
    res = exchange(mode, LIBS[0], tokens=lambda me, c: [12, 5 + 3 * me, 0][c], calls=3)
    check_all(res, 16, 8, 3, len(res))


def test_int64_ids_and_wider_rows():
    res = exchange("low_latency", LIBS[0], hidden=64, experts=4, top_k=2, max_tokens=20, idx64=True)
    check_all(res, 64, 4, 2, len(res))


@pytest.mark.parametrize("mode", ["low_latency", "throughput"])
@pytest.mark.parametrize("lib", LIBS)
def test_fp8_dispatch_sends_the_quantised_rows(mode, lib):
    # Every received row is the reference's e4m3 values and scales, bit for bit; the combine
    # of the dequantised tokens equals the reference's. A short call included.
    res = exchange(mode, lib, hidden=256, calls=2, dtype="fp8", tokens=lambda me, c: [12, 7 - me][c])
    check_all(res, 256, 8, 3, len(res), fp8=True)


def test_fp8_reference_is_within_e4m3_rounding():
    # The reference quantiser itself: every code decodes and encodes back, halfway points
    # go to the even code, and a token comes back within half an e4m3 step of each value.
    codes = np.arange(256, dtype=np.uint8)
    finite = codes[(codes & 0x7F) != 0x7F]
    assert (e4m3_from_f32(e4m3_to_f32(finite)) == finite).all()
    pos = e4m3_to_f32(np.arange(0x7F, dtype=np.uint8))
    mid = (pos[:-1] + pos[1:]) / 2
    even = np.arange(0x7E) + (np.arange(0x7E) % 2)
    assert (e4m3_from_f32(mid) == even).all()
    x, _, _ = make_inputs(0, 0, 4, 256, 8, 3)
    xf = bf16_to_f32(x)
    q, sc = quantize(x)
    back = dequantize(q, sc)
    step = np.maximum(np.abs(xf) / 16, np.repeat(sc, 128, axis=1) / 1024)
    assert (np.abs(back - xf) <= step * 1.0001).all()


def test_capacity_drops_and_counts():
    res = exchange("low_latency", LIBS[0], capacity=1, calls=1)
    assert sum(d for _, d in res) > 0, "a capacity of 1 must drop pairs"


def test_dispatch_input_is_sent_without_a_copy():
    def pe():
        shmem_rs.init()
        me = shmem_rs.my_pe()
        buf = shmem_rs.MoeBuffer(16, 8, 3, 12, threads=64)
        x, idx, w = make_inputs(me, 0, 12, 16, 8, 3)
        staged = buf.dispatch_input()
        assert staged.shape == (12, 16)
        staged[:] = to_lib(x, "numpy") if isinstance(staged, np.ndarray) else to_lib(x, "torch")
        recv, counts, h = buf.dispatch(staged[:12], to_lib(idx, LIBS[0]), to_lib(w, LIBS[0]))
        y = expert_layer(to_numpy(recv), to_numpy(counts), to_numpy(h.offsets), me)
        out = to_numpy(buf.combine(to_lib(y, LIBS[0]), h))
        ref = combine_reference(x, idx, w, 8 // shmem_rs.n_pes(), shmem_rs.n_pes())
        assert (out == ref).all()
        buf.close()

    on_pes(pe)


def test_errors_name_the_problem():
    def pe():
        shmem_rs.init()
        buf = shmem_rs.MoeBuffer(16, 8, 3, 4, threads=64)
        x, idx, w = make_inputs(shmem_rs.my_pe(), 0, 4, 16, 8, 3)
        lib = LIBS[0]
        errs = []

        def expect(exc, text, f):
            with pytest.raises(exc) as e:
                f()
            assert text in str(e.value), str(e.value)
            errs.append(str(e.value))

        expect(TypeError, "x must be bfloat16", lambda: buf.dispatch(to_lib(x.astype(np.float32), lib), to_lib(idx, lib), to_lib(w, lib)))
        expect(ValueError, "x must have shape [T, 16]", lambda: buf.dispatch(to_lib(x[:, :8].copy(), lib), to_lib(idx, lib), to_lib(w, lib)))
        expect(ValueError, "topk_idx must have shape [4, 3]", lambda: buf.dispatch(to_lib(x, lib), to_lib(idx[:, :2].copy(), lib), to_lib(w, lib)))
        expect(TypeError, "topk_weights must be float32", lambda: buf.dispatch(to_lib(x, lib), to_lib(idx, lib), to_lib(w.astype(np.float64), lib)))
        big = np.zeros((5, 16), np.uint16)
        expect(ValueError, "more than max_tokens=4", lambda: buf.dispatch(to_lib(big, lib), to_lib(np.zeros((5, 3), np.int32), lib), to_lib(np.zeros((5, 3), np.float32), lib)))
        expect(TypeError, "x must be a tensor or array", lambda: buf.dispatch([1, 2], idx, w))
        _, _, h1 = buf.dispatch(to_lib(x, lib), to_lib(idx, lib), to_lib(w, lib))
        _, _, h2 = buf.dispatch(to_lib(x, lib), to_lib(idx, lib), to_lib(w, lib))
        y = np.zeros((buf.pair_slots, 16), np.uint16)
        expect(ValueError, "dispatch 2 has run since", lambda: buf.combine(to_lib(y, lib), h1))
        expect(ValueError, "y must have shape", lambda: buf.combine(to_lib(y[:1].copy(), lib), h2))
        buf.combine(to_lib(y, lib), h2)
        with pytest.raises(ValueError, match="mode must be"):
            shmem_rs.MoeBuffer(16, 8, 3, 4, mode="fast")
        with pytest.raises(ValueError, match="top-k must be 1 to 16"):
            shmem_rs.MoeBuffer(16, 8, 17, 4)
        with pytest.raises(ValueError, match="multiple of 128"):
            shmem_rs.MoeBuffer(16, 8, 3, 4, dtype="fp8")
        with pytest.raises(ValueError, match="dtype must be"):
            shmem_rs.MoeBuffer(16, 8, 3, 4, dtype="int4")
        buf.close()
        with pytest.raises(ValueError, match="closed"):
            buf.dispatch(to_lib(x, lib), to_lib(idx, lib), to_lib(w, lib))
        return errs

    on_pes(pe)


@pytest.mark.skipif(GPU, reason="outside a job: the simulator's process only")
def test_calls_outside_a_job_raise():
    with pytest.raises(shmem_rs.ShmemError, match="not initialized"):
        shmem_rs.my_pe()
    with pytest.raises(shmem_rs.ShmemError, match="init"):
        shmem_rs.MoeBuffer(16, 8, 3, 4)


@pytest.mark.skipif(GPU, reason="the simulator's failure path")
def test_an_exception_on_one_pe_is_raised_by_run():
    def pe():
        shmem_rs.init()
        if shmem_rs.my_pe() == 1:
            raise KeyError("pe one failed")
        shmem_rs.MoeBuffer(16, 8, 3, 4)
        return 0

    with pytest.raises(KeyError, match="pe one failed"):
        shmem_rs.run(pe, 2)


@pytest.mark.skipif(not GPU, reason="CUDA graphs: the GPU")
def test_a_captured_dispatch_and_combine_replays_with_new_inputs():
    shmem_rs.init()
    me, n = shmem_rs.my_pe(), shmem_rs.n_pes()
    buf = shmem_rs.MoeBuffer(16, 8, 3, 12, threads=64)
    x, idx, w = make_inputs(me, 0, 12, 16, 8, 3)
    sx, si, sw = to_lib(x, "torch"), to_lib(idx, "torch"), to_lib(w, "torch")
    # Eager first (torch's advice before a capture), then the capture: the experts are the
    # identity, inside the graph too.
    recv, _, h = buf.dispatch(sx, si, sw)
    buf.combine(recv, h)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        recv, _, h = buf.dispatch(sx, si, sw)
        out = buf.combine(recv.clone(), h)
    for call in range(1, 4):
        x, idx, w = make_inputs(me, call, 12, 16, 8, 3)
        sx.copy_(to_lib(x, "torch"))
        si.copy_(to_lib(idx, "torch"))
        sw.copy_(to_lib(w, "torch"))
        graph.replay()
        torch.cuda.synchronize()
        ref = combine_reference(x, idx, w, 8 // n, n, scale=lambda e: np.float32(1.0))
        assert (to_numpy(out) == ref).all(), f"replay {call}"
    del graph
    buf.close()


def test_bf16_helpers_round_trip():
    v = np.array([1.0, -2.5, 3.140625], np.float32)
    assert (bf16_to_f32(f32_to_bf16(v)) == v).all()
