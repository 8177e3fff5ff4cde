//! Kernels for NVIDIA TensorRT's MXFP8 ops (`trt::TRT_MXFP8DynamicQuantize`,
//! `trt::TRT_MXFP8DequantizeLinear`, what TensorRT Model Optimizer exports), whose schemas the EP
//! publishes so that such models load with only the EP (ONNX Runtime has no `trt` domain). They
//! run only where no fusion absorbed the node, and compute what the rules read the ops as
//! (docs/ops.md, "ModelOpt spelling"): the quantizer is `MxQuantize` with the RCEIL rule, on
//! float16 / bfloat16 only (float is refused, as by the rules: its bytes are not established);
//! the dequantizer is `MxDequantize`. Both write / read the E8M0 scale bytes as uint8, which is
//! only a relabelling of the same bytes.

use kernels::{DType, MxDequantAttrs, MxQuantAttrs};

use super::{required, Attrs, Kernel};
use crate::error::{Error, Result};
use crate::ort_types::onnx_dtype::UINT8;
use crate::tensor::{Meta, TensorMut, TensorRef};

/// TensorRT's defaults (its ONNX parser, ModelOpt's exporter): axis -1, block 32; the rest is
/// refused as the rules refuse it.
fn axis_block(attrs: &Attrs, op: &str) -> Result<i64> {
    let block = attrs.int("block_size", 32);
    if block != 32 {
        return Err(Error::Unsupported(format!(
            "{op}: block_size {block} (MXFP8 blocks are 32)"
        )));
    }
    Ok(attrs.int("axis", -1))
}

/// `meta` with its element type replaced (the uint8 ↔ E8M0 relabelling).
fn retyped(meta: &Meta, dtype: i32) -> Meta {
    Meta::new(dtype, meta.dims.clone())
}

/// `TRT_MXFP8DynamicQuantize`: `MxQuantize(rceil, propagate)` along the last axis.
pub struct TrtDynamicQuantize(MxQuantAttrs);

impl TrtDynamicQuantize {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        let op = "TRT_MXFP8DynamicQuantize";
        if axis_block(attrs, op)? != -1 {
            return Err(Error::Unsupported(format!(
                "{op}: axis {} (only the last axis, -1, is run)",
                attrs.int("axis", -1)
            )));
        }
        let out = attrs.int("output_dtype", DType::E4M3.onnx_code() as i64);
        if out != DType::E4M3.onnx_code() as i64 {
            return Err(Error::Unsupported(format!(
                "{op}: output_dtype {out} is not FLOAT8E4M3FN"
            )));
        }
        Ok(TrtDynamicQuantize(MxQuantAttrs::from_pairs([
            ("block_size", "32"),
            ("scale_rule", "rceil"),
            ("nan_policy", "propagate"),
        ])?))
    }
}

impl Kernel for TrtDynamicQuantize {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let mut metas = self.0.output_metas(inputs)?;
        metas[1].dtype = UINT8;
        Ok(metas)
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        // Refused when it runs, not in shape inference (ORT would report only a rank error).
        if required(inputs, 0, "x")?.meta.dtype == DType::F32.onnx_code() {
            return Err(Error::Unsupported(
                "TRT_MXFP8DynamicQuantize of a float tensor: its scale bytes are not established for float inputs (docs/ops.md, ModelOpt spelling); float16 and bfloat16 run".into(),
            ));
        }
        let [Some(q), Some(s)] = outputs else {
            return Err(Error::invalid(
                "TRT_MXFP8DynamicQuantize needs both outputs",
            ));
        };
        let e8m0 = retyped(s.meta, DType::E8M0.onnx_code());
        let mut outs = [
            Some(TensorMut {
                meta: q.meta,
                data: &mut *q.data,
            }),
            Some(TensorMut {
                meta: &e8m0,
                data: &mut *s.data,
            }),
        ];
        self.0.compute(inputs, &mut outs, par)
    }
}

/// `TRT_MXFP8DequantizeLinear`: `MxDequantize` of a uint8 E8M0 scale.
pub struct TrtDequantize(MxDequantAttrs);

impl TrtDequantize {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        let axis = axis_block(attrs, "TRT_MXFP8DequantizeLinear")?.to_string();
        let out = attrs.int("output_dtype", -1).to_string();
        Ok(TrtDequantize(MxDequantAttrs::from_pairs([
            ("axis", axis.as_str()),
            ("block_size", "32"),
            ("output_dtype", out.as_str()),
        ])?))
    }
}

impl Kernel for TrtDequantize {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        self.0.output_metas(inputs)
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let (x, s) = (required(inputs, 0, "x")?, required(inputs, 1, "scale")?);
        let e8m0 = retyped(s.meta, DType::E8M0.onnx_code());
        let ins = [
            Some(TensorRef {
                meta: x.meta,
                data: x.data,
            }),
            Some(TensorRef {
                meta: &e8m0,
                data: s.data,
            }),
        ];
        self.0.compute(&ins, outputs, par)
    }
}
