//! Typed attributes of the `com.mxfuse` ops (docs/ops.md), with defaults and a parser from
//! string key/value pairs (the form the provider and the rules engine hold them in).

use crate::codec::{NanPolicy, QuantConfig, ScaleRule, BLOCK};
use crate::element::DType;
use crate::error::{KernelError, Result};

/// How `1/sqrt(v + eps)` is applied in the graph being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InvForm {
    /// `n = s · fl(1/fl(sqrt(v+eps)))` — same bits as `RecipMul`.
    #[default]
    Rsqrt,
    /// Sqrt → Reciprocal → Mul.
    RecipMul,
    /// Sqrt → Div: `n = s / fl(sqrt(v+eps))`.
    Div,
}

/// Where gate and up come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwiGluLayout {
    /// Two inputs `gate [..., I]` and `up [..., I]`.
    #[default]
    Separate,
    /// One input `[..., 2I]`: gate = first half, up = second half.
    SplitHalves,
    /// One input `[..., 2I]`: gate = even, up = odd elements.
    Interleaved,
}

/// The gated activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// act = gate·σ(alpha·gate)·up.
    #[default]
    Silu,
    /// gate = min(gate, limit), up = clamp(up, ±limit), act = gate·σ(alpha·gate)·(up + beta).
    Oai,
}

/// How the graph being replaced spells `gate·σ(alpha·gate)` (decides which intermediates are
/// rounded to T when `fp32_activation = 0`; see docs/ops.md "SwiGluMxQuant").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwishForm {
    /// `[Mul(alpha)] → Sigmoid → Mul(gate, ·)`: each op's output is rounded to T.
    #[default]
    Unrolled,
    /// One op (`Swish`, `QuickGelu`, `Silu`-as-one-node): computed in f32, rounded once.
    SingleOp,
}

/// Attributes of `AddRmsNormMxQuant`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AddRmsNormAttrs {
    pub epsilon: f32,
    /// Weight is (1 + gamma).
    pub gemma: bool,
    /// true: y = round_T(n·g) in f32; false: y = round_T(round_T(n)·g).
    pub gamma_in_f32: bool,
    pub inv_form: InvForm,
    /// true: normalise s = round_T(x + residual) (an unfused Add in T); false: normalise the
    /// unrounded f32 sum (vLLM's Triton kernel). `residual_out` is round_T(x + residual) either way.
    pub round_sum: bool,
    /// An AllReduce was absorbed (identity at world size 1).
    pub allreduce: bool,
    /// `q`, `scale` and `normed` are `[rows, H]` / `[rows, H/32]`: `x`'s leading dims flattened
    /// (a MoE block's `Reshape(normed, [-1, H])` read into the op). Same bytes, other shape.
    pub flatten_rows: bool,
    pub quant: QuantConfig,
}

impl Default for AddRmsNormAttrs {
    fn default() -> Self {
        Self {
            epsilon: 1e-6,
            gemma: false,
            gamma_in_f32: true,
            inv_form: InvForm::Rsqrt,
            round_sum: true,
            allreduce: false,
            flatten_rows: false,
            quant: QuantConfig::default(),
        }
    }
}

/// Attributes of `SwiGluMxQuant`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwiGluAttrs {
    pub layout: SwiGluLayout,
    pub activation: Activation,
    pub alpha: f32,
    pub limit: f32,
    pub beta: f32,
    /// Quantize the unrounded f32 activation (vLLM's fused kernel) instead of reproducing the
    /// unfused graph's per-op rounding.
    pub fp32_activation: bool,
    pub swish_form: SwishForm,
    pub quant: QuantConfig,
}

impl Default for SwiGluAttrs {
    fn default() -> Self {
        Self {
            layout: SwiGluLayout::Separate,
            activation: Activation::Silu,
            alpha: 1.0,
            limit: 7.0,
            beta: 1.0,
            fp32_activation: false,
            swish_form: SwishForm::Unrolled,
            quant: QuantConfig::default(),
        }
    }
}

