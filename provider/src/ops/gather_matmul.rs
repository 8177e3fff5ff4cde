//! `MxGatherMatMul` over `kernels::ops::mx_gather_matmul`: each sample's activation times the MX
//! weight of the expert its index selects, the stacked weights read in place (docs/ops.md).
//!
//! Constant experts are prepacked as `MxMatMul` prepacks its weight (matmul.rs): MXFP4 widened
//! once to the E4M3 bytes of the same values (widening per product was 8x the E4M3 time), and
//! the weight-second layout `[E, K, N]` transposed per expert to `[E, N, K]`, the rows the
//! kernels decode fastest (1.8x faster). Both ORT paths prepack alike, so they agree bit for bit.

use kernels::ops as k;
use kernels::{DType, MxGatherMatMulAttrs};

use super::gather_dequant::indices_i64;
use super::matmul::{transpose_bytes, widen_fp4_weight};
use super::{dims_of, float_input, out_dims, out_views, required, take, view, Kernel};
use crate::error::{Error, Result};
use crate::tensor::{Meta, Tensor, TensorMut, TensorRef};

/// Stacked E4M3 experts `[E, N, K]` with scales `[E, N, K/32]`.
pub(crate) struct Packed {
    pub q: Vec<u8>,
    pub scales: Vec<u8>,
    pub q_dims: [usize; 3],
    pub scale_dims: [usize; 3],
}

pub struct MxGatherMatMul {
    attrs: MxGatherMatMulAttrs,
    packed: Option<Packed>,
}

impl MxGatherMatMul {
    pub fn new(attrs: MxGatherMatMulAttrs) -> Self {
        MxGatherMatMul {
            attrs,
            packed: None,
        }
    }
}

/// Each of the `e` matrices `[rows, cols]` of `src` transposed to `[cols, rows]`.
fn transpose_each(src: &[u8], e: usize, rows: usize, cols: usize) -> Vec<u8> {
    src.chunks_exact(rows * cols)
        .take(e)
        .flat_map(|m| transpose_bytes(m, rows, cols))
        .collect()
}

/// The experts `b` (E4M3, or FP4 widened) and scales `bs` in the `[E, N, K]` layout (also what
/// the GPU program uploads: the layout its fast kernel reads); `None` when
/// there is nothing to gain (E4M3 already `[E, N, K]`) or the dims do not fit (left to the
/// kernel's checks and their messages).
pub(crate) fn pack(b: &TensorRef<'_>, bs: &TensorRef<'_>, nk: bool) -> Option<Packed> {
    let widened: Option<Tensor> = widen_fp4_weight(b);
    if nk && widened.is_none() {
        return None;
    }
    let bv = widened.as_ref().map_or(*b, Tensor::view);
    let (&[e, d1, d2], &[se, s1, s2]) = (&bv.meta.dims[..], &bs.meta.dims[..]) else {
        return None;
    };
    let [e, d1, d2, se, s1, s2] = [e, d1, d2, se, s1, s2].map(|d| d.max(0) as usize);
    if bv.meta.dtype != DType::E4M3.onnx_code()
        || se != e
        || bv.data.len() != e * d1 * d2
        || bs.data.len() != e * s1 * s2
    {
        return None;
    }
    Some(if nk {
        // Only a widened FP4 weight gets here: its bytes move in as they are.
        Packed {
            q: widened.map(|w| w.data).unwrap_or_default(),
            scales: bs.data.to_vec(),
            q_dims: [e, d1, d2],
            scale_dims: [e, s1, s2],
        }
    } else {
        // [E, K, N] / [E, K/32, N] → [E, N, K] / [E, N, K/32].
        Packed {
            q: transpose_each(bv.data, e, d1, d2),
            scales: transpose_each(bs.data, e, s1, s2),
            q_dims: [e, d2, d1],
            scale_dims: [e, s2, s1],
        }
    })
}

impl Kernel for MxGatherMatMul {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let a = required(inputs, 0, "a")?;
        float_input(a, "a")?;
        let b = required(inputs, 1, "b")?;
        required(inputs, 2, "b_scale")?;
        let idx = required(inputs, 3, "indices")?;
        let (ad, bd) = (&a.dims, &b.dims);
        if ad.len() != 3 || bd.len() != 3 || idx.dims.len() != 1 {
            return Err(Error::invalid(format!(
                "a {ad:?} and b {bd:?} must have rank 3 and indices {:?} rank 1",
                idx.dims
            )));
        }
        // The sample dim broadcasts as MatMul's batch dim (-1: unknown until run time).
        let s = match (ad[0], idx.dims[0]) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (-1, y) | (y, -1) if y > 1 => y,
            (-1, _) | (_, -1) => -1,
            (x, _) => x, // a mismatch: the kernel names it at run time
        };
        // Weight first: y [S, N, 1]; weight second: y [S, P, N].
        let dims = if self.attrs.trans_b {
            vec![s, bd[1], 1]
        } else {
            vec![s, ad[1], bd[2]]
        };
        Ok(vec![Meta::new(self.attrs.output_dtype.onnx_code(), dims)])
    }

    fn prepack_inputs(&self) -> &'static [usize] {
        &[1, 2]
    }

    fn prepack(&mut self, constants: &[Option<TensorRef<'_>>]) -> Result<()> {
        if let (Some(Some(b)), Some(Some(bs))) = (constants.get(1), constants.get(2)) {
            self.packed = pack(b, bs, self.attrs.trans_b);
        }
        Ok(())
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let a = required(inputs, 0, "a")?;
        let b = required(inputs, 1, "b")?;
        let bs = required(inputs, 2, "b_scale")?;
        let idx = required(inputs, 3, "indices")?;
        let (ad, bd, sd) = (dims_of(a), dims_of(b), dims_of(bs));
        let values = indices_i64(idx)?;
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let y = take(&mut outs, 0, "y")?;
        let a = view(a, &ad)?;
        Ok(match &self.packed {
            Some(p) => k::mx_gather_matmul_laid_out(
                a,
                k::TensorRef::new(DType::E4M3, &p.q_dims, &p.q)?,
                k::TensorRef::new(DType::E8M0, &p.scale_dims, &p.scales)?,
                &values,
                y,
                &self.attrs,
                true,
                par,
            ),
            None => k::mx_gather_matmul(
                a,
                view(b, &bd)?,
                view(bs, &sd)?,
                &values,
                y,
                &self.attrs,
                par,
            ),
        }?)
    }
}
