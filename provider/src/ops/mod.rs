//! The `com.mxfuse` ops as runnable kernels over `kernels::ops`: attributes parsed once (by the
//! kernels crate's own parsers), output shapes from its shape helpers. The custom-op library and
//! the plugin EP's executor both run ops through [`create`], so the two paths compute the same
//! bits.

pub mod attrs;
mod foreign;
mod gather_dequant;
pub(crate) mod gather_matmul;
mod huge;
mod matmul;
mod parallel;
pub(crate) mod reshape;
pub mod schema;
pub(crate) mod shape;
mod trt;

use graph_rewrites::view::QUARK_MX_OPS;
use kernels::ops::{self as k, NormTensors, SwiGluTensors};
use kernels::{
    AddRmsNormAttrs, DType, KernelError, MxDequantAttrs, MxMatMulAttrs, MxQuantAttrs,
    MxQuantLinearAttrs, SwiGluAttrs,
};

use crate::error::{Error, Result};
use crate::tensor::{Meta, TensorMut, TensorRef};
pub use attrs::Attrs;
/// Shared with the GPU executor's weight prepack (`gpu::program`).
pub(crate) use matmul::{transpose_bytes, transpose_mx_weight, widen_fp4_weight};
pub use parallel::{OrtParallel, Parallelism};

/// A com.mxfuse op with its attributes parsed and validated.
pub trait Kernel: Send + Sync {
    /// Types and shapes of the outputs for these inputs (`None` for omitted optional inputs).
    /// Dims of -1 (unknown, during ORT's shape inference) give -1 in dependent output dims.
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>>;

    /// Offers the inputs that are constant for the session (`constants[i]` is `Some` for a
    /// constant input `i`) so the kernel can keep them in a faster layout, as ORT's `PrePack`.
    /// Both the custom-op library and the EP call it, so both compute the same bits.
    fn prepack(&mut self, _constants: &[Option<TensorRef<'_>>]) -> Result<()> {
        Ok(())
    }

    /// Which inputs the node has (`present[i]` false for an omitted optional input), told before
    /// [`Kernel::prepack`] by both the custom-op library and the EP.
    fn inputs_present(&mut self, _present: &[bool]) {}

    /// The input indices [`Kernel::prepack`] looks at (callers fetch only these constants).
    fn prepack_inputs(&self) -> &'static [usize] {
        &[]
    }

    /// Computes the outputs; `outputs[i]` is `None` when the node does not produce output `i`.
    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()>;
}

impl From<KernelError> for Error {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Unsupported(m) => Error::Unsupported(m),
            other => Error::Invalid(other.to_string()),
        }
    }
}

/// Builds the kernel for `attrs.op()`.
pub fn create(attrs: &Attrs) -> Result<Box<dyn Kernel>> {
    let pairs = attrs.as_pairs();
    let pairs = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    Ok(match attrs.op() {
        // Quark's MX fake quant, in each spelling the EP publishes (`schema::FOREIGN`).
        op if QUARK_MX_OPS.iter().any(|&(_, o)| o == op) => {
            Box::new(foreign::QuarkFakeQuant::new(attrs)?)
        }
        "TRT_MXFP8DynamicQuantize" => Box::new(trt::TrtDynamicQuantize::new(attrs)?),
        "TRT_MXFP8DequantizeLinear" => Box::new(trt::TrtDequantize::new(attrs)?),
        "MxQuantize" => Box::new(MxQuantAttrs::from_pairs(pairs)?),
        "AddRmsNormMxQuant" => Box::new(AddRmsNormAttrs::from_pairs(pairs)?),
        "SwiGluMxQuant" => Box::new(SwiGluAttrs::from_pairs(pairs)?),
        "MxMatMul" => Box::new(matmul::MxMatMul::new(MxMatMulAttrs::from_pairs(pairs)?)),
        "MxDequantize" => Box::new(MxDequantAttrs::from_pairs(pairs)?),
        "MxGatherDequantize" => Box::new(kernels::MxGatherDequantAttrs::from_pairs(pairs)?),
        "MxGatherMatMul" => Box::new(gather_matmul::MxGatherMatMul::new(
            kernels::MxGatherMatMulAttrs::from_pairs(pairs)?,
        )),
        "MxQuantizeLinear" => Box::new(MxQuantLinearAttrs::from_pairs(pairs)?),
        other => return Err(Error::Unsupported(format!("com.mxfuse op {other:?}"))),
    })
}

/// The kernels-crate type of ONNX element type `onnx` (shared with `gpu::program`).
pub(crate) fn dtype(onnx: i32) -> Result<DType> {
    DType::from_onnx_code(onnx as i64)
        .ok_or_else(|| Error::invalid(format!("element type {onnx} is not supported")))
}

