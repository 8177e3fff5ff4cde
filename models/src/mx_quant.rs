//! MXFP8 activation quantization in front of MatMuls, in each [`QuantSpelling`], and the MatMul
//! weights in each [`WeightForm`].

use std::cell::RefCell;
use std::rc::Rc;

use graph_rewrites::onnx_pb::tensor_proto::DataType;

use crate::builder::{attr_i, attr_s, elem_of, Dim, GraphBuilder, Payload, Tensor};
use crate::config::{DType, QuantSpelling, WeightForm, MX_BLOCK};
use crate::data::{mx_quantize_axis0, mxfp4_quantize_axis0, Rng};

/// Domain of AMD Quark's ONNX custom ops.
pub const QUARK_DOMAIN: &str = "com.amd.quark";
const E4M3: i32 = DataType::Float8e4m3fn as i32;
const E8M0: i32 = DataType::Float8e8m0 as i32;
const E2M1: i32 = DataType::Float4e2m1 as i32;

/// `com.amd.quark::MXQuantizeDequantize` of `x` along `axis` (MXFP8 E4M3, block 32, RNE).
fn quark_qdq(b: &mut GraphBuilder, x: &Tensor, axis: i64, out: &str) -> Tensor {
    b.require_opset(QUARK_DOMAIN, 1);
    let attrs = vec![
        attr_i("axis", axis),
        attr_i("block_size", MX_BLOCK as i64),
        attr_s("element_dtype", "fp8_e4m3"),
        attr_i("rounding_mode", 2),
    ];
    let mut o = b.node(
        "MXQuantizeDequantize",
        QUARK_DOMAIN,
        &[&x.name],
        &[(out, x.elem, x.shape.clone())],
        attrs,
    );
    o.remove(0)
}

/// Quantize-dequantizes the activation `x` (`[..., K]`, K a fixed multiple of 32) and returns the
/// tensor the consumer MatMuls read; with [`QuantSpelling::None`] that is `x` itself, and so it is
/// when K is not a fixed multiple of 32 (no MX block layout exists; [`crate::DecoderConfig::validate`]
/// rules such shapes out for the decoder builders).
///
/// Standard spellings: `Reshape[0,0,K/32,32] → Abs → ReduceMax(-1) → [Cast(float)] →
/// Mul(2^-8) | Mul(1/448) | Div(448) → Cast(FLOAT8E8M0, round_mode) → QuantizeLinear →
/// DequantizeLinear`. For f16/bf16 the block amax is cast to float first (exact: it is one of the
/// inputs) so the scale arithmetic is the fp32 arithmetic docs/ops.md defines for both rules.
pub fn quantize_activation(
    b: &mut GraphBuilder,
    dtype: DType,
    quant: QuantSpelling,
    x: &Tensor,
    prefix: &str,
) -> Tensor {
    let k = match x.last_dim() {
        Some(k) if k > 0 && k.is_multiple_of(MX_BLOCK) => k,
        _ => return x.clone(),
    };
    let (mul_const, round_mode) = match quant {
        QuantSpelling::None => return x.clone(),
        QuantSpelling::Quark => return quark_qdq(b, x, -1, &format!("{prefix}.qdq")),
        QuantSpelling::StdFloor => (Some((-8f32).exp2()), "down"),
        QuantSpelling::StdRceilMul => (Some(1.0 / 448.0), "up"),
        QuantSpelling::StdRceilDiv => (None, "up"),
    };
    b.require_opset("", 24);
    let f32e = DataType::Float as i32;
    let blocks = k / MX_BLOCK;
    let mut block_shape = x.with_last(blocks);
    block_shape.push(Dim::Fixed(MX_BLOCK));
    let lead = vec![0i64; x.shape.len() - 1];
    let shape_c = b.const_i64(
        &format!("{prefix}.block_shape"),
        &[lead.as_slice(), &[blocks as i64, MX_BLOCK as i64]].concat(),
    );
    let xb = b.op(
        "Reshape",
        &[&x.name, &shape_c.name],
        &format!("{prefix}.blocks"),
        x.elem,
        block_shape.clone(),
    );
    let ab = b.op(
        "Abs",
        &[&xb.name],
        &format!("{prefix}.abs"),
        x.elem,
        block_shape,
    );
    let axes = b.const_i64(&format!("{prefix}.last_axis"), &[-1]);
    let scale_shape = x.with_last(blocks);
    let mut amax = b.op_attrs(
        "ReduceMax",
        &[&ab.name, &axes.name],
        &format!("{prefix}.amax"),
        x.elem,
        scale_shape.clone(),
        vec![attr_i("keepdims", 0)],
    );
    if dtype != DType::F32 {
        amax = b.op_attrs(
            "Cast",
            &[&amax.name],
            &format!("{prefix}.amax_f32"),
            f32e,
            scale_shape.clone(),
            vec![attr_i("to", 1)],
        );
    }
    let scaled = match mul_const {
        Some(c) => {
            let c = b.scalar(&format!("{prefix}.scale_mul"), DType::F32, c);
            b.op(
                "Mul",
                &[&amax.name, &c.name],
                &format!("{prefix}.amax_scaled"),
                f32e,
                scale_shape.clone(),
            )
        }
        None => {
            let c = b.scalar(&format!("{prefix}.e4m3_max"), DType::F32, 448.0);
            b.op(
                "Div",
                &[&amax.name, &c.name],
                &format!("{prefix}.amax_scaled"),
                f32e,
                scale_shape.clone(),
            )
        }
    };
    let scale = b.op_attrs(
        "Cast",
        &[&scaled.name],
        &format!("{prefix}.scale"),
        E8M0,
        scale_shape,
        vec![
            attr_i("to", E8M0 as i64),
            attr_s("round_mode", round_mode),
            attr_i("saturate", 1),
        ],
    );
    let q = b.op_attrs(
        "QuantizeLinear",
        &[&x.name, &scale.name],
        &format!("{prefix}.q"),
        E4M3,
        x.shape.clone(),
        vec![
            attr_i("axis", -1),
            attr_i("block_size", MX_BLOCK as i64),
            attr_i("output_dtype", E4M3 as i64),
            attr_i("saturate", 1),
        ],
    );
    b.op_attrs(
        "DequantizeLinear",
        &[&q.name, &scale.name],
        &format!("{prefix}.dq"),
        x.elem,
        x.shape.clone(),
        vec![
            attr_i("axis", -1),
            attr_i("block_size", MX_BLOCK as i64),
            attr_i("output_dtype", i64::from(x.elem)),
        ],
    )
}

