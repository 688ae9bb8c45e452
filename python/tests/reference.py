"""The pure NumPy reference of the Python front's tests: inputs, the stand-in experts, and
the combine with the kernels' rounding (``examples/moe-dispatch/src/reference.rs``)."""

import numpy as np


def f32_to_bf16(v):
    """Rounds float32 to bf16 bits (uint16), ties to even."""
    b = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(b):
    """Widens bf16 bits (uint16) to float32."""
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def scale(e):
    """The stand-in expert ``e``'s factor (``moe_dispatch::expert_scale``)."""
    return np.float32(1.0 + (e % 8) * 0.125)


def make_inputs(pe, call, tokens, hidden, experts, top_k):
    """PE ``pe``'s tokens (bf16 bits), distinct expert ids (some tokens with fewer: -1),
    and weights, for call ``call``."""
    rng = np.random.default_rng(1000 * pe + call)
    x = f32_to_bf16(rng.uniform(-2, 2, (tokens, hidden)).astype(np.float32))
    idx = np.full((tokens, top_k), -1, np.int32)
    for t in range(tokens):
        k = top_k if t % 5 else max(1, top_k - 1)
        idx[t, :k] = rng.choice(experts, k, replace=False)
    w = rng.uniform(0, 1, (tokens, top_k)).astype(np.float32)
    w[idx < 0] = 0
    return x, idx, w


def expert_layer(recv, counts, offsets, pe):
    """The caller's experts on the received rows: row ``p`` of local expert ``l`` times
    ``scale(pe * L + l)``, rounded to bf16; rows of no pair stay zero."""
    y = np.zeros_like(recv)
    n_local = counts.shape[0]
    for l in range(n_local):
        for s in range(counts.shape[1]):
            a, b = offsets[l, s], offsets[l, s] + counts[l, s]
            y[a:b] = f32_to_bf16(bf16_to_f32(recv[a:b]) * scale(pe * n_local + l))
    return y


def combine_reference(x, idx, w, n_local, n, scale=scale):
    """Each token: per destination PE in order, ``part += w_k * y_k`` over its choices there
    (float32; ``y_k``: the token times ``scale(expert)``, rounded to bf16), rounded to bf16;
    the parts added in float32 and rounded to bf16."""
    xf = bf16_to_f32(x)
    out = np.zeros(x.shape, np.uint16)
    for t in range(x.shape[0]):
        acc = np.zeros(x.shape[1], np.float32)
        for d in range(n):
            ks = [k for k in range(idx.shape[1]) if idx[t, k] >= 0 and idx[t, k] // n_local == d]
            if not ks:
                continue
            part = np.zeros(x.shape[1], np.float32)
            for k in ks:
                y = bf16_to_f32(f32_to_bf16(xf[t] * scale(idx[t, k])))
                part = part + np.float32(w[t, k]) * y
            acc = acc + bf16_to_f32(f32_to_bf16(part))
        out[t] = f32_to_bf16(acc)
    return out