/// Input `i`, which the schema marks as required.
fn required<'a, T>(inputs: &'a [Option<T>], i: usize, name: &str) -> Result<&'a T> {
    inputs
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::invalid(format!("missing input {name}")))
}

/// Dims for the kernels' shape helpers. Unknown dims (-1) become 0, which every helper accepts
/// (0 is a multiple of 32); [`from_dims`] turns the zeros back into -1.
fn to_dims(dims: &[i64]) -> (Vec<usize>, bool) {
    let unknown = dims.iter().any(|&d| d < 0);
    (dims.iter().map(|&d| d.max(0) as usize).collect(), unknown)
}

fn from_dims(dims: &[usize], unknown: bool) -> Vec<i64> {
    dims.iter()
        .map(|&d| if unknown && d == 0 { -1 } else { d as i64 })
        .collect()
}

/// `(q, scale)` metas for values of `dims`.
fn quant_metas(dims: &[usize], unknown: bool) -> Result<[Meta; 2]> {
    let scale = k::scale_shape(dims)?;
    Ok([
        Meta::new(DType::E4M3.onnx_code(), from_dims(dims, unknown)),
        Meta::new(DType::E8M0.onnx_code(), from_dims(&scale, unknown)),
    ])
}

fn float_input(m: &Meta, what: &str) -> Result<()> {
    if dtype(m.dtype)?.is_float() {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what} must be float, float16 or bfloat16, got element type {}",
            m.dtype
        )))
    }
}

/// A kernels-crate view of one of our tensors.
fn view<'a>(t: &TensorRef<'a>, dims: &'a [usize]) -> Result<k::TensorRef<'a>> {
    Ok(k::TensorRef::new(dtype(t.meta.dtype)?, dims, t.data)?)
}

/// The tensor's dims as `usize` (a tensor ORT hands a kernel has no unknown dims).
fn dims_of(t: &TensorRef<'_>) -> Vec<usize> {
    t.meta.dims_usize()
}

/// Output dims, computed up front so the kernel views can borrow them.
fn out_dims(outputs: &[Option<TensorMut<'_>>]) -> Vec<Vec<usize>> {
    outputs
        .iter()
        .map(|o| o.as_ref().map(|t| t.meta.dims_usize()).unwrap_or_default())
        .collect()
}

/// All outputs as kernels-crate views (`None` where the node omits the output).
fn out_views<'a>(
    outputs: &'a mut [Option<TensorMut<'_>>],
    dims: &'a [Vec<usize>],
) -> Result<Vec<Option<k::TensorMut<'a>>>> {
    outputs
        .iter_mut()
        .zip(dims)
        .map(|(o, d)| match o {
            None => Ok(None),
            Some(t) => Ok(Some(k::TensorMut::new(
                dtype(t.meta.dtype)?,
                d,
                &mut *t.data,
            )?)),
        })
        .collect()
}

/// Copies `bytes` into output 0 (`name` in errors), which must be that size: the default-domain
/// ops a fused program runs ([`reshape`], [`shape`]).
fn write_output0(outputs: &mut [Option<TensorMut<'_>>], name: &str, bytes: &[u8]) -> Result<()> {
    let y = outputs
        .get_mut(0)
        .and_then(Option::as_mut)
        .ok_or_else(|| Error::invalid(format!("missing output {name}")))?;
    if y.data.len() != bytes.len() {
        return Err(Error::invalid(format!(
            "{name}: {} bytes to write into {}",
            bytes.len(),
            y.data.len()
        )));
    }
    y.data.copy_from_slice(bytes);
    Ok(())
}

/// Takes required output `i` out of `views`.
fn take<'a>(
    views: &mut [Option<k::TensorMut<'a>>],
    i: usize,
    name: &str,
) -> Result<k::TensorMut<'a>> {
    views
        .get_mut(i)
        .and_then(Option::take)
        .ok_or_else(|| Error::invalid(format!("missing output {name}")))
}

