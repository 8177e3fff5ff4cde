//! Op identity: (domain, op_type, since-version).
//!
//! A node's *since-version* is the newest version of its op schema that is not newer than the
//! model's opset import for the node's domain. Patterns accept an explicit set of since-versions,
//! so an op whose semantics changed in a version we have not reviewed is refused, not guessed.

use crate::view::{GraphView, NodeId, MS_DOMAIN, ONNX_DOMAIN, QUARK_MX_OPS, TRT_DOMAIN};

/// The schema history (since-versions) of the ONNX-domain ops the rules look at.
/// Source: onnx 1.23.2 `onnx/defs` (Operators.md changelog); tests/python/test_opset_conversions.py
/// checks every row against the installed onnx's schemas. A version missing here is read as the
/// one before it, i.e. as reviewed: so each must be listed (Cast / Q / DQ-28 were not).
const ONNX_HISTORY: &[(&str, &[i64])] = &[
    ("Abs", &[1, 6, 13]),
    ("Add", &[1, 6, 7, 13, 14]),
    ("Cast", &[1, 6, 9, 13, 19, 21, 23, 24, 25, 28]),
    ("Clip", &[1, 6, 11, 12, 13]),
    ("DequantizeLinear", &[10, 13, 19, 21, 23, 24, 25, 28]),
    ("Div", &[1, 6, 7, 13, 14]),
    // 11: negative indices; 13: bfloat16.
    ("Gather", &[1, 11, 13]),
    ("Gemm", &[1, 6, 7, 9, 11, 13]),
    ("MatMul", &[1, 9, 13]),
    ("Max", &[1, 6, 8, 12, 13]),
    ("Min", &[1, 6, 8, 12, 13]),
    ("Mul", &[1, 6, 7, 13, 14]),
    ("Pow", &[1, 7, 12, 13, 15]),
    ("QuantizeLinear", &[10, 13, 19, 21, 23, 24, 25, 28]),
    ("Reciprocal", &[1, 6, 13]),
    ("ReduceMax", &[1, 11, 12, 13, 18, 20]),
    ("ReduceMean", &[1, 11, 13, 18]),
    // 13: axes an input (ReduceMean only from 18).
    ("ReduceSum", &[1, 11, 13]),
    ("Reshape", &[1, 5, 13, 14, 19, 21, 23, 24, 25]),
    ("RMSNormalization", &[23]),
    ("Sigmoid", &[1, 6, 13]),
    // ORT registers this contrib op in the ONNX domain (a historical accident ORT kept).
    ("SimplifiedLayerNormalization", &[1]),
    // 1: starts/ends/axes are attributes; 10: they are inputs, plus steps; 11: negative axes;
    // 13: bfloat16.
    ("Slice", &[1, 10, 11, 13]),
    ("Split", &[1, 2, 11, 13, 18]),
    ("Sqrt", &[1, 6, 13]),
    // 1, 11: axes an attribute (11: negative axes); 13: an input; later versions add types.
    ("Squeeze", &[1, 11, 13, 21, 23, 24, 25]),
    ("Swish", &[24]),
    ("SwiGLU", &[28]),
];

/// The reviewed versions of `Cast`, `QuantizeLinear` and `DequantizeLinear` for MX: FLOAT8E8M0
/// exists from 24; 25 adds INT2 / UINT2 and 28 FLOAT6E2M3 / FLOAT6E3M2 (element types every rule
/// refuses by type), the semantics of the FLOAT8 / FLOAT4 / E8M0 ones unchanged.
pub const MX_QDQ_VERSIONS: &[i64] = &[24, 25, 28];

/// Ops of other domains: all at version 1 (and every spelling of Quark's MX fake quant,
/// `QUARK_MX_OPS`).
const OTHER_DOMAIN_OPS: &[(&str, &str)] = &[
    (MS_DOMAIN, "AllReduce"),
    (MS_DOMAIN, "QuickGelu"),
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"),
    (TRT_DOMAIN, "TRT_MXFP8DynamicQuantize"),
    (TRT_DOMAIN, "TRT_MXFP8DequantizeLinear"),
    (crate::view::MXFUSE_DOMAIN, "MxQuantize"),
    (crate::view::MXFUSE_DOMAIN, "MxMatMul"),
    (crate::view::MXFUSE_DOMAIN, "MxDequantize"),
    (crate::view::MXFUSE_DOMAIN, "MxGatherDequantize"),
    (crate::view::MXFUSE_DOMAIN, "MxGatherMatMul"),
    (crate::view::MXFUSE_DOMAIN, "MxQuantizeLinear"),
    (crate::view::MXFUSE_DOMAIN, "AddRmsNormMxQuant"),
    (crate::view::MXFUSE_DOMAIN, "SwiGluMxQuant"),
];

/// Identity of an op a pattern accepts.
#[derive(Clone, Debug)]
pub struct OpId {
    pub domain: &'static str,
    pub op_type: &'static str,
    /// Accepted since-versions; empty = every known version.
    pub versions: &'static [i64],
    /// Other (domain, op_type) spellings of the same op, accepted exactly as the first one
    /// (e.g. Quark's deprecated `com.vai.quantize::MXFixNeuron`); usually empty.
    pub aliases: &'static [(&'static str, &'static str)],
}

impl OpId {
    pub fn new(domain: &'static str, op_type: &'static str) -> Self {
        OpId {
            domain,
            op_type,
            versions: &[],
            aliases: &[],
        }
    }

    /// AMD Quark's MX fake quant in every spelling of `QUARK_MX_OPS`.
    pub fn quark_mx() -> Self {
        let (&(domain, op_type), aliases) = QUARK_MX_OPS
            .split_first()
            .expect("QUARK_MX_OPS lists at least one spelling");
        OpId {
            domain,
            op_type,
            versions: &[],
            aliases,
        }
    }

    /// Every (domain, op_type) spelling the op accepts: its own, then its aliases.
    pub fn spellings(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        std::iter::once((self.domain, self.op_type)).chain(self.aliases.iter().copied())
    }

    /// Whether node `n` of `g` is this op at an accepted since-version.
    pub fn accepts(&self, g: &dyn GraphView, n: NodeId) -> bool {
        let (op_type, domain) = (g.op_type(n), g.domain(n));
        if !self.spellings().any(|(d, o)| d == domain && o == op_type) {
            return false;
        }
        match since_version(g, domain, op_type) {
            Some(v) => self.versions.is_empty() || self.versions.contains(&v),
            None => false,
        }
    }
}

/// The since-version of `op_type` in the model's opset for `domain`, if the op is known and
/// existed at that opset.
pub fn since_version(g: &dyn GraphView, domain: &str, op_type: &str) -> Option<i64> {
    if domain == ONNX_DOMAIN {
        let opset = g.opset(ONNX_DOMAIN)?;
        let (_, hist) = ONNX_HISTORY.iter().find(|(name, _)| *name == op_type)?;
        hist.iter().copied().filter(|v| *v <= opset).max()
    } else if OTHER_DOMAIN_OPS
        .iter()
        .chain(QUARK_MX_OPS)
        .any(|(d, o)| *d == domain && *o == op_type)
    {
        // Contrib / vendor domains are versioned 1; a model may omit their opset import
        // (ORT accepts that for com.microsoft), so a missing import is treated as 1.
        Some(1)
    } else {
        None
    }
}