/// Attributes of `MxQuantize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MxQuantAttrs {
    pub quant: QuantConfig,
}

/// Attributes of `MxDequantize` (ONNX `DequantizeLinear`-24 with a FLOAT8E8M0 scale).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MxDequantAttrs {
    /// The quantized axis (negative counts from the back), for per-axis and blocked scales.
    pub axis: i64,
    /// Elements per scale along `axis`; 0 = per-axis or per-tensor (ONNX's default).
    pub block_size: usize,
    /// dtype of y: F32, F16 or BF16.
    pub output_dtype: DType,
}

impl Default for MxDequantAttrs {
    fn default() -> Self {
        Self {
            axis: 1,
            block_size: 0,
            output_dtype: DType::F32,
        }
    }
}

/// Attributes of `MxGatherDequantize`: `Gather(DequantizeLinear(x, scale), indices, axis =
/// gather_axis)` in one op, dequantizing only the gathered slices (stacked MX expert weights
/// selected per token, MX embedding tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MxGatherDequantAttrs {
    /// The DequantizeLinear's attributes, `axis` counted on x (before the gather).
    pub dequant: MxDequantAttrs,
    /// The Gather's axis on x (negative counts from the back).
    pub gather_axis: i64,
}

/// Attributes of `MxGatherMatMul` (each sample's activation times the MX weight of the expert
/// its index selects from a stacked `[E, ., .]` weight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MxGatherMatMulAttrs {
    /// The weight comes first (`b [E, N, K]`, a `[S, K, 1]`, y `[S, N, 1]`) instead of second
    /// (`b [E, K, N]`, a `[S, P, K]`, y `[S, P, N]`).
    pub trans_b: bool,
    /// dtype of y: F32, F16 or BF16.
    pub output_dtype: DType,
}

impl Default for MxGatherMatMulAttrs {
    fn default() -> Self {
        Self {
            trans_b: false,
            output_dtype: DType::F32,
        }
    }
}

impl MxGatherMatMulAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut a = Self::default();
        for (k, v) in pairs {
            match k {
                "trans_b" => a.trans_b = parse_bool(k, v)?,
                "output_dtype" => a.output_dtype = parse_output_dtype(k, v)?,
                _ => return Err(unknown("MxGatherMatMul", k)),
            }
        }
        Ok(a)
    }
}

/// Attributes of `MxQuantizeLinear` (ONNX `QuantizeLinear`-24 with a FLOAT8E8M0 scale).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MxQuantLinearAttrs {
    /// The quantized axis (negative counts from the back), for per-axis and blocked scales.
    pub axis: i64,
    /// Elements per scale along `axis`; 0 = per-axis or per-tensor (ONNX's default).
    pub block_size: usize,
    /// dtype of y: E4M3 (FLOAT8E4M3FN) or E5M2 (FLOAT8E5M2).
    pub output_dtype: DType,
    /// ONNX `saturate`: out-of-range values and ±Inf become the largest finite value (true) or
    /// NaN (E4M3FN) / ±Inf (E5M2) (false).
    pub saturate: bool,
}

impl Default for MxQuantLinearAttrs {
    fn default() -> Self {
        Self {
            axis: 1,
            block_size: 0,
            output_dtype: DType::E4M3,
            saturate: true,
        }
    }
}

/// Attributes of `MxMatMul`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MxMatMulAttrs {
    /// b is `[N, K]` (with `b_scale [N, K/32]` when b is FP8) instead of `[K, N]`.
    pub trans_b: bool,
    /// dtype of y: F32, F16 or BF16.
    pub output_dtype: DType,
    /// Scale of the product (ONNX `Gemm`'s alpha): `y = alpha · acc + beta · bias`.
    pub alpha: f32,
    /// Scale of the optional bias (ONNX `Gemm`'s beta); unused without a bias.
    pub beta: f32,
}

