//! Fast kernels: row-parallel through [`crate::Parallel`], AVX2+FMA+F16C when the CPU has it
//! (chosen at run time by [`Isa::detect`]), the scalar code otherwise. Bit-exact with
//! [`crate::reference`] except `MxMatMul`, whose f32 accumulation order is its own.

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_act;
#[cfg(target_arch = "x86_64")]
mod avx2_mx;
#[cfg(target_arch = "x86_64")]
mod avx2_norm_words;
#[cfg(target_arch = "x86_64")]
mod avx512_cols;
#[cfg(target_arch = "x86_64")]
mod avx512_mx;
#[cfg(target_arch = "x86_64")]
mod avx512_norm;
#[cfg(target_arch = "x86_64")]
mod avx512_norm_words;
#[cfg(target_arch = "x86_64")]
mod avx512_regs;
mod codec;
pub mod cols_layout;
mod dequant;
pub mod float_a;
mod isa;
mod matmul;
#[cfg(target_arch = "x86_64")]
mod matmul_cols;
#[cfg(target_arch = "x86_64")]
mod matmul_mx;
mod norm;
#[cfg(test)]
mod norm_edge_rows;
mod quant_linear;
mod quantize;
mod shared;
mod swiglu;
#[cfg(target_arch = "x86_64")]
mod word_rows;

pub use codec::{cast_from_e4m3, cast_to_e4m3};
pub use dequant::mx_dequantize;
pub use isa::{
    amx_bf16, avx512_bf16, avx512_norm, with_amx, with_avx2_only, with_avx512_bf16, with_portable,
    Isa,
};
pub use matmul::{mx_matmul, mx_matmul_a, mx_matmul_quantize_a};
pub use norm::add_rms_norm_mx_quant;
pub use quant_linear::mx_quantize_linear;
pub use quantize::mx_quantize;
pub use swiglu::swiglu_mx_quant;

use crate::element::Element;
use half::{bf16, f16};

/// An activation element type the fast kernels accept (f32, f16, bf16).
#[cfg(target_arch = "x86_64")]
pub trait FastElement: Element + avx2::Lanes {}
/// An activation element type the fast kernels accept (f32, f16, bf16).
#[cfg(not(target_arch = "x86_64"))]
pub trait FastElement: Element {}

impl FastElement for f32 {}
impl FastElement for f16 {}
impl FastElement for bf16 {}

/// Elements of work below which a kernel stays on the calling thread: spawning costs more than
/// it saves for a few tens of microseconds of work.
const MIN_PARALLEL_ELEMS: usize = 16 * 1024;

/// Minimum rows per task so that each task has about [`MIN_PARALLEL_ELEMS`] elements.
fn min_rows_per_task(row_elems: usize) -> usize {
    MIN_PARALLEL_ELEMS.div_ceil(row_elems.max(1))
}
