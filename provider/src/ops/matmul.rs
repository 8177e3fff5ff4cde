//! `MxMatMul`, with its constant MX weight prepacked into the layout the kernel decodes fastest.
//!
//! The rules keep an MX weight as ONNX stores it (`b [K, N]`, `b_scale [K/32, N]`, the
//! `DequantizeLinear(axis=0)` layout). The kernels decode `[N, K]` rows (`trans_b = 1`) a whole
//! row of K at a time; `[K, N]` in 16-column stripes, 1.1–1.4× slower at M ≤ 16 (BENCHMARKS.md,
//! CPU kernels; a scalar per-element decode when the prepack came in: the step 4–7× slower).
//! When both are session constants, [`MxMatMul::prepack`] stores them transposed once and runs
//! with `trans_b = 1`. The result is exact either way; only the f32 summation order follows the
//! layout, and both ORT paths (EP and custom-op library) prepack alike, so they agree bit for bit.
//! Where the CPU GEMM runs AVX-512 BF16 without AMX (`kernels::fast::cols_layout::wanted`), the
//! constant weight (either `trans_b`) is instead prepacked in 16-column groups for the
//! column-lane kernel (`kernels::ops::mx_matmul_cols`; 1.2-1.4× faster at M = 8, BENCHMARKS.md
//! 2026-12-01 (2)).
//!
//! An MXFP4 weight (`b` FLOAT4E2M1, packed two per byte, same E8M0 scales) is widened at prepack
//! to the E4M3 bytes of the same values ([`widen_fp4_weight`]): every E2M1 value is an E4M3
//! value and MXFP4 has MXFP8's blocks, so from there it is an MXFP8 weight — bit for bit the
//! product of the dequantized FP4 weight. The model file keeps the 4-bit weight; memory holds
//! the 8-bit one (the GEMM decodes E4M3). `trans_b` FP4 weights are stored widened as they are.

use std::mem::MaybeUninit;

use kernels::ops as k;
use kernels::{DType, MxMatMulAttrs};

use super::huge::HugeBytes;
use super::{dims_of, from_dims, out_dims, out_views, required, take, to_dims, view, Kernel};
use crate::error::Result;
use crate::tensor::{Meta, Tensor, TensorMut, TensorRef};

/// An MX weight transposed to `[N, K]` with scales `[N, K/32]`; `Q` holds the weight bytes
/// (the CPU kernels keep them in huge pages, [`HugeBytes`]).
pub(crate) struct PackedB<Q = Vec<u8>> {
    pub q: Q,
    pub scales: Vec<u8>,
    pub q_dims: [usize; 2],
    pub scale_dims: [usize; 2],
}

/// An MX weight in the column-group layout of the column-lane CPU GEMM
/// (`kernels::fast::cols_layout`), for CPUs where that is the fast path.
struct ColsB {
    q: HugeBytes,
    scales: Vec<u8>,
    n: usize,
    k: usize,
}

pub struct MxMatMul {
    attrs: MxMatMulAttrs,
    packed: Option<PackedB<HugeBytes>>,
    cols: Option<ColsB>,
    /// The node has no `a_scale`: a float activation (a weight-only MX GEMM).
    float_a: bool,
}

impl MxMatMul {
    pub fn new(attrs: MxMatMulAttrs) -> Self {
        MxMatMul {
            attrs,
            packed: None,
            cols: None,
            float_a: false,
        }
    }
}

/// The MX weight `b [K, N]` (E4M3) with scales `[K/32, N]` transposed to `[N, K]` /
/// `[N, K/32]`; `None` when they are not such a pair. `transpose_q(src, rows, cols)` transposes
/// the weight bytes into their store (`transpose_bytes` for a `Vec`). Shared with the GPU
/// executor, which uploads the result for its tensor-core GEMM.
pub(crate) fn transpose_mx_weight<Q>(
    b: &TensorRef<'_>,
    bs: &TensorRef<'_>,
    transpose_q: impl FnOnce(&[u8], usize, usize) -> Q,
) -> Option<PackedB<Q>> {
    let e4m3 = DType::E4M3.onnx_code();
    if b.meta.dtype != e4m3 || b.meta.dims.len() != 2 || bs.meta.dims.len() != 2 {
        return None;
    }
    let (kk, n) = (b.meta.dims[0] as usize, b.meta.dims[1] as usize);
    let kb = bs.meta.dims[0] as usize;
    if b.data.len() != kk * n || bs.data.len() != kb * n || bs.meta.dims[1] as usize != n {
        return None; // malformed: left to the kernels' own checks and their messages
    }
    Some(PackedB {
        q: transpose_q(b.data, kk, n),
        scales: transpose_bytes(bs.data, kb, n),
        q_dims: [n, kk],
        scale_dims: [n, kb],
    })
}