impl Default for MxMatMulAttrs {
    fn default() -> Self {
        Self {
            trans_b: false,
            output_dtype: DType::F32,
            alpha: 1.0,
            beta: 1.0,
        }
    }
}

fn parse_int(key: &str, v: &str) -> Result<i64> {
    v.trim()
        .parse::<i64>()
        .map_err(|_| KernelError::Attribute(format!("{key} must be an integer, got {v:?}")))
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match parse_int(key, v)? {
        0 => Ok(false),
        1 => Ok(true),
        n => Err(KernelError::Attribute(format!(
            "{key} must be 0 or 1, got {n}"
        ))),
    }
}

fn parse_float(key: &str, v: &str) -> Result<f32> {
    let f = v
        .trim()
        .parse::<f32>()
        .map_err(|_| KernelError::Attribute(format!("{key} must be a float, got {v:?}")))?;
    if f.is_finite() {
        Ok(f)
    } else {
        Err(KernelError::Attribute(format!(
            "{key} must be finite, got {v:?}"
        )))
    }
}

/// Parses an enum attribute spelled as one of `choices`' names; the error lists them all
/// ("{key} must be a, b or c, got \"x\"").
fn parse_choice<T: Copy>(key: &str, v: &str, choices: &[(&str, T)]) -> Result<T> {
    if let Some(&(_, value)) = choices.iter().find(|(name, _)| *name == v) {
        return Ok(value);
    }
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    let listed = match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    };
    Err(KernelError::Attribute(format!(
        "{key} must be {listed}, got {v:?}"
    )))
}

/// An `output_dtype` code: 1 (float), 10 (float16) or 16 (bfloat16).
fn parse_output_dtype(key: &str, v: &str) -> Result<DType> {
    let code = parse_int(key, v)?;
    DType::from_onnx_code(code)
        .filter(|d| d.is_float())
        .ok_or_else(|| KernelError::Attribute(format!("{key} must be 1, 10 or 16, got {code}")))
}

fn unknown(op: &str, key: &str) -> KernelError {
    KernelError::Attribute(format!("{op} has no attribute {key:?}"))
}

/// Applies a key of the common quantizer attributes; returns false when `key` is not one.
fn apply_quant_key(quant: &mut QuantConfig, key: &str, v: &str) -> Result<bool> {
    match key {
        "block_size" => {
            let b = parse_int(key, v)?;
            if b != BLOCK as i64 {
                return Err(KernelError::Attribute(format!(
                    "block_size must be 32, got {b}"
                )));
            }
        }
        "scale_rule" => quant.scale_rule = ScaleRule::parse(v)?,
        "nan_policy" => quant.nan_policy = NanPolicy::parse(v)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The shared body of the `from_pairs` of the ops with quantizer attributes: starts from the
/// defaults, offers each key to the common quantizer keys, then to `own` (false: not one of the
/// op's keys either), and rejects any other key as an unknown attribute of `op`.
fn from_quant_pairs<'a, A: Default>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    op: &str,
    quant: fn(&mut A) -> &mut QuantConfig,
    mut own: impl FnMut(&mut A, &str, &str) -> Result<bool>,
) -> Result<A> {
    let mut a = A::default();
    for (k, v) in pairs {
        if !apply_quant_key(quant(&mut a), k, v)? && !own(&mut a, k, v)? {
            return Err(unknown(op, k));
        }
    }
    Ok(a)
}

impl MxQuantAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        from_quant_pairs(
            pairs,
            "MxQuantize",
            |a: &mut Self| &mut a.quant,
            |_, _, _| Ok(false),
        )
    }
}

