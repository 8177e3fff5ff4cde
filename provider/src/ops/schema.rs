//! The `com.mxfuse` operator signatures (docs/ops.md): inputs, outputs and attributes, as the
//! custom-op registration and the attribute parser need them.

use graph_rewrites::view::QUARK_MX_OPS;

use crate::ort_types::onnx_dtype;

/// Attribute value kinds (what the custom-op `KernelInfo` getters are asked for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Int,
    Float,
    String,
}

/// One input or output slot.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub name: &'static str,
    pub optional: bool,
    /// The one ONNX element type the slot has, or `None` when it follows the activations
    /// (float, float16 or bfloat16: checked when the kernel runs).
    pub dtype: Option<i32>,
}

/// Signature of one op.
#[derive(Debug)]
pub struct OpSchema {
    /// The op's domain: [`DOMAIN`] for ours, another for the foreign ops in [`FOREIGN`].
    pub domain: &'static str,
    pub name: &'static str,
    pub inputs: &'static [Slot],
    pub outputs: &'static [Slot],
    pub attrs: &'static [(&'static str, AttrKind)],
}

const fn req(name: &'static str) -> Slot {
    Slot {
        name,
        optional: false,
        dtype: None,
    }
}
const fn opt(name: &'static str) -> Slot {
    Slot {
        name,
        optional: true,
        dtype: None,
    }
}
const fn typed(slot: Slot, dtype: i32) -> Slot {
    Slot {
        dtype: Some(dtype),
        ..slot
    }
}
const Q: Slot = typed(req("q"), onnx_dtype::FLOAT8E4M3FN);
const SCALE: Slot = typed(req("scale"), onnx_dtype::FLOAT8E8M0);

/// Attributes of every quantizing op.
const QUANT_ATTRS: [(&str, AttrKind); 3] = [
    ("block_size", AttrKind::Int),
    ("scale_rule", AttrKind::String),
    ("nan_policy", AttrKind::String),
];

/// The domain and its opset version.
pub const DOMAIN: &str = "com.mxfuse";
pub const OPSET: i32 = 1;

pub const MX_QUANTIZE: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "MxQuantize",
    inputs: &[req("x")],
    outputs: &[Q, SCALE],
    attrs: &QUANT_ATTRS,
};

pub const ADD_RMS_NORM_MX_QUANT: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "AddRmsNormMxQuant",
    inputs: &[req("x"), opt("residual"), req("gamma")],
    outputs: &[Q, SCALE, opt("residual_out"), opt("normed")],
    attrs: &[
        QUANT_ATTRS[0],
        QUANT_ATTRS[1],
        QUANT_ATTRS[2],
        ("epsilon", AttrKind::Float),
        ("gemma", AttrKind::Int),
        ("gamma_in_f32", AttrKind::Int),
        ("inv_form", AttrKind::String),
        ("allreduce", AttrKind::Int),
        ("round_sum", AttrKind::Int),
        ("flatten_rows", AttrKind::Int),
    ],
};

pub const SWIGLU_MX_QUANT: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "SwiGluMxQuant",
    inputs: &[req("gate"), opt("up")],
    outputs: &[Q, SCALE],
    attrs: &[
        QUANT_ATTRS[0],
        QUANT_ATTRS[1],
        QUANT_ATTRS[2],
        ("layout", AttrKind::String),
        ("activation", AttrKind::String),
        ("alpha", AttrKind::Float),
        ("limit", AttrKind::Float),
        ("beta", AttrKind::Float),
        ("fp32_activation", AttrKind::Int),
        ("swish_form", AttrKind::String),
    ],
};

pub const MX_MAT_MUL: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "MxMatMul",
    inputs: &[
        // FLOAT8E4M3FN values with `a_scale`, or (no `a_scale`: a weight-only MX GEMM) float,
        // float16 or bfloat16 activations: untyped here, checked by the kernel.
        req("a_q"),
        typed(opt("a_scale"), onnx_dtype::FLOAT8E8M0),
        // Float, FLOAT8E4M3FN or FLOAT4E2M1 (MXFP4: widened to E4M3 at prepack).
        req("b"),
        typed(opt("b_scale"), onnx_dtype::FLOAT8E8M0),
        opt("bias"),
    ],
    outputs: &[req("y")],
    attrs: &[
        ("trans_b", AttrKind::Int),
        ("output_dtype", AttrKind::Int),
        ("alpha", AttrKind::Float),
        ("beta", AttrKind::Float),
    ],
};

/// ONNX `DequantizeLinear`-24 for a FLOAT8E8M0 scale (x FLOAT8E4M3FN, FLOAT8E5M2 or FLOAT4E2M1:
/// `x` is untyped in the registration, so ORT accepts each; the kernel checks).
pub const MX_DEQUANTIZE: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "MxDequantize",
    inputs: &[req("x"), SCALE],
    outputs: &[req("y")],
    attrs: &[
        ("axis", AttrKind::Int),
        ("block_size", AttrKind::Int),
        ("output_dtype", AttrKind::Int),
    ],
};

/// `Gather(DequantizeLinear-24(x, scale), indices, axis = gather_axis)` for a FLOAT8E8M0 scale,
/// dequantizing only the gathered slices (x as for MxDequantize; indices int32 or int64, checked
/// by the kernel).
pub const MX_GATHER_DEQUANTIZE: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "MxGatherDequantize",
    inputs: &[req("x"), SCALE, req("indices")],
    outputs: &[req("y")],
    attrs: &[
        ("axis", AttrKind::Int),
        ("block_size", AttrKind::Int),
        ("output_dtype", AttrKind::Int),
        ("gather_axis", AttrKind::Int),
    ],
};

