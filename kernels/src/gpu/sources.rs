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
/// What the Python harness and the HIP compile check build; the runtime compiles [`MODULES`].
pub fn program_text() -> String {
    text_of(PROGRAM_FILES.iter().map(|(name, _)| *name))
}

/// One separately compiled part of the program: the two headers, then `files` (in
/// [`PROGRAM_FILES`] order). Compiling the whole program as one unit took ~2 minutes on the
/// H200's host at first use (NVRTC is single-threaded per program), most of it in the GEMM
/// files; as modules they compile on parallel threads, and the opt-in split-K GEMM only when a
/// kernel of it is asked for.
pub struct Module {
    pub name: &'static str,
    /// The `.hip` files after the headers; a file needs every file it uses in the same module.
    pub files: &'static [&'static str],
    /// Compiled at start (`true`) or at the first lookup of a kernel no eager module has.
    pub eager: bool,
}

/// The modules the runtime compiles. Kernel names are unique within a module; a kernel found
/// in two modules (`mx_matmul.hip`'s, also compiled into `splitk`) is taken from the first.
pub const MODULES: [Module; 6] = [
    Module {
        name: "norm",
        files: &["add_rmsnorm_mxquant.hip"],
        eager: true,
    },
    Module {
        name: "swiglu",
        files: &["swiglu_mxquant.hip"],
        eager: true,
    },
    Module {
        name: "quantize",
        files: &[
            "mx_quantize.hip",
            "mx_dequantize.hip",
            "mx_quantize_linear.hip",
        ],
        eager: true,
    },
    Module {
        name: "gemm",
        files: &["mx_matmul.hip"],
        eager: true,
    },
    Module {
        // The fragment GEMM uses the pipeline GEMM's mma helpers.
        name: "gemm_frag",
        files: &["mx_matmul_pipe.hip", "mx_matmul_frag.hip"],
        eager: true,
    },
    Module {
        // The opt-in split-K GEMM (MXFUSE_GPU_V2=1) uses `mx_matmul.hip`'s loaders.
        name: "gemm_splitk",
        files: &["mx_matmul.hip", "mx_matmul_splitk.hip"],
        eager: false,
    },
];

/// The program text of `module`: the headers and its files, as [`program_text`] writes them.
pub fn module_text(module: &Module) -> String {
    let headers = PROGRAM_FILES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.ends_with(".h"));
    text_of(headers.chain(module.files.iter().copied()))
}

fn text_of<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for name in names {
        let body = PROGRAM_FILES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .unwrap_or_else(|| panic!("{name} is not in PROGRAM_FILES"));
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

    #[test]
    fn modules_cover_every_op_file_and_start_with_the_headers() {
        for (name, _) in PROGRAM_FILES.iter().filter(|(n, _)| n.ends_with(".hip")) {
            assert!(
                MODULES.iter().any(|m| m.files.contains(name)),
                "{name} is in no module"
            );
        }
        for m in &MODULES {
            let text = module_text(m);
            assert!(
                text.starts_with("#line 1 \"mx_portability.h\""),
                "{}",
                m.name
            );
            assert!(text.contains("#line 1 \"mx_common.h\""), "{}", m.name);
            assert!(!text.contains("#pragma once"));
        }
    }
}
