//! The rule registry. Order is priority: a fused rule must run before `mxquant`, which would
//! otherwise take its quantizer alone; `mx_quant_linear` and `mx_dequant` are fallbacks (run when
//! the others are done).
pub mod add_rmsnorm_mxquant;
pub mod flat_linear;
pub mod gathered_bmm;
pub mod gathered_quark;
pub mod mx_consumers;
pub mod mx_dequant;
pub mod mx_gather_dequant;
pub mod mx_quant_linear;
pub mod mx_weight_matmul;
pub mod mxquant;
mod quark_check;
pub mod spellings;
pub mod swiglu_mxquant_matmul;

use crate::pattern::DynRule;

/// All rules, in priority order.
pub fn registry() -> &'static [&'static dyn DynRule] {
    static RULES: std::sync::LazyLock<Vec<&'static dyn DynRule>> = std::sync::LazyLock::new(|| {
        vec![
            &*add_rmsnorm_mxquant::RULE,
            &*swiglu_mxquant_matmul::RULE,
            // A Gather of an MX dequantize (stacked experts, embedding tables): only when the
            // Gather is the dequantize's one reader, so it never takes a weight from the rules
            // around it. Before `mxquant`: a Quark fake-quant of a constant along its last axis
            // (or of its Gather) is an activation quantizer there, which would quantize every
            // expert at run time.
            &*mx_gather_dequant::RULE,
            // The standalone quantizer comes last: it only takes what no fusion took.
            &*mxquant::RULE,
            // A float activation times a constant MX weight: its pattern excludes MX-dequantized
            // activations (the fusions above own those MatMuls).
            &*mx_weight_matmul::RULE,
            // Fallbacks: run once the others are done, on the E8M0 QuantizeLinears and
            // DequantizeLinears left.
            &*mx_quant_linear::RULE,
            &*mx_dequant::RULE,
        ]
    });
    &RULES
}