/// Runs an element-wise `(x, scale) -> y` op (MxDequantize, MxQuantizeLinear) on the node's
/// inputs 0, 1 and output 0.
fn x_scale_to_y(
    inputs: &[Option<TensorRef<'_>>],
    outputs: &mut [Option<TensorMut<'_>>],
    op: impl FnOnce(k::TensorRef<'_>, k::TensorRef<'_>, k::TensorMut<'_>) -> kernels::Result<()>,
) -> Result<()> {
    let x = required(inputs, 0, "x")?;
    let scale = required(inputs, 1, "scale")?;
    let (xd, sd) = (dims_of(x), dims_of(scale));
    let od = out_dims(outputs);
    let mut outs = out_views(outputs, &od)?;
    let y = take(&mut outs, 0, "y")?;
    Ok(op(view(x, &xd)?, view(scale, &sd)?, y)?)
}

/// Takes the required `(q, scale)` outputs 0 and 1 out of `views`.
fn take_quant<'a>(
    views: &mut [Option<k::TensorMut<'a>>],
) -> Result<(k::TensorMut<'a>, k::TensorMut<'a>)> {
    Ok((take(views, 0, "q")?, take(views, 1, "scale")?))
}

impl Kernel for MxQuantAttrs {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(inputs, 0, "x")?;
        float_input(x, "x")?;
        let (dims, unknown) = to_dims(&x.dims);
        Ok(quant_metas(&dims, unknown)?.to_vec())
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let x = required(inputs, 0, "x")?;
        let xd = dims_of(x);
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let (q, s) = take_quant(&mut outs)?;
        Ok(k::mx_quantize(view(x, &xd)?, q, s, self, par)?)
    }
}

impl Kernel for MxDequantAttrs {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(inputs, 0, "x")?;
        required(inputs, 1, "scale")?;
        if !matches!(dtype(x.dtype)?, DType::E4M3 | DType::E5M2 | DType::E2M1) {
            return Err(Error::invalid(format!(
                "x must be float8e4m3fn, float8e5m2 or float4e2m1, got element type {}",
                x.dtype
            )));
        }
        Ok(vec![Meta::new(
            self.output_dtype.onnx_code(),
            x.dims.clone(),
        )])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        x_scale_to_y(inputs, outputs, |x, scale, y| {
            k::mx_dequantize(x, scale, y, self, par)
        })
    }
}

impl Kernel for MxQuantLinearAttrs {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(inputs, 0, "x")?;
        required(inputs, 1, "scale")?;
        float_input(x, "x")?;
        Ok(vec![Meta::new(
            self.output_dtype.onnx_code(),
            x.dims.clone(),
        )])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        x_scale_to_y(inputs, outputs, |x, scale, y| {
            k::mx_quantize_linear(x, scale, y, self, par)
        })
    }
}

impl Kernel for AddRmsNormAttrs {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let x = required(inputs, 0, "x")?;
        float_input(x, "x")?;
        required(inputs, 2, "gamma")?;
        let (dims, unknown) = to_dims(&x.dims);
        // `flatten_rows`: q, scale and normed are [rows, H] (an unknown leading dim makes rows
        // 0 here, -1 after `from_dims`); residual_out keeps x's shape.
        let rows = k::norm_output_shape(&dims, self.flatten_rows)?;
        let [q, s] = quant_metas(&rows, unknown)?;
        let normed = Meta::new(x.dtype, from_dims(&rows, unknown));
        Ok(vec![q, s, Meta::new(x.dtype, x.dims.clone()), normed])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let x = required(inputs, 0, "x")?;
        let gamma = required(inputs, 2, "gamma")?;
        let residual = inputs.get(1).copied().flatten();
        let (xd, gd) = (dims_of(x), dims_of(gamma));
        let rd = residual.as_ref().map(dims_of).unwrap_or_default();
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let (q, scale) = take_quant(&mut outs)?;
        let out = NormTensors {
            q,
            scale,
            residual_out: outs.get_mut(2).and_then(Option::take),
            normed: outs.get_mut(3).and_then(Option::take),
        };
        let residual = residual.as_ref().map(|r| view(r, &rd)).transpose()?;
        Ok(k::add_rms_norm_mx_quant(
            view(x, &xd)?,
            residual,
            view(gamma, &gd)?,
            out,
            self,
            par,
        )?)
    }
}

impl Kernel for SwiGluAttrs {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let first = required(inputs, 0, "gate")?;
        float_input(first, "gate")?;
        let (dims, unknown) = to_dims(&first.dims);
        let act = k::swiglu_output_shape(&dims, self.layout)?;
        Ok(quant_metas(&act, unknown)?.to_vec())
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let first = required(inputs, 0, "gate")?;
        let up = inputs.get(1).copied().flatten();
        let fd = dims_of(first);
        let ud = up.as_ref().map(dims_of).unwrap_or_default();
        let input = match &up {
            None => SwiGluTensors::Fused(view(first, &fd)?),
            Some(up) => SwiGluTensors::Separate {
                gate: view(first, &fd)?,
                up: view(up, &ud)?,
            },
        };
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let (q, s) = take_quant(&mut outs)?;
        Ok(k::swiglu_mx_quant(input, q, s, self, par)?)
    }
}
