//! Dtype-tagged tensor views the executor and the custom-op kernels pass to the op layer.
//! Element types use ONNX's numbering (see `ort_types`); data is raw little-endian bytes.

use crate::error::{Error, Result};
use crate::ort_types::{elem_size, element_count};

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

    /// Size in bytes of a tensor with this meta.
    pub fn byte_len(&self) -> Result<usize> {
        let size = elem_size(self.dtype)
            .ok_or_else(|| Error::Unsupported(format!("element type {}", self.dtype)))?;
        element_count(&self.dims)?
            .checked_mul(size)
            .ok_or_else(|| Error::invalid("tensor too large"))
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
