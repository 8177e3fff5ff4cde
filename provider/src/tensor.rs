//! Dtype-tagged tensor views the executor and the custom-op kernels pass to the op layer.
//! Element types use ONNX's numbering (see `ort_types`); data is raw little-endian bytes.

use crate::error::Result;
use crate::ort_types::{element_count, tensor_bytes};

/// Element type and shape of a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub dtype: i32,
    pub dims: Vec<i64>,
}

impl Meta {
    pub fn new(dtype: i32, dims: Vec<i64>) -> Self {
        Meta { dtype, dims }
    }

    /// The dims as `usize`: a tensor ORT hands a kernel has no unknown (negative) dims; one
    /// would read as 0, never as a huge size.
    pub fn dims_usize(&self) -> Vec<usize> {
        self.dims.iter().map(|&d| d.max(0) as usize).collect()
    }

    /// Size in bytes of a tensor with this meta.
    pub fn byte_len(&self) -> Result<usize> {
        tensor_bytes(self.dtype, element_count(&self.dims)?)
    }
}

/// A read-only tensor.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub meta: &'a Meta,
    pub data: &'a [u8],
}

/// A tensor to write.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub meta: &'a Meta,
    pub data: &'a mut [u8],
}

/// The `len` bytes at `p`. ORT may hand an empty tensor a NULL pointer, so a zero length or a
/// NULL `p` is the empty slice.
///
/// # Safety
/// Unless empty as above, `p` must point at `len` readable bytes that nothing writes during `'a`.
pub unsafe fn raw_bytes<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || p.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(p, len)
    }
}

/// [`raw_bytes`] to write.
///
/// # Safety
/// Unless empty, `p` must point at `len` writable bytes that nothing else accesses during `'a`.
pub unsafe fn raw_bytes_mut<'a>(p: *mut u8, len: usize) -> &'a mut [u8] {
    if len == 0 || p.is_null() {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p, len)
    }
}

impl<'a> TensorRef<'a> {
    /// The tensor of `meta` whose bytes are at `p` (see [`raw_bytes`]).
    ///
    /// # Safety
    /// As [`raw_bytes`] with `meta.byte_len()` bytes.
    pub unsafe fn from_raw(meta: &'a Meta, p: *const u8) -> Result<Self> {
        let data = raw_bytes(p, meta.byte_len()?);
        Ok(TensorRef { meta, data })
    }
}

impl<'a> TensorMut<'a> {
    /// The tensor of `meta` to write at `p` (see [`raw_bytes_mut`]).
    ///
    /// # Safety
    /// As [`raw_bytes_mut`] with `meta.byte_len()` bytes.
    pub unsafe fn from_raw(meta: &'a Meta, p: *mut u8) -> Result<Self> {
        let data = raw_bytes_mut(p, meta.byte_len()?);
        Ok(TensorMut { meta, data })
    }
}

/// An owned tensor (executor intermediates).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub meta: Meta,
    pub data: Vec<u8>,
}

impl Tensor {
    /// A zero-filled tensor of `meta`.
    pub fn zeros(meta: Meta) -> Result<Self> {
        let n = meta.byte_len()?;
        Ok(Tensor {
            meta,
            data: vec![0; n],
        })
    }

    pub fn view(&self) -> TensorRef<'_> {
        TensorRef {
            meta: &self.meta,
            data: &self.data,
        }
    }

    pub fn view_mut(&mut self) -> TensorMut<'_> {
        TensorMut {
            meta: &self.meta,
            data: &mut self.data,
        }
    }
}
