//! Kernels for the foreign ops the EP publishes schemas for (see `schema::FOREIGN`). They run
//! only where no fusion absorbed the node.

use std::sync::Mutex;

use half::f16;
use kernels::codec::{e4m3_to_f32, e8m0_to_f32, BLOCK};
use kernels::ops as k;
use kernels::reference::quark_mx::{quark_mx_fake_quant, IntRounding, QuarkElement};
use kernels::{DType, KernelError, MxQuantAttrs};

use super::{dims_of, out_dims, out_views, required, take, Attrs, Kernel};
use crate::error::{Error, Result};
use crate::tensor::{Meta, TensorMut, TensorRef};

/// About this many values per task of the parallel element-wise path.
const TASK_VALUES: usize = 1 << 16;

/// Quark's MX fake quantization (`com.amd.quark::MXQuantizeDequantize`) of an f32 or f16 tensor
/// along `axis`, blocks of `block_size`, for every `element_dtype` Quark exports (docs/provider.md
/// "Foreign ops"). Attribute defaults are those of Quark's schema (`int8`, axis 1, block 32,
/// rounding_mode 0), which the rules read too.
///
/// Like Quark's op, a length along `axis` that is not a multiple of the block is padded with
/// zeros to the next block (Quark exports put `axis = 1`, the sequence axis, on `[B, S, H]`
/// activations that feed no MatMul): a zero never raises a block's exponent, so the last,
/// partial block is quantized by its own values. A tensor of one element passes unchanged and a
/// rank-1 tensor is quantized along its only axis whatever `axis` says, as in Quark's kernel.
/// f16 values are quantized as their f32 widening and the result rounded back to f16.
///
/// `fp8_e4m3` with block 32 is `MxQuantize` (OCP floor rule, NaN policy "ignore") of each block,
/// then decode (`e4m3 · 2^(scale-127)`, exact): what the rules fuse the op into, so a fused and an
/// unfused Quark model compute the same bits. Every other element type (and E4M3 with another
/// block size) is `kernels::reference::quark_mx`, Quark's kernel as written.
pub struct QuarkFakeQuant {
    /// The node's op type (`MXQuantizeDequantize`, or its deprecated alias `MXFixNeuron`), which
    /// the errors name.
    op: String,
    element: QuarkElement,
    rounding: IntRounding,
    block: usize,
    axis: i64,
    /// The MXFP8 quantizer of the fp8_e4m3, block-32 case.
    mxfp8: Option<MxQuantAttrs>,
}

impl QuarkFakeQuant {
    pub fn new(attrs: &Attrs) -> Result<Self> {
        let op = attrs.op().to_string();
        let element = QuarkElement::parse(attrs.string("element_dtype", "int8"))
            .map_err(|e| named(&op, e))?;
        let block = attrs.int("block_size", 32);
        if !(1..=1 << 20).contains(&block) {
            return Err(Error::invalid(format!(
                "{op} block_size {block} is not in [1, 2^20]"
            )));
        }
        // Quark rounds FP elements half to even whatever rounding_mode says; it picks INT8's
        // rounding only.
        let rounding = match element {
            QuarkElement::Int8 => {
                IntRounding::from_mode(attrs.int("rounding_mode", 0)).map_err(|e| named(&op, e))?
            }
            _ => IntRounding::HalfEven,
        };
        // NaN policy "ignore": Quark's kernel takes the block exponent from the finite elements
        // and passes a NaN through, so a NaN costs only its own element (under "propagate" it
        // would make the whole block NaN). It is also what the rules read Quark's op as, so a
        // fused and an unfused Quark model agree on NaN blocks. (An Inf still differs: Quark
        // ignores it for the exponent and passes it; "ignore" counts it, as vLLM's kernel does.)
        let mxfp8 = if element == QuarkElement::Fp8E4M3 && block == BLOCK as i64 {
            Some(MxQuantAttrs::from_pairs([
                ("block_size", "32"),
                ("nan_policy", "ignore"),
            ])?)
        } else {
            None
        };
        Ok(QuarkFakeQuant {
            op,
            element,
            rounding,
            block: block as usize,
            axis: attrs.int("axis", 1),
            mxfp8,
        })
    }

