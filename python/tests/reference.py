"""The pure NumPy reference of the Python front's tests: inputs, the stand-in experts, and
the combine with the kernels' rounding (``examples/moe-dispatch/src/reference.rs``)."""

import numpy as np


def f32_to_bf16(v):
    """Rounds float32 to bf16 bits (uint16), ties to even; NaN is 0x7FFF."""
    f = np.asarray(v, np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    return np.where(np.isnan(f), 0x7FFF, (b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(b):
    """Widens bf16 bits (uint16) to float32."""
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def e4m3_from_f32(v):
    """float32 to e4m3 bits (uint8): to nearest, ties to even, saturating at 448; written
    independently of the Rust conversion (``shmem_device::fp8``) from the format's definition."""
    v = np.asarray(v, np.float32)
    sign = ((v.view(np.uint32) >> 24) & 0x80).astype(np.uint8)
    a = np.abs(v)
    # Subnormals: multiples of 2^-9, rounded half to even by NumPy's rint.
    sub = np.rint(a.astype(np.float64) * 512).astype(np.int64)
    bits = a.view(np.uint32).astype(np.int64)
    mant = bits & 0x7FFFFF
    exp = (bits >> 23) - 127
    # Normals: 3 mantissa bits, half to even; a carry moves into the exponent.
    m3 = mant >> 20
    rest = mant & 0xFFFFF
    up = (rest > 0x80000) | ((rest == 0x80000) & (m3 & 1 == 1))
    norm = ((exp + 7) << 3) + m3 + up
    code = np.where(a < 2.0**-6, sub, norm)
    code = np.where(a >= 448, 0x7E, np.minimum(code, 0x7E))
    return sign | code.astype(np.uint8)


def e4m3_to_f32(b):
    """e4m3 bits (uint8) to float32 (exact)."""
    b = np.asarray(b, np.uint8).astype(np.int64)
    e, m = (b >> 3) & 0xF, b & 7
    mag = np.where(e == 0, m / 512.0, (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


def quantize(x):
    """bf16 tokens ``[T, H]`` as the FP8 dispatch sends them: e4m3 bits ``[T, H]`` and one
    float32 scale per 128 values ``[T, H / 128]`` (the group's largest magnitude, at least
    1e-4, times 1/448 in float32, as DeepEP computes it; values times 448 over it)."""
    xf = bf16_to_f32(x).reshape(x.shape[0], -1, 128)
    amax = np.maximum(np.abs(xf).max(axis=2, keepdims=True), np.float32(1e-4))
    scales = amax * (np.float32(1) / np.float32(448))
    q = e4m3_from_f32(xf * (np.float32(448) / amax))
    return q.reshape(x.shape), scales[:, :, 0]


def dequantize(q, scales):
    """The values an FP8 row stands for: each e4m3 value times its group's scale."""
    v = e4m3_to_f32(q).reshape(q.shape[0], -1, 128) * scales[:, :, None]
    return v.reshape(q.shape)


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


def expert_layer(recv, counts, offsets, pe, scales=None):
    """The caller's experts on the received rows: row ``p`` of local expert ``l`` times
    ``scale(pe * L + l)``, rounded to bf16; rows of no pair stay zero. With ``scales``, the
    rows are FP8 (e4m3 bits and their scales)."""
    y = np.zeros(recv.shape, np.uint16)
    n_local = counts.shape[0]
    for l in range(n_local):
        for s in range(counts.shape[1]):
            a, b = offsets[l, s], offsets[l, s] + counts[l, s]
            # Only the pairs' rows: the others hold whatever an earlier call left there, which
            # dequantised may overflow.
            rows = recv[a:b]
            values = bf16_to_f32(rows) if scales is None else dequantize(rows, scales[a:b])
            y[a:b] = f32_to_bf16(values * scale(pe * n_local + l))
    return y


def combine_reference(x, idx, w, n_local, n, scale=scale, fp8=False):
    """Each token: per destination PE in order, ``part += w_k * y_k`` over its choices there
    (float32; ``y_k``: the token times ``scale(expert)``, rounded to bf16), rounded to bf16;
    the parts added in float32, starting from the first as it is, and rounded to bf16. With
    ``fp8``, the token is what an FP8 dispatch delivers of it."""
    xf = bf16_to_f32(x) if not fp8 else dequantize(*quantize(x))
    out = np.zeros(x.shape, np.uint16)
    for t in range(x.shape[0]):
        acc = None  # the first destination's part as it is, then the others added
        for d in range(n):
            ks = [k for k in range(idx.shape[1]) if idx[t, k] >= 0 and idx[t, k] // n_local == d]
            if not ks:
                continue
            part = np.zeros(x.shape[1], np.float32)
            for k in ks:
                y = bf16_to_f32(f32_to_bf16(xf[t] * scale(idx[t, k])))
                part = part + np.float32(w[t, k]) * y
            part = bf16_to_f32(f32_to_bf16(part))
            acc = part if acc is None else acc + part
        out[t] = f32_to_bf16(acc) if acc is not None else 0
    return out
