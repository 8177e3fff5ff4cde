//! Which instruction set the fast kernels use: AVX2+FMA+F16C when the CPU has them (checked at
//! run time), the portable scalar path otherwise or when a caller forces it (tests, A/B runs).
//! On top of AVX2, the MXFP8 GEMM uses AVX512-BF16 dot products where the CPU has them
//! ([`avx512_bf16`]; [`with_avx2_only`] turns them off for tests and A/B runs).
//!
//! `MXFUSE_CPU_ISA` sets the choice for the whole process: `portable`, `avx2`, or `avx512` /
//! unset (the default: the AVX-512 BF16 GEMM wherever the CPU has it). The two GEMM paths sum in
//! different orders — both f32 accumulation within the documented tolerance (docs/ops.md: GEMM
//! outputs are never a bit-exact target, as in every BLAS), but not bit-identical — so a model
//! gives the same bits on two CPUs only if both take the same path: `MXFUSE_CPU_ISA=avx2` pins
//! every AVX2 CPU to one. Everything else (quantize, norm, SwiGLU) is bit-exact on every path.
//!
//! `MXFUSE_CPU_AMX=1` / `0` turns the AMX-BF16 tiles of the MXFP8 GEMM at 4 ≤ M ≤ 64 on / off
//! ([`amx_bf16`]; unset: [`AMX_DEFAULT`], on); they need the AVX-512 BF16 path too (its decode)
//! and are off under `MXFUSE_CPU_ISA=avx2`. Their sums are in yet another order (f32, within
//! the same tolerance).

use std::cell::Cell;
use std::sync::OnceLock;

/// The process-wide cap from `MXFUSE_CPU_ISA` (read once). A value that is none of the
/// documented ones is ignored with one line on stderr: a typo (`avx-2`) used to be ignored
/// silently, leaving the GEMMs on the CPU's best path when the user had asked to pin them.
fn isa_cap() -> &'static str {
    static CAP: OnceLock<String> = OnceLock::new();
    CAP.get_or_init(|| {
        let (cap, warning) = isa_cap_from(std::env::var("MXFUSE_CPU_ISA").ok().as_deref());
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        cap
    })
}

/// `MXFUSE_CPU_ISA`'s value → (the cap, lower-cased; `""` for the default) and a warning for a
/// value that is none of `portable`, `avx2`, `avx512` (then the default).
fn isa_cap_from(value: Option<&str>) -> (String, Option<String>) {
    let v = value.unwrap_or_default().trim().to_ascii_lowercase();
    match v.as_str() {
        "" | "portable" | "avx2" | "avx512" => (v, None),
        _ => (
            String::new(),
            Some(format!(
                "mxfuse: MXFUSE_CPU_ISA={:?} is not portable, avx2 or avx512: ignored (the default: \
                 the best path this CPU has)",
                value.unwrap_or_default()
            )),
        ),
    }
}

/// The code path a fast kernel takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Portable,
    Avx2,
}

thread_local! {
    static FORCE_PORTABLE: Cell<bool> = const { Cell::new(false) };
    static FORCE_AVX2_ONLY: Cell<bool> = const { Cell::new(false) };
    static FORCE_AVX512: Cell<bool> = const { Cell::new(false) };
    static FORCE_AMX: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether AMX runs where it can when `MXFUSE_CPU_AMX` is unset: yes, it measured 1.9-4.5×
/// the AVX-512 BF16 path at M = 8 and 16, 3.4-4.9× at M = 64, on the three MiniMax-M3 TP4
/// shapes (Xeon, 2 threads, weights from DRAM), and M < 4 does not take it.
pub const AMX_DEFAULT: bool = true;

/// `MXFUSE_CPU_AMX` (read once): `1` / `0`; unset or empty → [`AMX_DEFAULT`]; anything else →
/// [`AMX_DEFAULT`] with one line on stderr.
fn amx_wanted() -> bool {
    static WANT: OnceLock<bool> = OnceLock::new();
    *WANT.get_or_init(|| {
        let (want, warning) = amx_wanted_from(std::env::var("MXFUSE_CPU_AMX").ok().as_deref());
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        want
    })
}

/// `MXFUSE_CPU_AMX`'s value → whether AMX is wanted, and a warning for a value that is not
/// `0` / `1` (then [`AMX_DEFAULT`]).
fn amx_wanted_from(value: Option<&str>) -> (bool, Option<String>) {
    match value.map(str::trim) {
        Some("1") => (true, None),
        Some("0") => (false, None),
        None | Some("") => (AMX_DEFAULT, None),
        Some(other) => (
            AMX_DEFAULT,
            Some(format!(
                "mxfuse: MXFUSE_CPU_AMX={other:?} is not 0 or 1: ignored (the default: {})",
                if AMX_DEFAULT { "on" } else { "off" }
            )),
        ),
    }
}

/// Whether the MXFP8 `[N, K]` GEMM at 4 ≤ M ≤ 64 may run on AMX-BF16 tiles: wanted
/// (`MXFUSE_CPU_AMX`, or [`with_amx`] on this thread), [`avx512_bf16`] (whose decode it reuses)
/// and the CPU and OS support AMX-BF16 for this process (checked once).
pub fn amx_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        FORCE_AMX.with(Cell::get).unwrap_or_else(amx_wanted)
            && avx512_bf16()
            && super::amx::supported()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Runs `f` with the AMX GEMM path on or off on this thread whatever `MXFUSE_CPU_AMX` says
/// (still only where the CPU and OS have it); for tests and A/B runs.
pub fn with_amx<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let prev = FORCE_AMX.with(|c| c.replace(Some(on)));
    let out = f();
    FORCE_AMX.with(|c| c.set(prev));
    out
}

