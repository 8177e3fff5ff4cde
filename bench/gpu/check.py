"""Correctness of kernels/gpu/* on the device against reference.py (docs/ops.md numerics).
Fresh random inputs plus edge blocks (zero, NaN, +-Inf, subnormal, huge, 448*2^k boundaries);
outputs are poisoned before every launch. Prints one line per case and a summary."""
import ctypes, json, os, sys
import numpy as np, torch
import reference as ref
from mxgpu import CLUSTERS, NORM_MAX_BLOCK, Module, Ops, swiglu_table_ok, swiglu_uses_table, F_RCEIL, F_NAN_IGNORE, F_GEMMA, F_GAMMA_F32, F_INV_DIV, F_OAI, F_FP32_ACT, F_NO_ROUND_SUM, F_SWISH_SINGLE

torch.manual_seed(1)
rng = np.random.default_rng(1)
DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
fails = []


def report(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (" " + detail if detail else ""), flush=True)
    if not ok:
        fails.append(name)


def to_dev(a32, dt):
    return torch.from_numpy(np.ascontiguousarray(a32, dtype=np.float32)).to(DT[dt]).cuda()


def host(t):
    return t.float().cpu().numpy() if t.dtype != torch.uint8 else t.cpu().numpy()


def poison(outs):
    for o in outs:
        if o is not None:
            o.view(torch.uint8).fill_(0xA5) if o.dtype != torch.uint8 else o.fill_(0xA5)


