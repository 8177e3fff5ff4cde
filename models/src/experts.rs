//! Stacked MoE experts as transformers' `batched_mm` experts export them (torch dynamo): every
//! expert's MX weight in one `[E, ., .]` initializer pair behind a `DequantizeLinear`, selected
//! per token by `Gather(·, expert_ids)` and multiplied by a bmm. What rule `mx_gather_dequant`
//! takes (`MxGatherMatMul`, `MxGatherDequantize`).

use graph_rewrites::onnx_pb::tensor_proto::DataType;

use crate::builder::{attr_i, elem_of, GraphBuilder, Payload, Tensor};
use crate::config::{DType, WeightForm, MX_BLOCK};
use crate::data::{mx_quantize_axis0, mxfp4_quantize_axis0};

/// The `[rows, cols]` row-major matrix `m` transposed.
fn transpose<T: Copy>(m: &[T], rows: usize, cols: usize) -> Vec<T> {
    (0..rows * cols)
        .map(|i| m[(i % rows) * cols + i / rows])
        .collect()
}

/// FLOAT4E2M1 bytes (two codes a byte, low nibble first) as one code a byte, and back.
fn unpack_fp4(p: &[u8]) -> Vec<u8> {
    p.iter().flat_map(|b| [b & 15, b >> 4]).collect()
}
fn pack_fp4(codes: &[u8]) -> Vec<u8> {
    codes.chunks(2).map(|c| c[0] | (c[1] << 4)).collect()
}

/// `e` random experts of `[k, n]` (weight second: `[E, K, N]`, blocked along axis 1) or `[n,
/// k]` (`weight_first`: `[E, N, K]`, blocked along axis 2), MXFP8 (`StdMx`) or MXFP4
/// (`StdMxfp4`), quantized by the OCP floor rule: the stacked `DequantizeLinear` output of
/// `dtype`. `None` for another form or `k` not a multiple of 32.
#[allow(clippy::too_many_arguments)]
pub fn stacked_mx_experts(
    b: &mut GraphBuilder,
    dtype: DType,
    form: WeightForm,
    name: &str,
    (e, k, n): (usize, usize, usize),
    weight_first: bool,
) -> Option<Tensor> {
    let fp4 = match form {
        WeightForm::StdMx => false,
        WeightForm::StdMxfp4 => true,
        _ => return None,
    };
    if k == 0 || !k.is_multiple_of(MX_BLOCK) {
        return None;
    }
    let std = 1.0 / (k as f32).sqrt();
    let mut rng = b.weight_rng(name);
    let (mut q, mut s) = (Vec::new(), Vec::new());
    for _ in 0..e {
        let w = rng.normals(k * n, 0.0, std);
        let (mut eq, mut es) = if fp4 {
            let (p, s) = mxfp4_quantize_axis0(&w, k, n, MX_BLOCK);
            (unpack_fp4(&p), s)
        } else {
            mx_quantize_axis0(&w, k, n, MX_BLOCK)
        };
        if weight_first {
            eq = transpose(&eq, k, n);
            es = transpose(&es, k / MX_BLOCK, n);
        }
        q.extend(if fp4 { pack_fp4(&eq) } else { eq });
        s.extend(es);
    }
    let (dims, sdims, axis) = if weight_first {
        ([e, n, k], [e, n, k / MX_BLOCK], 2)
    } else {
        ([e, k, n], [e, k / MX_BLOCK, n], 1)
    };
    let elem = if fp4 {
        DataType::Float4e2m1
    } else {
        DataType::Float8e4m3fn
    } as i32;
    b.require_opset("", 24);
    let q = b.add_initializer(&format!("{name}.q"), elem, &dims, Payload::Bytes(q));
    let s = b.add_initializer(
        &format!("{name}.e8m0"),
        DataType::Float8e8m0 as i32,
        &sdims,
        Payload::Bytes(s),
    );
    Some(b.op_attrs(
        "DequantizeLinear",
        &[&q.name, &s.name],
        &format!("{name}.dq"),
        elem_of(dtype),
        dims.iter().map(|&d| d.into()).collect(),
        vec![
            attr_i("axis", axis),
            attr_i("block_size", MX_BLOCK as i64),
            attr_i("output_dtype", i64::from(elem_of(dtype))),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_and_fp4_packing_round_trip() {
        let m: Vec<u8> = (0..12).collect();
        assert_eq!(transpose(&transpose(&m, 3, 4), 4, 3), m);
        assert_eq!(transpose(&m, 3, 4)[..4], [0, 4, 8, 1]);
        let codes: Vec<u8> = (0..16).collect();
        assert_eq!(unpack_fp4(&pack_fp4(&codes)), codes);
    }

    #[test]
    fn stacked_experts_have_the_blocked_layout_of_their_order() {
        let mut b = GraphBuilder::new(1, false);
        let t = stacked_mx_experts(&mut b, DType::F32, WeightForm::StdMx, "w", (3, 64, 8), true)
            .expect("built");
        assert_eq!(t.shape.len(), 3);
        assert!(
            stacked_mx_experts(&mut b, DType::F32, WeightForm::Float, "v", (3, 64, 8), true)
                .is_none()
        );
        assert!(
            stacked_mx_experts(&mut b, DType::F32, WeightForm::StdMx, "v", (3, 40, 8), true)
                .is_none()
        );
    }
}