impl AddRmsNormAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        from_quant_pairs(
            pairs,
            "AddRmsNormMxQuant",
            |a: &mut Self| &mut a.quant,
            |a, k, v| {
                match k {
                    "epsilon" => a.epsilon = parse_float(k, v)?,
                    "gemma" => a.gemma = parse_bool(k, v)?,
                    "gamma_in_f32" => a.gamma_in_f32 = parse_bool(k, v)?,
                    "round_sum" => a.round_sum = parse_bool(k, v)?,
                    "allreduce" => a.allreduce = parse_bool(k, v)?,
                    "flatten_rows" => a.flatten_rows = parse_bool(k, v)?,
                    "inv_form" => {
                        a.inv_form = parse_choice(
                            k,
                            v,
                            &[
                                ("rsqrt", InvForm::Rsqrt),
                                ("recip_mul", InvForm::RecipMul),
                                ("div", InvForm::Div),
                            ],
                        )?
                    }
                    _ => return Ok(false),
                }
                Ok(true)
            },
        )
    }
}

impl SwiGluAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        from_quant_pairs(
            pairs,
            "SwiGluMxQuant",
            |a: &mut Self| &mut a.quant,
            |a, k, v| {
                match k {
                    "alpha" => a.alpha = parse_float(k, v)?,
                    "limit" => a.limit = parse_float(k, v)?,
                    "beta" => a.beta = parse_float(k, v)?,
                    "fp32_activation" => a.fp32_activation = parse_bool(k, v)?,
                    "layout" => {
                        a.layout = parse_choice(
                            k,
                            v,
                            &[
                                ("separate", SwiGluLayout::Separate),
                                ("split_halves", SwiGluLayout::SplitHalves),
                                ("interleaved", SwiGluLayout::Interleaved),
                            ],
                        )?
                    }
                    "activation" => {
                        a.activation = parse_choice(
                            k,
                            v,
                            &[("silu", Activation::Silu), ("oai", Activation::Oai)],
                        )?
                    }
                    "swish_form" => {
                        a.swish_form = parse_choice(
                            k,
                            v,
                            &[
                                ("unrolled", SwishForm::Unrolled),
                                ("single_op", SwishForm::SingleOp),
                            ],
                        )?
                    }
                    _ => return Ok(false),
                }
                Ok(true)
            },
        )
    }
}

impl MxMatMulAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut a = Self::default();
        for (k, v) in pairs {
            match k {
                "trans_b" => a.trans_b = parse_bool(k, v)?,
                "alpha" => a.alpha = parse_float(k, v)?,
                "beta" => a.beta = parse_float(k, v)?,
                "output_dtype" => a.output_dtype = parse_output_dtype(k, v)?,
                _ => return Err(unknown("MxMatMul", k)),
            }
        }
        Ok(a)
    }
}

/// ONNX Q/DQ's `block_size`: any non-negative int (0 = not blocked).
fn parse_block_size(key: &str, v: &str) -> Result<usize> {
    let b = parse_int(key, v)?;
    usize::try_from(b).map_err(|_| KernelError::Attribute(format!("{key} must be >= 0, got {b}")))
}

impl MxDequantAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut a = Self::default();
        for (k, v) in pairs {
            match k {
                "axis" => a.axis = parse_int(k, v)?,
                "block_size" => a.block_size = parse_block_size(k, v)?,
                "output_dtype" => a.output_dtype = parse_output_dtype(k, v)?,
                _ => return Err(unknown("MxDequantize", k)),
            }
        }
        Ok(a)
    }
}

impl MxGatherDequantAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut a = Self::default();
        for (k, v) in pairs {
            match k {
                "axis" => a.dequant.axis = parse_int(k, v)?,
                "block_size" => a.dequant.block_size = parse_block_size(k, v)?,
                "output_dtype" => a.dequant.output_dtype = parse_output_dtype(k, v)?,
                "gather_axis" => a.gather_axis = parse_int(k, v)?,
                _ => return Err(unknown("MxGatherDequantize", k)),
            }
        }
        Ok(a)
    }
}

