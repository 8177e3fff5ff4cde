//! Element types of the activation tensors (f32, f16, bf16) and the dtype tags of every tensor the
//! ops read or write.

use half::{bf16, f16};

/// Dtype tag of a tensor at the op-level API. The codes are ONNX `TensorProto.DataType` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    /// FLOAT8E4M3FN (bias 7, no Inf, NaN = 0x7F/0xFF, max 448).
    E4M3,
    /// FLOAT8E5M2 (bias 15, ±Inf, NaN; max 57344). Read by `MxDequantize`, written by
    /// `MxQuantizeLinear`.
    E5M2,
    /// FLOAT8E8M0 (a power of two 2^(byte-127), 0xFF = NaN).
    E8M0,
    /// FLOAT4E2M1 (MXFP4 values, ±{0, 0.5, …, 6}), two per byte, low nibble first
    /// ([`crate::codec::e2m1`]). Read by `MxDequantize` and as a constant `MxMatMul` weight.
    E2M1,
}

impl DType {
    /// Size of one storage unit in bytes: one element, except E2M1, whose byte holds two
    /// (a tensor's length is [`DType::byte_len`]).
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::E4M3 | DType::E5M2 | DType::E8M0 | DType::E2M1 => 1,
        }
    }

    /// Bytes of a tensor of `elements` elements (E2M1: `ceil(elements / 2)`, the last byte's
    /// high nibble padding when the count is odd); `None` on overflow.
    pub fn byte_len(self, elements: usize) -> Option<usize> {
        match self {
            DType::E2M1 => Some(crate::codec::e2m1::packed_len(elements)),
            d => elements.checked_mul(d.size()),
        }
    }

    /// The ONNX `TensorProto.DataType` code of this dtype.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::F16 => 10,
            DType::BF16 => 16,
            DType::E4M3 => 17,
            DType::E5M2 => 19,
            DType::E8M0 => 24,
            DType::E2M1 => 23,
        }
    }

    /// The dtype of an ONNX `TensorProto.DataType` code, if the kernels know it.
    pub fn from_onnx_code(code: i64) -> Option<DType> {
        match code {
            1 => Some(DType::F32),
            10 => Some(DType::F16),
            16 => Some(DType::BF16),
            17 => Some(DType::E4M3),
            19 => Some(DType::E5M2),
            24 => Some(DType::E8M0),
            23 => Some(DType::E2M1),
            _ => None,
        }
    }

    /// Whether this is one of the activation dtypes ([`Element`] types).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }
}

/// An activation element type: f32, f16 or bf16. Arithmetic happens in f32; `from_f32` is the
/// round-to-nearest-even "round_T" of docs/ops.md.
pub trait Element: Copy + Default + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// The dtype tag of this type.
    const DTYPE: DType;
    /// Exact widening to f32.
    fn to_f32(self) -> f32;
    /// Round-to-nearest-even narrowing from f32 (NaN stays NaN, overflow becomes ±Inf).
    fn from_f32(v: f32) -> Self;
    /// `round_T` as an f32: the value after a round trip through `Self`.
    #[inline]
    fn round_f32(v: f32) -> f32 {
        Self::from_f32(v).to_f32()
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    #[inline]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    #[inline]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}
