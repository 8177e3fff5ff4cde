"""Issue 6 follow-up 36: `_t2h`, `_t2` on a mixed grid (mx_matmul_frag.hip
mx_matmul_frag_m8_bf16_w4_s1_t2h): np tile-pair blocks, then ns one-tile blocks whose warps run
two K ranges of their tile in `_t2`'s two register sets, so no tile is split between blocks and no
workspace is needed; the grid's y (tiles - np) tells the kernel np. Against
the runtime's kernel and cuBLAS bf16. Check: the pair blocks' columns bit-equal to `_t2` w4 s1
(same loop; also timed, as "t2w4"), every output's max relative difference to the runtime's
kernel's (the one-tile blocks add in another order), and bit-equal across two launches before and one after the timing. Time:
PDL, CUDA-graph replay of 200 launches, weights rotating over >= 400 MB, median of REPS,
alternating.
Usage: python3 ab_het.py [REPS]   (AB_CASES "NxK:M,M;..."; AB_NP "np,np:W,..." pair blocks, 0 for
the number of SMs, default "0"; with AB_BENCH=1 ":W": frag_t2hw.hip's kernel at W warps, ":pPF": its
pair warps' L2 prefetch from PF / 8 of their range on); on the
device: AB=ab_het OUT=$OUT bash bench/gpu/device_ab.sh"""
import faulthandler, json, os, sys
import torch
import mxgpu
from program import gemm_text_with

HERE = os.path.dirname(os.path.abspath(__file__))
faulthandler.dump_traceback_later(int(os.environ.get("AB_WATCHDOG", "300")), exit=False)
# AB_BENCH: the bench kernels appended (frag_g1k.hip and its G1k variant "g1k:W:S": commit
# "session 35 calls 7-8").
BENCH_FILES = {"1": "frag_t2hw.hip", "tn": "frag_tn.hip", "c3": "frag_c3.hip", "16": "frag_t2h16.hip", "r": "frag_t2hr.hip"}
if os.environ.get("AB_BENCH") in BENCH_FILES:
    mxgpu.program_text = lambda: gemm_text_with(os.path.join(HERE, BENCH_FILES[os.environ["AB_BENCH"]]))
from mxgpu import frag_kernel, frag_name_grid  # noqa: E402
from bench_frag_pdl import ab_cases, ab_line, ab_module, ab_variants, launch_frag  # noqa: E402

OUT = os.environ.get("OUT", ".")


