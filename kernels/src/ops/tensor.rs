//! Dtype-tagged tensor views over raw bytes, as the provider receives them from ONNX Runtime.

use half::{bf16, f16};

use crate::element::DType;
use crate::error::{KernelError, Result};

/// Types whose every bit pattern is a valid value, so a byte buffer can be viewed as them.
pub trait Pod: Copy + 'static {
    /// The dtype tags this Rust type may view.
    fn accepts(d: DType) -> bool;
}
impl Pod for f32 {
    fn accepts(d: DType) -> bool {
        d == DType::F32
    }
}
impl Pod for f16 {
    fn accepts(d: DType) -> bool {
        d == DType::F16
    }
}
impl Pod for bf16 {
    fn accepts(d: DType) -> bool {
        d == DType::BF16
    }
}
impl Pod for u8 {
    fn accepts(d: DType) -> bool {
        // E2M1: the packed bytes (two values each).
        matches!(d, DType::E4M3 | DType::E5M2 | DType::E8M0 | DType::E2M1)
    }
}

fn numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| KernelError::Shape(format!("shape {shape:?} overflows usize")))
}

fn check_bytes(dtype: DType, shape: &[usize], len: usize) -> Result<()> {
    let want = dtype
        .byte_len(numel(shape)?)
        .ok_or_else(|| KernelError::Shape(format!("shape {shape:?} overflows usize")))?;
    if len != want {
        return Err(KernelError::Buffer(format!(
            "{dtype:?} tensor of shape {shape:?} needs {want} bytes, got {len}"
        )));
    }
    Ok(())
}

/// Checks that `len` bytes at `ptr` may be viewed as `T`. An empty buffer is always fine: its
/// view is `&[]` (ORT hands an empty tensor — a batch or sequence of 0 — a NULL or byte-aligned
/// pointer, and an empty `Vec<u8>`'s pointer is 1, neither aligned for f32).
fn check_view<T: Pod>(dtype: DType, ptr: *const u8, len: usize) -> Result<()> {
    if !T::accepts(dtype) {
        return Err(KernelError::DType(format!(
            "{dtype:?} tensor viewed as {}",
            std::any::type_name::<T>()
        )));
    }
    if len > 0 && !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(KernelError::Buffer(format!(
            "{dtype:?} buffer is not aligned"
        )));
    }
    Ok(())
}

/// A read-only tensor: dtype, shape and its row-major bytes.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    data: &'a [u8],
}

impl<'a> TensorRef<'a> {
    /// Wraps `data`, checking its length against `shape` and `dtype`.
    pub fn new(dtype: DType, shape: &'a [usize], data: &'a [u8]) -> Result<Self> {
        check_bytes(dtype, shape, data.len())?;
        Ok(Self { dtype, shape, data })
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The elements as `T` (dtype and alignment checked).
    pub fn view<T: Pod>(&self) -> Result<&'a [T]> {
        check_view::<T>(self.dtype, self.data.as_ptr(), self.data.len())?;
        if self.data.is_empty() {
            return Ok(&[]);
        }
        let n = self.data.len() / std::mem::size_of::<T>();
        // SAFETY: T is Pod (every bit pattern valid), the pointer is aligned for T and the
        // buffer holds exactly n elements (length checked in `new`).
        Ok(unsafe { std::slice::from_raw_parts(self.data.as_ptr() as *const T, n) })
    }
}

/// A writable tensor: dtype, shape and its row-major bytes.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    data: &'a mut [u8],
}

impl<'a> TensorMut<'a> {
    /// Wraps `data`, checking its length against `shape` and `dtype`.
    pub fn new(dtype: DType, shape: &'a [usize], data: &'a mut [u8]) -> Result<Self> {
        check_bytes(dtype, shape, data.len())?;
        Ok(Self { dtype, shape, data })
    }

    /// The elements as `T` (dtype and alignment checked).
    pub fn view_mut<T: Pod>(self) -> Result<&'a mut [T]> {
        check_view::<T>(self.dtype, self.data.as_ptr(), self.data.len())?;
        if self.data.is_empty() {
            return Ok(&mut []);
        }
        let n = self.data.len() / std::mem::size_of::<T>();
        // SAFETY: as in `TensorRef::view`; the exclusive borrow moves into the result.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data.as_mut_ptr() as *mut T, n) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty tensor (a batch or sequence of 0) views as `&[]` whatever its pointer: ORT gives
    /// it NULL or an unaligned one, an empty `Vec<u8>` has pointer 1.
    #[test]
    fn empty_buffers_view_whatever_their_alignment() {
        let shape = [0usize, 64];
        let empty: &[u8] = &[];
        assert!(TensorRef::new(DType::F32, &shape, empty)
            .unwrap()
            .view::<f32>()
            .unwrap()
            .is_empty());
        let mut none: Vec<u8> = Vec::new();
        assert!(TensorMut::new(DType::F16, &shape, &mut none)
            .unwrap()
            .view_mut::<f16>()
            .unwrap()
            .is_empty());
        // Non-empty buffers are still checked.
        let bytes = [0u8; 9];
        let t = TensorRef::new(DType::F32, &[2], &bytes[1..]).unwrap();
        let aligned = (bytes[1..].as_ptr() as usize).is_multiple_of(4);
        assert_eq!(t.view::<f32>().is_ok(), aligned);
    }
}
