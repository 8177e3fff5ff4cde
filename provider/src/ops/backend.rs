//! Calls into the `kernels` crate's op-level API.
//!
//! (Waiting on `kernels::ops`; until it lands every op reports "not supported" at run time.)

use super::matmul::MxMatMul;
use super::quant_common::QuantParams;
use super::rms_norm::AddRmsNormMxQuant;
use super::swiglu::SwiGluMxQuant;
use crate::error::{Error, Result};
use crate::tensor::{TensorMut, TensorRef};

fn pending(op: &str) -> Error {
    Error::Unsupported(format!("{op}: CPU kernel not available in this build"))
}

pub fn mx_quantize(
    _p: &QuantParams,
    _x: &TensorRef<'_>,
    _out: &mut [Option<TensorMut<'_>>],
) -> Result<()> {
    Err(pending("MxQuantize"))
}

pub fn add_rms_norm_mx_quant(
    _op: &AddRmsNormMxQuant,
    _inputs: &[Option<TensorRef<'_>>],
    _out: &mut [Option<TensorMut<'_>>],
) -> Result<()> {
    Err(pending("AddRmsNormMxQuant"))
}

pub fn swiglu_mx_quant(
    _op: &SwiGluMxQuant,
    _inputs: &[Option<TensorRef<'_>>],
    _out: &mut [Option<TensorMut<'_>>],
) -> Result<()> {
    Err(pending("SwiGluMxQuant"))
}

pub fn mx_matmul(
    _op: &MxMatMul,
    _inputs: &[Option<TensorRef<'_>>],
    _out: &mut [Option<TensorMut<'_>>],
) -> Result<()> {
    Err(pending("MxMatMul"))
}