/// Each sample's float activation times the MX weight of the expert its index selects from a
/// stacked weight (`MatMul(Gather(DequantizeLinear(b, b_scale), indices), a)` or the weight
/// second): b FLOAT8E4M3FN or FLOAT4E2M1, indices int32 or int64 (checked by the kernel).
pub const MX_GATHER_MAT_MUL: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "MxGatherMatMul",
    inputs: &[
        req("a"),
        req("b"),
        typed(req("b_scale"), onnx_dtype::FLOAT8E8M0),
        req("indices"),
    ],
    outputs: &[req("y")],
    attrs: &[("trans_b", AttrKind::Int), ("output_dtype", AttrKind::Int)],
};

/// ONNX `QuantizeLinear`-24 for a FLOAT8E8M0 scale (y FLOAT8E4M3FN or FLOAT8E5M2, by
/// `output_dtype`).
pub const MX_QUANTIZE_LINEAR: OpSchema = OpSchema {
    domain: DOMAIN,
    name: "MxQuantizeLinear",
    inputs: &[req("x"), SCALE],
    outputs: &[req("y")],
    attrs: &[
        ("axis", AttrKind::Int),
        ("block_size", AttrKind::Int),
        ("output_dtype", AttrKind::Int),
        ("saturate", AttrKind::Int),
    ],
};

/// AMD Quark's MX fake quant in the spelling `QUARK_MX_OPS[i]`: one schema per spelling, all
/// alike.
const fn quark_mx(i: usize) -> OpSchema {
    const X: &[Slot] = &[req("x")];
    const Y: &[Slot] = &[req("y")];
    let (domain, name) = QUARK_MX_OPS[i];
    OpSchema {
        domain,
        name,
        inputs: X,
        outputs: Y,
        attrs: &[
            ("element_dtype", AttrKind::String),
            ("block_size", AttrKind::Int),
            ("axis", AttrKind::Int),
            ("rounding_mode", AttrKind::Int),
        ],
    }
}

/// AMD Quark's `com.amd.quark::MXQuantizeDequantize` (MXFP8 fake quantization), which ORT does
/// not know; the rules turn it into `MxQuantize` + `MxMatMul`.
pub const QUARK_MX_QDQ: OpSchema = quark_mx(0);
/// The same op under its deprecated Vitis AI name, `com.vai.quantize::MXFixNeuron` (older Quark
/// releases, `quark.onnx.tools.convert_custom_ops`).
pub const QUARK_MX_FIX_NEURON: OpSchema = quark_mx(1);
// Each spelling of `QUARK_MX_OPS` has its schema above (and in `FOREIGN`).
const _: () = assert!(QUARK_MX_OPS.len() == 2);

/// TensorRT's MXFP8 dynamic quantizer as TensorRT Model Optimizer exports it (domain `trt`,
/// which ORT does not know): E4M3 values and uint8 E8M0 scales; the rules fuse it
/// (docs/ops.md, "ModelOpt spelling").
pub const TRT_MXFP8_DYNAMIC_QUANTIZE: OpSchema = OpSchema {
    domain: "trt",
    name: "TRT_MXFP8DynamicQuantize",
    inputs: &[req("x")],
    outputs: &[
        typed(req("x_fp8"), onnx_dtype::FLOAT8E4M3FN),
        typed(req("x_scale"), onnx_dtype::UINT8),
    ],
    attrs: &[
        ("axis", AttrKind::Int),
        ("block_size", AttrKind::Int),
        ("output_dtype", AttrKind::Int),
    ],
};

/// TensorRT's MXFP8 dequantizer (domain `trt`): E4M3 values times uint8 E8M0 scales.
pub const TRT_MXFP8_DEQUANTIZE_LINEAR: OpSchema = OpSchema {
    domain: "trt",
    name: "TRT_MXFP8DequantizeLinear",
    inputs: &[
        typed(req("x"), onnx_dtype::FLOAT8E4M3FN),
        typed(req("x_scale"), onnx_dtype::UINT8),
    ],
    outputs: &[req("y")],
    attrs: &[
        ("axis", AttrKind::Int),
        ("block_size", AttrKind::Int),
        ("output_dtype", AttrKind::Int),
    ],
};

/// Ops of other domains the EP publishes so that models using them load with only the EP
/// registered (not part of the custom-op library: Quark's own library may provide them).
///
/// `com.microsoft::AllReduce` cannot be published this way: a custom domain named
/// "com.microsoft" hides every built-in contrib op (QuickGelu, SkipSimplifiedLayerNormalization,
/// ...) from the session. Models with AllReduce load only on ORT builds that register it (NCCL).
pub const FOREIGN: &[&OpSchema] = &[
    &QUARK_MX_QDQ,
    &QUARK_MX_FIX_NEURON,
    &TRT_MXFP8_DYNAMIC_QUANTIZE,
    &TRT_MXFP8_DEQUANTIZE_LINEAR,
];

/// Every op of the domain.
pub const ALL: &[&OpSchema] = &[
    &MX_QUANTIZE,
    &ADD_RMS_NORM_MX_QUANT,
    &SWIGLU_MX_QUANT,
    &MX_MAT_MUL,
    &MX_DEQUANTIZE,
    &MX_GATHER_DEQUANTIZE,
    &MX_GATHER_MAT_MUL,
    &MX_QUANTIZE_LINEAR,
];

/// The schema of `op_type`, if it is one of ours (com.mxfuse).
pub fn find(op_type: &str) -> Option<&'static OpSchema> {
    ALL.iter().copied().find(|s| s.name == op_type)
}
