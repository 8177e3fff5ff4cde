//! Reading a kernel's inputs from an `OrtKernelContext` and allocating its outputs there.

use std::ptr;

use ort_sys::{OrtKernelContext, OrtValue};

use crate::error::{Error, Result};
use crate::ffi::api::{api, check};
use crate::ort_types::{ort_from_onnx, tensor_data, tensor_data_mut, value_type_and_dims};
use crate::tensor::{raw_bytes_mut, Meta, TensorMut, TensorRef};

/// The inputs of one kernel invocation: metas (owned) plus pointers to ORT's data.
pub struct Inputs {
    metas: Vec<Option<Meta>>,
    data: Vec<*const u8>,
}

impl Inputs {
    /// Reads every input of `ctx`; omitted optional inputs are `None`.
    ///
    /// # Safety
    /// `ctx` must be the live context of the current `Compute` call.
    pub unsafe fn read(ctx: *mut OrtKernelContext) -> Result<Self> {
        let (metas, data) = read_input_addresses(ctx)?
            .into_iter()
            .map(|v| match v {
                Some((meta, p)) => (Some(meta), p as *const u8),
                None => (None, ptr::null()),
            })
            .unzip();
        Ok(Inputs { metas, data })
    }

    pub fn metas(&self) -> Vec<Option<&Meta>> {
        self.metas.iter().map(Option::as_ref).collect()
    }

    /// Views of the inputs; valid while the `Compute` call runs.
    pub fn views(&self) -> Result<Vec<Option<TensorRef<'_>>>> {
        self.metas
            .iter()
            .zip(&self.data)
            .map(|(meta, &p)| match meta {
                None => Ok(None),
                // SAFETY: ORT guarantees the bytes of CPU data for a tensor of this meta for the
                // duration of Compute.
                Some(meta) => unsafe { TensorRef::from_raw(meta, p) }.map(Some),
            })
            .collect()
    }
}

/// Every input of `ctx` as (meta, data address); `None` for omitted optional inputs. The
/// address is ORT's, host or device memory as the session placed it.
///
/// # Safety
/// `ctx` must be the live context of the current `Compute` call.
pub unsafe fn read_input_addresses(ctx: *mut OrtKernelContext) -> Result<Vec<Option<(Meta, u64)>>> {
    let ort = api()?.ort;
    let mut n = 0usize;
    check((ort.KernelContext_GetInputCount)(ctx, &mut n))?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut value: *const OrtValue = ptr::null();
        check((ort.KernelContext_GetInput)(ctx, i, &mut value))?;
        if value.is_null() {
            out.push(None);
            continue;
        }
        let (dtype, dims) = value_type_and_dims(value)?;
        out.push(Some((Meta::new(dtype, dims), tensor_data(value)? as u64)));
    }
    Ok(out)
}

/// Allocates output `index` of `ctx` with `meta` and returns its data address (host or device
/// memory, as the session placed it), or `None` when the node does not have that (optional)
/// output.
///
/// # Safety
/// `ctx` must be the live context of the current `Compute` call.
pub unsafe fn output_address(
    ctx: *mut OrtKernelContext,
    index: usize,
    meta: &Meta,
) -> Result<Option<u64>> {
    let ort = api()?.ort;
    let mut count = 0usize;
    check((ort.KernelContext_GetOutputCount)(ctx, &mut count))?;
    if index >= count {
        return Ok(None);
    }
    let mut value: *mut OrtValue = ptr::null_mut();
    check((ort.KernelContext_GetOutput)(
        ctx,
        index,
        meta.dims.as_ptr(),
        meta.dims.len(),
        &mut value,
    ))?;
    if value.is_null() {
        return Ok(None);
    }
    // The element type ORT allocated must be the one we will write.
    let (dtype, _) = value_type_and_dims(value)?;
    if dtype != meta.dtype {
        ort_from_onnx(meta.dtype)?;
        return Err(Error::invalid(format!(
            "output {index}: the graph declares element type {dtype}, the op produces {}",
            meta.dtype
        )));
    }
    Ok(Some(tensor_data_mut(value)? as u64))
}

/// Allocates output `index` of `ctx` with `meta` (host memory) and returns its bytes, or `None`
/// when the node does not have that (optional) output.
///
/// # Safety
/// `ctx` must be the live context of the current `Compute` call; the returned slice is valid
/// until it returns.
pub unsafe fn alloc_output<'a>(
    ctx: *mut OrtKernelContext,
    index: usize,
    meta: &Meta,
) -> Result<Option<&'a mut [u8]>> {
    let Some(p) = output_address(ctx, index, meta)? else {
        return Ok(None);
    };
    Ok(Some(raw_bytes_mut(p as *mut u8, meta.byte_len()?)))
}

/// Runs `kernel` on the inputs of `ctx`, writing straight into ORT's output buffers.
///
/// # Safety
/// `ctx` must be the live context of the current `Compute` call.
pub unsafe fn run_kernel(
    kernel: &dyn crate::ops::Kernel,
    ctx: *mut OrtKernelContext,
    parallelism: crate::ops::Parallelism,
) -> Result<()> {
    let inputs = Inputs::read(ctx)?;
    let out_metas = kernel.output_metas(&inputs.metas())?;
    let mut buffers = Vec::with_capacity(out_metas.len());
    for (i, meta) in out_metas.iter().enumerate() {
        buffers.push(alloc_output(ctx, i, meta)?);
    }
    let mut outputs: Vec<Option<TensorMut<'_>>> = buffers
        .into_iter()
        .zip(&out_metas)
        .map(|(buf, meta)| buf.map(|data| TensorMut { meta, data }))
        .collect();
    let views = inputs.views()?;
    parallelism.with(ctx, |par| kernel.compute(&views, &mut outputs, par))
}