class Het:
    """The mixed grid at one (N, M): np pair blocks, then the tiles left as one-tile blocks."""

    def __init__(self, mod, np_, N, M, W=4, bench="", rows=8):
        tiles = -(-N // 16)
        self.mod, self.W, self.np = mod, W, min(np_, tiles // 2)
        self.ns = max(0, tiles - 2 * self.np)
        self.grid = (-(-M // rows), tiles - self.np)
        self.name = f"mx_matmul_frag_m{rows}_bf16_w{W}_s1_t2h" + bench
        self.label = f"h{self.np}+{self.ns}" + (f"w{W}{bench}" if bench else "") + ("r16" if rows == 16 else "")

    def __call__(self, wf, wsf, N, K, M, aq, as_, y, pre=1):
        return launch_frag(self.mod, self.name, self.grid, self.W, wf, wsf, N, K, M, aq, as_, y, pre)


class Tn:
    """frag_tn.hip at one (N, M): ceil(tiles / T) blocks of W warps on T tiles each (T = tiles / SMs
    rounded up unless given)."""

    def __init__(self, mod, sms, N, M, W, T=0):
        tiles = -(-N // 16)
        T = T or -(-tiles // sms)
        self.mod, self.W = mod, W
        self.grid = (-(-M // 8), -(-tiles // T))
        self.name = f"mx_matmul_frag_m8_bf16_w{W}_s1_tn"
        self.label = f"tn{W}x{T}"

    def __call__(self, wf, wsf, N, K, M, aq, as_, y, pre=1):
        return launch_frag(self.mod, self.name, self.grid, self.W, wf, wsf, N, K, M, aq, as_, y, pre)


class T2:
    """The runtime's `_t2` (or, sfx "", the m8 kernel) at a given (W, S), on its own grid."""

    def __init__(self, ops, W, S, sfx="_t2"):
        self.ops, self.W, self.S, self.sfx = ops, W, S, sfx
        self.label = f"{sfx[1:] or 'm8'}w{W}s{S}"

    def __call__(self, wf, wsf, N, K, M, aq, as_, y, pre=1):
        return self.ops.matmul_frag(wf, wsf, N, K, M, aq, as_, W=self.W, S=self.S, sfx=self.sfx, y=y, pre=pre)


class C3:
    """frag_c3.hip at one (N, M): pairs of 4-warp blocks on three tiles each; sfx "" (clusters,
    the split tile's fix-up through distributed shared memory), "p" (probe: no fix-up), "g" (a
    global workspace of sentinel-filled slots)."""

    def __init__(self, mod, N, M, sfx=""):
        tiles = -(-N // 16)
        self.mod, self.W = mod, 4
        self.grid = (2 * -(-M // 8), -(-tiles // 3))
        self.name = f"mx_matmul_frag_m8_bf16_w4_s1_c3{sfx}"
        self.label = f"c3{sfx}"
        n = self.grid[0] // 2 * self.grid[1] * 8 * 128
        self.ws = torch.full((n,), -1, dtype=torch.int32, device="cuda").view(torch.float32)  # 0xffffffff

    def __call__(self, wf, wsf, N, K, M, aq, as_, y, pre=1):
        return launch_frag(self.mod, self.name, self.grid, self.W, wf, wsf, N, K, M, aq, as_, y, pre,
                           extra=(self.ws,))


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod, ops = ab_module()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # "np" (the runtime's w4 kernel), "np:W" (frag_t2hw.hip's `_t2hb` at W warps), "np:pPF" (its
    # `_t2hp<PF>`, w4, the pair warps' L2 prefetch from PF / 8 of their range) or "0:1" (its
    # `_t2h1`, singles only) or "np:mU" (its `_t2hm<U>`, m8 singles); those AB_BENCH=1; "tn:W[:T]"
    # frag_tn.hip's (AB_BENCH=tn); "np:16" / "np:16f" frag_t2h16.hip's 16-row `_t2h` / `_t2hf`, at
    # 9-16 rows only (AB_BENCH=16); "np:rP" frag_t2hr.hip's `_t2hr<P>` (AB_BENCH=r).
    def variant(v):
        np_, _, x = v.partition(":")
        if x in ("16", "16f"):
            return int(np_) or sms, 4, x
        if np_ in ("t2", "m8"):  # "t2:W:S" / "m8:W:S": the runtime's `_t2` / m8 kernel at (W, S)
            W, _, S = x.partition(":")
            return int(S), int(W), np_
        if x.startswith("r"):  # "np:rP": frag_t2hr.hip's `_t2hr<P>` (AB_BENCH=r), the pair warps' ramp prefetch
            return int(np_) or sms, 4, x
        if x == "1":  # its `_t2h1`: every tile a one-tile block, three blocks an SM
            return 0, 4, "1"
        if x.startswith("m"):  # "np:mU": its `_t2hm<U>`, the singles the m8 kernel at U
            return int(np_) or sms, 4, x
        if np_ == "c3":  # "c3[:p|:g]": frag_c3.hip (AB_BENCH=c3)
            return x, 4, "c3"
        if np_ == "tn":  # "tn:W[:T]": frag_tn.hip (AB_BENCH=tn), T tiles a block (default tiles / SMs)
            W, _, T = x.partition(":")
            return int(T or 0), int(W), "tn"
        return (int(np_) or sms, 4 if x.startswith("p") or not x else int(x),
                "" if not x else ("p" + x[1:] if x.startswith("p") else "b"))
    nps = [variant(v) for v in os.environ.get("AB_NP", "0").split(",")]
    cases = os.environ.get("AB_CASES", "6144x6144:1,8;5120x6144:1;6160x6144:5;4096x4096:1;6144x768:1")
    rows_out = []
    for c in ab_cases(ops, frag_kernel, cases):
        N, K, M, P = c.N, c.K, c.M, c.P
        # `_t2` w4 s1 on its own grid of pairs (the runtime's kernel before follow-up 36).
        t2 = ops.matmul_frag(*P[0], N, K, M, c.aq, c.as_, W=4, S=1, sfx="_t2", y=torch.empty_like(c.y)).float()
        c.fns["t2w4"] = lambda: ops.matmul_frag(*P[c.next()], N, K, M, c.aq, c.as_, W=4, S=1, sfx="_t2", y=c.y)
        r16 = [Het(mod, np_, N, M, W, bench[2:], rows=16) for np_, W, bench in nps if bench in ("16", "16f")]
        hs = r16 if M > 8 else [Tn(mod, sms, N, M, W, np_) if bench == "tn" else C3(mod, N, M, np_) if bench == "c3"
                                else T2(ops, W, np_, "_t2" if bench == "t2" else "") if bench in ("t2", "m8")
                                else Het(mod, np_, N, M, W, bench) for np_, W, bench in nps
                                if bench not in ("16", "16f")]
        # 16-row pairs give the m16 kernel's bits at W = 4, as `_fs` w4 s1 (`_t2hf`: every tile).
        fs = ops.matmul_frag(*P[0], N, K, M, c.aq, c.as_, W=4, S=1, sfx="_fs", y=torch.empty_like(c.y)).float() if r16 else None
        m8 = {S: ops.matmul_frag(*P[0], N, K, M, c.aq, c.as_, W=8, S=S, sfx="", y=torch.empty_like(c.y)).float()
              for S in (1, 2)} if any(b == "c3" for _, _, b in nps) and M <= 8 else {}

        def pairs_bits(h, a):
            if isinstance(h, T2):
                return {}
            if isinstance(h, C3):  # own tiles: m8 w8 s1's bits; split tiles (3c + 2): m8 w8 s2's
                split = (torch.arange(N, device=a.device) // 16) % 3 == 2
                return {h.label + "_own_bits": float(torch.equal(a[:, ~split], m8[1][:, ~split])),
                        h.label + "_split_bits": float(torch.equal(a[:, split], m8[2][:, split]))}
            pc = min(N, 32 * getattr(h, "np", 0))
            if fs is not None and M > 8:
                return {h.label + "_pairs_bits": float(torch.equal(a[:, :pc], fs[:, :pc])),
                        h.label + "_all_fs_bits": float(torch.equal(a, fs))}
            return {h.label + "_pairs_bits": float(torch.equal(a[:, :pc], t2[:, :pc]))}
        for h in hs:  # how many clusters of each cluster kernel the device holds at once
            if isinstance(h, T2) and h.S > 1:
                name, grid = frag_name_grid(N, M, h.W, h.S, h.sfx, 1)
                print(f"    {h.label}: grid {grid}, {grid[0] * grid[1] // h.S} clusters of {h.S}; the device holds "
                      f"{mod.active_clusters(name, grid, 32 * h.W)} at once", flush=True)
        times, med, diffs, bits = ab_variants(c, hs, reps, pairs_bits, finite=True)
        rows_out.append(dict(N=N, K=K, M=M, rt=list(c.rt), med=med, times=times, diffs=diffs, bits=bits))
        print(ab_line(c, med, diffs, rate=True), flush=True)
        print("    deterministic: " + " ".join(f"{k} {'yes' if v else 'NO'}" for k, v in bits.items()), flush=True)
    json.dump(dict(rows=rows_out), open(os.path.join(OUT, "ab_het.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