/// The `[k, n]` weight of a MatMul named `name`, as the tensor the MatMul reads.
pub fn matmul_weight(
    b: &mut GraphBuilder,
    dtype: DType,
    form: WeightForm,
    name: &str,
    k: usize,
    n: usize,
) -> Tensor {
    // Kaiming-like spread keeps activations O(1) through the stack.
    let std = 1.0 / (k as f32).sqrt();
    match form {
        WeightForm::Float => b.random_weight(name, dtype, &[k, n], 0.0, std),
        WeightForm::Quark => {
            let w = b.random_weight(name, dtype, &[k, n], 0.0, std);
            quark_qdq(b, &w, 0, &format!("{name}.qdq"))
        }
        WeightForm::StdMx => {
            let (q, s) = if b.fake_weights() {
                (Payload::Zeros(k * n), Payload::Zeros(k / MX_BLOCK * n))
            } else {
                lazy_mx_pair(b.weight_rng(name), k, n, std, Elements::E4M3)
            };
            mx_dequantized_weight(b, dtype, name, k, n, (q, Elements::E4M3), s)
        }
        WeightForm::StdMxfp4 => {
            let (q, s) = if b.fake_weights() {
                (Payload::Zeros(k * n / 2), Payload::Zeros(k / MX_BLOCK * n))
            } else {
                lazy_mx_pair(b.weight_rng(name), k, n, std, Elements::E2M1)
            };
            mx_dequantized_weight(b, dtype, name, k, n, (q, Elements::E2M1), s)
        }
    }
}

/// The element format of a standard MX weight.
#[derive(Clone, Copy)]
enum Elements {
    /// MXFP8: one FLOAT8E4M3FN byte per value.
    E4M3,
    /// MXFP4: FLOAT4E2M1, two values per byte.
    E2M1,
}

impl Elements {
    fn onnx(self) -> i32 {
        match self {
            Elements::E4M3 => E4M3,
            Elements::E2M1 => E2M1,
        }
    }

    /// Suffix of the values initializer's name.
    fn suffix(self) -> &'static str {
        match self {
            Elements::E4M3 => "e4m3",
            Elements::E2M1 => "e2m1",
        }
    }

    /// Bytes of `len` values.
    fn bytes(self, len: usize) -> usize {
        match self {
            Elements::E4M3 => len,
            Elements::E2M1 => len.div_ceil(2),
        }
    }

    /// Quantizes a row-major `[k, n]` weight along axis 0: (values, E8M0 scales).
    fn quantize(self, w: &[f32], k: usize, n: usize) -> (Vec<u8>, Vec<u8>) {
        match self {
            Elements::E4M3 => mx_quantize_axis0(w, k, n, MX_BLOCK),
            Elements::E2M1 => mxfp4_quantize_axis0(w, k, n, MX_BLOCK),
        }
    }
}