    /// Fake-quantizes `rows` (each `padded` long, a multiple of the block) into `out`.
    fn quantize_rows(
        &self,
        rows: &[f32],
        padded: usize,
        out: &mut [f32],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let Some(quant) = &self.mxfp8 else {
            // Chunks of whole rows on the pool; each task locks only its own output chunk.
            let rows_per_task = (TASK_VALUES / padded).max(1);
            let chunk = rows_per_task * padded;
            let outs: Vec<Mutex<&mut [f32]>> = out.chunks_mut(chunk).map(Mutex::new).collect();
            let failed = Mutex::new(None);
            par.for_each(outs.len(), &|t| {
                let mut y = outs[t].lock().unwrap_or_else(|e| e.into_inner());
                let x = &rows[t * chunk..t * chunk + y.len()];
                let r =
                    quark_mx_fake_quant(x, &mut y, padded, self.block, self.element, self.rounding);
                if let Err(e) = r {
                    *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                }
            });
            return match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(e) => Err(e.into()),
                None => Ok(()),
            };
        };
        let row_dims = [rows.len() / padded, padded];
        let scale_dims = k::scale_shape(&row_dims)?;
        let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (mut q, mut s) = (vec![0u8; rows.len()], vec![0u8; rows.len() / BLOCK]);
        k::mx_quantize(
            k::TensorRef::new(DType::F32, &row_dims, &bytes)?,
            k::TensorMut::new(DType::E4M3, &row_dims, &mut q)?,
            k::TensorMut::new(DType::E8M0, &scale_dims, &mut s)?,
            quant,
            par,
        )?;
        for (r, y) in out.iter_mut().enumerate() {
            *y = e4m3_to_f32(q[r]) * e8m0_to_f32(s[r / BLOCK]);
        }
        Ok(())
    }
}

/// `e` (an attribute the kernels' Quark reference refuses) prefixed with the node's op type.
fn named(op: &str, e: KernelError) -> Error {
    match e {
        KernelError::Unsupported(m) => Error::Unsupported(format!("{op} {m}")),
        other => Error::invalid(format!("{op} {other}")),
    }
}

