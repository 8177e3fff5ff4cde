"""Minimal ctypes binding of NVRTC + the CUDA driver for the bench / correctness harness.

Compiles kernels/gpu/* (program.program_text(), the same text the Rust runtime compiles) once, and
launches its kernels on torch's current stream, so launches can be captured into torch CUDA graphs.
"""
import contextlib, ctypes, glob, math, os, struct, sys
import torch

from program import program_text


def _find_lib(names, patterns):
    for n in names:
        try:
            return ctypes.CDLL(n, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass
    roots = [os.path.dirname(torch.__file__), "/usr/local/cuda/lib64"] + [p for p in sys.path if "site-packages" in p]
    for r in roots:
        for pat in patterns:
            for hit in sorted(glob.glob(os.path.join(r, pat), recursive=True)):
                try:
                    return ctypes.CDLL(hit, mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    pass
    raise OSError(f"none of {names} found")


nvrtc = _find_lib(["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"],
                  ["**/libnvrtc.so*"])
cuda = _find_lib(["libcuda.so.1", "libcuda.so"], [])
NVRTC_PATH = getattr(nvrtc, "_name", "")


def _ck(rc, what):
    if rc != 0:
        s = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(s))
        raise RuntimeError(f"{what} failed: {rc} {s.value}")


def compile_program(arch):
    """NVRTC-compiles the program for sm_<arch>; the cubin is kept in $MXFUSE_PY_CUBIN_CACHE (a
    directory, keyed by program text + arch) so the harness's processes compile it once."""
    import hashlib
    text = program_text()
    cache_dir = os.environ.get("MXFUSE_PY_CUBIN_CACHE")
    key = hashlib.sha256((text + "|" + arch).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir, f"mxfuse-sm_{arch}-{key}.cubin") if cache_dir else None
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            return f.read(), f"(cubin from {path})"
    src = text.encode()
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"mxfuse.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture=sm_{arch}".encode(), b"-std=c++17", b"-lineinfo"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        raise RuntimeError("NVRTC failed:\n" + log.value.decode())
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    assert nvrtc.nvrtcGetCUBIN(prog, cubin) == 0
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        with open(path, "wb") as f:
            f.write(cubin.raw)
    return cubin.raw, log.value.decode()


class _LaunchAttr(ctypes.Structure):  # CUlaunchAttribute: id, 4 pad bytes, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_ubyte * 64)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shmem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttr)), ("num_attrs", ctypes.c_uint)]


CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class Module:
    """pdl: launch with programmatic stream serialization (cuLaunchKernelEx; every kernel waits in
    MX_PDL_ENTRY / MX_PDL_WAIT, mx_portability.h), as the Rust runtime does on sm_90; default from
    MXFUSE_BENCH_PDL=1 (e.g. bench.py's sweeps under PDL)."""
    pdl = os.environ.get("MXFUSE_BENCH_PDL") == "1"

    def __init__(self):
        torch.cuda.init()
        torch.empty(1, device="cuda")  # make torch's primary context current
        cc = torch.cuda.get_device_capability()
        # MXFUSE_BENCH_ARCH (e.g. 90a): the A/B scripts whose bench kernels need arch-specific PTX.
        self.arch = os.environ.get("MXFUSE_BENCH_ARCH") or f"{cc[0]}{cc[1]}"
        self.cubin, self.log = compile_program(self.arch)
        self.mod = ctypes.c_void_p()
        _ck(cuda.cuModuleLoadData(ctypes.byref(self.mod), self.cubin), "cuModuleLoadData")
        self.funcs = {}
        self.clusters = {}  # active_clusters by (kernel, block size)
        self.resident = {}

    @contextlib.contextmanager
    def pdl_on(self):
        """Launches inside the `with` block are programmatic (PDL); `pdl` is put back after it."""
        before, self.pdl = self.pdl, True
        try:
            yield
        finally:
            self.pdl = before

    def active_clusters(self, name, grid, block):
        """How many clusters of cluster kernel `name` the device holds at once
        (cuOccupancyMaxActiveClusters, asked once per kernel and block size; runtime.rs
        active_clusters)."""
        key = (name, block)
        if key not in self.clusters:
            cfg = _LaunchConfig((ctypes.c_uint * 3)(*grid, *(1,) * (3 - len(grid))), (ctypes.c_uint * 3)(block, 1, 1),
                                0, None, None, 0)
            n = ctypes.c_int(0)
            _ck(cuda.cuOccupancyMaxActiveClusters(ctypes.byref(n), self.func(name), ctypes.byref(cfg)),
                f"cluster occupancy {name}")
            self.clusters[key] = n.value
        return self.clusters[key]

    def func(self, name):
        if name not in self.funcs:
            f = ctypes.c_void_p()
            _ck(cuda.cuModuleGetFunction(ctypes.byref(f), self.mod, name.encode()), f"get {name}")
            self.funcs[name] = f
        return self.funcs[name]

    def attrs(self, name):
        """(registers, static shared bytes, local bytes) of a kernel."""
        out = []
        for a in (4, 1, 3):  # CU_FUNC_ATTRIBUTE_NUM_REGS, SHARED_SIZE_BYTES, LOCAL_SIZE_BYTES
            v = ctypes.c_int()
            _ck(cuda.cuFuncGetAttribute(ctypes.byref(v), a, self.func(name)), "attr")
            out.append(v.value)
        return tuple(out)

    def resident_blocks(self, name, block):
        """Blocks of `block` lanes of kernel `name` one SM holds at once (the driver's occupancy
        query, as kernels/src/gpu/driver.rs `resident_blocks`; no dynamic shared memory)."""
        key = (name, block)
        if key not in self.resident:
            n = ctypes.c_int()
            _ck(cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), self.func(name), ctypes.c_int(block),
                                                                 ctypes.c_size_t(0)), f"occupancy {name}")
            self.resident[key] = n.value
        return self.resident[key]

    def launch(self, name, grid, block, args, shmem=0):
        """args: list of torch tensors (passed as device pointers), None (null) or ctypes scalars."""
        vals = []
        for a in args:
            if isinstance(a, torch.Tensor):
                vals.append(ctypes.c_uint64(a.data_ptr()))
            elif a is None:
                vals.append(ctypes.c_uint64(0))
            else:
                vals.append(a)
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if self.pdl:
            attr = _LaunchAttr(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            attr.value[0] = 1
            cfg = _LaunchConfig((ctypes.c_uint * 3)(*g), (ctypes.c_uint * 3)(*b), shmem, stream,
                                ctypes.pointer(attr), 1)
            _ck(cuda.cuLaunchKernelEx(ctypes.byref(cfg), self.func(name), ptrs, None), f"launchEx {name}")
            return
        _ck(cuda.cuLaunchKernel(self.func(name), *[ctypes.c_uint(v) for v in g], *[ctypes.c_uint(v) for v in b],
                                ctypes.c_uint(shmem), stream, ptrs, None), f"launch {name}")


def frag_name_grid(N, M, W, S, sfx, mt, out_dtype=torch.bfloat16):
    """A fragment GEMM kernel's name and grid (launch.rs frag_kernel_name / frag_grid) at W warps,
    S cluster blocks, loop suffix sfx and 8 mt rows a block; `_t2h`'s grid y is the caller's."""
    return (f"mx_matmul_frag_m{8 * mt}_{SUFFIX[out_dtype]}_w{W}_s{S}{sfx}",
            (-(-M // (8 * mt)) * S, -(-(-(-N // 16)) // (2 if sfx in ("_t2", "_g1") else 1))))


# Flag bits of kernels/gpu/mx_common.h.
F_RCEIL, F_NAN_IGNORE, F_GEMMA, F_GAMMA_F32, F_INV_DIV, F_OAI, F_FP32_ACT = 1, 2, 4, 8, 16, 32, 64
F_NO_ROUND_SUM, F_SWISH_SINGLE, F_SIGMA_PINNED = 128, 256, 512
LAYOUTS = {"separate": 0, "split_halves": 1, "interleaved": 2}
# Below this many elements the elementwise kernels take 2 elements per lane (short per-lane chains).
SMALL_ELEMS = 1 << 21
SUFFIX = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
# Largest block of each one-block-per-row norm kernel (__launch_bounds__ in add_rmsnorm_mxquant.hip).
NORM_MAX_BLOCK = {1: 1024, 2: 1024, 3: 512, 4: 1024}


class MxEpi(ctypes.Structure):
    """`struct MxEpi` of kernels/gpu/mx_common.h (the MxMatMul epilogue, passed by value to every
    GEMM kernel): y = round_T(fl(alpha * acc) + fl(beta * bias[m * ld + n * cs])), bias nullable."""
    _fields_ = [("bias", ctypes.c_uint64), ("ld", ctypes.c_int), ("cs", ctypes.c_int),
                ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]


def epilogue(bias=None, alpha=1.0, beta=1.0, M=None, N=None):
    """The MxEpi of a bias tensor (torch, on the device, of the output dtype) broadcasting to
    [M, N] ([], [1], [N], [1|M, 1|N]), or of no bias; keeps a reference to the tensor."""
    if bias is None:
        e = MxEpi(0, 0, 0, alpha, beta)
    else:
        shape = list(bias.shape)
        rows, cols = ([1] * (2 - len(shape)) + shape)[-2:]
        assert rows in (1, M) and cols in (1, N), f"bias {shape} does not broadcast to [{M}, {N}]"
        e = MxEpi(bias.data_ptr(), 0 if rows == 1 else cols, 0 if cols == 1 else 1, alpha, beta)
    e.keep = bias
    return e


class Ops:
    """Launch wrappers with the same grid/block choices as kernels/src/gpu/launch.rs. `ep`: the
    MxMatMul epilogue (`epilogue(...)`), none by default."""

    def __init__(self, mod: Module):
        self.m = mod

    def norm_quant(self, x, res, gamma, flags, eps=1e-6, res_out=True, normed=True, outs=None, nch=None, split=None, opt=""):
        """nch: chunks per lane of the one-block-per-row kernels; split: blocks of a cluster per row
        (1 = one block per row); None = the runtime's choice (launch.rs + thresholds.rs: norm_choice
        below). opt: "_lean" launches the lean split-8 kernel (split=8; launch.rs takes it for
        exactly its case, which the runtime choice here mirrors)."""
        M, H = x.shape
        chunks = H // 8
        runtime_choice = split is None and nch is None
        if runtime_choice:
            split, nch = norm_choice(M, H)
        split = split or 1
        if split > 1:
            nch = 1
        if nch is None:
            nch = norm_fit_nch(H)
        assert chunks <= nch * split * NORM_MAX_BLOCK[nch], "H too large"
        B = -(-(-(-chunks // (nch * split))) // 32) * 32
        if outs is None:
            outs = (torch.empty(M, H, dtype=torch.uint8, device=x.device),
                    torch.empty(M, H // 32, dtype=torch.uint8, device=x.device),
                    torch.empty_like(x) if res_out else None, torch.empty_like(x) if normed else None)
        q, s, ro, no = outs
        name = "mx_add_rmsnorm_quant_" + SUFFIX[x.dtype] + ("_gf32" if gamma.dtype == torch.float32 and x.dtype != torch.float32 else "")
        name += f"_c{nch}" + (f"_s{split}" if split > 1 else "") + opt
        # The runtime's lean split-8 kernel (launch.rs: H = 6144, bf16 x and gamma, Gemma +
        # gamma_in_f32, floor, propagate, residual / residual_out / normed present).
        if (runtime_choice and not opt and split == 8 and B == 96 and H == 6144 and x.dtype == torch.bfloat16
                and gamma.dtype == torch.bfloat16 and flags == F_GEMMA | F_GAMMA_F32 and res is not None
                and ro is not None and no is not None and M * H < 1 << 31):
            name += "_lean"
        self.m.launch(name, (M * split,), (B,), [x, res, gamma, q, s, ro, no, ctypes.c_int(H), ctypes.c_float(eps), ctypes.c_uint(flags)])
        return outs

    def swiglu_quant(self, gate, up, I, layout, flags, alpha=1.702, limit=7.0, beta=1.0, outs=None, e=None, block=None, opt="",
                     pinned=None, grid=None, table=None):
        """opt: "_table" launches the table kernel (bf16, e = 8, block <= 256, rounded unrolled
        swish, see swiglu_table_ok). pinned: F_SIGMA_PINNED on / off; None: the launch table's
        choice. grid: at most this many blocks (the table kernel loops over the rest; the others
        must not be capped). table: None = the launch table's choice where no
        e / block / opt / grid is given (the table kernel, 256 lanes, grid capped at the resident
        blocks, where swiglu_uses_table says so: launch.rs `swiglu_mxquant`); False = the choice
        without the table kernel (the default before it)."""
        rows = gate.shape[0]
        if outs is None:
            outs = (torch.empty(rows, I, dtype=torch.uint8, device=gate.device),
                    torch.empty(rows, I // 32, dtype=torch.uint8, device=gate.device))
        q, s = outs
        host = e is None and block is None and not opt and grid is None
        if table is None:
            table = host and swiglu_uses_table(rows * I, gate.dtype, flags, alpha, limit)
        if table:
            assert host, "table=True takes the table kernel's own shape"
            opt, e, block, pinned = "_table", 8, SWIGLU_TABLE_BLOCK, False
        e0, block0 = swiglu_choice(rows * I)
        e, block = e or e0, block or block0
        if pinned if pinned is not None else rows * I < SWIGLU_PINNED_BELOW[1 if flags & F_FP32_ACT else 0]:
            flags |= F_SIGMA_PINNED
        lanes = rows * I // e
        act = (1 if flags & F_OAI else 0) + (2 if flags & F_FP32_ACT else 0)
        blocks = -(-lanes // block)
        name = f"mx_swiglu_quant_{SUFFIX[gate.dtype]}_e{e}_a{act}{opt}"
        if opt == "_table":
            # the table kernel traps where its preconditions fail: never launch it there
            if not swiglu_table_ok(gate.dtype, e, block, flags, alpha, limit):
                raise ValueError("swiglu _table: preconditions not met (swiglu_table_ok)")
            if table:
                grid = torch.cuda.get_device_properties(0).multi_processor_count * self.m.resident_blocks(name, block)
            blocks = min(blocks, grid or blocks)
        elif grid is not None:
            raise ValueError("grid: the table kernel only")
        self.m.launch(name, (blocks,), (block,),
                      [gate, up, q, s, ctypes.c_longlong(rows), ctypes.c_int(I), ctypes.c_int(LAYOUTS[layout]),
                       ctypes.c_float(alpha), ctypes.c_float(limit), ctypes.c_float(beta), ctypes.c_uint(flags)])
        return outs

    def quantize(self, x, flags, outs=None, e=None):
        K = x.shape[-1]
        if outs is None:
            outs = (torch.empty(x.shape, dtype=torch.uint8, device=x.device),
                    torch.empty(x.shape[:-1] + (K // 32,), dtype=torch.uint8, device=x.device))
        q, s = outs
        e = e or (2 if x.numel() < SMALL_ELEMS else 8)
        lanes = x.numel() // e
        self.m.launch(f"mx_quantize_{SUFFIX[x.dtype]}_e{e}", (-(-lanes // 256),), (256,),
                      [x, q, s, ctypes.c_longlong(x.numel()), ctypes.c_uint(flags)])
        return outs

    def matmul_tc(self, w, ws, M, aq=None, as_=None, af=None, out_dtype=torch.bfloat16, flags=0, warps=8, y=None, pf=None, ep=None):
        """w e4m3 bytes [N, K], ws [N, K/32]; a either (aq, as_) or af (bf16/f16, quantized in kernel)."""
        N, K = w.shape
        mt = 1 if M <= 8 else 2
        if af is not None:
            amode = "q" + SUFFIX[af.dtype]
        else:
            amode = "e4m3"
        if y is None:
            y = torch.empty(M, N, dtype=out_dtype, device=w.device)
        if pf is None:  # software pipeline only when the grid leaves SMs idle (it halves occupancy)
            pf = -(-N // 16) * -(-M // (8 * mt)) < 132
        name = f"mx_matmul_tc_{amode}_m{8 * mt}_{SUFFIX[out_dtype]}" + ("_pf" if pf else "")
        self.m.launch(name, (-(-N // 16), -(-M // (8 * mt))), (32 * warps,),
                      [aq, as_, af, w, ws, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ctypes.c_uint(flags),
                       ep or epilogue()])
        return y

    def sk_choice(self, N, K, M, sms=132):
        """(S, warps) of the split-K GEMM, as kernels/src/gpu/launch.rs picks them."""
        return sk_choice(N, K, M, sms)

    def matmul_sk(self, w, ws, M, aq=None, as_=None, af=None, out_dtype=torch.bfloat16, flags=0, warps=None, S=None, y=None, ep=None):
        """The split-K GEMM (mx_matmul_splitk.hip): w e4m3 [N, K], ws [N, K/32]; a either (aq, as_)
        or af (bf16/f16, quantized in kernel). S blocks of a cluster split K."""
        N, K = w.shape
        mt = 1 if M <= 8 else 2
        S0, W0 = sk_choice(N, K, M)
        S = S or S0
        warps = warps or W0
        amode = "q" + SUFFIX[af.dtype] if af is not None else "e4m3"
        if y is None:
            y = torch.empty(M, N, dtype=out_dtype, device=w.device)
        name = f"mx_matmul_sk_{amode}_m{8 * mt}_{SUFFIX[out_dtype]}_s{S}"
        self.m.launch(name, (-(-N // 16) * S, -(-M // (8 * mt))), (32 * warps,),
                      [aq, as_, af, w, ws, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ctypes.c_uint(flags),
                       ep or epilogue()])
        return y

    def matmul_pipe(self, w, ws, M, aq, as_, out_dtype=torch.bfloat16, W=None, S=None, y=None, var="", ep=None):
        """The cp.async pipeline GEMM (mx_matmul_pipe.hip): w e4m3 [N, K], ws [N, K/32], K % 128 == 0;
        a pre-quantized (aq e4m3 [M, K], as_ [M, K/32]). W warps = W 16-column tiles per block;
        S blocks of a cluster split K. None = the runtime's choice (pipe_choice). var: "" (the most
        stages that fit), or the bf16-only measurement variants "_p4" (4 stages, W <= 2) and "_l2"
        (L2 256-byte prefetch hint on the weights)."""
        N, K = w.shape
        assert K % 128 == 0
        mt = 1 if M <= 8 else 2
        W0, S0 = pipe_choice(N, K, M)
        if W0 == 0:  # the table names the first kernel here: the rule's shape when asked anyway
            W0, S0 = 2, 2
        W, S = W or W0, S or S0
        if y is None:
            y = torch.empty(M, N, dtype=out_dtype, device=w.device)
        name = f"mx_matmul_pipe_m{8 * mt}_{SUFFIX[out_dtype]}_w{W}_s{S}{var}"
        self.m.launch(name, (-(-N // (16 * W)) * S, -(-M // (8 * mt))), (32 * W,),
                      [aq, as_, w, ws, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ep or epilogue()])
        return y

    def matmul_frag(self, wf, wsf, N, K, M, aq, as_, out_dtype=torch.bfloat16, W=None, S=None, y=None, pre=None, ep=None, sfx=None, rows=None,
                    t2h_pairs=132):
        """The fragment-packed GEMM (mx_matmul_frag.hip): (wf, wsf) = pack_frag(w [N, K], ws); a
        pre-quantized. W warps and S cluster blocks split K of each 16-column tile. With W, S, pre
        and sfx all left out: the runtime's kernel (frag_kernel, as launch.rs). Otherwise None =
        frag_choice, pre = 1, sfx = "". pre & 1: load the first weights before the PDL wait; pre & 2:
        the L2 prefetch of each warp's weights. sfx="_fs" / "_fsa": the m16 bf16 kernels of issue 6
        follow-ups 11 and 13 (every W, S; 16 rows a block at any M); "_t2": the m8 bf16 loop on
        two 16-column tiles a block (follow-ups 20-21; 8-row tiles at any M, pre & 2 ignored); "_t2h":
        `_t2` w4 s1 on its mixed grid (follow-up 36; t2h_blocks_y(N, t2h_pairs), at M <= 8); "_g1":
        one group a warp on two tiles (follow-up 32; W = K / 128, S = 1, every output type); "_g1c":
        16 rows, one group a warp on one tile, weights converted before the PDL wait (follow-up 38;
        W = K / 128 from 3 to 8, S = 1, every output type).
        rows=8: the m8 kernel at any M (8-row tiles). W = 3: the m8 kernel only (S = 1)."""
        assert K % 128 == 0
        runtime = W is None and S is None and pre is None and sfx is None
        if runtime:
            rows, W, S, sfx, pf = frag_kernel(N, K, M, out_dtype)
            pre, mt = (3 if pf else 1), rows // 8
        else:
            sfx = sfx or ""
            pre = 1 if pre is None else pre
            mt = 1 if (M <= 8 and sfx == "") or sfx in ("_t2", "_t2h", "_g1") or rows == 8 else 2
            W0, S0 = frag_choice(N, K, M)
            W, S = W or W0, S or S0
        if y is None:
            y = torch.empty(M, N, dtype=out_dtype, device=wf.device)
        name, grid = frag_name_grid(N, M, W, S, sfx, mt, out_dtype)
        if runtime:
            # launch.rs fit_clusters (shapes::fit_cluster_split): the split halved until the device
            # holds every cluster of the grid at once.
            while S > 1 and grid[0] // S * grid[1] > self.m.active_clusters(name, grid, 32 * W):
                S //= 2
                name, grid = frag_name_grid(N, M, W, S, sfx, mt, out_dtype)
        if sfx == "_t2h":
            grid = (grid[0], t2h_blocks_y(N, t2h_pairs))
        self.m.launch(name, grid, (32 * W,),
                      [aq, as_, wf, wsf, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ctypes.c_int(pre),
                       ep or epilogue()])
        return y

    def matmul_default(self, w, ws, M, aq, as_, out_dtype=torch.bfloat16, y=None, ep=None):
        """The runtime's pre-quantized decode GEMM on sm_90 (launch.rs matmul_tc): the pipeline
        GEMM at pipe_choice, or the first tensor-core kernel where the table says so."""
        N, K = w.shape
        if K % 128 == 0 and pipe_choice(N, K, M)[0] > 0:
            return self.matmul_pipe(w, ws, M, aq, as_, out_dtype=out_dtype, y=y, ep=ep)
        return self.matmul_tc(w, ws, M, aq=aq, as_=as_, out_dtype=out_dtype, y=y,
                              warps=16 if -(-N // 16) < 132 else 8, ep=ep)

    def matmul_generic(self, aq, as_, b, bs, bmode, N, out_dtype=torch.bfloat16, ep=None):
        M, K = aq.shape
        y = torch.empty(M, N, dtype=out_dtype, device=aq.device)
        self.m.launch("mx_matmul_generic_" + SUFFIX[out_dtype], (-(-N // 128), M), (128,),
                      [aq, as_, b, bs, y, ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K), ctypes.c_int(bmode),
                       ep or epilogue()])
        return y


def sk_choice(N, K, M, sms=132):
    """Split-K GEMM launch shape (mirrors kernels/src/gpu/launch.rs `splitk_shape`): the fewest
    cluster splits S in (1, 2, 4) that give >= 2 blocks per SM (every SM busy, a second block to
    hide the tail), then warps = the groups of 4 k-blocks per split (one group in flight per warp
    plus its prefetch), but few enough that every block is resident at once, at most 16, and
    preferably a divisor of the groups."""
    mt = 1 if M <= 8 else 2
    tiles = -(-N // 16) * -(-M // (8 * mt))
    groups = -(-(K // 32) // 4)
    S = next((s for s in (1, 2, 4) if tiles * s >= 2 * sms), 4)
    while S > 1 and groups < S:
        S //= 2
    per = -(-groups // S)
    resident = (24 if M <= 8 else 20) // -(-(tiles * S) // sms)  # warps per SM by registers
    cap = max(1, min(16, per, resident))
    even = next(w for w in range(cap, 0, -1) if per % w == 0)
    return S, even if 2 * even > cap else cap


# The pipeline GEMM's launch shapes: mirrors kernels/src/gpu/shapes.rs `pipe_shape` with the H200 row
# of thresholds.rs `PipeGemmTable` (measured: results/issue6_gemm_run2_*). W = 0: the first kernel.
PIPE_WS = (1, 2, 4)
PIPE_SS = (1, 2, 4, 8)
PIPE_ROWS = [(1536, 6144, 4, 1, 8), (1536, 6144, 8, 2, 8), (1536, 6144, 16, 2, 4),
             (6144, 768, 16, 2, 1), (6144, 6144, 4, 0, 0), (6144, 6144, 16, 2, 2)]
PIPE_ONE_WARP_MAX_M, PIPE_MIN_WARPS_PER_SM, PIPE_MIN_GROUPS_PER_SPLIT = 4, 3, 4


def pipe_choice(N, K, M, sms=132):
    """(W, S) of the pipeline GEMM as the runtime picks them on the H200; (0, 0) = the first
    tensor-core kernel (mirrors kernels/src/gpu/shapes.rs `pipe_shape`)."""
    for n, k, max_m, w, s in PIPE_ROWS:
        if (n, k) == (N, K) and M <= max_m:
            return w, s
    W = 1 if M <= PIPE_ONE_WARP_MAX_M else 2
    warps = -(-N // 16) * -(-M // (8 if M <= 8 else 16))
    groups = K // 128
    S = 1
    for cand in PIPE_SS:
        if cand > 1 and groups // cand < PIPE_MIN_GROUPS_PER_SPLIT:
            break
        S = cand
        if warps * cand >= PIPE_MIN_WARPS_PER_SM * sms:
            break
    return W, S


def pack_frag(w, ws):
    """Weights [N, K] e4m3 + [N, K/32] E8M0 (torch uint8, K % 128 == 0) in the layout of
    mx_matmul_frag.hip (mirrors kernels/src/gpu/pack.rs `pack_frag_weights`): wf [N16, K/32, 32
    lanes, 16] with lane (g, t) = bytes 8t .. 8t+7 of the k-block of rows 16 n16 + g and + g + 8;
    wsf [N16, K/128, 16 rows, 4 k-blocks]. Rows past N: zero weights, scale 127."""
    N, K = w.shape
    T, KB, G = -(-N // 16), K // 32, K // 128
    wp = torch.zeros(16 * T, K, dtype=torch.uint8, device=w.device)
    wp[:N] = w
    wf = wp.view(T, 2, 8, KB, 4, 8).permute(0, 3, 2, 4, 1, 5).contiguous()
    sp = torch.full((16 * T, KB), 127, dtype=torch.uint8, device=w.device)
    sp[:N] = ws
    wsf = sp.view(T, 16, G, 4).permute(0, 2, 1, 3).contiguous()
    return wf, wsf


FRAG_WS = (2, 4, 8)
FRAG_SS = (1, 2, 4, 8)


def frag_choice(N, K, M, sms=132, measured=True, resident=None, tiles=None):
    """(W, S) of the fragment-packed GEMM (mirrors kernels/src/gpu/shapes.rs `frag_shape`): a
    measured row of FRAG_ROWS, else one block per 16-column tile with the most warps W (8, 4, 2)
    for which all blocks are resident in one wave (FRAG_RESIDENT_WARPS // W blocks per SM) and
    each warp keeps FRAG_MIN_GROUPS groups of 4 k-blocks; cluster splits S only where the tiles
    leave most SMs idle."""
    for n, k, max_m, w, s in FRAG_ROWS if measured else ():
        if (n, k) == (N, K) and M <= max_m:
            return w, s
    tiles = tiles or -(-N // 16) * -(-M // (8 if M <= 8 else 16))
    groups = K // 128
    enough = lambda parts: -(-groups // parts) >= FRAG_MIN_GROUPS
    W = next((w for w in sorted(FRAG_WS, reverse=True)
              if enough(w) and tiles <= sms * max(1, (resident or FRAG_RESIDENT_WARPS) // w)), FRAG_WS[0])
    S = 1
    if 2 * tiles < sms:
        for cand in FRAG_SS:
            if tiles * cand <= sms and enough(W * cand):
                S = cand
    return W, S


def trim_idle_warp(K, W, S):
    """The m8 kernel's (W, S) without an idle warp (mirrors shapes.rs `trim_idle_warp`): 3 warps
    where they give each warp as many groups as 4 do (K = 640, 768, 1152), at S = 1."""
    G = K // 128
    return (3, 1) if W == 4 and S == 1 and -(-G // 3) == -(-G // 4) else (W, S)


def t2h_blocks_y(N, pairs=132):
    """The grid's y of `_t2h` (shapes.rs FragLoop::blocks_y): `pairs` pair blocks (the runtime: the
    SM count), then a block for each tile left."""
    tiles = -(-N // 16)
    return tiles - min(pairs, tiles // 2)


def frag_kernel(N, K, M, out_dtype=torch.bfloat16, sms=132, t2=True, g1=True, t2h=True, g1c=True):
    """(rows, W, S, sfx, l2_prefetch) of the fragment GEMM kernel the runtime launches (mirrors
    kernels/src/gpu/shapes.rs `frag_kernel` with its switches on; t2=False: MXFUSE_GPU_FRAG_T2=0,
    g1=False: MXFUSE_GPU_FRAG_G1=0, t2h=False: MXFUSE_GPU_FRAG_T2H=0, g1c=False: MXFUSE_GPU_FRAG_G1C=0):
    at M <= 8 and 384 <= K <= 1024 `_g1` (K / 128 warps, every output type) where its tile pairs fit
    one wave, at 9-16 rows there `_g1c` (16 rows, one tile a warp) from 1.25 tiles an SM to one
    wave; with bf16 output `_t2`
    at M <= 8 (the rule's W, S for half the tiles, no prefetch; its mixed grid `_t2h` at w4 s1 between
    one and one and a half pairs an SM), `_fs` at 9-16 rows (and at M <= 8 without `_t2` where the grid
    leaves SMs idle); there the L2 prefetch, and `_fsa` from FRAG_STAGED_A_FROM rows."""
    tiles = -(-N // 16)
    G = K // 128
    if g1 and M <= 8 and G1_MIN_WARPS <= G <= G1_MAX_WARPS and -(-tiles // 2) <= sms * max(1, G1_RESIDENT_WARPS // G):
        return 8, G, 1, "_g1", False
    if g1c and 9 <= M <= 16 and G1_MIN_WARPS <= G <= G1_MAX_WARPS and 5 * sms <= 4 * tiles <= 4 * sms * max(1, G1_RESIDENT_WARPS // G):
        return 16, G, 1, "_g1c", False
    W16, S16 = frag_choice(N, K, max(M, 9), sms)
    if t2 and out_dtype == torch.bfloat16 and M <= 16:
        pairs = -(-tiles // 2) * -(-M // 8)
        W, S = frag_choice(N, K, M, sms, measured=False, resident=T2_RESIDENT_WARPS, tiles=pairs)
        one_wave = pairs <= sms * max(1, T2_RESIDENT_WARPS // W)
        named = any((n, k) == (N, K) and M <= max_m for n, k, max_m, _, _ in FRAG_ROWS)
        if M <= 8 or (not named and W >= W16 and one_wave):
            mixed = t2h and M <= 8 and (W, S) == (4, 1) and sms < pairs and tiles <= T2_MIXED_MAX_TILES_PER_SM * sms
            return 8, W, S, "_t2h" if mixed else "_t2", False
    fs = out_dtype == torch.bfloat16 and M <= 16 and (M > 8 or tiles * S16 < sms)
    rows, (W, S) = (16, (W16, S16)) if fs or M > 8 else (8, trim_idle_warp(K, *frag_choice(N, K, M, sms)))
    idle = tiles * -(-M // rows) * S < sms
    sfx = ("_fsa" if idle and M >= FRAG_STAGED_A_FROM else "_fs") if fs else ""
    return rows, W, S, sfx, idle


FRAG_RESIDENT_WARPS, FRAG_MIN_GROUPS, FRAG_STAGED_A_FROM, T2_RESIDENT_WARPS = 12, 2, 13, 10
T2_MIXED_MAX_TILES_PER_SM = 3
G1_RESIDENT_WARPS, G1_MIN_WARPS, G1_MAX_WARPS = 21, 3, 8
# The H200 rows of kernels/src/gpu/thresholds.rs `FragGemmTable`: (n, k, max_m, W, S), measured
# (bench_frag_pdl.py; BENCHMARKS.md).
FRAG_ROWS = [(1536, 6144, 16, 8, 1), (6144, 768, 16, 4, 1), (6144, 6144, 16, 4, 1)]


# MXFUSE_GPU_V2=1: the runtime's GEMM is the split-K cluster kernel (launch.rs).
# MXFUSE_GPU_CLUSTERS=off (harness only): bench.py / check.py skip every cluster kernel, even when
# named explicitly, and the runtime choice never splits rows (device_run.sh's fallback after a hang).
V2 = os.environ.get("MXFUSE_GPU_V2") in ("1", "on")
CLUSTERS = os.environ.get("MXFUSE_GPU_CLUSTERS") != "off"


def norm_split(rows, H, sms=132):
    """Blocks per norm row (mirrors kernels/src/gpu/shapes.rs `norm_split`)."""
    if rows >= sms or not CLUSTERS:
        return 1
    return next((s for s in (8, 4, 2) if (H // 32) % s == 0 and rows * s <= sms and H // 8 // s <= 1024), 1)


def norm_fit_nch(H):
    """The fewest chunks per lane whose block holds a row of H (few rows: short per-lane chains)."""
    return next(c for c in (1, 2, 4) if H // 8 <= c * NORM_MAX_BLOCK[c])


# The H200 row of kernels/src/gpu/thresholds.rs `NormChoiceTable` (measured, BENCHMARKS.md).
NORM_SPLIT_MAX_ROWS = 64
NORM_MANY_ROWS, NORM_MANY_ROWS_NCH = 264, 3


def norm_choice(rows, H, sms=132):
    """(split, nch) as the runtime picks them on the H200 (launch.rs with thresholds.rs)."""
    if rows <= NORM_SPLIT_MAX_ROWS and norm_split(rows, H, sms) > 1:
        return norm_split(rows, H, sms), 1
    if rows >= NORM_MANY_ROWS and H // 8 <= NORM_MANY_ROWS_NCH * NORM_MAX_BLOCK[NORM_MANY_ROWS_NCH]:
        return 1, NORM_MANY_ROWS_NCH
    return 1, norm_fit_nch(H)


# The H200 row of kernels/src/gpu/thresholds.rs `ElementwiseChoice`: elements per lane and block
# size of SwiGluMxQuant / MxQuantize by output size.
SWIGLU_SMALL = [(1 << 14, 1, 256), (1 << 15, 2, 256), (1 << 16, 1, 512), (1 << 18, 2, 256)]
SWIGLU_LARGE = (8, 128)
# ... and below how many outputs the launch asks for the pinned logistic (F_SIGMA_PINNED), for the
# bf16-rounded and the fp32 activation.
SWIGLU_PINNED_BELOW = (1 << 20, 1 << 22)


# The SwiGLU table kernel (swiglu_mxquant.hip swiglu_mxquant_blocks, `_table`), the launch table's
# choice from SWIGLU_TABLE_FROM outputs (the H200 row's `table_from`, thresholds.rs
# SwiGluLaunchTable) in 256-lane blocks (kernels/src/gpu/swiglu_table_kernel.rs).
SWIGLU_TABLE_FROM = 1 << 12
SWIGLU_TABLE_BLOCK = 256


def swiglu_table_ok(dtype, e, block, flags, alpha, limit):
    """Whether the table kernel may be launched (it traps otherwise): bf16, 8 per lane, <= 256 lanes
    a block, rounded activation in the unrolled swish form; OAI with limit > 0 and bf16(limit) > 0;
    bf16(alpha) finite and nonzero."""
    def bf(v):  # f32, then bf16 round-to-nearest-even (as the kernel's mx_round<MxBf16>)
        b = struct.unpack("<I", struct.pack("<f", v))[0]
        if (b & 0x7FFFFFFF) > 0x7F800000:
            return math.nan
        return struct.unpack("<f", struct.pack("<I", ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16 & 0xFFFFFFFF))[0]
    ok = dtype == torch.bfloat16 and e == 8 and block <= 256 and not flags & (F_FP32_ACT | F_SWISH_SINGLE)
    ok = ok and (not flags & F_OAI or (limit > 0 and bf(limit) > 0))
    a = bf(alpha)
    return bool(ok and math.isfinite(a) and a != 0.0)


def swiglu_uses_table(n, dtype, flags, alpha=1.702, limit=7.0):
    """Whether the launch table takes the table kernel for n outputs (launch.rs `swiglu_mxquant`)."""
    return n >= SWIGLU_TABLE_FROM and swiglu_table_ok(dtype, 8, SWIGLU_TABLE_BLOCK, flags, alpha, limit)


def swiglu_choice(n):
    for limit, e, block in SWIGLU_SMALL:
        if n < limit:
            return e, block
    return SWIGLU_LARGE
