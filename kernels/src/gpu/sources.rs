//! The kernel sources (kernels/gpu/*), embedded at build time and assembled into the one program
//! text that NVRTC or hipRTC compiles at run time. bench/gpu/program.py assembles the same text
//! (same files, same order, same markers), so the device harness measures exactly this code.

/// The source files, in program order: portability layer, shared numerics, then one file per op.
pub const PROGRAM_FILES: [(&str, &str); 11] = [
    (
        "mx_portability.h",
        include_str!("../../gpu/mx_portability.h"),
    ),
    ("mx_common.h", include_str!("../../gpu/mx_common.h")),
    (
        "add_rmsnorm_mxquant.hip",
        include_str!("../../gpu/add_rmsnorm_mxquant.hip"),
    ),
    (
        "swiglu_mxquant.hip",
        include_str!("../../gpu/swiglu_mxquant.hip"),
    ),
    ("mx_quantize.hip", include_str!("../../gpu/mx_quantize.hip")),
    (
        "mx_dequantize.hip",
        include_str!("../../gpu/mx_dequantize.hip"),
    ),
    (
        "mx_quantize_linear.hip",
        include_str!("../../gpu/mx_quantize_linear.hip"),
    ),
    ("mx_matmul.hip", include_str!("../../gpu/mx_matmul.hip")),
    (
        "mx_matmul_splitk.hip",
        include_str!("../../gpu/mx_matmul_splitk.hip"),
    ),
    (
        "mx_matmul_pipe.hip",
        include_str!("../../gpu/mx_matmul_pipe.hip"),
    ),
    (
        "mx_matmul_frag.hip",
        include_str!("../../gpu/mx_matmul_frag.hip"),
    ),
];

/// The whole program: each file behind a `#line 1 "<file>"` marker (so compiler messages name
/// the real file and line), with its `#pragma once` dropped (everything is one translation unit).
pub fn program_text() -> String {
    let mut out = String::new();
    for (name, body) in PROGRAM_FILES {
        out.push_str(&format!("#line 1 \"{name}\"\n"));
        for line in body.split('\n').filter(|l| l.trim() != "#pragma once") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_holds_every_file_once_without_pragma_once() {
        let text = program_text();
        for (name, _) in PROGRAM_FILES {
            assert_eq!(text.matches(&format!("#line 1 \"{name}\"")).count(), 1);
        }
        assert!(!text.contains("#pragma once"));
        assert!(text.contains("extern \"C\" __global__"));
    }
}