/// Calls `f(s, r)` for every element of a tensor `[outer, len, inner]` (flat index `s`) with its
/// index `r` in the matrix `[outer·inner, padded]` whose rows are the lines along the middle axis.
/// Tiles of 16×16 (line position × line) keep both sides in cache where `inner` > 1 (a transpose).
fn for_each_line_element(
    (outer, len, inner): (usize, usize, usize),
    padded: usize,
    mut f: impl FnMut(usize, usize),
) {
    const T: usize = 16;
    for o in 0..outer {
        for a0 in (0..len).step_by(T) {
            for i0 in (0..inner).step_by(T) {
                for a in a0..(a0 + T).min(len) {
                    for i in i0..(i0 + T).min(inner) {
                        f((o * len + a) * inner + i, (o * inner + i) * padded + a);
                    }
                }
            }
        }
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
        let is_f16 = match x.meta.dtype {
            t if t == DType::F32.onnx_code() => false,
            t if t == DType::F16.onnx_code() => true,
            t => {
                return Err(Error::Unsupported(format!(
                    "unfused {} runs on float and float16 tensors, got element type {t}",
                    self.op
                )))
            }
        };
        let dims = dims_of(x);
        let src: Vec<f32> = if is_f16 {
            x.data
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect()
        } else {
            x.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let y = take(&mut outs, 0, "y")?;
        let mut result = vec![0f32; src.len()];
        if src.len() == 1 {
            // Quark's kernel returns a one-element tensor unchanged (its exports put the op on
            // constants such as eps and alpha): the real decoder-layer export's expected output
            // needs exactly that.
            result.copy_from_slice(&src);
        } else if !src.is_empty() {
            let rank = dims.len() as i64;
            // Quark quantizes a rank-1 tensor along its axis whatever `axis` says.
            let axis = match self.axis {
                _ if rank == 1 => 0,
                a if a < 0 => a + rank,
                a => a,
            };
            if !(0..rank).contains(&axis) {
                return Err(Error::invalid(format!(
                    "{} axis {} out of range for rank {rank}",
                    self.op, self.axis
                )));
            }
            let axis = axis as usize;
            let (outer, len, inner) = (
                dims[..axis].iter().product::<usize>(),
                dims[axis],
                dims[axis + 1..].iter().product::<usize>(),
            );
            // Gather each line along `axis` into a row of an [outer·inner, padded] matrix,
            // zeros in the padding, quantize the rows, scatter them back.
            let padded = len.div_ceil(self.block) * self.block;
            let mut rows = vec![0f32; outer * inner * padded];
            for_each_line_element((outer, len, inner), padded, |s, r| rows[r] = src[s]);
            let mut quantized = vec![0f32; rows.len()];
            self.quantize_rows(&rows, padded, &mut quantized, par)?;
            for_each_line_element((outer, len, inner), padded, |s, r| result[s] = quantized[r]);
        }
        if is_f16 {
            for (d, v) in y.view_mut::<f16>()?.iter_mut().zip(&result) {
                *d = f16::from_f32(*v);
            }
        } else {
            y.view_mut::<f32>()?.copy_from_slice(&result);
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

    const F32: i32 = 1;
    const F16: i32 = 10;

    fn kernel(element: &str, extra: &[(&str, i64)]) -> Result<QuarkFakeQuant> {
        let mut attrs = BTreeMap::from([(
            "element_dtype".to_string(),
            AttrValue::String(element.into()),
        )]);
        for (name, v) in extra {
            attrs.insert(name.to_string(), AttrValue::Int(*v));
        }
        QuarkFakeQuant::new(&Attrs::new(&QUARK_MX_QDQ, attrs)?)
    }

    fn run(kernel: &QuarkFakeQuant, dtype: i32, dims: &[i64], data: Vec<u8>) -> Result<Vec<u8>> {
        let meta = Meta::new(dtype, dims.to_vec());
        let x = Tensor {
            meta: meta.clone(),
            data,
        };
        let mut y = Tensor::zeros(meta)?;
        kernel.compute(&[Some(x.view())], &mut [Some(y.view_mut())], &Serial)?;
        Ok(y.data)
    }

    fn quantize(element: &str, dims: &[i64], axis: i64, values: &[f32]) -> Vec<f32> {
        let k = kernel(element, &[("axis", axis), ("rounding_mode", 2)]).unwrap();
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        run(&k, F32, dims, bytes)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn quantizes_along_any_axis_like_the_transposed_last_axis() {
        // [32, 2] along axis 0 must equal [2, 32] along the last axis, transposed.
        let v: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 31.5) * 0.37)
            .collect();
        let t: Vec<f32> = (0..64).map(|i| v[(i % 32) * 2 + i / 32]).collect();
        for el in QuarkElement::ALL.map(QuarkElement::name) {
            let along0 = quantize(el, &[32, 2], 0, &v);
            let along_last = quantize(el, &[2, 32], -1, &t);
            for r in 0..32 {
                for c in 0..2 {
                    assert_eq!(
                        along0[r * 2 + c].to_bits(),
                        along_last[c * 32 + r].to_bits(),
                        "{el}"
                    );
                }
            }
            // Fake quantization is idempotent and changes at least one value of this data.
            assert_eq!(quantize(el, &[2, 32], -1, &along_last), along_last, "{el}");
            assert_ne!(along_last, t, "{el}");
        }
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
        for el in QuarkElement::ALL.map(QuarkElement::name) {
            let got = quantize(el, &[3, 40], -1, &v);
            let want = quantize(el, &[3, 64], -1, &padded);
            for r in 0..3 {
                assert_eq!(
                    bits(&got[r * 40..r * 40 + 40]),
                    bits(&want[r * 64..r * 64 + 40]),
                    "{el} row {r}"
                );
            }
            // A sequence axis of 8 (the real Quark export's `axis = 1` on [B, S, H]).
            assert_eq!(quantize(el, &[2, 8, 3], 1, &v[..48]).len(), 48);
        }
    }

    #[test]
    fn one_element_tensors_pass_unchanged_and_rank_1_ignores_axis_as_in_quark() {
        for el in QuarkElement::ALL.map(QuarkElement::name) {
            // 1.702 is on no element grid (E4M3 would make it 1.75).
            for dims in [&[][..], &[1], &[1, 1]] {
                assert_eq!(
                    quantize(el, dims, 0, &[1.702]),
                    vec![1.702],
                    "{el} {dims:?}"
                );
            }
            // Quark's default axis 1 on a bias: the only axis is quantized.
            let v: Vec<f32> = (0..40).map(|i| (i as f32 - 19.5) * 0.61).collect();
            assert_eq!(
                quantize(el, &[40], 1, &v),
                quantize(el, &[40], 0, &v),
                "{el}"
            );
        }
    }

    #[test]
    fn other_element_types_are_quarks_kernel_along_the_axis() {
        // [40, 3] along axis 0 against the reference on the transposed, zero-padded rows.
        let v: Vec<f32> = (0..120)
            .map(|i| ((i * 29 % 113) as f32 - 56.0) * 0.053)
            .collect();
        for el in QuarkElement::ALL {
            if el == QuarkElement::Fp8E4M3 {
                continue; // the MXFP8 path, checked against it in kernels/tests/quark_mx.rs
            }
            let got = quantize(el.name(), &[40, 3], 0, &v);
            let mut rows = vec![0f32; 3 * 64];
            for c in 0..3 {
                for r in 0..40 {
                    rows[c * 64 + r] = v[r * 3 + c];
                }
            }
            let mut want = vec![0f32; rows.len()];
            quark_mx_fake_quant(&rows, &mut want, 64, 32, el, IntRounding::HalfEven).unwrap();
            for c in 0..3 {
                for r in 0..40 {
                    assert_eq!(
                        got[r * 3 + c].to_bits(),
                        want[c * 64 + r].to_bits(),
                        "{el:?}"
                    );
                }
            }
        }
        // INT8's rounding mode: 64·x/scale = 0.5 rounds to 1 (half away, half up) or 0 (even).
        let mut tie = [0f32; 32];
        tie[0] = 1.0; // scale 2^0
        tie[1] = 0.5 / 64.0;
        tie[2] = -0.5 / 64.0;
        let at = |mode: i64| {
            let k = kernel("int8", &[("axis", -1), ("rounding_mode", mode)]).unwrap();
            let y = run(
                &k,
                F32,
                &[1, 32],
                tie.iter().flat_map(|v| v.to_le_bytes()).collect(),
            );
            let y = y.unwrap();
            let f = |i: usize| f32::from_le_bytes(y[4 * i..4 * i + 4].try_into().unwrap());
            (f(1) * 64.0, f(2) * 64.0)
        };
        assert_eq!(at(0), (1.0, -1.0));
        assert_eq!(at(1), (1.0, 0.0));
        assert_eq!(at(2), (0.0, 0.0));
    }

    #[test]
    fn f16_is_quantized_as_its_f32_widening() {
        let v: Vec<f32> = (0..64)
            .map(|i| ((i * 41 % 64) as f32 - 31.0) * 0.77)
            .collect();
        let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        let widened: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        for el in QuarkElement::ALL.map(QuarkElement::name) {
            let k = kernel(el, &[("axis", -1)]).unwrap();
            let y = run(
                &k,
                F16,
                &[2, 32],
                h.iter().flat_map(|x| x.to_le_bytes()).collect(),
            );
            let want: Vec<f16> = quantize(el, &[2, 32], -1, &widened)
                .into_iter()
                .map(f16::from_f32)
                .collect();
            let got: Vec<f16> = y
                .unwrap()
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]))
                .collect();
            assert_eq!(got, want, "{el}");
        }
    }

    #[test]
    fn a_nan_costs_only_its_own_element_as_in_quarks_kernel() {
        // Quark's kernel: the block exponent from the finite elements, a NaN passed through. So
        // the block with a NaN equals the same block with a zero there (a zero never raises the
        // amax), except at the NaN itself.
        for el in QuarkElement::ALL.map(QuarkElement::name) {
            let mut v: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) * 0.83).collect();
            v[5] = 0.0;
            let want = quantize(el, &[1, 32], -1, &v);
            v[5] = f32::NAN;
            let got = quantize(el, &[1, 32], -1, &v);
            assert!(got[5].is_nan());
            for i in (0..32).filter(|&i| i != 5) {
                assert_eq!(got[i].to_bits(), want[i].to_bits(), "{el} element {i}");
            }
        }
    }

    #[test]
    fn the_row_parallel_path_equals_the_serial_one() {
        // [40, 3000] along the last axis: rows of 3008 (padded), 21 rows a task, the last task
        // short; and along axis 0 (a transpose) with three threads.
        let v: Vec<f32> = (0..120_000)
            .map(|i| ((i * 7919 % 10007) as f32 - 5003.0) * 1e-3)
            .collect();
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        for el in ["fp6_e2m3", "int8"] {
            for axis in [-1, 0] {
                let k = kernel(el, &[("axis", axis)]).unwrap();
                let meta = Meta::new(F32, vec![40, 3000]);
                let x = Tensor {
                    meta: meta.clone(),
                    data: bytes.clone(),
                };
                let mut y = Tensor::zeros(meta).unwrap();
                let threads = kernels::StdThreads::new(3);
                k.compute(&[Some(x.view())], &mut [Some(y.view_mut())], &threads)
                    .unwrap();
                let serial = run(&k, F32, &[40, 3000], bytes.clone()).unwrap();
                assert_eq!(y.data, serial, "{el} axis {axis}");
            }
        }
    }

    /// Every spelling of Quark's MX fake quant (`QUARK_MX_OPS`: `com.amd.quark::
    /// MXQuantizeDequantize` and its deprecated name `com.vai.quantize::MXFixNeuron`) is
    /// published with the same signature and built into the same kernel, computing the same bits.
    #[test]
    fn every_quark_spelling_is_published_with_the_same_kernel() {
        use crate::ops::schema::FOREIGN;
        use graph_rewrites::view::QUARK_MX_OPS;
        let x: Vec<u8> = (0..2 * 64)
            .map(|i| (i as f32 - 60.0) * 0.37)
            .flat_map(|v: f32| v.to_le_bytes())
            .collect();
        let mut outs = Vec::new();
        for &(domain, op) in QUARK_MX_OPS {
            let schema = FOREIGN
                .iter()
                .find(|s| s.domain == domain && s.name == op)
                .unwrap_or_else(|| panic!("{domain}::{op} is not published"));
            assert_eq!(
                (schema.inputs.len(), schema.outputs.len(), schema.attrs),
                (1, 1, QUARK_MX_QDQ.attrs),
                "{op}"
            );
            let attrs = BTreeMap::from([
                (
                    "element_dtype".to_string(),
                    AttrValue::String("fp8_e4m3".into()),
                ),
                ("axis".to_string(), AttrValue::Int(-1)),
            ]);
            let attrs = Attrs::new(schema, attrs).unwrap();
            assert!(crate::ops::create(&attrs).is_ok(), "{op}");
            let k = QuarkFakeQuant::new(&attrs).unwrap();
            outs.push(run(&k, F32, &[2, 64], x.clone()).unwrap());
        }
        assert_eq!(outs.len(), 2);
        assert_eq!(outs[0], outs[1]);
        assert_ne!(outs[0], x, "the fake quant rounds");
    }

    /// The attribute errors name the node's own op type: an `MXFixNeuron` node's said
    /// `MXQuantizeDequantize` (session 25's leftover).
    #[test]
    fn attribute_errors_name_the_spelling_of_the_node() {
        use crate::ops::schema::FOREIGN;
        use graph_rewrites::view::QUARK_MX_OPS;
        for &(domain, op) in QUARK_MX_OPS {
            let schema = FOREIGN
                .iter()
                .find(|s| s.domain == domain && s.name == op)
                .unwrap();
            let build = |pairs: &[(&str, AttrValue)]| {
                let attrs = pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect();
                QuarkFakeQuant::new(&Attrs::new(schema, attrs).unwrap())
            };
            let s = |v: &str| AttrValue::String(v.into());
            let errors = [
                build(&[("element_dtype", s("fp5_e2m2"))]).err(),
                build(&[
                    ("element_dtype", s("int8")),
                    ("rounding_mode", AttrValue::Int(3)),
                ])
                .err(),
                build(&[("block_size", AttrValue::Int(0))]).err(),
                build(&[("axis", AttrValue::Int(5))])
                    .ok()
                    .and_then(|k| run(&k, F32, &[2, 64], vec![0; 2 * 64 * 4]).err()),
                build(&[])
                    .ok()
                    .and_then(|k| run(&k, 7, &[2, 64], vec![0; 2 * 64 * 8]).err()),
            ];
            for e in errors {
                let e = e.expect("an error").to_string();
                let other = QUARK_MX_OPS.iter().find(|&&(_, o)| o != op).unwrap().1;
                assert!(e.contains(op) && !e.contains(other), "{op}: {e}");
            }
        }
    }

    #[test]
    fn the_default_element_type_is_quarks_int8() {
        let attrs = Attrs::new(&QUARK_MX_QDQ, BTreeMap::new()).unwrap();
        let k = QuarkFakeQuant::new(&attrs).unwrap();
        assert_eq!((k.element, k.axis, k.block), (QuarkElement::Int8, 1, 32));
        assert_eq!(k.rounding, IntRounding::HalfAwayFromZero);
    }

    #[test]
    fn rejects_bad_axis_element_type_block_size_rounding_mode_and_dtype() {
        let k = kernel("fp6_e3m2", &[("axis", 3)]).unwrap();
        let err = run(&k, F32, &[2, 32], vec![0; 256]).unwrap_err();
        assert!(err.to_string().contains("axis 3"), "{err}");
        let err = run(&k, 6, &[2, 32], vec![0; 256]).unwrap_err();
        assert!(err.to_string().contains("element type 6"), "{err}");
        let err = kernel("fp4", &[]).err().unwrap().to_string();
        assert!(err.contains("element_dtype \"fp4\""), "{err}");
        let err = kernel("int8", &[("rounding_mode", 7)]).err().unwrap();
        assert!(err.to_string().contains("rounding_mode 7"), "{err}");
        // The mode is INT8's only: Quark ignores it for FP elements.
        assert!(kernel("fp4_e2m1", &[("rounding_mode", 7)]).is_ok());
        let err = kernel("fp8_e5m2", &[("block_size", 0)]).err().unwrap();
        assert!(err.to_string().contains("block_size 0"), "{err}");
    }
}
