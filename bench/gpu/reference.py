"""NumPy statement of docs/ops.md numerics, the oracle of the device harness (the Rust test
kernels/tests/gpu_kernels.rs checks the same kernels against kernels::reference)."""
import numpy as np
import ml_dtypes

F32 = np.float32
F_RCEIL, F_NAN_IGNORE, F_GEMMA, F_GAMMA_F32, F_INV_DIV, F_OAI, F_FP32_ACT = 1, 2, 4, 8, 16, 32, 64
F_NO_ROUND_SUM, F_SWISH_SINGLE = 128, 256


def rnd(x, dt):
    x = np.asarray(x, dtype=F32)
    if dt == "bf16":
        return x.astype(ml_dtypes.bfloat16).astype(F32)
    if dt == "f16":
        return x.astype(np.float16).astype(F32)
    return x


def bits_f32(u):
    return np.asarray(u, dtype=np.uint32).view(F32)


def scale_byte(amax, flags):
    amax = np.asarray(amax, dtype=F32)
    if flags & F_RCEIL:
        qb = (amax * F32(1.0 / 448.0)).astype(F32).view(np.uint32)
        e, m = qb >> 23, qb & 0x7FFFFF
        s = np.where(e == 0, (m > 0x400000).astype(np.uint32), np.minimum(e + (m != 0), 254))
    else:
        s = np.minimum((amax * F32(2.0 ** -8)).astype(F32).view(np.uint32) >> 23, 254)
    return np.where(np.isinf(amax), 254, s).astype(np.uint32)


def e4m3_sat(v):
    v = np.asarray(v, dtype=F32)
    c = np.clip(v, F32(-448), F32(448))
    b = c.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).copy()
    b[np.isnan(v)] = 0x7F
    b[np.isposinf(v)] = 0x7F  # non-finite elements are not saturated (docs/ops.md nan_policy)
    b[np.isneginf(v)] = 0xFF
    return b


def e4m3_to_f32(b):
    return np.asarray(b, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)


def e8m0_to_f32(s):
    s = np.asarray(s, dtype=np.uint32)
    v = np.where(s == 0, bits_f32(np.full(s.shape, 0x00400000)), bits_f32(s << 23))
    return np.where(s == 255, np.nan, v).astype(F32)