/// A FLOAT4E2M1 weight widened to FLOAT8E4M3FN bytes of the same values and shape; `None` when
/// `b` is not FLOAT4E2M1 or its byte length does not fit its dims (left to the kernels' checks).
/// Shared with the GPU executor's weight upload.
pub(crate) fn widen_fp4_weight(b: &TensorRef<'_>) -> Option<Tensor> {
    if b.meta.dtype != DType::E2M1.onnx_code() {
        return None;
    }
    let n = crate::ort_types::element_count(&b.meta.dims).ok()?;
    if b.data.len() != n.div_ceil(2) {
        return None;
    }
    Some(Tensor {
        meta: Meta::new(DType::E4M3.onnx_code(), b.meta.dims.clone()),
        data: kernels::codec::widened_e4m3(b.data, n),
    })
}

/// `src [rows, cols]` (1-byte elements) transposed to `[cols, rows]`.
pub(crate) fn transpose_bytes(src: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut dst = Vec::with_capacity(src.len());
    transpose_into(src, rows, cols, &mut dst.spare_capacity_mut()[..src.len()]);
    // SAFETY: transpose_into wrote all `src.len()` bytes.
    unsafe { dst.set_len(src.len()) };
    dst
}

/// `src [rows, cols]` (1-byte elements) transposed into `dst [cols, rows]`, writing every byte
/// of `dst` (`rows * cols` of them), in 64 × 64 tiles so that both sides stay in cache (element
/// by element, the strided writes made this 11 % of a 4-layer decoder benchmark's time, all of
/// it at session creation).
fn transpose_into(src: &[u8], rows: usize, cols: usize, dst: &mut [MaybeUninit<u8>]) {
    const TILE: usize = 64;
    assert!(src.len() == rows * cols && dst.len() == src.len());
    let mut tile = [[0u8; TILE]; TILE];
    for r0 in (0..rows).step_by(TILE) {
        let h = TILE.min(rows - r0);
        for c0 in (0..cols).step_by(TILE) {
            let w = TILE.min(cols - c0);
            // Transposed into a local tile, then written out as runs of h bytes.
            for (r, line) in src[r0 * cols..].chunks(cols).take(h).enumerate() {
                for (c, &b) in line[c0..c0 + w].iter().enumerate() {
                    tile[c][r] = b;
                }
            }
            for (c, t) in tile.iter().take(w).enumerate() {
                let at = (c0 + c) * rows + r0;
                for (d, &b) in dst[at..at + h].iter_mut().zip(&t[..h]) {
                    d.write(b);
                }
            }
        }
    }
}

/// (N, K, K/32 as stored) of a `trans_b` weight `[N, K]` with scales `[N, K/32]`; `None` when
/// the dims or byte lengths do not fit (left to the kernels' checks).
fn nk_dims(w: &TensorRef<'_>, bs: &TensorRef<'_>) -> Option<(usize, usize, usize)> {
    let (&[n, k], &[sn, kb]) = (&w.meta.dims[..], &bs.meta.dims[..]) else {
        return None;
    };
    let (n, k, sn, kb) = (n as usize, k as usize, sn as usize, kb as usize);
    (sn == n && w.data.len() == n * k && bs.data.len() == n * kb).then_some((n, k, kb))
}

