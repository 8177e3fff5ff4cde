"""Compile the GPU program for an NVIDIA target on a machine without a GPU, and report per kernel
what costs no device time: registers, spills, shared memory (ptxas -v) and, with cuobjdump, a
histogram of the SASS of chosen kernels (are the loads 16 bytes wide, which MMA instructions,
any local memory). The cubin it writes is the one the device would compile (same NVRTC, same
program text and options as kernels/src/gpu/runtime.rs), so it can also be carried to a device
call as a kernel cache (bench/gpu/device_run.sh).

Needs NVRTC 13.0 (the device image's; pip: nvidia-cuda-nvrtc==13.0.*) and optionally cuobjdump
(pip: nvidia-cuda-cuobjdump): point MXFUSE_NVRTC / CUOBJDUMP at them, or let the script search
the Python site directories.

    python3 bench/gpu/offline_compile.py [--arch sm_90] [--out DIR] [--sass KERNEL ...] [--pack]

--pack writes .gpucache/kernels.tar.xz (the cubin under the Python harness's and the Rust runtime's
cache names; the latter from `cargo test -p kernels --test gpu_kernels -- --ignored kernel_cache_name`)
and .gpucache/gpu_kernels.xz (that test binary), which bench/gpu/device_run.sh unpacks on the device
(carry .gpucache; add /.gpucache/ to .git/info/exclude).
"""
import argparse, concurrent.futures, ctypes, collections, glob, hashlib, io, lzma, os, re, subprocess, sys, sysconfig, tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from program import program_text


def find(env, pattern):
    if os.environ.get(env):
        return os.environ[env]
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]} | {p for p in sys.path if "-packages" in p}
    for r in sorted(roots):
        hits = sorted(glob.glob(os.path.join(r, "nvidia", "**", pattern), recursive=True))
        if hits:
            return hits[-1]
    return None


def load_nvrtc():
    lib_path = find("MXFUSE_NVRTC", "libnvrtc.so.*[0-9]")
    if not lib_path:
        sys.exit("no NVRTC: pip install nvidia-cuda-nvrtc==13.0.* or set MXFUSE_NVRTC")
    # libnvrtc loads libnvrtc-builtins from its own directory via the loader path.
    ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(lib_path), "libnvrtc-builtins.so*"))[0], mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(lib_path)


def compile_text(nvrtc, src, arch, verbose=True):
    """(cubin, log) of one program text with the runtime's options (runtime.rs
    cuda_compile_options), plus the resource report when `verbose`."""
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"mxfuse.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", b"-lineinfo"]
    opts += [b"--ptxas-options=-v"] if verbose else []
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.value.decode()
    if rc != 0:
        sys.exit("NVRTC failed:\n" + log[:20000])
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin.raw, log


def compile_cubin(arch):
    src = program_text()
    cubin, log = compile_text(load_nvrtc(), src, arch)
    return cubin, log, src


def resources(log):
    """{kernel: (registers, spill stores, spill loads, smem bytes)} from the ptxas -v log."""
    out, name = {}, None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            spills = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?", line)
        if m and name:
            out[name] = (int(m.group(1)),) + spills + (int(m.group(2) or 0),)
            name = None
    return out


def pack(cubin, src, arch, root):
    """The device call's kernel cache and Rust test binary, compressed (see the module doc): the
    whole-program cubin under the Python harness's name, and each module of the Rust runtime
    (kernels::gpu::sources::MODULES, texts and cache names from the `kernel_cache_name` test)
    compiled on parallel threads under the runtime's names."""
    py_name = f"mxfuse-{arch}-{hashlib.sha256((src + '|' + arch[3:]).encode()).hexdigest()[:16]}.cubin"
    dump = os.path.join("/tmp", f"mxfuse_modules_{os.getpid()}")
    run = subprocess.run(["cargo", "test", "-p", "kernels", "--test", "gpu_kernels", "--", "--ignored",
                          "--nocapture", "kernel_cache_name"], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "MXFUSE_MODULE_DUMP": dump})
    modules = re.findall(r"^(\w+) (mxfuse-sm_\d+-[0-9a-f]{16}\.bin)$", run.stdout, re.M)
    if run.returncode != 0 or not modules or arch != "sm_90":
        sys.exit("cannot get the Rust cache names (cargo test ... kernel_cache_name; sm_90 only):\n" + run.stderr[-2000:])
    binary = re.search(r"Running tests/gpu_kernels.rs \((\S+)\)", run.stderr)
    nvrtc = load_nvrtc()
    texts = [open(os.path.join(dump, f"{m}.cu")).read() for m, _ in modules]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count()) as ex:
        images = list(ex.map(lambda t: compile_text(nvrtc, t, arch, verbose=False)[0], texts))
    os.makedirs(os.path.join(root, ".gpucache"), exist_ok=True)
    with tarfile.open(os.path.join(root, ".gpucache", "kernels.tar.xz"), "w:xz") as t:
        for name, data in [(py_name, cubin)] + [(n, img) for (_, n), img in zip(modules, images)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    if binary:
        with open(os.path.join(root, binary.group(1)), "rb") as f, lzma.open(os.path.join(root, ".gpucache", "gpu_kernels.xz"), "wb") as o:
            o.write(f.read())
    print(f"packed {py_name}, {', '.join(n for _, n in modules)}"
          + (f", {binary.group(1)}" if binary else " (no test binary found)"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90", help="NVRTC target (default sm_90, the H200's)")
    ap.add_argument("--out", default="/tmp/mxfuse_offline", help="where the cubin and ptxas log go")
    ap.add_argument("--sass", nargs="*", default=[], help="kernels whose SASS histogram to print")
    ap.add_argument("--pack", action="store_true", help="write .gpucache/ for bench/gpu/device_run.sh")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cubin, log, src = compile_cubin(a.arch)
    path = os.path.join(a.out, f"mxfuse-{a.arch}.cubin")
    open(path, "wb").write(cubin)
    open(os.path.join(a.out, "ptxas.log"), "w").write(log)
    res = resources(log)
    print(f"{len(res)} kernels -> {path}")
    for k, (regs, st, ld, smem) in sorted(res.items()):
        flag = "  SPILLS" if st or ld else ""
        print(f"  {k:48s} {regs:4d} regs {smem:6d} B smem{flag}")
    tool = find("CUOBJDUMP", "cuobjdump")
    for k in a.sass:
        if k not in res:
            print(f"{k}: no such kernel (names as listed above)")
            continue
        if not tool:
            print("no cuobjdump: pip install nvidia-cuda-cuobjdump or set CUOBJDUMP")
            break
        sass = subprocess.run([tool, "-sass", "-fun", k, path], capture_output=True, text=True).stdout
        ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M)
        hist = collections.Counter(o.split(".")[0] for o in ops)
        print(f"{k}: {len(ops)} instructions; " + ", ".join(f"{o} {c}" for o, c in hist.most_common(16)))
    if a.pack:
        pack(cubin, src, a.arch, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


if __name__ == "__main__":
    main()