def quantize(y, flags):
    """y [R, K] fp32 (already rounded to T) -> (q uint8 [R, K], scale uint8 [R, K/32])."""
    y = np.asarray(y, dtype=F32)
    R, K = y.shape
    yb = y.reshape(R, K // 32, 32)
    nan = (~np.isfinite(yb)).any(-1)  # "propagate" fires on NaN and +-Inf
    amax = np.where(np.isnan(yb), F32(0), np.abs(yb)).max(-1).astype(F32)
    s = scale_byte(amax, flags)
    inv = np.where(s >= 254, bits_f32(np.full(s.shape, 0x00400000)),
                   bits_f32((254 - np.minimum(s, 253)) << 23)).astype(F32)
    q = e4m3_sat(yb * inv[..., None])
    s = s.astype(np.uint8)
    if not flags & F_NAN_IGNORE:
        s[nan] = 255
        q[nan] = 0x7F
    return q.reshape(R, K), s


def add_rmsnorm(x, r, gamma, dt, flags, eps=1e-6, gdt=None):
    """-> (y rounded to T, s = residual_out), both fp32 arrays."""
    x = np.asarray(x, F32)
    s = (x + np.asarray(r, F32)).astype(F32) if r is not None else x
    res_out = rnd(s, dt)
    if not flags & F_NO_ROUND_SUM:
        s = res_out
    v = ((s * s).astype(F32).astype(np.float64).sum(-1, keepdims=True) / s.shape[-1]).astype(F32)
    root = np.sqrt((v + F32(eps)).astype(F32)).astype(F32)
    n = (s / root) if flags & F_INV_DIV else s * (F32(1) / root)
    n = n.astype(F32)
    g = np.asarray(gamma, F32)
    gdt = gdt or dt  # gamma's dtype (Gemma + gamma_in_f32 = 0 adds 1 in it)
    w = g
    if flags & F_GEMMA:
        w = (F32(1) + g).astype(F32) if flags & F_GAMMA_F32 else rnd(F32(1) + g, gdt)
    y = rnd(n * w, dt) if flags & F_GAMMA_F32 else rnd(rnd(n, dt) * w, dt)
    return y, res_out


def fma32(a, b, c):
    """Correctly rounded f32 fma(a, b, c) (f32::mul_add, fmaf): a * b is exact in f64; the f64 sum
    is rounded to odd (TwoSum error term, then the odd neighbour when inexact), which makes the
    final rounding to f32 correct (53 >= 24 + 2 bits)."""
    a, b, c = (np.asarray(v, F32).astype(np.float64) for v in (a, b, c))
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * b
        s = p + c
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        odd = (s.view(np.int64) & 1) == 1
        fix = np.isfinite(s) & (err != 0) & ~odd
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(F32)


def exp_pinned(x):
    """kernels::reference::math::exp_f32 in numpy f32 (one correctly rounded fma per step)."""
    x = np.asarray(x, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        sh = F32(12582912.0)
        n = (fma32(x, F32(1.4426950408889634), sh) - sh).astype(F32)
        r = fma32(n, F32(-0.693359375), x)
        r = fma32(n, F32(2.12194440e-4), r)
        p = np.full_like(r, F32(1.9875691e-4))
        for c in (1.3981999e-3, 8.3334520e-3, 4.1665796e-2, 1.6666665e-1, 0.5, 1.0, 1.0):
            p = fma32(p, r, F32(c))
        y = p
        ni = np.nan_to_num(np.clip(n, -126, 127)).astype(np.int64)
        out = (y * ((ni + 127).astype(np.uint32) << 23).view(F32)).astype(F32)
    out = np.where(x > 88, np.inf, np.where(x < -87, 0, out)).astype(F32)
    return np.where(np.isnan(x), x, out).astype(F32)


def sigmoid_pinned(z):
    return (F32(1) / (F32(1) + exp_pinned(-np.asarray(z, F32)))).astype(F32)


def swiglu(g, u, dt, flags, alpha=1.702, limit=7.0, beta=1.0):
    """kernels::reference::swiglu_value, vectorised."""
    g, u = np.asarray(g, F32), np.asarray(u, F32)
    R = lambda v: rnd(v, dt)
    a, lim, b = F32(alpha), F32(limit), F32(beta)
    with np.errstate(over="ignore", invalid="ignore"):
        if flags & F_FP32_ACT:
            if flags & F_OAI:
                g = np.where(g > lim, lim, g)
                u = (np.where(u > lim, lim, np.where(u < -lim, -lim, u)) + b).astype(F32)
            return ((g * sigmoid_pinned(a * g)).astype(F32) * u).astype(F32)
        if flags & F_OAI:
            lr = R(lim)
            g = np.where(g > lr, lr, g)
            u = R(np.where(u > lr, lr, np.where(u < -lr, -lr, u)) + R(b))
        if flags & F_SWISH_SINGLE:
            sw = R(g * sigmoid_pinned(a * g))
        else:
            z = g if alpha == 1.0 else R(g * R(a))
            sw = R(g * R(sigmoid_pinned(z)))
        return R(sw * u)


def matmul(aq, as_, w, ws):
    """a [M, K] e4m3 + [M, K/32]; w [N, K] e4m3 + [N, K/32] -> fp64 [M, N]."""
    a = e4m3_to_f32(aq).astype(np.float64) * np.repeat(e8m0_to_f32(as_), 32, -1)
    b = e4m3_to_f32(w).astype(np.float64) * np.repeat(e8m0_to_f32(ws), 32, -1)
    return a @ b.T
