//! The `com.mxfuse` ops as runnable kernels: attributes parsed once, output shapes inferred from
//! input shapes, compute delegated to the `kernels` crate. Both the custom-op library and the
//! plugin EP's executor run ops through [`create`] and the [`Kernel`] trait, so the two paths
//! compute identical bits.

pub mod attrs;
mod backend;
mod matmul;
mod quant_common;
mod quantize;
mod rms_norm;
pub mod schema;
mod swiglu;

use crate::error::{Error, Result};
use crate::tensor::{Meta, TensorMut, TensorRef};
pub use attrs::Attrs;

/// A com.mxfuse op with its attributes parsed and validated.
pub trait Kernel: Send + Sync {
    /// Types and shapes of the outputs for these inputs (`None` for omitted optional ones).
    /// Checks everything about the inputs that compute relies on.
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>>;

    /// Computes all outputs; `outputs[i]` is `None` when the node does not produce output `i`.
    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
    ) -> Result<()>;
}

/// Builds the kernel for `attrs.op()`.
pub fn create(attrs: &Attrs) -> Result<Box<dyn Kernel>> {
    Ok(match attrs.op() {
        "MxQuantize" => Box::new(quantize::MxQuantize::new(attrs)?),
        "AddRmsNormMxQuant" => Box::new(rms_norm::AddRmsNormMxQuant::new(attrs)?),
        "SwiGluMxQuant" => Box::new(swiglu::SwiGluMxQuant::new(attrs)?),
        "MxMatMul" => Box::new(matmul::MxMatMul::new(attrs)?),
        other => return Err(Error::Unsupported(format!("com.mxfuse op {other:?}"))),
    })
}

/// Input `i`, which the schema marks as required.
fn required<'a, T>(op: &str, inputs: &'a [Option<T>], i: usize, name: &str) -> Result<&'a T> {
    inputs
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::invalid(format!("{op}: missing input {name}")))
}