/// A widened `trans_b` weight `[N, K]` with scales `[N, K/32]` kept in that layout; `None` when
/// the dims or byte lengths do not fit (left to the kernels' checks).
fn nk_weight(w: &Tensor, bs: &TensorRef<'_>) -> Option<PackedB<HugeBytes>> {
    let (n, k, kb) = nk_dims(&w.view(), bs)?;
    // SAFETY: the closure writes every byte of the `w.data.len()`-byte destination.
    let q = unsafe {
        HugeBytes::init_with(w.data.len(), |d| {
            for (d, &b) in d.iter_mut().zip(&w.data) {
                d.write(b);
            }
        })
    };
    Some(PackedB {
        q,
        scales: bs.data.to_vec(),
        q_dims: [n, k],
        scale_dims: [n, kb],
    })
}

/// The E4M3 weight `b` (`[K, N]`, or `[N, K]` when `trans_b`) with its scales in the column-group
/// layout; `None` when they are not such a pair (left to the kernels' checks).
fn cols_weight(b: &TensorRef<'_>, bs: &TensorRef<'_>, trans_b: bool) -> Option<ColsB> {
    // `[N, K]` bytes: the weight itself when `trans_b`, else its transposition.
    let transposed;
    let (q, scales, n, k, kb) = if trans_b {
        if b.meta.dtype != DType::E4M3.onnx_code() {
            return None;
        }
        let (n, k, kb) = nk_dims(b, bs)?;
        (b.data, bs.data, n, k, kb)
    } else {
        transposed = transpose_mx_weight(b, bs, transpose_bytes)?;
        let ([n, k], [_, kb]) = (transposed.q_dims, transposed.scale_dims);
        (&transposed.q[..], &transposed.scales[..], n, k, kb)
    };
    if !k.is_multiple_of(32) || kb * 32 != k {
        return None;
    }
    let padded = n.div_ceil(kernels::fast::cols_layout::GROUP) * kernels::fast::cols_layout::GROUP;
    let mut packed_scales = vec![0u8; padded * k / 32];
    // SAFETY: the closure initialises every byte of the `padded·k`-byte destination (zeros,
    // then pack_into writes them all).
    let packed_q = unsafe {
        HugeBytes::init_with(padded * k, |d| {
            d.fill(MaybeUninit::new(0));
            // SAFETY: every byte was just initialised.
            let d = &mut *(d as *mut [MaybeUninit<u8>] as *mut [u8]);
            kernels::fast::cols_layout::pack_into(q, scales, n, k, (d, &mut packed_scales));
        })
    };
    Some(ColsB {
        q: packed_q,
        scales: packed_scales,
        n,
        k,
    })
}

/// The element type of `y`: a float `a`'s type (no `a_scale`: a weight-only MX GEMM), else the
/// float weight's type when `b` is float, else `output_dtype`.
///
/// The rules only emit `MxMatMul`s whose `output_dtype` is the float operand's type (a MatMul's
/// output has its inputs' type), so this is `output_dtype` for every rewritten model. It
/// differs only when ORT's CPU `InsertCastTransformer` moves an "isolated fp16 node" to fp32
/// (f16 inputs cast to f32, Cast back to f16 after `y`): `y` must then follow the float operand
/// or the graph no longer type-checks. The bits are the same: the f32 accumulator rounded once
/// to f16 either way.
fn y_dtype(attrs: &MxMatMulAttrs, a_dtype: i32, b_dtype: i32) -> DType {
    let float = |t: i32| DType::from_onnx_code(t as i64).filter(|t| t.is_float());
    float(a_dtype)
        .or_else(|| float(b_dtype))
        .unwrap_or(attrs.output_dtype)
}

impl Kernel for MxMatMul {
    fn output_metas(&self, inputs: &[Option<&Meta>]) -> Result<Vec<Meta>> {
        let a = required(inputs, 0, "a_q")?;
        let b = required(inputs, 2, "b")?;
        let (ad, a_unknown) = to_dims(&a.dims);
        let (bd, b_unknown) = to_dims(&b.dims);
        let (_, _, _, y) = k::mx_matmul_dims(&ad, &bd, self.attrs.trans_b)?;
        Ok(vec![Meta::new(
            y_dtype(&self.attrs, a.dtype, b.dtype).onnx_code(),
            from_dims(&y, a_unknown || b_unknown),
        )])
    }

    fn inputs_present(&mut self, present: &[bool]) {
        self.float_a = !present.get(1).copied().unwrap_or(false);
    }

