//! Kernels for the foreign ops the EP publishes schemas for (see `schema::FOREIGN`). They run
//! only where no fusion absorbed the node.

use kernels::codec::{e4m3_to_f32, e8m0_to_f32, BLOCK};
use kernels::ops as k;
use kernels::{DType, MxQuantAttrs};

use super::{dims_of, out_dims, out_views, required, take, Attrs, Kernel};
use crate::error::{Error, Result};
use crate::tensor::{Meta, TensorMut, TensorRef};

/// Quark's MXFP8 fake quantization of an f32 tensor along `axis`: `MxQuantize` (OCP floor
/// rule, NaN policy "ignore") of each 32-element block along the axis, then decode (`e4m3 · 2^(scale-127)`, exact).
/// Like Quark's op, a length along `axis` that is not a multiple of 32 is padded with zeros to
/// the next block (Quark exports put `axis = 1`, the sequence axis, on `[B, S, H]` activations
/// that feed no MatMul): a zero never raises a block's amax, so the last, partial block is
/// quantized by its own values. A scalar passes unchanged, as in Quark's kernel.
pub struct QuarkFakeQuant {
    quant: MxQuantAttrs,
    axis: i64,
}

impl QuarkFakeQuant {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        let element = attrs.string("element_dtype", "fp8_e4m3");
        if element != "fp8_e4m3" {
            return Err(Error::Unsupported(format!(
                "MXQuantizeDequantize element_dtype {element:?}"
            )));
        }
        let block = attrs.int("block_size", 32).to_string();
        // NaN policy "ignore": Quark's kernel takes the block exponent from the finite elements
        // and passes a NaN through, so a NaN costs only its own element (under "propagate" it
        // would make the whole block NaN). It is also what the rules read Quark's op as, so a
        // fused and an unfused Quark model agree on NaN blocks. (An Inf still differs: Quark
        // ignores it for the exponent; "ignore" counts it, as vLLM's kernel does.)
        let quant =
            MxQuantAttrs::from_pairs([("block_size", block.as_str()), ("nan_policy", "ignore")])?;
        Ok(QuarkFakeQuant {
            quant,
            axis: attrs.int("axis", -1),
        })
    }
}