impl MxQuantLinearAttrs {
    /// Builds the attributes from `(name, value)` pairs; absent names keep their defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut a = Self::default();
        for (k, v) in pairs {
            match k {
                "axis" => a.axis = parse_int(k, v)?,
                "block_size" => a.block_size = parse_block_size(k, v)?,
                "saturate" => a.saturate = parse_bool(k, v)?,
                "output_dtype" => {
                    let code = parse_int(k, v)?;
                    a.output_dtype = DType::from_onnx_code(code)
                        .filter(|d| matches!(d, DType::E4M3 | DType::E5M2))
                        .ok_or_else(|| {
                            KernelError::Attribute(format!("{k} must be 17 or 19, got {code}"))
                        })?;
                }
                _ => return Err(unknown("MxQuantizeLinear", k)),
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let a = AddRmsNormAttrs::from_pairs([
            ("epsilon", "1e-5"),
            ("gemma", "1"),
            ("scale_rule", "rceil"),
        ])
        .unwrap();
        assert!(a.gemma && a.epsilon == 1e-5 && a.quant.scale_rule == ScaleRule::Rceil);
        assert!(AddRmsNormAttrs::from_pairs([("block_size", "16")]).is_err());
        assert!(AddRmsNormAttrs::from_pairs([("gemma", "2")]).is_err());
        assert!(SwiGluAttrs::from_pairs([("layout", "weird")]).is_err());
        assert!(MxQuantAttrs::from_pairs([("epsilon", "1")]).is_err());
        let m = MxMatMulAttrs::from_pairs([("trans_b", "1"), ("output_dtype", "16")]).unwrap();
        assert!(m.trans_b && m.output_dtype == DType::BF16);
        assert!(MxMatMulAttrs::from_pairs([("output_dtype", "17")]).is_err());
        let d = MxDequantAttrs::from_pairs([("axis", "-1"), ("block_size", "32")]).unwrap();
        assert!(d.axis == -1 && d.block_size == 32 && d.output_dtype == DType::F32);
        assert!(MxDequantAttrs::from_pairs([("block_size", "-2")]).is_err());
        assert!(MxDequantAttrs::from_pairs([("output_dtype", "24")]).is_err());
        assert!(MxDequantAttrs::from_pairs([("scale_rule", "floor")]).is_err());
        let q = MxQuantLinearAttrs::from_pairs([("output_dtype", "19"), ("saturate", "0")]);
        assert!(q.is_ok_and(|q| q.output_dtype == DType::E5M2 && !q.saturate && q.axis == 1));
        assert!(MxQuantLinearAttrs::from_pairs([("output_dtype", "1")]).is_err());
        assert!(MxQuantLinearAttrs::from_pairs([("saturate", "2")]).is_err());
        assert!(MxQuantLinearAttrs::from_pairs([("block_size", "-1")]).is_err());
        assert!(MxQuantLinearAttrs::from_pairs([("precision", "1")]).is_err());
    }

    #[test]
    fn enum_errors_list_every_spelling() {
        let msg = |r: Result<SwiGluAttrs>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg(SwiGluAttrs::from_pairs([("layout", "weird")]))
            .contains("layout must be separate, split_halves or interleaved, got \"weird\""));
        assert!(msg(SwiGluAttrs::from_pairs([("activation", "gelu")]))
            .contains("activation must be silu or oai, got \"gelu\""));
        let n = AddRmsNormAttrs::from_pairs([("inv_form", "x")])
            .err()
            .map(|e| e.to_string());
        assert!(n
            .unwrap_or_default()
            .contains("inv_form must be rsqrt, recip_mul or div, got \"x\""));
        let s = SwiGluAttrs::from_pairs([("swish_form", "single_op"), ("layout", "interleaved")]);
        assert!(matches!(
            s,
            Ok(SwiGluAttrs {
                swish_form: SwishForm::SingleOp,
                layout: SwiGluLayout::Interleaved,
                ..
            })
        ));
    }
}
