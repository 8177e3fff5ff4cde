//! Reusable sub-patterns: the spellings real exporters emit for each piece of a fusion.
mod block_shape;
pub mod gate_up;
pub mod modelopt;
pub mod mx_quant;
pub mod rms_norm;
pub mod swiglu;
