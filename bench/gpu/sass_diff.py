"""Do two kernel sources compile to the same machine code? For refactors of kernels/gpu that must
not change what the runtime runs: compiles another checkout's kernels/gpu (OLD) and this tree's
with offline_compile.py's NVRTC and options (sm_90), dumps every kernel's SASS with cuobjdump
(instruction lines, encodings dropped) and compares, per kernel both sides define, the ptxas
resources (registers, spill stores / loads, shared memory) and the SASS line by line.

    python3 bench/gpu/sass_diff.py OLD_KERNEL_DIR [--files add_rmsnorm_mxquant.hip ...] [--out DIR]

--files: the headers and these files only (a runtime module, kernels/src/gpu/sources.rs MODULES:
what the runtime compiles at first use); default the whole program. Prints the kernels only one
side defines, one line per kernel that differs (`resources old -> new` / `sass: N of M lines`,
plus whether the instructions are the same multiset once registers are renamed, i.e. only their
order or register choice differs), and a summary; the SASS files stay under DIR/old, DIR/new."""
import argparse, collections, os, re, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_compile as oc
from program import KERNEL_DIR, program_text


def build(nvrtc, kernel_dir, files, out):
    """{kernel: (resources, SASS lines)} of kernel_dir's program, and the NVRTC time."""
    t = time.perf_counter()
    cubin, log = oc.compile_text(nvrtc, program_text(kernel_dir, files), "sm_90")
    dt = time.perf_counter() - t
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "mxfuse-sm_90.cubin")
    open(path, "wb").write(cubin)
    tool = oc.find("CUOBJDUMP", "cuobjdump") or sys.exit("no cuobjdump: pip install nvidia-cuda-cuobjdump")
    sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
    code, name = {}, None
    for line in sass.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            name = m.group(1)
            code[name] = []
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);?\s*(/\*.*\*/)?\s*$", line)
        if name and m:
            code[name].append(m.group(1).strip())
    res = oc.resources(log)
    for k, lines in code.items():
        open(os.path.join(out, k + ".sass"), "w").write("\n".join(lines) + "\n")
    return {k: (res.get(k), code[k]) for k in code}, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old", help="the other checkout's kernels/gpu")
    ap.add_argument("--files", nargs="*", default=None, help="a module's .hip files (default: the whole program)")
    ap.add_argument("--out", default="/tmp/mxfuse_sass_diff")
    a = ap.parse_args()
    nvrtc = oc.load_nvrtc()
    old, t_old = build(nvrtc, a.old, a.files, os.path.join(a.out, "old"))
    new, t_new = build(nvrtc, KERNEL_DIR, a.files, os.path.join(a.out, "new"))
    print(f"old {len(old)} kernels ({t_old:.1f} s NVRTC), new {len(new)} kernels ({t_new:.1f} s NVRTC)")
    print("only old:", " ".join(sorted(set(old) - set(new))) or "-")
    print("only new:", " ".join(sorted(set(new) - set(old))) or "-")
    shape = lambda lines: collections.Counter(re.sub(r"\bU?R\d+\b", "R", l) for l in lines)
    same = 0
    for k in sorted(set(old) & set(new)):
        (ro, so), (rn, sn) = old[k], new[k]
        if ro == rn and so == sn:
            same += 1
            continue
        what = [] if ro == rn else [f"resources {ro} -> {rn}"]
        if so != sn:
            n = sum(x != y for x, y in zip(so, sn)) + abs(len(so) - len(sn))
            what.append(f"sass: {n} of {len(sn)} lines" + (", same instructions" if shape(so) == shape(sn) else ""))
        print(f"DIFF {k}: " + "; ".join(what))
    print(f"{same} of {len(set(old) & set(new))} common kernels identical (resources and SASS)")


if __name__ == "__main__":
    main()