def edge_rows(R, K, dt):
    """Random rows with edge blocks planted in the first rows."""
    x = (rng.standard_normal((R, K)) * np.exp2(rng.integers(-8, 8, (R, 1)))).astype(np.float32)
    big = 60000.0 if dt == "f16" else 3e38
    tiny = 1e-39 if dt != "f16" else 3e-8
    specials = [0.0, np.nan, np.inf, -np.inf, tiny, big, 448.0, 447.0, 1.75, 1.7578125, -0.0]
    for i in range(min(R, 12)):
        j = rng.integers(0, K // 32) * 32
        kind = i % 6
        if kind == 0: x[i, j:j + 32] = 0.0; x[i, j + 5] = -0.0
        elif kind == 1: x[i, j + rng.integers(32)] = np.nan
        elif kind == 2: x[i, j + rng.integers(32)] = np.inf if i % 2 else -np.inf
        elif kind == 3: x[i, j:j + 32] = x[i, j:j + 32] * tiny
        elif kind == 4: x[i, j:j + 32] = rng.choice(specials[4:], 32)
        else: x[i, j:j + 32] = rng.standard_normal(32) * big / 8
    return ref.rnd(x, dt)


def check_vectors(ops):
    vecs = json.load(open(os.path.join(os.path.dirname(__file__), "spec_vectors.json")))
    for v in vecs:
        xb = np.array([int(b, 16) for b in v["bits"]], dtype=np.uint16)
        x = torch.from_numpy(xb.view(np.int16).copy()).view(torch.bfloat16).reshape(1, 32).cuda()
        # V9/V10 (NaN, Inf) are vLLM Triton semantics: nan_policy "ignore"
        flags = F_RCEIL | (F_NAN_IGNORE if ("nan" in v["name"] or "inf" in v["name"]) else 0)
        q, s = ops.quantize(x, flags)
        torch.cuda.synchronize()
        want = [int(b, 16) for b in v["values"]]
        got_q, got_s = list(q.cpu().numpy()[0]), int(s.cpu()[0, 0])
        rq, rs = ref.quantize(x.float().cpu().numpy(), flags)
        ok = got_q == want and got_s == v["scale"] and list(rq[0]) == want and int(rs[0, 0]) == v["scale"]
        report(f"vector {v['name']}", ok, "" if ok else f"scale {got_s} want {v['scale']} q {bytes(got_q).hex()} want {bytes(want).hex()}")


def check_quantize(ops):
    for dt in ("bf16", "f16", "f32"):
        for flags, e in ((0, 8), (F_RCEIL, 2), (F_NAN_IGNORE, 8), (F_RCEIL | F_NAN_IGNORE, 2)):
            R, K = 37, 2048
            x32 = edge_rows(R, K, dt)
            x = to_dev(x32, dt)
            outs = (torch.empty(R, K, dtype=torch.uint8, device="cuda"), torch.empty(R, K // 32, dtype=torch.uint8, device="cuda"))
            poison(outs)
            q, s = ops.quantize(x, flags, outs, e=e)
            rq, rs = ref.quantize(x.float().cpu().numpy(), flags)
            dq, ds = (host(q) != rq).sum(), (host(s) != rs).sum()
            report(f"quantize {dt} flags={flags} e={e}", dq == 0 and ds == 0, f"q_mismatch={dq} s_mismatch={ds}")


def check_norm(ops):
    cases = []
    for dt in ("bf16", "f16", "f32"):
        for flags in (F_GEMMA | F_GAMMA_F32, F_GAMMA_F32 | F_RCEIL, 0, F_INV_DIV | F_GEMMA | F_GAMMA_F32 | F_NAN_IGNORE):
            cases.append((dt, flags, 6144, 9, True, False))
        cases.append((dt, F_GEMMA | F_NO_ROUND_SUM, 2048, 5, True, False))
    cases += [("bf16", F_GEMMA | F_GAMMA_F32, 6144, 300, True, False), ("bf16", F_GEMMA | F_GAMMA_F32, 2048, 3, False, True), ("bf16", F_GEMMA | F_GAMMA_F32 | F_RCEIL, 16384, 4, True, True),
              ("bf16", F_GAMMA_F32, 32768, 2, True, False), ("bf16", F_GAMMA_F32, 96, 5, True, False),
              ("f16", F_GEMMA | F_GAMMA_F32, 4096, 8192 // 64, True, True)]
    for dt, flags, H, M, has_res, g32 in cases:
        x32 = rng.standard_normal((M, H)).astype(np.float32) * 3
        if M > 2:
            x32[1, 7] = np.nan; x32[2, 100 % H] = 1e30 if dt != "f16" else 60000.0
        x32 = ref.rnd(x32, dt)
        r32 = ref.rnd(rng.standard_normal((M, H)), dt) if has_res else None
        gdt = "f32" if g32 else dt
        g32v = ref.rnd(rng.standard_normal(H) * 0.1, gdt)
        x, g = to_dev(x32, dt), to_dev(g32v, gdt)
        r = to_dev(r32, dt) if has_res else None
        y_ref, s_ref = ref.add_rmsnorm(x32, r32, g32v, dt, flags, gdt=gdt)
        rq, rs = ref.quantize(y_ref, flags)
        # the runtime's choice, the one-block-per-row kernels with 1-4 chunks per lane (where a block
        # holds the row), rows split over clusters of 2, 4, 8 blocks
        variants = [dict(nch=None, split=None)]
        variants += [dict(nch=c, split=1) for c in (1, 2, 3, 4) if H // 8 <= c * NORM_MAX_BLOCK[c]]
        variants += [dict(split=c) for c in (2, 4, 8) if CLUSTERS and (H // 32) % c == 0 and H // 8 // c <= 1024]
        for var in variants:
            outs = (torch.empty(M, H, dtype=torch.uint8, device="cuda"), torch.empty(M, H // 32, dtype=torch.uint8, device="cuda"),
                    torch.empty_like(x), torch.empty_like(x))
            poison(outs)
            q, s, ro, no = ops.norm_quant(x, r, g, flags, outs=outs, **var)
            norm_compare(dt, flags, H, M, has_res, g32, var, q, s, ro, no, y_ref, s_ref, rq, rs)


def check_norm_lean(ops):
    """The lean split-8 kernel (_c1_s8_lean; issue 6 follow-up 10): the runtime's
    M = 8 case (bf16, bf16 gamma, Gemma + gamma_in_f32, residual, residual_out and normed) at M = 1,
    8, 16 with edge rows (zero, subnormal, a block of 448s, NaN / Inf / 1e30 inputs; at M = 16 NaN
    and Inf weights), every output byte equal to the generic split-8 kernel's and the reference
    comparison of check_norm."""
    if not CLUSTERS:
        return
    H, flags = 6144, F_GEMMA | F_GAMMA_F32
    for M in (1, 8, 16):
        x32 = rng.standard_normal((M, H)).astype(np.float32) * 3
        r32 = rng.standard_normal((M, H)).astype(np.float32)
        g32v = rng.standard_normal(H) * 0.1
        if M > 1:
            x32[1] = 0.0; r32[1] = 0.0  # zero row
            x32[2] *= 1e-39; r32[2] *= 1e-39  # subnormal row
            x32[3, :32] = 448.0; x32[3, 32:64] = -448.0; r32[3, :64] = 0.0  # saturating blocks
            x32[4, 7] = np.nan; x32[5, 100] = np.inf; x32[6, 3000] = 1e30; x32[7, 5000] = -np.inf
        if M > 8:
            g32v[64] = np.nan; g32v[200] = np.inf; g32v[6143] = -np.inf
        x32, r32, g32v = ref.rnd(x32, "bf16"), ref.rnd(r32, "bf16"), ref.rnd(g32v, "bf16")
        x, r, g = to_dev(x32, "bf16"), to_dev(r32, "bf16"), to_dev(g32v, "bf16")
        y_ref, s_ref = ref.add_rmsnorm(x32, r32, g32v, "bf16", flags, gdt="bf16")
        rq, rs = ref.quantize(y_ref, flags)
        mk = lambda: (torch.empty(M, H, dtype=torch.uint8, device="cuda"), torch.empty(M, H // 32, dtype=torch.uint8, device="cuda"),
                      torch.empty_like(x), torch.empty_like(x))
        base = mk(); poison(base)
        ops.norm_quant(x, r, g, flags, outs=base, split=8)
        outs = mk(); poison(outs)
        q, s, ro, no = ops.norm_quant(x, r, g, flags, outs=outs, split=8, opt="_lean")
        diff = sum(int((a.view(torch.uint8) != b.view(torch.uint8)).sum()) for a, b in zip(base, outs))
        report(f"norm lean bf16 flags={flags} H={H} M={M} split=8 opt=_lean vs generic _c1_s8", diff == 0, f"bytes_diff={diff}")
        norm_compare("bf16", flags, H, M, True, False, dict(split=8, opt="_lean"), q, s, ro, no, y_ref, s_ref, rq, rs)


def norm_compare(dt, flags, H, M, has_res, g32, var, q, s, ro, no, y_ref, s_ref, rq, rs):
    """Reports one norm launch: residual_out and q (against the GPU's own normed row) bit for bit,
    normed and q against the reference up to rare 1-ulp rsqrt/division differences."""
    gq, gs = ref.quantize(host(no), flags)  # the quantizer on the GPU's own normed row
    same = lambda a, b: int((~((a == b) | (np.isnan(a) & np.isnan(b)))).sum())
    d_res, d_norm = same(host(ro), s_ref), same(host(no), y_ref)
    d_q, d_s = int((host(q) != rq).sum()), int((host(s) != rs).sum())
    d_q_own = int((host(q) != gq).sum()) + int((host(s) != gs).sum())
    ok = d_res == 0 and d_q_own == 0 and d_norm <= M * H // 1000 and d_q <= M * H // 500
    report(f"norm {dt} flags={flags} H={H} M={M} res={has_res} gamma_f32={g32} " + " ".join(f"{k}={v}" for k, v in var.items()), ok,
           f"residual_diff={d_res} normed_diff={d_norm} q_diff={d_q} scale_diff={d_s} q_vs_own_normed={d_q_own}")


def check_swiglu(ops):
    for dt in ("bf16", "f16", "f32"):
        for layout in ("separate", "split_halves", "interleaved"):
            for flags, e, block, *akw in ((F_OAI, 8, 256), (F_OAI | F_FP32_ACT | F_RCEIL, 2, 256), (0, 8, 128), (F_OAI | F_NAN_IGNORE, 2, 64),
                                    (F_SWISH_SINGLE, 8, 256), (F_FP32_ACT, 8, 512), (F_OAI | F_FP32_ACT, 8, 128), (F_OAI, 1, 64), (F_OAI | F_FP32_ACT, 1, 32),
                                    (F_OAI | F_FP32_ACT, None, None), (F_OAI, 8, 256, 1.0, 0.0, 0.5),
                                    (F_OAI | F_FP32_ACT, 8, 256, 1.0, -1.0, 1.0), (F_SWISH_SINGLE, 2, 256, 1.0, 7.0, 1.0),
                                    (0, 1, 64, 1.0, 7.0, 1.0), (F_OAI | F_FP32_ACT | F_RCEIL, 8, 128),
                                    (F_FP32_ACT | F_NAN_IGNORE, 8, 256), (F_OAI | F_FP32_ACT, 8, 64, 100.0, 7.0, 1.0)):
                kw = dict(zip(("alpha", "limit", "beta"), akw))
                M, I = 19, 768
                g32 = ref.rnd(rng.standard_normal((M, I)) * 4, dt)
                u32 = ref.rnd(rng.standard_normal((M, I)) * 4, dt)
                g32[0, 3] = np.nan; g32[1, 40] = 100.0; u32[2, 70] = -100.0; g32[3, 96:128] = 0.0; u32[3, 96:128] = 0.0
                # |alpha g| > 87 (the logistic's exact fallback), a NaN and infinities in up, -0
                g32[4, 5] = -60.0; g32[5, 6] = -200.0; u32[5, 7] = np.nan; g32[6, 8] = -0.0
                if dt != "f16":
                    g32[6, 9] = np.inf; g32[7, 10] = -np.inf; u32[7, 11] = np.inf
                if layout == "separate":
                    gate, up = to_dev(g32, dt), to_dev(u32, dt)
                elif layout == "split_halves":
                    gate, up = to_dev(np.concatenate([g32, u32], 1), dt), None
                else:
                    gate, up = to_dev(np.stack([g32, u32], -1).reshape(M, 2 * I), dt), None
                outs = (torch.empty(M, I, dtype=torch.uint8, device="cuda"), torch.empty(M, I // 32, dtype=torch.uint8, device="cuda"))
                act = ref.swiglu(g32, u32, dt, flags, **kw)
                rq, rs = ref.quantize(act, flags)
                # The certified fast logistic and the pinned one (the launch table's choice by size).
                runs = [("", None, None)] + ([("", True, None), ("", False, None)] if (dt, e) == ("bf16", 8) else [])
                # The table kernel where its preconditions hold, one block per chunk and a grid of 3
                # blocks (each loops over several chunks).
                if dt == "bf16" and e == 8:
                    a = dict(alpha=1.702, limit=7.0) | kw
                    runs += [("_table", None, g) for g in (None, 3)
                             if swiglu_table_ok(DT[dt], e, block, flags, a["alpha"], a["limit"])]
                for opt, pinned, grid in runs:
                    poison(outs)
                    q, s = ops.swiglu_quant(gate, up, I, layout, flags, outs=outs, e=e, block=block, opt=opt, pinned=pinned, grid=grid, **kw)
                    hq = host(q)
                    d_q, d_s = int((hq != rq).sum()), int((host(s) != rs).sum())
                    # The pinned exp / logistic (docs/ops.md) is the same function on both sides: bit-exact.
                    ok = d_q == 0 and d_s == 0
                    report(f"swiglu {dt} {layout} flags={flags} e={e} block={block}" + (f" opt={opt}" if opt else "")
                           + (f" pinned={pinned}" if pinned is not None else "") + (f" grid={grid}" if grid else "")
                           + "".join(f" {k}={v}" for k, v in kw.items()), ok, f"q_diff={d_q} scale_diff={d_s}")


def check_rcp(ops):
    """The SwiGLU logistic's reciprocal (mx_rcp_fast, mx_common.h) gives the bits of the IEEE
    1.0f / d for every d in [1, 2) and [2^125, 2^126) (the range it serves) and at 2^20 random d
    in between, on this GPU."""
    lo = np.arange(0x3F800000, 0x40000000, dtype=np.uint32)
    hi = np.arange(0x7E000000, 0x7E800000, dtype=np.uint32)
    mid = rng.integers(0x3F800000, 0x7E800000, 1 << 20, dtype=np.uint64).astype(np.uint32)
    d = torch.from_numpy(np.concatenate([lo, hi, mid]).view(np.float32)).cuda()
    bad = torch.zeros(1, dtype=torch.int32, device="cuda")
    first = torch.zeros(1, dtype=torch.float32, device="cuda")
    n = d.numel()
    ops.m.launch("mx_test_rcp", (-(-n // 256),), (256,), [d, ctypes.c_longlong(n), bad, first])
    nb = int(host(bad)[0])
    report(f"rcp fast path == 1.0f / d over {n} values", nb == 0, f"mismatches={nb}" + (f" first d={float(host(first)[0])!r}" if nb else ""))


def check_sigmoid_cert(ops):
    """The packed SwiGLU path's fast logistic (mx_sigmoid_approx + mx_sigmoid_certified,
    swiglu_mxquant.hip): wherever the certificate accepts a z, bf16(fast) is bf16(pinned), for every
    bf16 z (the packed path's z is a bf16 value) and every f32 z in (-87, 87); reports the exact
    fallback's rate and the largest ulp distance between the two sigmas."""
    for name, bf16, start, n in (("bf16", 1, 0, 1 << 16), ("f32 z >= 0", 0, 0, 0x42AE0000), ("f32 z < 0", 0, 0x80000000, 0x42AE0000)):
        out = torch.zeros(3, dtype=torch.int32, device="cuda")
        ops.m.launch("mx_test_sigmoid_cert", (-(-n // 256),), (256,), [ctypes.c_uint(start), ctypes.c_longlong(n), ctypes.c_int(bf16), out])
        wrong, refused, ulps = (int(v) & 0xFFFFFFFF for v in host(out))
        # 12 ulps: the bound mx_quant_group8_certified's 2^-19 margin assumes.
        report(f"sigmoid certificate over all {name} z, |z| < 87", wrong == 0 and ulps <= 12,
               f"wrong={wrong} refused={refused} ({refused / n:.2e}) max_ulps={ulps}")


def check_sigma_table(ops):
    """The logistic table of the `_table` SwiGLU kernels (swiglu_sigma_table.hip, generated by
    kernels/src/gpu/sigma_table.rs): the kernels' own lookup (mx_sigma_lookup2, from shared
    memory) gives bf16(mx_sigmoid_pinned(z)) on this GPU for every non-NaN bf16 z."""
    out = torch.zeros(2, dtype=torch.int32, device="cuda")
    ops.m.launch("mx_test_sigma_table", (128,), (256,), [out])
    bad, seen = (int(v) for v in host(out))
    report("sigma table lookup == bf16(pinned sigma) for every bf16 z", bad == 0 and seen == 65536 - 254,
           f"mismatches={bad} looked_up={seen}")


def check_swiglu_all_bf16(ops):
    """The packed and the fp32-activation fast paths on every bf16 gate value (alpha 1: z = g),
    silu and OAI, against the reference (alpha 100: the fp32 path's exact branch); "host": the
    launch table's choice (at M = 192, 147456 outputs: the table kernel where swiglu_uses_table)."""
    M, I = 192, 768
    allg = np.arange(1 << 16, dtype=np.uint32) << 16
    g32 = np.resize(allg.view(np.float32), M * I).reshape(M, I).copy()
    u32 = ref.rnd(rng.standard_normal((M, I)) * 2, "bf16")
    for flags, kw in ((0, dict(alpha=1.0)), (F_OAI, dict(alpha=1.0, limit=7.0, beta=1.0)), (F_OAI | F_NAN_IGNORE, {}),
                      (F_FP32_ACT, dict(alpha=1.0)), (F_OAI | F_FP32_ACT | F_RCEIL, {}), (F_OAI | F_FP32_ACT | F_NAN_IGNORE, {}),
                      (F_FP32_ACT, dict(alpha=100.0)), (0, dict(alpha=3e38)), (F_OAI, dict(alpha=-1e-30, limit=7.0, beta=1.0))):
        gate, up = to_dev(g32, "bf16"), to_dev(u32, "bf16")
        outs = (torch.empty(M, I, dtype=torch.uint8, device="cuda"), torch.empty(M, I // 32, dtype=torch.uint8, device="cuda"))
        with np.errstate(all="ignore"):
            act = ref.swiglu(g32, u32, "bf16", flags, **kw)
            rq, rs = ref.quantize(act, flags)
        a = dict(alpha=1.702, limit=7.0) | kw
        for opt in ("host", "") + (("_table",) if swiglu_table_ok(torch.bfloat16, 8, 256, flags, a["alpha"], a["limit"]) else ()):
            poison(outs)
            if opt == "host":
                q, s = ops.swiglu_quant(gate, up, I, "separate", flags, outs=outs, **kw)
                what = "host" + ("_table" if swiglu_uses_table(M * I, torch.bfloat16, flags, a["alpha"], a["limit"]) else "")
            else:
                q, s = ops.swiglu_quant(gate, up, I, "separate", flags, outs=outs, e=8, block=256, pinned=False, opt=opt, **kw)
                what = f"e=8{opt}"
            d_q, d_s = int((host(q) != rq).sum()), int((host(s) != rs).sum())
            report(f"swiglu bf16 every gate value {what} flags={flags} {kw}", d_q == 0 and d_s == 0, f"q_diff={d_q} scale_diff={d_s}")
        # The table kernel's split-halves loop (follow-up 9; other flags take its generic loop):
        # split halves, one block per chunk and grids of 5 / 7 blocks (each loops over ~10 chunks,
        # the stride's column carry taken).
        gu_all = to_dev(np.concatenate([g32, u32], 1), "bf16")
        for grid in (None, 5, 7) if swiglu_table_ok(torch.bfloat16, 8, 256, flags, a["alpha"], a["limit"]) else ():
            poison(outs)
            q, s = ops.swiglu_quant(gu_all, None, I, "split_halves", flags, outs=outs, e=8, block=256, pinned=False, opt="_table", grid=grid, **kw)
            d_q, d_s = int((host(q) != rq).sum()), int((host(s) != rs).sum())
            report(f"swiglu bf16 every gate value split e=8_table grid={grid} flags={flags} {kw}", d_q == 0 and d_s == 0, f"q_diff={d_q} scale_diff={d_s}")
    # The bench's data (gate_up ~ N(0, 8^2)) at a size where the fallbacks happen by the hundred.
    M = 2048
    gu32 = ref.rnd(rng.standard_normal((M, 2 * I)) * 8, "bf16")
    gu = to_dev(gu32, "bf16")
    for flags in (F_OAI, F_OAI | F_FP32_ACT, 0, F_FP32_ACT | F_RCEIL):
        outs = (torch.empty(M, I, dtype=torch.uint8, device="cuda"), torch.empty(M, I // 32, dtype=torch.uint8, device="cuda"))
        rq, rs = ref.quantize(ref.swiglu(gu32[:, :I], gu32[:, I:], "bf16", flags), flags)
        table = [("_table", g, b) for g, b in ((None, 256), (None, 128), (97, 256))
                 if swiglu_table_ok(torch.bfloat16, 8, b, flags, 1.702, 7.0)]
        for opt, grid, block in [("host", None, None), ("", None, 256)] + table:
            poison(outs)
            if opt == "host":  # the launch table's choice (the table kernel, occupancy-capped grid, where it applies)
                q, s = ops.swiglu_quant(gu, None, I, "split_halves", flags, outs=outs)
                what = "host" + ("_table" if swiglu_uses_table(M * I, torch.bfloat16, flags) else "")
            else:
                q, s = ops.swiglu_quant(gu, None, I, "split_halves", flags, outs=outs, e=8, block=block, pinned=False, opt=opt, grid=grid)
                what = f"e=8{opt} block={block}" + (f" grid={grid}" if grid else "")
            d_q, d_s = int((host(q) != rq).sum()), int((host(s) != rs).sum())
            report(f"swiglu bf16 N(0, 64) M={M} {what} flags={flags}", d_q == 0 and d_s == 0, f"q_diff={d_q} scale_diff={d_s}")
    # A partial last chunk (2045 rows: 196320 lanes, 766.9 chunks of 256) for the split loop,
    # one block per chunk and grids of 97 / 300 blocks (the partial chunk reached by a looping block).
    M = 2045
    gu = to_dev(gu32[:M], "bf16")
    for flags in (F_OAI, 0):
        outs = (torch.empty(M, I, dtype=torch.uint8, device="cuda"), torch.empty(M, I // 32, dtype=torch.uint8, device="cuda"))
        rq, rs = ref.quantize(ref.swiglu(gu32[:M, :I], gu32[:M, I:], "bf16", flags), flags)
        for grid in (None, 97, 300):
            poison(outs)
            q, s = ops.swiglu_quant(gu, None, I, "split_halves", flags, outs=outs, e=8, block=256, pinned=False, opt="_table", grid=grid)
            d_q, d_s = int((host(q) != rq).sum()), int((host(s) != rs).sum())
            report(f"swiglu bf16 N(0, 64) M={M} e=8_table grid={grid} flags={flags}", d_q == 0 and d_s == 0, f"q_diff={d_q} scale_diff={d_s}")


def rand_e4m3(shape):
    b = rng.integers(0, 256, shape, dtype=np.uint8)
    b[(b & 0x7F) == 0x7F] = 0x3C  # no NaN codes
    return b


def rand_frag_weights(N, K):
    """Random e4m3 weights [N, K] (no NaN codes) with E8M0 scales near 2^0, fragment-packed on the
    device (mxgpu.pack_frag)."""
    from mxgpu import pack_frag
    w = torch.from_numpy(rand_e4m3((N, K))).cuda()
    ws = torch.from_numpy(rng.integers(118, 130, (N, K // 32), dtype=np.uint8)).cuda()
    return pack_frag(w, ws)


def check_matmul(ops):
    for N, K in ((1536, 6144), (6144, 768), (100, 256)):
        w = rand_e4m3((N, K)); ws = rng.integers(110, 135, (N, K // 32), dtype=np.uint8)
        wd, wsd = torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda()
        for M in (1, 3, 8, 9, 16, 21):
            a32 = ref.rnd(rng.standard_normal((M, K)) * 2, "bf16")
            a = to_dev(a32, "bf16")
            aq, as_ = ops.quantize(a, 0)
            yref = ref.matmul(host(aq), host(as_), w, ws)
            for out in ("bf16", "f32"):
                y1 = ops.matmul_tc(wd, wsd, M, aq=aq, as_=as_, out_dtype=DT[out])
                y2 = ops.matmul_tc(wd, wsd, M, af=a, out_dtype=DT[out], flags=0)
                y3 = ops.matmul_tc(wd, wsd, M, aq=aq, as_=as_, out_dtype=DT[out], warps=16, pf=N > 2000)
                h1 = host(y1).astype(np.float64)
                err = np.linalg.norm(h1 - yref) / np.linalg.norm(yref)
                exact_inkernel = np.array_equal(host(y1), host(y2), equal_nan=True)
                # 16 warps split K differently: same values up to fp32 summation order
                err3 = np.linalg.norm(host(y3).astype(np.float64) - yref) / np.linalg.norm(yref)
                ok = err < 4e-3 and err3 < 4e-3 and exact_inkernel
                report(f"matmul_tc N={N} K={K} M={M} out={out}", ok, f"rel_err={err:.2e} in_gemm_quant_identical={exact_inkernel}")
            if M in (3, 16):
                for bmode in (0, 1, 2):
                    if bmode == 0:
                        b, bs = torch.from_numpy(np.ascontiguousarray(w.T)).cuda(), torch.from_numpy(np.ascontiguousarray(ws.T)).cuda()
                        r = yref
                    elif bmode == 1:
                        b, bs, r = wd, wsd, yref
                    else:
                        bf = ref.rnd(rng.standard_normal((K, N)), "bf16")
                        b, bs = to_dev(bf, "bf16"), None
                        adq = ref.e4m3_to_f32(host(aq)).astype(np.float64) * np.repeat(ref.e8m0_to_f32(host(as_)), 32, -1)
                        r = adq @ bf.astype(np.float64)
                    y = ops.matmul_generic(aq, as_, b, bs, bmode, N, torch.float32)
                    err = np.linalg.norm(host(y) - r) / np.linalg.norm(r)
                    report(f"matmul_generic bmode={bmode} N={N} K={K} M={M}", err < 1e-5, f"rel_err={err:.2e}")


def check_matmul_splitk(ops):
    """The split-K GEMM (mx_matmul_splitk.hip) at every cluster size and several block sizes:
    within the accumulation bound of the f64 reference; in-GEMM quantization bit-identical to
    quantize + GEMM at the same launch shape; the same launch twice gives the same bits."""
    if not CLUSTERS:
        return report("matmul_sk skipped (MXFUSE_GPU_CLUSTERS=off)", True)
    for N, K in ((1536, 6144), (6144, 768), (100, 256), (48, 96), (40, 1056)):
        w = rand_e4m3((N, K)); ws = rng.integers(110, 135, (N, K // 32), dtype=np.uint8)
        wd, wsd = torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda()
        for M in (1, 3, 8, 9, 16, 21):
            a32 = ref.rnd(rng.standard_normal((M, K)) * 2, "bf16")
            if M == 9:
                a32[4, 33] = np.nan  # propagates to output row 4 (nan_policy propagate)
            a = to_dev(a32, "bf16")
            aq, as_ = ops.quantize(a, 0)
            yref = ref.matmul(host(aq), host(as_), w, ws)
            fin = np.isfinite(yref)
            S0, W0 = ops.sk_choice(N, K, M)
            for S in (1, 2, 4):
                for warps in sorted({W0, 4, 16}):
                    for out in ("bf16", "f32"):
                        y1 = ops.matmul_sk(wd, wsd, M, aq=aq, as_=as_, out_dtype=DT[out], warps=warps, S=S)
                        y2 = ops.matmul_sk(wd, wsd, M, af=a, out_dtype=DT[out], warps=warps, S=S)
                        y3 = ops.matmul_sk(wd, wsd, M, aq=aq, as_=as_, out_dtype=DT[out], warps=warps, S=S)
                        h1 = host(y1).astype(np.float64)
                        err = np.linalg.norm((h1 - yref)[fin]) / np.linalg.norm(yref[fin])
                        nan_ok = bool(np.isnan(h1[~fin]).all()) and not np.isnan(h1[fin]).any()
                        same_in = np.array_equal(host(y1), host(y2), equal_nan=True)
                        same_rep = np.array_equal(host(y1), host(y3), equal_nan=True)
                        ok = err < (4e-3 if out == "bf16" else 1e-5) and nan_ok and same_in and same_rep
                        report(f"matmul_sk N={N} K={K} M={M} S={S} warps={warps} out={out}", ok,
                               f"rel_err={err:.2e} nan_ok={nan_ok} in_gemm_identical={same_in} deterministic={same_rep}")


def k128_gemm_cases(ops):
    """The decode-GEMM cases of the pipeline and fragment checks (K % 128 == 0): the MiniMax-M3
    shapes and ragged ones, E8M0 2^-127 and NaN weight scales at N = 100 (the kernels' exact
    decode path), M = 1 ... 40 with a NaN activation at M = 9 (propagates to output row 4).
    Yields (N, K, w, ws, M, aq, as_, yref, finite)."""
    for N, K in ((1536, 6144), (6144, 768), (100, 256), (40, 1152), (48, 128)):
        w = rand_e4m3((N, K)); ws = rng.integers(110, 135, (N, K // 32), dtype=np.uint8)
        if N == 100:
            ws[3, 1] = 0; ws[7, 0] = 255
        for M in (1, 3, 8, 9, 16, 21, 40):
            a32 = ref.rnd(rng.standard_normal((M, K)) * 2, "bf16")
            if M == 9:
                a32[4, 33] = np.nan
            aq, as_ = ops.quantize(to_dev(a32, "bf16"), 0)
            yref = ref.matmul(host(aq), host(as_), w, ws)
            yield N, K, w, ws, M, aq, as_, yref, np.isfinite(yref)


def gemm_verdict(y1, same, yref, fin, out):
    """(ok, detail) of a GEMM output y1 against the f64 reference: relative error within the
    accumulation bound (bf16 / f16 out 4e-3, f32 out 1e-5; f16 compared below its 65504 limit),
    NaN exactly where the reference has NaN, and `same` (repeat launches bit-identical)."""
    h1 = host(y1).astype(np.float64)
    sel = fin & (np.abs(yref) < 6e4) if out == "f16" else fin
    err = np.linalg.norm((h1 - yref)[sel]) / np.linalg.norm(yref[sel])
    nan_ok = bool(np.isnan(h1[~fin]).all()) and not np.isnan(h1[fin]).any()
    ok = err < (1e-5 if out == "f32" else 4e-3) and nan_ok and same
    return ok, f"rel_err={err:.2e} nan_ok={nan_ok} deterministic={same}"


def repeat_bits(ops, launch, shape, dtype):
    """(y1, same): launch(y=y1) into a poisoned y1 of `shape` / `dtype`, then launch() twice more,
    the second under PDL; `same`: all three gave the same bits."""
    y1 = torch.empty(*shape, dtype=dtype, device="cuda"); poison([y1])
    launch(y=y1)
    y2 = launch()
    with ops.m.pdl_on():
        y3 = launch()
    return y1, all(np.array_equal(host(y1), host(o), equal_nan=True) for o in (y2, y3))


def check_matmul_pipe(ops):
    """The cp.async pipeline GEMM (mx_matmul_pipe.hip) at every (warps, cluster split) it is compiled
    for (k128_gemm_cases, gemm_verdict): the same launch twice gives the same bits; every output
    is written (the buffer starts poisoned)."""
    from mxgpu import PIPE_WS, PIPE_SS, pipe_choice
    if not CLUSTERS:
        return report("matmul_pipe skipped (MXFUSE_GPU_CLUSTERS=off)", True)
    for N, K, w, ws, M, aq, as_, yref, fin in k128_gemm_cases(ops):
        wd, wsd = torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda()
        W0, S0 = pipe_choice(N, K, M)
        W0, S0 = (W0, S0) if W0 else (2, 2)
        shapes = [(W_, S_, "bf16") for W_ in PIPE_WS for S_ in PIPE_SS]
        shapes += [(W0, S0, "f32"), (W0, S0, "f16"), (1, 2, "f32"), (4, 8, "f32")]
        for W_, S_, out in shapes:
            y1 = torch.empty(M, N, dtype=DT[out], device="cuda"); poison([y1])
            ops.matmul_pipe(wd, wsd, M, aq, as_, out_dtype=DT[out], W=W_, S=S_, y=y1)
            y3 = ops.matmul_pipe(wd, wsd, M, aq, as_, out_dtype=DT[out], W=W_, S=S_)
            ok, detail = gemm_verdict(y1, np.array_equal(host(y1), host(y3), equal_nan=True), yref, fin, out)
            report(f"matmul_pipe N={N} K={K} M={M} W={W_} S={S_} out={out}", ok, detail)


def check_matmul_frag(ops):
    """The fragment-packed GEMM (mx_matmul_frag.hip) at every (warps, cluster split) it is compiled
    for, weights packed by mxgpu.pack_frag (k128_gemm_cases, gemm_verdict): the same launch twice
    -- and under a programmatic (PDL) launch with the weights read before the wait -- gives the
    same bits; every output is written (the buffer starts poisoned)."""
    from mxgpu import FRAG_WS, FRAG_SS, frag_choice, frag_kernel, pack_frag
    if not CLUSTERS:
        return report("matmul_frag skipped (MXFUSE_GPU_CLUSTERS=off)", True)
    for N, K, w, ws, M, aq, as_, yref, fin in k128_gemm_cases(ops):
        wf, wsf = pack_frag(torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda())
        W0, S0 = frag_choice(N, K, M)
        shapes = [(W_, S_, "bf16") for W_ in FRAG_WS for S_ in FRAG_SS]
        shapes += [(W0, S0, "f32"), (W0, S0, "f16"), (2, 2, "f32"), (8, 8, "f32")]
        shapes += [(3, 1, o) for o in ("bf16", "f16", "f32")] if M <= 8 else []  # m8 only
        for W_, S_, out in shapes:
            y1 = torch.empty(M, N, dtype=DT[out], device="cuda"); poison([y1])
            ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=W_, S=S_, y=y1)
            y3 = ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=W_, S=S_)
            with ops.m.pdl_on():
                y4 = ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=W_, S=S_, pre=1)
                y5 = ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=W_, S=S_, pre=3)
            same = all(np.array_equal(host(y1), host(o), equal_nan=True) for o in (y3, y4, y5))
            ok, detail = gemm_verdict(y1, same, yref, fin, out)
            report(f"matmul_frag N={N} K={K} M={M} W={W_} S={S_} out={out}", ok, detail + " (incl. PDL, L2 prefetch)")
    # The runtime's choice (mxgpu.frag_kernel: `_t2` at M <= 8, `_fs` above on the measured
    # shapes, `_t2` on two row tiles at 9-16 rows on 4096 x 1152; the L2 prefetch) against the m8
    # / m16 kernel at the same (W, S) and row tiles.
    for N, K in ((1536, 6144), (6144, 768), (4096, 1152)):
        wf, wsf = rand_frag_weights(N, K)
        for M in (1, 5, 8, 12, 13, 16):
            aq, as_ = ops.quantize(to_dev(ref.rnd(rng.standard_normal((M, K)) * 2, "bf16"), "bf16"), 0)
            rows, W_, S_, sfx, pf = frag_kernel(N, K, M)
            with ops.m.pdl_on():
                y_rt = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_))
            if sfx in ("_g1", "_g1c"):  # no m8 / m16 kernel at W = 6 (check_matmul_frag_g1 / _g1c compare where there is)
                y_plain = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=W_, S=S_, sfx=sfx))
            else:
                y_plain = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=W_, S=S_, rows=rows))
            report(f"matmul_frag runtime choice N={N} K={K} M={M} rows={rows} W={W_} S={S_} kernel={sfx or '-'} l2pf={pf}",
                   np.array_equal(y_rt, y_plain, equal_nan=True), "== the m8 / m16 kernel (`_g1`: itself), PDL")
    # The m8 kernel on 3 warps (mxgpu.trim_idle_warp) splits K exactly as 4 warps do where the
    # runtime takes it (the fourth warp's range was empty), so it gives the same bits.
    for N, K in ((256, 640), (384, 768), (128, 1152)):
        wf, wsf = rand_frag_weights(N, K)
        for M in (1, 5, 8):
            aq, as_ = ops.quantize(to_dev(ref.rnd(rng.standard_normal((M, K)) * 2, "bf16"), "bf16"), 0)
            for out in ("bf16", "f32"):
                y3 = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=3, S=1))
                y4 = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=4, S=1))
                report(f"matmul_frag m8 w3 == w4 N={N} K={K} M={M} out={out}", np.array_equal(y3, y4, equal_nan=True))


def edge_weight_blocks(w, ws):
    """The fragment GEMM checks' edge blocks, written into e4m3 weight bytes w [N, K] (N >= 13,
    K >= 96) and their E8M0 scales ws: NaN (0x7F) over row 0's first block and one -NaN (0xFF) in
    row 1, rows of 448 (0x7E) and of the smallest subnormal (0x01), -448 (0xFE) over row 4's third
    block; scale codes 0 (2^-127), 255 (NaN), 1 and 254 on whole rows, 100 / 150 on single blocks,
    0 / 255 on every second / third block of two more rows."""
    w[0, :32] = 0x7F; w[1, 5] = 0xFF; w[2, :] = 0x7E; w[3, :] = 0x01; w[4, 64:96] = 0xFE
    ws[5, :] = 0; ws[6, :] = 255; ws[7, :] = 1; ws[8, :] = 254; ws[9, 0] = 100; ws[10, -1] = 150
    ws[11, ::2] = 0; ws[12, 1::3] = 255


def edge_activation_scales(as_):
    """The same for the activations' E8M0 scales (rows 1-5: M >= 6): codes 0, 255, 1, 254."""
    as_[1, 0] = 0; as_[2, :] = 255; as_[3, -1] = 1; as_[4, :] = 254; as_[5, ::2] = 0


def check_matmul_frag_fs(ops):
    """The m16 loops of issue 6 follow-ups 11 and 13 (mx_matmul_frag_m16_bf16_w<W>_s<S>_fs and
    `_fsa`) and, at M <= 8, the two-tile m8 loop of follow-up 20 (`_t2`, odd tile counts included):
    the same per-group arithmetic as the m16 kernels (and, on half a tile, the m8 ones), so at
    every (W, S) and M <= 16 of k128_gemm_cases they must give the current kernel's bits (plain,
    under PDL, and with the L2 prefetch) and pass
    gemm_verdict; then edge blocks bit-identical to the current kernel: weight scales 0 / 1 / 254 /
    255 and 100 / 150 (2^-27, 2^23), activation scales 0 / 1 / 254 / 255, e4m3 NaN weights (0x7f,
    0xff), 448 and subnormal weights, K = 128 (one group) and K = 128 * odd group counts (one
    buffer left at the end of the two-group loop)."""
    from mxgpu import FRAG_WS, FRAG_SS, pack_frag
    if not CLUSTERS:
        return report("matmul_frag_fs skipped (MXFUSE_GPU_CLUSTERS=off)", True)

    def same_as_current(wf, wsf, N, K, M, aq, as_, W_, S_):
        """(output of _fs, every _fs / _fsa launch == the current kernel's bits)."""
        y0 = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=W_, S=S_))
        same, first = True, None
        for sfx in ("_fs", "_fsa") + (("_t2",) if M <= 8 else ()):
            y1 = torch.empty(M, N, dtype=torch.bfloat16, device="cuda"); poison([y1])
            ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=W_, S=S_, y=y1, sfx=sfx)
            with ops.m.pdl_on():
                y2 = ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=W_, S=S_, pre=1, sfx=sfx)
                y3 = ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=W_, S=S_, pre=3, sfx=sfx)
            first = y1 if first is None else first
            same = same and all(np.array_equal(y0, host(o), equal_nan=True) for o in (y1, y2, y3))
        return first, same

    for N, K, w, ws, M, aq, as_, yref, fin in k128_gemm_cases(ops):
        if M > 16:
            continue
        wf, wsf = pack_frag(torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda())
        for W_ in FRAG_WS:
            for S_ in FRAG_SS:
                y1, same = same_as_current(wf, wsf, N, K, M, aq, as_, W_, S_)
                ok, detail = gemm_verdict(y1, same, yref, fin, "bf16")
                report(f"matmul_frag_fs N={N} K={K} M={M} W={W_} S={S_}", ok, detail + " (== current kernel, incl. PDL)")
    for N, K in ((48, 128), (40, 384), (64, 1152), (100, 2688)):
        w = rand_e4m3((N, K))
        ws = rng.integers(100, 151, (N, K // 32), dtype=np.uint8)
        edge_weight_blocks(w, ws)
        wf, wsf = pack_frag(torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda())
        for M in (6, 12, 16):  # 6: the m8 kernel's rows on half a 16-row tile (edits rows 1-5)
            a32 = ref.rnd(rng.standard_normal((M, K)) * 2, "bf16")
            aq, as_ = ops.quantize(to_dev(a32, "bf16"), 0)
            edge_activation_scales(as_)
            for W_ in FRAG_WS:
                for S_ in FRAG_SS:
                    _, same = same_as_current(wf, wsf, N, K, M, aq, as_, W_, S_)
                    report(f"matmul_frag_fs edge N={N} K={K} M={M} W={W_} S={S_}", same, "== current kernel, incl. PDL")


def check_matmul_frag_g1(ops):
    """The one-group-a-warp loop of issue 6 follow-up 32 (mx_matmul_frag_m8_<out>_w<G>_s1_g1, G =
    K / 128 <= 8 warps, two tiles a block, every output type): on k128_gemm_cases with K <= 1024
    and M <= 8 it passes gemm_verdict (the same launch twice and under PDL with the weights read
    before the wait: the same bits); where an m8 kernel exists at W = G (G = 2, 3, 4, 8) its bits
    equal that kernel's (one group a warp, warp-order sums), on random weights and on the edge
    blocks of check_matmul_frag_fs (E8M0 0 / 1 / 254 / 255 weight and activation scales, e4m3 NaN,
    448 and subnormal weights), odd tile counts included (a pair half empty)."""
    if not CLUSTERS:
        return report("matmul_frag_g1 skipped (MXFUSE_GPU_CLUSTERS=off)", True)

    def g1(wf, wsf, N, K, M, aq, as_, out, y=None, pre=1):
        return ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=K // 128, S=1, sfx="_g1", y=y, pre=pre)

    one_group_verdicts(ops, "matmul_frag_g1", g1, lambda K, M: K <= 1024 and M <= 8)
    one_group_bits(ops, "matmul_frag_g1", g1, ((100, 256), (40, 384), (64, 512), (100, 1024), (16, 1024)), (1, 6, 8), 8)


def one_group_verdicts(ops, label, run, keep):
    """The one-group loops (`run(wf, wsf, N, K, M, aq, as_, out, y=None, pre=1)`) on the
    k128_gemm_cases where keep(K, M), every output type: gemm_verdict, the same launch twice and
    under PDL giving the same bits."""
    from mxgpu import pack_frag
    for N, K, w, ws, M, aq, as_, yref, fin in k128_gemm_cases(ops):
        if not keep(K, M):
            continue
        wf, wsf = pack_frag(torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda())
        for out in ("bf16", "f16", "f32"):
            y1, same = repeat_bits(ops, lambda y=None: run(wf, wsf, N, K, M, aq, as_, out, y=y), (M, N), DT[out])
            ok, detail = gemm_verdict(y1, same, yref, fin, out)
            report(f"{label} N={N} K={K} M={M} W={K // 128} out={out}", ok, detail + " (incl. PDL)")


def one_group_bits(ops, label, run, shapes, ms, rows):
    """The one-group loops' bits (`run(wf, wsf, N, K, M, aq, as_, out)`) equal the m<rows> kernel's
    at W = K / 128 on each (N, K) of `shapes` and M of `ms`, bf16 and f32 out, on random blocks and
    on edge blocks: E8M0 0 / 1 / 254 / 255 and 2^-27 / 2^23 weight scales, e4m3 NaN, 448 and
    subnormal weights; from 6 rows E8M0 0 / 1 / 254 / 255 activation scales too, and from 9 a
    code-0 scale in the last row."""
    from mxgpu import pack_frag
    for N, K in shapes:
        for edge in (False, True):
            w = rand_e4m3((N, K))
            ws = rng.integers(100 if edge else 118, 151 if edge else 130, (N, K // 32), dtype=np.uint8)
            if edge:
                edge_weight_blocks(w, ws)
            wf, wsf = pack_frag(torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda())
            for M in ms:
                aq, as_ = ops.quantize(to_dev(ref.rnd(rng.standard_normal((M, K)) * 2, "bf16"), "bf16"), 0)
                if edge and M > 5:
                    edge_activation_scales(as_)
                if edge and M > 8:
                    as_[M - 1, 1] = 0
                for out in ("bf16", "f32"):
                    y = host(run(wf, wsf, N, K, M, aq, as_, out))
                    y_plain = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=K // 128, S=1, rows=rows))
                    report(f"{label} == m{rows} w{K // 128} N={N} K={K} M={M} out={out}{' edge' if edge else ''}",
                           np.array_equal(y, y_plain, equal_nan=True))


def check_matmul_frag_g1c(ops):
    """The 16-row one-group-a-warp loop of issue 6 follow-up 38 (mx_matmul_frag_m16_<out>_w<G>_s1_g1c,
    G = K / 128 from 3 to 8 warps, one tile a block, the weights converted before the PDL wait,
    at G = 3, 6, 8 also the rows' addresses and the weights' scale decode (follow-up 43: G = 8's
    bit checks below take that path, its exact decode of codes 0 / 255 included), every output
    type): on k128_gemm_cases with 384 <= K <= 1024 (and at M <= 8, where it runs on
    16 rows all the same) it passes gemm_verdict (the same launch twice and under PDL: the same
    bits); where an m16 kernel exists at W = G (G = 4, 8) its bits equal that kernel's (one group a
    warp, warp-order sums), on random weights and on the edge blocks of check_matmul_frag_g1 (E8M0
    0 / 1 / 254 / 255 weight and activation scales, e4m3 NaN, 448 and subnormal weights), a ragged
    last tile and rows 9-16 included; then the runtime's choice at 6144 x 768 and 4096 x 1024."""
    from mxgpu import frag_kernel
    if not CLUSTERS:
        return report("matmul_frag_g1c skipped (MXFUSE_GPU_CLUSTERS=off)", True)

    def g1c(wf, wsf, N, K, M, aq, as_, out, y=None, pre=1):
        return ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[out], W=K // 128, S=1, sfx="_g1c", y=y, pre=pre)

    one_group_verdicts(ops, "matmul_frag_g1c", g1c, lambda K, M: 384 <= K <= 1024)
    one_group_bits(ops, "matmul_frag_g1c", g1c, ((100, 512), (64, 512), (100, 1024), (16, 1024)), (9, 13, 16), 16)
    for N, K in ((6144, 768), (4096, 1024), (6160, 512)):
        wf, wsf = rand_frag_weights(N, K)
        for M in (9, 12, 16):
            aq, as_ = ops.quantize(to_dev(ref.rnd(rng.standard_normal((M, K)) * 2, "bf16"), "bf16"), 0)
            choice = frag_kernel(N, K, M)
            with ops.m.pdl_on():
                y_rt = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_))
            y_g1c = host(g1c(wf, wsf, N, K, M, aq, as_, "bf16"))
            report(f"matmul_frag_g1c runtime choice N={N} K={K} M={M} {choice}",
                   choice[3] == "_g1c" and np.array_equal(y_rt, y_g1c, equal_nan=True), "the runtime takes `_g1c`, PDL")


def check_matmul_frag_t2h(ops):
    """`_t2` on its mixed grid (issue 6 follow-up 36, mx_matmul_frag_m8_bf16_w4_s1_t2h): pair
    blocks first, then one block a tile whose 4 warps run 8 K ranges in two register sets and add
    them in range order. So its pair tiles give the m8 kernel's bits at W = 4 and its single tiles
    the m8 kernel's at W = 8, whatever the mix (all singles, all pairs with an odd tile as a
    single, the runtime's 132 pairs), on k128_gemm_cases (M <= 8; also gemm_verdict, repeat
    launches and PDL with the weights read before the wait) and on edge blocks (E8M0 0 / 1 / 254
    / 255 weight and activation scales, e4m3 NaN, 448 and subnormal weights, ranges left empty at
    K = 128 and 384); then the runtime's choice at 6144 x 6144 and 6160 x 6144 (132 pairs and 120 /
    121 singles) against the same m8 kernels."""
    from mxgpu import frag_kernel, pack_frag
    if not CLUSTERS:
        return report("matmul_frag_t2h skipped (MXFUSE_GPU_CLUSTERS=off)", True)

    def t2h(wf, wsf, N, K, M, aq, as_, pairs, y=None, pre=1):
        return ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=4, S=1, sfx="_t2h", t2h_pairs=pairs, y=y, pre=pre)

    def against_m8(y, wf, wsf, N, K, M, aq, as_, pairs):
        """Pair tiles (columns < 32 pairs) == the m8 kernel at W = 4, the rest == it at W = 8."""
        pc = 32 * min(pairs, -(-N // 16) // 2)
        m4 = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=4, S=1, rows=8))
        m8 = host(ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=8, S=1, rows=8))
        y = host(y)
        return np.array_equal(y[:, :pc], m4[:, :pc], equal_nan=True) and np.array_equal(y[:, pc:], m8[:, pc:], equal_nan=True)

    for N, K, w, ws, M, aq, as_, yref, fin in k128_gemm_cases(ops):
        if M > 8:
            continue
        wf, wsf = pack_frag(torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda())
        for pairs in (0, 1, 132):
            y1, same = repeat_bits(ops, lambda y=None: t2h(wf, wsf, N, K, M, aq, as_, pairs, y=y), (M, N),
                                   torch.bfloat16)
            ok, detail = gemm_verdict(y1, same, yref, fin, "bf16")
            m8 = against_m8(y1, wf, wsf, N, K, M, aq, as_, pairs)
            report(f"matmul_frag_t2h N={N} K={K} M={M} pairs={pairs}", ok and m8,
                   detail + f" (incl. PDL) m8 w4 / w8 bits={m8}")
    for N, K in ((100, 128), (40, 384), (64, 512), (112, 1152), (48, 6144)):
        for edge in (False, True):
            w = rand_e4m3((N, K))
            ws = rng.integers(100 if edge else 118, 151 if edge else 130, (N, K // 32), dtype=np.uint8)
            if edge:
                edge_weight_blocks(w, ws)
                ws[-1, :] = 255; ws[-2, 0] = 0
            wf, wsf = pack_frag(torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda())
            for M in (1, 6, 8):
                aq, as_ = ops.quantize(to_dev(ref.rnd(rng.standard_normal((M, K)) * 2, "bf16"), "bf16"), 0)
                if edge and M > 5:
                    edge_activation_scales(as_)
                for pairs in (0, 1, 2):
                    y = t2h(wf, wsf, N, K, M, aq, as_, pairs)
                    report(f"matmul_frag_t2h == m8 w4 / w8 N={N} K={K} M={M} pairs={pairs}{' edge' if edge else ''}",
                           against_m8(y, wf, wsf, N, K, M, aq, as_, pairs))
    for N in (6144, 6160):
        K = 6144
        wf, wsf = rand_frag_weights(N, K)
        for M in (1, 5, 8):
            aq, as_ = ops.quantize(to_dev(ref.rnd(rng.standard_normal((M, K)) * 2, "bf16"), "bf16"), 0)
            rows, W_, S_, sfx, pf = frag_kernel(N, K, M)
            with ops.m.pdl_on():
                y_rt = ops.matmul_frag(wf, wsf, N, K, M, aq, as_)
            report(f"matmul_frag runtime choice N={N} K={K} M={M} kernel={sfx} (132 pairs + singles)",
                   sfx == "_t2h" and against_m8(y_rt, wf, wsf, N, K, M, aq, as_, 132), "== m8 w4 / w8, PDL")


def check_pdl(ops):
    """Every op under a programmatic (PDL) launch, back to back on one stream with the previous
    kernel writing what the next one reads, gives the bits of ordinary launches: the decode chain
    norm -> norm (reading the first's residual_out / normed) -> fragment GEMM (reading the second's
    q / scales) -> quantize -> SwiGLU, at row counts that take the split-row, one-chunk and
    multi-chunk norms."""
    from mxgpu import F_GEMMA, F_OAI, F_FP32_ACT
    H, I, N = 6144, 768, 1536
    wf, wsf = rand_frag_weights(N, H)
    wf2, wsf2 = rand_frag_weights(H, I)  # down_proj, K = I = 768: `_g1` at M <= 8
    gamma = to_dev(ref.rnd(rng.standard_normal(H) * 0.1, "bf16"), "bf16")
    for M in (8, 64, 300):
        x = to_dev(ref.rnd(rng.standard_normal((M, H)) * 3, "bf16"), "bf16")
        r = to_dev(ref.rnd(rng.standard_normal((M, H)), "bf16"), "bf16")
        gu = to_dev(ref.rnd(rng.standard_normal((M, 2 * I)) * 4, "bf16"), "bf16")
        def chain():
            o1 = ops.norm_quant(x, r, gamma, F_GEMMA)
            o2 = ops.norm_quant(o1[2], o1[3], gamma, F_GEMMA)
            y = ops.matmul_frag(wf, wsf, N, H, min(M, 16), o2[0][:16], o2[1][:16])
            q = ops.quantize(o2[3], 0)
            s = ops.swiglu_quant(gu, None, I, "split_halves", F_OAI | F_FP32_ACT)
            y2 = ops.matmul_frag(wf2, wsf2, H, I, min(M, 8), s[0][:8], s[1][:8])
            return [host(t) for t in (*o1, *o2, y, *q, *s, y2)]
        base = chain()
        with ops.m.pdl_on():
            got = chain()
        same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(base, got))
        report(f"pdl chain M={M}: norm -> norm -> frag GEMM, quantize, swiglu -> frag GEMM (`_g1`)", same)


def check_matmul_epilogue(ops):
    """The MxMatMul epilogue (bias C, alpha, beta; docs/ops.md) on every GEMM family: each output
    equals the same launch's fp32 accumulator (the launch without an epilogue, fp32 out) put
    through round_T(fl(alpha * acc) + fl(beta * c)) on the host, bit for bit, for C of shape [N],
    [1, N], [], [M, N], [M, 1], bf16 / f16 / f32 outputs and a NaN in C."""
    from mxgpu import epilogue, pack_frag

    def want(acc, c, alpha, beta, out):
        t = torch.tensor(alpha, dtype=torch.float32) * acc  # separate IEEE ops: never fused
        u = torch.tensor(beta, dtype=torch.float32) * c.float().cpu()
        return (t + u).to(DT[out])  # C broadcasts to [M, N] as numpy / ONNX do

    def same(a, b):
        return np.array_equal(a.float().cpu().numpy(), b.float().cpu().numpy(), equal_nan=True)

    for N, K in ((100, 256), (1536, 768)):
        w = rand_e4m3((N, K)); ws = rng.integers(110, 135, (N, K // 32), dtype=np.uint8)
        wd, wsd = torch.from_numpy(w).cuda(), torch.from_numpy(ws).cuda()
        wkn, wskn = (torch.from_numpy(np.ascontiguousarray(x.T)).cuda() for x in (w, ws))
        wf, wsf = pack_frag(wd, wsd) if CLUSTERS else (None, None)
        for M in (1, 9, 21):
            a = to_dev(ref.rnd(rng.standard_normal((M, K)) * 2, "bf16"), "bf16")
            aq, as_ = ops.quantize(a, 0)
            fams = {
                "tc": lambda o, ep: ops.matmul_tc(wd, wsd, M, aq=aq, as_=as_, out_dtype=DT[o], ep=ep),
                "tc_in_gemm": lambda o, ep: ops.matmul_tc(wd, wsd, M, af=a, out_dtype=DT[o], ep=ep),
                "generic_kn": lambda o, ep: ops.matmul_generic(aq, as_, wkn, wskn, 0, N, DT[o], ep=ep),
                "generic_nk": lambda o, ep: ops.matmul_generic(aq, as_, wd, wsd, 1, N, DT[o], ep=ep),
            }
            if CLUSTERS:
                fams["sk"] = lambda o, ep: ops.matmul_sk(wd, wsd, M, aq=aq, as_=as_, out_dtype=DT[o], S=2, ep=ep)
                fams["pipe"] = lambda o, ep: ops.matmul_pipe(wd, wsd, M, aq, as_, out_dtype=DT[o], ep=ep)
                fams["frag"] = lambda o, ep: ops.matmul_frag(wf, wsf, N, K, M, aq, as_, out_dtype=DT[o], ep=ep)
            for fam, run in fams.items():
                acc = run("f32", None).cpu()
                bad = []
                for shape in ([N], [1, N], [], [M, N], [M, 1]):
                    for alpha, beta, nan in ((1.0, 1.0, False), (0.5, -3.0, True)):
                        for out in ("bf16", "f16", "f32"):
                            c32 = ref.rnd(rng.standard_normal(shape) * 4, out).astype(np.float32)
                            if nan:
                                c32.reshape(-1)[c32.size // 2] = np.nan
                            c = to_dev(c32, out)
                            y = run(out, epilogue(c, alpha, beta, M, N))
                            if not same(y, want(acc, c, alpha, beta, out)):
                                bad.append(f"{shape}/{alpha}/{beta}/{out}")
                report(f"matmul_epilogue {fam} N={N} K={K} M={M}", not bad, "mismatch: " + ", ".join(bad[:6]) if bad else "bit-exact, 30 cases")


if __name__ == "__main__":
    mod = Module()
    ops = Ops(mod)
    print("compiled for sm_" + mod.arch, "nvrtc log:", mod.log.strip()[:500])
    for k in ("mx_add_rmsnorm_quant_bf16_c1", "mx_add_rmsnorm_quant_bf16_gf32_c3", "mx_add_rmsnorm_quant_f32_c4", "mx_swiglu_quant_bf16_e8_a3", "mx_swiglu_quant_bf16_e2_a1", "mx_swiglu_quant_bf16_e8_a1_table", "mx_swiglu_quant_bf16_e8_a0_table", "mx_quantize_bf16_e2", "mx_matmul_tc_e4m3_m8_bf16", "mx_matmul_tc_e4m3_m8_bf16_pf",
              "mx_matmul_tc_qbf16_m16_bf16", "mx_matmul_generic_bf16", "mx_matmul_sk_e4m3_m8_bf16_s1",
              "mx_matmul_sk_e4m3_m16_bf16_s4", "mx_matmul_sk_qbf16_m8_bf16_s2",
              "mx_matmul_pipe_m8_bf16_w4_s1", "mx_matmul_pipe_m16_bf16_w1_s8"):
        print(f"  {k}: regs/shared/local = {mod.attrs(k)}")
    only = sys.argv[1:]  # e.g. "check_matmul_splitk": run only these checks
    for fn in (check_rcp, check_sigmoid_cert, check_sigma_table, check_swiglu_all_bf16, check_matmul_frag, check_matmul_frag_fs, check_matmul_frag_g1, check_matmul_frag_g1c, check_matmul_frag_t2h, check_pdl, check_matmul_pipe, check_matmul_splitk, check_vectors, check_quantize, check_norm, check_norm_lean, check_swiglu, check_matmul, check_matmul_epilogue):
        if only and fn.__name__ not in only:
            continue
        try:
            fn(ops)
        except Exception as e:
            import traceback; traceback.print_exc()
            report(fn.__name__ + " raised", False, repr(e)[:300])
        torch.cuda.synchronize()
    print(f"CHECK SUMMARY: {len(fails)} failed" + (": " + ", ".join(fails[:20]) if fails else ""))
