//! Reusable sub-patterns: the spellings real exporters emit for each piece of a fusion.
pub mod gate_up;
pub mod mx_quant;
pub mod rms_norm;
pub mod swiglu;
