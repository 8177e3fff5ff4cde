"""NumPy statement of docs/ops.md numerics, the oracle of the device harness (the Rust test
kernels/tests/gpu_kernels.rs checks the same kernels against kernels::reference)."""
import numpy as np
import ml_dtypes

F32 = np.float32
F_RCEIL, F_NAN_IGNORE, F_GEMMA, F_GAMMA_F32, F_INV_DIV, F_OAI, F_FP32_ACT = 1, 2, 4, 8, 16, 32, 64


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
        e = amax.view(np.uint32) >> 23
        s = np.where(e > 8, e - 8, 0)
    return np.where(np.isinf(amax), 254, s).astype(np.uint32)


def e4m3_sat(v):
    v = np.asarray(v, dtype=F32)
    c = np.clip(v, F32(-448), F32(448))
    b = c.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).copy()
    b[np.isnan(v)] = 0x7F
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
    nan = np.isnan(yb).any(-1)
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


def add_rmsnorm(x, r, gamma, dt, flags, eps=1e-6):
    """-> (y rounded to T, s = residual_out), both fp32 arrays."""
    x = np.asarray(x, F32)
    s = rnd(x + np.asarray(r, F32), dt) if r is not None else x
    v = ((s.astype(np.float64) ** 2).sum(-1, keepdims=True) / s.shape[-1]).astype(F32)
    root = np.sqrt((v + F32(eps)).astype(F32)).astype(F32)
    n = (s / root) if flags & F_INV_DIV else s * (F32(1) / root)
    n = n.astype(F32)
    g = np.asarray(gamma, F32)
    w = (F32(1) + g).astype(F32) if flags & F_GEMMA else g
    y = rnd(n * w, dt) if flags & F_GAMMA_F32 else rnd(rnd(n, dt) * w, dt)
    return y, s


def swiglu(g, u, dt, flags, alpha=1.702, limit=7.0, beta=1.0):
    g, u = np.asarray(g, F32), np.asarray(u, F32)
    R = (lambda v: v) if flags & F_FP32_ACT else (lambda v: rnd(v, dt))
    alpha, limit, beta = F32(alpha), F32(limit), F32(beta)
    with np.errstate(over="ignore", invalid="ignore"):
        if flags & F_OAI:
            g = np.where(g > limit, limit, g)
            u = np.where(u > limit, limit, np.where(u < -limit, -limit, u))
        t = R(alpha * g)
        sg = R(F32(1) / (F32(1) + np.exp(-t)))
        glu = R(g * sg)
        if flags & F_OAI:
            u = R(u + beta)
        return R(glu * u).astype(F32)


def matmul(aq, as_, w, ws):
    """a [M, K] e4m3 + [M, K/32]; w [N, K] e4m3 + [N, K/32] -> fp64 [M, N]."""
    a = e4m3_to_f32(aq).astype(np.float64) * np.repeat(e8m0_to_f32(as_), 32, -1)
    b = e4m3_to_f32(w).astype(np.float64) * np.repeat(e8m0_to_f32(ws), 32, -1)
    return a @ b.T
