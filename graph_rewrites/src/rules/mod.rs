//! The rule registry. Order is priority: a fused rule must run before `mxquant`, which would
//! otherwise take its quantizer alone.
pub mod add_rmsnorm_mxquant;
pub mod mx_consumers;
pub mod mxquant;
pub mod spellings;
pub mod swiglu_mxquant_matmul;

use crate::pattern::DynRule;

/// All rules, in priority order.
pub fn registry() -> &'static [&'static dyn DynRule] {
    static RULES: std::sync::LazyLock<Vec<&'static dyn DynRule>> = std::sync::LazyLock::new(|| {
        vec![
            &*add_rmsnorm_mxquant::RULE,
            &*swiglu_mxquant_matmul::RULE,
            // The standalone quantizer comes last: it only takes what no fusion took.
            &*mxquant::RULE,
        ]
    });
    &RULES
}