    fn prepack_inputs(&self) -> &'static [usize] {
        &[2, 3]
    }

    fn prepack(&mut self, constants: &[Option<TensorRef<'_>>]) -> Result<()> {
        let (Some(Some(b)), Some(Some(bs))) = (constants.get(2), constants.get(3)) else {
            return Ok(());
        };
        let widened = widen_fp4_weight(b);
        let b = widened.as_ref().map_or(*b, Tensor::view);
        // A float `a` runs the `[N, K]` kernels (`kernels::fast::float_a`): the column-group
        // kernel multiplies bf16 A only.
        if kernels::fast::cols_layout::wanted() && !self.float_a {
            self.cols = cols_weight(&b, bs, self.attrs.trans_b);
            if self.cols.is_some() {
                return Ok(());
            }
        }
        if self.attrs.trans_b {
            // Already the fast layout: only an FP4 weight is stored (widened) as it is.
            self.packed = widened.as_ref().and_then(|w| nk_weight(w, bs));
            return Ok(());
        }
        // The weight is transposed straight into its huge-page buffer.
        self.packed = transpose_mx_weight(&b, bs, |src, rows, cols| {
            // SAFETY: transpose_into writes every byte of its `src.len()`-byte destination.
            unsafe { HugeBytes::init_with(src.len(), |d| transpose_into(src, rows, cols, d)) }
        });
        Ok(())
    }

    fn compute(
        &self,
        inputs: &[Option<TensorRef<'_>>],
        outputs: &mut [Option<TensorMut<'_>>],
        par: &dyn kernels::Parallel,
    ) -> Result<()> {
        let a = required(inputs, 0, "a_q")?;
        // No a_scale: a float activation against the MX weight (a weight-only MX GEMM).
        let a_scale = inputs.get(1).copied().flatten();
        let b = required(inputs, 2, "b")?;
        let b_scale = inputs.get(3).copied().flatten();
        let bias = inputs.get(4).copied().flatten();
        let (ad, bd) = (dims_of(a), dims_of(b));
        let asd = a_scale.as_ref().map(dims_of).unwrap_or_default();
        let bsd = b_scale.as_ref().map(dims_of).unwrap_or_default();
        let cd = bias.as_ref().map(dims_of).unwrap_or_default();
        let od = out_dims(outputs);
        let mut outs = out_views(outputs, &od)?;
        let y = take(&mut outs, 0, "y")?;
        let attrs = MxMatMulAttrs {
            output_dtype: y_dtype(&self.attrs, a.meta.dtype, b.meta.dtype),
            ..self.attrs
        };
        let a = view(a, &ad)?;
        let a_scale = a_scale.as_ref().map(|t| view(t, &asd)).transpose()?;
        let bias = bias.as_ref().map(|t| view(t, &cd)).transpose()?;
        if let Some(c) = &self.cols {
            let w = kernels::fast::cols_layout::MxColWeights {
                q: &c.q,
                scales: &c.scales,
                n: c.n,
                k: c.k,
            };
            return Ok(match a_scale {
                Some(s) => k::mx_matmul_cols(a, s, w, bias, y, &attrs, par),
                None => k::mx_matmul_cols_float_a(a, w, bias, y, &attrs, par),
            }?);
        }
        let (b, b_scale, attrs) = match &self.packed {
            Some(p) => (
                k::TensorRef::new(DType::E4M3, &p.q_dims, &p.q)?,
                Some(k::TensorRef::new(DType::E8M0, &p.scale_dims, &p.scales)?),
                MxMatMulAttrs {
                    trans_b: true,
                    ..attrs
                },
            ),
            None => (
                view(b, &bd)?,
                b_scale.as_ref().map(|t| view(t, &bsd)).transpose()?,
                attrs,
            ),
        };
        Ok(match a_scale {
            Some(s) => k::mx_matmul(a, s, b, b_scale, bias, y, &attrs, par),
            None => k::mx_matmul_float_a(a, b, b_scale, bias, y, &attrs, par),
        }?)
    }
}

#[cfg(test)]
mod tests {
    use kernels::Serial;

    use super::*;

    impl MxMatMul {
        /// Whether the constant weight was prepacked (either layout).
        fn prepacked(&self) -> bool {
            self.packed.is_some() || self.cols.is_some()
        }
    }

    #[test]
    fn tiled_transpose_equals_the_definition() {
        for (rows, cols) in [(1, 1), (3, 200), (64, 64), (70, 130), (129, 65)] {
            let src: Vec<u8> = (0..rows * cols).map(|i| (i * 7 % 251) as u8).collect();
            let t = transpose_bytes(&src, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        t[c * rows + r],
                        src[r * cols + c],
                        "{rows}x{cols} at {r},{c}"
                    );
                }
            }
        }
    }
    fn tensor(dtype: DType, dims: &[i64], data: Vec<u8>) -> Tensor {
        Tensor {
            meta: Meta::new(dtype.onnx_code(), dims.to_vec()),
            data,
        }
    }

    #[test]
    fn prepacked_weight_gives_the_same_values_as_the_stored_layout() {
        let (m, kk, n) = (3usize, 64usize, 5usize);
        let a = tensor(
            DType::E4M3,
            &[m as i64, kk as i64],
            (0..m * kk).map(|i| (i * 29 % 0x70) as u8).collect(),
        );
        let a_s = tensor(
            DType::E8M0,
            &[m as i64, 2],
            vec![127, 128, 126, 127, 129, 127],
        );
        let b = tensor(
            DType::E4M3,
            &[kk as i64, n as i64],
            (0..kk * n)
                .map(|i| (i * 53 % 0x7e) as u8 | ((i as u8 & 1) << 7))
                .collect(),
        );
        let b_s = tensor(
            DType::E8M0,
            &[2, n as i64],
            (0..2 * n).map(|i| 120 + i as u8).collect(),
        );
        let inputs = [
            Some(a.view()),
            Some(a_s.view()),
            Some(b.view()),
            Some(b_s.view()),
        ];
        let run = |kernel: &MxMatMul| {
            let mut y = Tensor::zeros(Meta::new(1, vec![m as i64, n as i64])).unwrap();
            kernel
                .compute(&inputs, &mut [Some(y.view_mut())], &Serial)
                .unwrap();
            y.data
        };
        let plain = MxMatMul::new(MxMatMulAttrs::default());
        let mut packed = MxMatMul::new(MxMatMulAttrs::default());
        packed
            .prepack(&[None, None, Some(b.view()), Some(b_s.view())])
            .unwrap();
        assert!(packed.prepacked());
        let to_f32 = |d: Vec<u8>| {
            d.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect::<Vec<_>>()
        };
        let (p, q) = (to_f32(run(&plain)), to_f32(run(&packed)));
        for (x, y) in p.iter().zip(&q) {
            // Same products, possibly summed in another order: equal to f32 rounding.
            assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{x} vs {y}");
        }
    }

    /// The bias input (slot 4) and alpha / beta reach the kernel on both the stored-layout and
    /// the prepacked path: each output is `fl(alpha · acc) + fl(beta · c)` of that path's own
    /// plain product, bit for bit; a bias of another type is an error.
    #[test]
    fn bias_and_scales_reach_both_paths() {
        let (m, kk, n) = (2usize, 64usize, 3usize);
        let a = tensor(
            DType::E4M3,
            &[m as i64, kk as i64],
            (0..m * kk).map(|i| (i * 37 % 0x70) as u8).collect(),
        );
        let a_s = tensor(DType::E8M0, &[m as i64, 2], vec![127, 126, 128, 127]);
        let b = tensor(
            DType::E4M3,
            &[kk as i64, n as i64],
            (0..kk * n).map(|i| (i * 11 % 0x60) as u8).collect(),
        );
        let b_s = tensor(
            DType::E8M0,
            &[2, n as i64],
            vec![125, 126, 127, 128, 129, 127],
        );
        let cv = [0.5f32, -1.25, 3.0];
        let c = tensor(
            DType::F32,
            &[n as i64],
            cv.iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        let to_f32 = |d: Vec<u8>| {
            d.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect::<Vec<_>>()
        };
        let run = |kernel: &MxMatMul, bias: Option<&Tensor>| {
            let inputs = [
                Some(a.view()),
                Some(a_s.view()),
                Some(b.view()),
                Some(b_s.view()),
                bias.map(Tensor::view),
            ];
            let mut y = Tensor::zeros(Meta::new(1, vec![m as i64, n as i64])).unwrap();
            kernel
                .compute(&inputs, &mut [Some(y.view_mut())], &Serial)
                .map(|_| to_f32(y.data))
        };
        let attrs = MxMatMulAttrs {
            alpha: 0.5,
            beta: 2.0,
            ..Default::default()
        };
        for prepacked in [false, true] {
            let (mut plain, mut biased) = (
                MxMatMul::new(MxMatMulAttrs::default()),
                MxMatMul::new(attrs),
            );
            if prepacked {
                let consts = [None, None, Some(b.view()), Some(b_s.view())];
                plain.prepack(&consts).unwrap();
                biased.prepack(&consts).unwrap();
            }
            let acc = run(&plain, None).unwrap();
            let y = run(&biased, Some(&c)).unwrap();
            for (i, (y, acc)) in y.iter().zip(&acc).enumerate() {
                assert_eq!(y.to_bits(), (0.5 * acc + 2.0 * cv[i % n]).to_bits(), "{i}");
            }
            let c16 = tensor(DType::F16, &[n as i64], vec![0; 2 * n]);
            let err = run(&biased, Some(&c16)).unwrap_err();
            assert!(err.to_string().contains("bias"), "{err}");
        }
    }

    /// An MXFP4 weight (packed two per byte) gives the bits of the MXFP8 weight of the same
    /// values, prepacked (both layouts) or not (the kernels widen it per call).
    #[test]
    fn fp4_weight_runs_as_its_widened_fp8_weight() {
        let (m, kk, n) = (2usize, 64usize, 3usize);
        let a = tensor(
            DType::E4M3,
            &[m as i64, kk as i64],
            (0..m * kk).map(|i| (i * 29 % 0x70) as u8).collect(),
        );
        let a_s = tensor(DType::E8M0, &[m as i64, 2], vec![127, 128, 126, 127]);
        let codes: Vec<u8> = (0..kk * n).map(|i| (i * 7 % 16) as u8).collect();
        let packed: Vec<u8> = codes.chunks(2).map(|p| p[0] | (p[1] << 4)).collect();
        let wide: Vec<u8> = codes
            .iter()
            .map(|&c| kernels::codec::e2m1_to_e4m3(c))
            .collect();
        let s_vals: Vec<u8> = (0..2 * n).map(|i| 124 + i as u8).collect();
        for trans_b in [false, true] {
            let dims = if trans_b {
                [n as i64, kk as i64]
            } else {
                [kk as i64, n as i64]
            };
            let sdims = if trans_b {
                [n as i64, 2]
            } else {
                [2, n as i64]
            };
            let b4 = tensor(DType::E2M1, &dims, packed.clone());
            let b8 = tensor(DType::E4M3, &dims, wide.clone());
            let bs = tensor(DType::E8M0, &sdims, s_vals.clone());
            let attrs = MxMatMulAttrs {
                trans_b,
                ..Default::default()
            };
            let run = |kernel: &MxMatMul, b: &Tensor| {
                let inputs = [
                    Some(a.view()),
                    Some(a_s.view()),
                    Some(b.view()),
                    Some(bs.view()),
                ];
                let mut y = Tensor::zeros(Meta::new(1, vec![m as i64, n as i64])).unwrap();
                kernel
                    .compute(&inputs, &mut [Some(y.view_mut())], &Serial)
                    .unwrap();
                y.data
            };
            let mut fp8 = MxMatMul::new(attrs);
            fp8.prepack(&[None, None, Some(b8.view()), Some(bs.view())])
                .unwrap();
            let mut fp4 = MxMatMul::new(attrs);
            fp4.prepack(&[None, None, Some(b4.view()), Some(bs.view())])
                .unwrap();
            assert!(fp4.prepacked(), "trans_b {trans_b}");
            let want = run(&fp8, &b8);
            assert_eq!(run(&fp4, &b4), want, "prepacked, trans_b {trans_b}");
            let plain = MxMatMul::new(attrs);
            // Not prepacked: same layout as the prepacked FP8 one only for trans_b (the f32
            // sum order follows the layout), so compare with the unpacked FP8 weight.
            assert_eq!(
                run(&plain, &b4),
                run(&plain, &b8),
                "plain, trans_b {trans_b}"
            );
        }
    }

    /// A float `a` without `a_scale` (a weight-only MX GEMM): prepacked `[N, K]` (never column
    /// groups) or not, the output follows `a`'s type and the values are `Σ a · deq(b)`; an E4M3
    /// `a` without its scale is an error, not a panic.
    #[test]
    fn float_a_without_a_scale_runs_the_weight_only_gemm() {
        let (m, kk, n) = (2usize, 64usize, 20usize);
        let av: Vec<f32> = (0..m * kk).map(|i| (i as f32 * 0.37).sin()).collect();
        let a = tensor(
            DType::F32,
            &[m as i64, kk as i64],
            av.iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        let bq: Vec<u8> = (0..kk * n).map(|i| (i * 53 % 0x7e) as u8).collect();
        let b = tensor(DType::E4M3, &[kk as i64, n as i64], bq.clone());
        let bsv: Vec<u8> = (0..2 * n).map(|i| 120 + (i % 5) as u8).collect();
        let bs = tensor(DType::E8M0, &[2, n as i64], bsv.clone());
        let want: Vec<f32> = (0..m * n)
            .map(|i| {
                let (r, c) = (i / n, i % n);
                (0..kk)
                    .map(|k| {
                        f64::from(av[r * kk + k])
                            * f64::from(
                                kernels::codec::e4m3_to_f32(bq[k * n + c])
                                    * kernels::codec::e8m0_to_f32(bsv[(k / 32) * n + c]),
                            )
                    })
                    .sum::<f64>() as f32
            })
            .collect();
        let inputs = [Some(a.view()), None, Some(b.view()), Some(bs.view())];
        for prepacked in [false, true] {
            let mut kernel = MxMatMul::new(MxMatMulAttrs::default());
            kernel.inputs_present(&[true, false, true, true]);
            if prepacked {
                kernel
                    .prepack(&[None, None, Some(b.view()), Some(bs.view())])
                    .unwrap();
                assert!(kernel.packed.is_some() && kernel.cols.is_none());
            }
            let metas = kernel
                .output_metas(&[Some(&a.meta), None, Some(&b.meta), Some(&bs.meta)])
                .unwrap();
            assert_eq!(metas[0].dtype, DType::F32.onnx_code());
            let mut y = Tensor::zeros(Meta::new(1, vec![m as i64, n as i64])).unwrap();
            kernel
                .compute(&inputs, &mut [Some(y.view_mut())], &Serial)
                .unwrap();
            let got: Vec<f32> = y
                .data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
        // f16 a: y is float16 whatever output_dtype says (ORT's cast insertion moves the node).
        let a16 = tensor(DType::F16, &[m as i64, kk as i64], vec![0; m * kk * 2]);
        let kernel = MxMatMul::new(MxMatMulAttrs::default());
        let metas = kernel
            .output_metas(&[Some(&a16.meta), None, Some(&b.meta), Some(&bs.meta)])
            .unwrap();
        assert_eq!(metas[0].dtype, DType::F16.onnx_code());
        // An E4M3 a needs its scale.
        let a8 = tensor(DType::E4M3, &[m as i64, kk as i64], vec![0x38; m * kk]);
        let mut y = Tensor::zeros(Meta::new(1, vec![m as i64, n as i64])).unwrap();
        let err = kernel
            .compute(
                &[Some(a8.view()), None, Some(b.view()), Some(bs.view())],
                &mut [Some(y.view_mut())],
                &Serial,
            )
            .unwrap_err();
        assert!(err.to_string().contains("a_scale"), "{err}");
    }

    #[test]
    fn float_weights_and_runtime_weights_are_not_prepacked() {
        let mut k = MxMatMul::new(MxMatMulAttrs::default());
        let b = tensor(DType::F32, &[32, 2], vec![0; 32 * 2 * 4]);
        k.prepack(&[None, None, Some(b.view()), None]).unwrap();
        assert!(!k.prepacked());
    }
}