/// A standard-MX weight from given `[k, n]` row-major values (`k` a multiple of 32): quantized by
/// the OCP floor rule along K to E4M3 + E8M0 initializers, returned as their `DequantizeLinear`.
/// Returns `None` when `w.len() != k * n` or `k` is not a multiple of 32.
pub fn mx_weight_from_values(
    b: &mut GraphBuilder,
    dtype: DType,
    name: &str,
    w: &[f32],
    k: usize,
    n: usize,
) -> Option<Tensor> {
    if w.len() != k * n || k == 0 || !k.is_multiple_of(MX_BLOCK) {
        return None;
    }
    let (q, s) = mx_quantize_axis0(w, k, n, MX_BLOCK);
    Some(mx_dequantized_weight(
        b,
        dtype,
        name,
        k,
        n,
        (Payload::Bytes(q), Elements::E4M3),
        Payload::Bytes(s),
    ))
}

/// `DequantizeLinear(name.e4m3|e2m1 [k,n], name.e8m0 [k/32,n], axis=0, block_size=32,
/// output_dtype=T)`.
fn mx_dequantized_weight(
    b: &mut GraphBuilder,
    dtype: DType,
    name: &str,
    k: usize,
    n: usize,
    (q, elems): (Payload, Elements),
    s: Payload,
) -> Tensor {
    b.require_opset("", 24);
    let q = b.add_initializer(
        &format!("{name}.{}", elems.suffix()),
        elems.onnx(),
        &[k, n],
        q,
    );
    let s = b.add_initializer(&format!("{name}.e8m0"), E8M0, &[k / MX_BLOCK, n], s);
    b.op_attrs(
        "DequantizeLinear",
        &[&q.name, &s.name],
        &format!("{name}.dq"),
        elem_of(dtype),
        vec![k.into(), n.into()],
        vec![
            attr_i("axis", 0),
            attr_i("block_size", MX_BLOCK as i64),
            attr_i("output_dtype", i64::from(elem_of(dtype))),
        ],
    )
}

/// Lazy payloads of the E4M3 / E2M1 values and E8M0 scales of one random `[k, n]` weight. Quantizing
/// makes both at once: whichever is written first leaves the other in a one-slot cache (the
/// writer places the pair back to back), so the weight is generated once and never kept.
fn lazy_mx_pair(rng: Rng, k: usize, n: usize, std: f32, elems: Elements) -> (Payload, Payload) {
    type Slot = Rc<RefCell<Option<Vec<u8>>>>;
    let make = move || elems.quantize(&rng.clone().normals(k * n, 0.0, std), k, n);
    let make: Rc<dyn Fn() -> (Vec<u8>, Vec<u8>)> = Rc::new(make);
    let (q_slot, s_slot): (Slot, Slot) = Default::default();
    let (mk, qs, ss) = (make.clone(), q_slot.clone(), s_slot.clone());
    let q = move || {
        qs.borrow_mut().take().unwrap_or_else(|| {
            let (q, s) = mk();
            *ss.borrow_mut() = Some(s);
            q
        })
    };
    let s = move || {
        s_slot.borrow_mut().take().unwrap_or_else(|| {
            let (q, s) = make();
            *q_slot.borrow_mut() = Some(q);
            s
        })
    };
    (
        Payload::Lazy {
            len: elems.bytes(k * n),
            make: Rc::new(q),
        },
        Payload::Lazy {
            len: k / MX_BLOCK * n,
            make: Rc::new(s),
        },
    )
}

/// `MatMul(a, w)` with `w` `[k, n]`: output shape is `a`'s with the last dim `n`.
pub fn matmul(b: &mut GraphBuilder, a: &Tensor, w: &Tensor, n: usize, out: &str) -> Tensor {
    b.op("MatMul", &[&a.name, &w.name], out, a.elem, a.with_last(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::e4m3_encode;
    use crate::external::into_inline;

    #[test]
    fn mx_weight_from_values_stores_ocp_blocks_and_rejects_bad_shapes() {
        let mut b = GraphBuilder::new(0, false);
        let (k, n) = (64, 2);
        let w: Vec<f32> = (0..k * n)
            .map(|i| if i % n == 0 { 1.0 } else { 4.0 })
            .collect();
        let dq = mx_weight_from_values(&mut b, DType::F16, "w", &w, k, n).expect("valid weight");
        assert_eq!(dq.shape, vec![Dim::Fixed(64), Dim::Fixed(2)]);
        assert!(mx_weight_from_values(&mut b, DType::F16, "bad", &w, 63, n).is_none());
        assert!(mx_weight_from_values(&mut b, DType::F16, "bad", &w[1..], k, n).is_none());
        let g = into_inline(b.finish("g", "")).graph.expect("graph");
        let raw = |name: &str| {
            let t = g
                .initializer
                .iter()
                .find(|t| t.name.as_deref() == Some(name));
            t.and_then(|t| t.raw_data.clone()).expect("initializer")
        };
        assert_eq!(raw("w.e8m0"), vec![119, 121, 119, 121]);
        assert!(raw("w.e4m3").iter().all(|&c| c == e4m3_encode(256.0)));
        assert_eq!(g.node.len(), 1, "one DequantizeLinear");
    }
}
