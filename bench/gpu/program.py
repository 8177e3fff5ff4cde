"""The GPU program text, assembled exactly as kernels/src/gpu/sources.rs assembles it: the files of
kernels/gpu/ in PROGRAM_FILES order, each behind a `#line` marker, with the `#pragma once` lines
dropped. Used by the bench / correctness harness and the AMD compile check so that they compile the
same source text as the Rust runtime."""
import os

# MXFUSE_KERNEL_DIR: another checkout's kernels/gpu (an old-vs-new cubin for bench/gpu/ab_swiglu.py).
KERNEL_DIR = os.environ.get("MXFUSE_KERNEL_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "gpu")
PROGRAM_FILES = [
    "mx_portability.h",
    "mx_common.h",
    "add_rmsnorm_mxquant.hip",
    "swiglu_sigma_table.hip",
    "swiglu_mxquant.hip",
    "mx_quantize.hip",
    "mx_dequantize.hip",
    "mx_gather.hip",
    "mx_quantize_linear.hip",
    "mx_matmul.hip",
    "mx_matmul_splitk.hip",
    "mx_matmul_pipe.hip",
    "mx_matmul_frag.hip",
    "mx_matmul_frag_wo.hip",
    "mx_prefill.hip",
    "mx_matmul_frag_grouped.hip",  # last: its define reaches no other file here
]


def program_text(kernel_dir=KERNEL_DIR, files=None) -> str:
    """The program from kernel_dir; `files`: only the headers and these files (one runtime module,
    kernels/src/gpu/sources.rs `module_text`), in PROGRAM_FILES order."""
    parts = []
    for name in PROGRAM_FILES:
        if files is not None and not (name.endswith(".h") or name in files):
            continue
        with open(os.path.join(kernel_dir, name)) as f:
            body = f.read()
        body = "\n".join(l for l in body.split("\n") if l.strip() != "#pragma once")
        parts.append(f'#line 1 "{name}"\n{body}\n')
    return "".join(parts)


if __name__ == "__main__":
    import sys
    sys.stdout.write(program_text())


def gemm_text_with(path):
    """The decode GEMM's module text (quantize, pipe, frag files) with a bench-only kernel file
    appended (the A/B scripts' experiments: ab_ws.py, ab_grid.py; bench/gpu/device_*.sh)."""
    t = program_text(files=["mx_quantize.hip", "mx_matmul_pipe.hip", "mx_matmul_frag.hip"])
    return t + f'#line 1 "{os.path.basename(path)}"\n' + open(path).read() + "\n"