impl Kernel for QuarkFakeQuant {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        Ok(vec![(*required(inputs, 0, "x")?).clone()])
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let x = required(inputs, 0, "x")?;
        if x.meta.dtype != DType::F32.onnx_code() {
            return Err(Error::Unsupported(format!(
                "unfused MXQuantizeDequantize runs only on float tensors, got element type {}",
                x.meta.dtype
            )));
        }
        let dims = dims_of(x);
        let src: Vec<f32> = x
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let y = take(&mut outs, 0, "y")?.view_mut::<f32>()?;
        if dims.is_empty() {
            // Quark's kernel returns a scalar unchanged (its exports put the op on constants such
            // as eps and alpha): the real decoder-layer export's expected output needs exactly that.
            y.copy_from_slice(&src);
            return Ok(());
        }
        let rank = dims.len() as i64;
        let axis = if self.axis < 0 {
            self.axis + rank
        } else {
            self.axis
        };
        if !(0..rank).contains(&axis) {
            return Err(Error::invalid(format!(
                "MXQuantizeDequantize axis {} out of range for rank {rank}",
                self.axis
            )));
        }
        let axis = axis as usize;
        let (outer, len, inner) = (
            dims[..axis].iter().product::<usize>(),
            dims[axis],
            dims[axis + 1..].iter().product::<usize>(),
        );
        if src.is_empty() {
            return Ok(());
        }
        // Gather each line along `axis` into a row of an [outer·inner, padded] matrix, zeros in
        // the padding.
        let padded = len.div_ceil(BLOCK) * BLOCK;
        let at = |o: usize, a: usize, i: usize| (o * len + a) * inner + i;
        let mut rows = vec![0f32; outer * inner * padded];
        for o in 0..outer {
            for i in 0..inner {
                for a in 0..len {
                    rows[(o * inner + i) * padded + a] = src[at(o, a, i)];
                }
            }
        }
        let row_dims = [outer * inner, padded];
        let scale_dims = k::scale_shape(&row_dims)?;
        let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (mut q, mut s) = (vec![0u8; rows.len()], vec![0u8; rows.len() / BLOCK]);
        k::mx_quantize(
            k::TensorRef::new(DType::F32, &row_dims, &bytes)?,
            k::TensorMut::new(DType::E4M3, &row_dims, &mut q)?,
            k::TensorMut::new(DType::E8M0, &scale_dims, &mut s)?,
            &self.quant,
            par,
        )?;
        for o in 0..outer {
            for i in 0..inner {
                for a in 0..len {
                    let r = (o * inner + i) * padded + a;
                    y[at(o, a, i)] = e4m3_to_f32(q[r]) * e8m0_to_f32(s[r / BLOCK]);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use graph_rewrites::view::AttrValue;
    use kernels::Serial;

    use super::*;
    use crate::ops::schema::QUARK_MX_QDQ;
    use crate::tensor::Tensor;

    fn fake_quant(dims: &[i64], axis: i64, values: &[f32]) -> Vec<f32> {
        let attrs = Attrs::new(
            &QUARK_MX_QDQ,
            BTreeMap::from([("axis".to_string(), AttrValue::Int(axis))]),
        )
        .unwrap();
        let kernel = QuarkFakeQuant::new(&attrs).unwrap();
        let meta = Meta::new(1, dims.to_vec());
        let x = Tensor {
            meta: meta.clone(),
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let mut y = Tensor::zeros(meta).unwrap();
        kernel
            .compute(&[Some(x.view())], &mut [Some(y.view_mut())], &Serial)
            .unwrap();
        y.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn quantizes_along_any_axis_like_the_transposed_last_axis() {
        // [32, 2] along axis 0 must equal [2, 32] along the last axis, transposed.
        let v: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 31.5) * 0.37)
            .collect();
        let t: Vec<f32> = (0..64).map(|i| v[(i % 32) * 2 + i / 32]).collect();
        let along0 = fake_quant(&[32, 2], 0, &v);
        let along_last = fake_quant(&[2, 32], -1, &t);
        for r in 0..32 {
            for c in 0..2 {
                assert_eq!(
                    along0[r * 2 + c].to_bits(),
                    along_last[c * 32 + r].to_bits()
                );
            }
        }
        // Fake quantization is idempotent and changes at least one value of this data.
        assert_eq!(fake_quant(&[2, 32], -1, &along_last), along_last);
        assert_ne!(along_last, t);
    }

    #[test]
    fn a_partial_block_is_quantized_as_if_padded_with_zeros() {
        // Quark's semantics: [3, 40] along the last axis = [3, 64] zero-padded, first 40 kept.
        let v: Vec<f32> = (0..120)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.71)
            .collect();
        let mut padded = vec![0f32; 3 * 64];
        for r in 0..3 {
            padded[r * 64..r * 64 + 40].copy_from_slice(&v[r * 40..r * 40 + 40]);
        }
        let got = fake_quant(&[3, 40], -1, &v);
        let want = fake_quant(&[3, 64], -1, &padded);
        for r in 0..3 {
            let w: Vec<u32> = want[r * 64..r * 64 + 40]
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let g: Vec<u32> = got[r * 40..r * 40 + 40]
                .iter()
                .map(|x| x.to_bits())
                .collect();
            assert_eq!(g, w, "row {r}");
        }
        // A sequence axis of 8 (the real Quark export's `axis = 1` on [B, S, H]), and a scalar.
        assert_eq!(fake_quant(&[2, 8, 3], 1, &v[..48]).len(), 48);
        // A scalar passes unchanged (1.702 is not an E4M3 value: quantized it would be 1.75).
        assert_eq!(fake_quant(&[], 0, &[1.702]), vec![1.702]);
    }

    #[test]
    fn a_nan_costs_only_its_own_element_as_in_quarks_kernel() {
        // Quark's kernel: the block exponent from the finite elements, a NaN passed through. So
        // the block with a NaN equals the same block with a zero there (a zero never raises the
        // amax), except at the NaN itself.
        let mut v: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) * 0.83).collect();
        v[5] = 0.0;
        let want = fake_quant(&[1, 32], -1, &v);
        v[5] = f32::NAN;
        let got = fake_quant(&[1, 32], -1, &v);
        assert!(got[5].is_nan());
        for i in (0..32).filter(|&i| i != 5) {
            assert_eq!(got[i].to_bits(), want[i].to_bits(), "element {i}");
        }
    }

    #[test]
    fn rejects_bad_axis_and_element_type() {
        let attrs = Attrs::new(
            &QUARK_MX_QDQ,
            BTreeMap::from([("axis".to_string(), AttrValue::Int(3))]),
        )
        .unwrap();
        let kernel = QuarkFakeQuant::new(&attrs).unwrap();
        let meta = Meta::new(1, vec![2, 32]);
        let x = Tensor::zeros(meta.clone()).unwrap();
        let mut y = Tensor::zeros(meta).unwrap();
        let err = kernel
            .compute(&[Some(x.view())], &mut [Some(y.view_mut())], &Serial)
            .unwrap_err();
        assert!(err.to_string().contains("axis 3"), "{err}");
        let bad = BTreeMap::from([("element_dtype".to_string(), AttrValue::String("fp4".into()))]);
        assert!(QuarkFakeQuant::new(&Attrs::new(&QUARK_MX_QDQ, bad).unwrap()).is_err());
    }
}
