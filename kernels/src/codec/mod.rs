//! Scalar codecs: FP8 E4M3FN and E5M2 values, FP4 E2M1 values (MXFP4), E8M0 scales and the MXFP8 block quantizer built from them.
//!
//! These scalar functions are the definition the reference and the vectorized paths agree with;
//! `crate::simd` holds the AVX2 versions.

pub mod e2m1;
pub mod e4m3;
pub mod e5m2;
pub mod e8m0;
pub mod mx;

pub use e2m1::{e2m1_to_e4m3, e2m1_to_f32, widened_e4m3};
pub use e4m3::{e4m3_to_f32, f32_to_e4m3, E4M3_MAX, E4M3_NAN};
pub use e5m2::{e5m2_to_f32, f32_to_e5m2, E5M2_MAX, E5M2_NAN};
pub use e8m0::{e8m0_to_f32, pow2_inverse, E8M0_NAN};
pub use mx::{quantize_block, NanPolicy, QuantConfig, ScaleRule, BLOCK};