impl Isa {
    /// The best path for this CPU, unless the calling thread is inside [`with_portable`].
    pub fn detect() -> Isa {
        if FORCE_PORTABLE.with(Cell::get) || isa_cap() == "portable" {
            return Isa::Portable;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }
}

/// Runs `f` with the fast kernels called from this thread restricted to the portable path.
pub fn with_portable<R>(f: impl FnOnce() -> R) -> R {
    let prev = FORCE_PORTABLE.with(|c| c.replace(true));
    let out = f();
    FORCE_PORTABLE.with(|c| c.set(prev));
    out
}

/// Whether an AVX-512 path may run on this thread at all: [`Isa::detect`] is `Avx2`,
/// `MXFUSE_CPU_ISA` is not `avx2` (or the thread is inside [`with_avx512_bf16`]) and the thread is
/// not inside [`with_avx2_only`]. Each path then checks the CPU features it needs.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn avx512_allowed() -> bool {
    let allowed = isa_cap() != "avx2" || FORCE_AVX512.with(Cell::get);
    allowed && !FORCE_AVX2_ONLY.with(Cell::get) && Isa::detect() == Isa::Avx2
}

/// Whether the AVX2 path may also use AVX-512 BF16 dot products (`vdpbf16ps`) in the MXFP8 GEMM
/// (and `vcvtne2ps2bf16` in the fused norm's packed-word pass 2, with [`avx512_norm`]):
/// `avx512_allowed()` and the CPU has AVX512F/BW/VL/BF16 and VBMI (the byte look-ups of the
/// in-register decode; every CPU with AVX512-BF16 but Cooper Lake has it).
pub fn avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512_allowed()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512bf16")
            && is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the fused norm (`AddRmsNormMxQuant`) may take its AVX-512 path (16-lane pass 2 and
/// quantizer, 32-lane bf16 pass 1; bit-identical to the AVX2 path): `avx512_allowed()` and the
/// CPU has AVX512F/BW/DQ/VBMI.
pub fn avx512_norm() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512_allowed()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Runs `f` with the fast kernels called from this thread restricted to AVX2 (no AVX-512).
pub fn with_avx2_only<R>(f: impl FnOnce() -> R) -> R {
    let prev = FORCE_AVX2_ONLY.with(|c| c.replace(true));
    let out = f();
    FORCE_AVX2_ONLY.with(|c| c.set(prev));
    out
}

/// Runs `f` with the AVX-512 BF16 GEMM allowed on this thread (where the CPU has it) even under
/// `MXFUSE_CPU_ISA=avx2`; for tests and A/B runs.
pub fn with_avx512_bf16<R>(f: impl FnOnce() -> R) -> R {
    let prev = FORCE_AVX512.with(|c| c.replace(true));
    let out = f();
    FORCE_AVX512.with(|c| c.set(prev));
    out
}

#[cfg(test)]
mod env_tests {
    use super::{amx_wanted_from, isa_cap_from, AMX_DEFAULT};

    /// A value that is none of the documented ones is the default with a warning naming the
    /// variable, never silently another path (new-user probe 5: `MXFUSE_CPU_ISA=bogus` was
    /// ignored without a word).
    #[test]
    fn cpu_isa_and_amx_values() {
        assert_eq!(isa_cap_from(None), (String::new(), None));
        assert_eq!(isa_cap_from(Some("AVX2")), ("avx2".to_string(), None));
        assert_eq!(
            isa_cap_from(Some("portable")),
            ("portable".to_string(), None)
        );
        assert_eq!(isa_cap_from(Some("avx512")), ("avx512".to_string(), None));
        let (cap, w) = isa_cap_from(Some("avx-2"));
        assert_eq!(cap, "");
        assert!(w
            .unwrap()
            .starts_with("mxfuse: MXFUSE_CPU_ISA=\"avx-2\" is not portable, avx2 or avx512"));
        assert_eq!(amx_wanted_from(Some("0")), (false, None));
        assert_eq!(amx_wanted_from(Some("1")), (true, None));
        assert_eq!(amx_wanted_from(None), (AMX_DEFAULT, None));
        let (want, w) = amx_wanted_from(Some("off"));
        assert_eq!(want, AMX_DEFAULT);
        assert!(w
            .unwrap()
            .starts_with("mxfuse: MXFUSE_CPU_AMX=\"off\" is not 0 or 1"));
    }
}
