//! Per-op type and shape rules: what each supported op's outputs are, given what is known about
//! its inputs, attributes and small constant inputs. Ops not listed here get nothing.
//!
//! Each rule returns one [`TensorInfo`] per output slot it knows about (possibly partial:
//! `elem_type` 0 or `shape: None`); the caller merges them into the graph's values.

use super::node::{info, IntList, Node};
use super::shape::{self, known, norm_axes, norm_axis};
use super::{control_flow, einsum, layout, linear_attention, resize};
use crate::pattern::predicates::{dtype, scalar_f64};
use crate::view::{
    is_quark_mx, AttrValue, Dim, GraphView, TensorInfo, MS_DOMAIN, MXFUSE_DOMAIN, TRT_DOMAIN,
};

const UINT8: i32 = 2;
pub(super) const BOOL: i32 = 9;

/// The MX block length (docs/ops.md): scales have `K / 32` entries along the last axis.
const MX_BLOCK: i64 = 32;

/// Types of the outputs of node `c` (see the module docs).
pub(super) fn infer_node(c: &Node) -> Vec<TensorInfo> {
    let op = c.g.op_type(c.n);
    // Quark's MX fake quantize (any spelling): float in, same float out.
    if is_quark_mx(c.g, c.n) {
        return c.same(0);
    }
    match c.g.domain(c.n) {
        "" => onnx_op(c, op),
        MS_DOMAIN => ms_op(c, op),
        MXFUSE_DOMAIN => mxfuse_op(c, op),
        TRT_DOMAIN => trt_op(c, op),
        _ => Vec::new(),
    }
}

/// TensorRT's MXFP8 ops (ModelOpt exports, docs/ops.md): the quantizer writes E4M3 values
/// (`output_dtype`, 17 by its schema) and uint8 E8M0 scales, `[..., K/32]` along the last axis
/// (its default and the only axis inferred here); the dequantizer writes `output_dtype`.
fn trt_op(c: &Node, op: &str) -> Vec<TensorInfo> {
    match op {
        "TRT_MXFP8DynamicQuantize" => {
            let last = matches!(c.int("axis", -1), Some(-1));
            let [_, mut scale] = mx_outputs(c.shape(0).filter(|_| last));
            scale.elem_type = UINT8;
            let q_type = c.int("output_dtype", 0).unwrap_or(0);
            vec![info(i32::try_from(q_type).unwrap_or(0), c.shape(0)), scale]
        }
        "TRT_MXFP8DequantizeLinear" => {
            let out = c.int("output_dtype", 0).unwrap_or(0);
            vec![info(i32::try_from(out).unwrap_or(0), c.shape(0))]
        }
        _ => Vec::new(),
    }
}

/// Target-shape element values as dims: negative numbers are not sizes.
fn dims_of_values(values: Vec<Dim>) -> Vec<Dim> {
    values
        .into_iter()
        .map(|d| match d {
            Dim::Known(v) if v < 0 => Dim::Unknown,
            d => d,
        })
        .collect()
}

fn onnx_op(c: &Node, op: &str) -> Vec<TensorInfo> {
    match op {
        "Identity"
        | "Abs"
        | "Neg"
        | "Relu"
        | "Sigmoid"
        | "Tanh"
        | "Erf"
        | "Exp"
        | "Log"
        | "Sqrt"
        | "Reciprocal"
        | "Sin"
        | "Cos"
        | "Floor"
        | "Ceil"
        | "Round"
        | "Sign"
        | "Not"
        | "Gelu"
        | "Softplus"
        | "Softsign"
        | "LeakyRelu"
        | "Elu"
        | "Selu"
        | "HardSigmoid"
        | "Clip"
        | "Softmax"
        | "LogSoftmax"
        | "CumSum"
        | "Swish"
        | "RMSNormalization"
        | "HardSwish"
        | "Mish"
        | "Celu"
        | "ThresholdedRelu"
        | "Shrink"
        | "Tan"
        | "Trilu"
        | "Asin"
        | "Acos"
        | "Atan"
        | "Sinh"
        | "Cosh"
        | "Asinh"
        | "Acosh"
        | "Atanh"
        | "BitwiseNot"
        | "Hardmax"
        | "CumProd"
        | "LpNormalization"
        | "MeanVarianceNormalization"
        | "InstanceNormalization"
        | "GroupNormalization"
        | "RotaryEmbedding"
        // Opset 24: a KV-cache update in place; the present cache is the past one's type.
        | "TensorScatter" => c.same(0),
        "Attention" => attention(c),
        "IsNaN" | "IsInf" => vec![info(BOOL, c.shape(0))],
        "Dropout" => vec![c.info(0), info(BOOL, c.shape(0))],
        // The exponent of Pow may have another type than the base.
        "Pow" => elementwise(c, c.elem(0)),
        "Add" | "Sub" | "Mul" | "Div" | "Mod" | "Min" | "Max" | "Sum" | "Mean" | "And" | "Or"
        | "Xor" | "BitShift" | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "PRelu" | "SwiGLU" => {
            elementwise(c, c.first_elem(0..c.input_count()))
        }
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" => elementwise(c, BOOL),
        "Where" => elementwise(c, c.first_elem([1, 2])),
        // BitCast (opset 26) reinterprets the bits: same shape, `to` type.
        "Cast" | "BitCast" => {
            let to = c.int("to", 0).unwrap_or(0);
            vec![info(i32::try_from(to).unwrap_or(0), c.shape(0))]
        }
        "CastLike" => vec![info(c.elem(1), c.shape(0))],
        "MatMul" => {
            let s = c.shape(0).zip(c.shape(1));
            vec![info(
                c.first_elem([0, 1]),
                s.and_then(|(a, b)| shape::matmul(&a, &b)),
            )]
        }
        "Gemm" => gemm(c),
        "Reshape" => layout::reshape(c),
        "Flatten" => layout::flatten(c),
        "Transpose" => layout::transpose(c),
        "Unsqueeze" => layout::unsqueeze(c),
        "Squeeze" => layout::squeeze(c),
        "Concat" => layout::concat(c),
        "Split" => layout::split(c),
        "Slice" => layout::slice(c),
        "Tile" => layout::tile(c),
        "Pad" => layout::pad(c),
        "Einsum" => einsum::einsum(c),
        "OneHot" => one_hot(c),
        "Resize" => resize::resize(c),
        "If" => control_flow::if_op(c),
        "Loop" => control_flow::loop_op(c),
        "Scan" => control_flow::scan(c),
        "LinearAttention" => linear_attention::linear_attention(c),
        "CausalConvWithState" => linear_attention::causal_conv(c),
        "Gather" => layout::gather(c),
        "GatherElements" => vec![info(c.elem(0), c.shape(1))],
        "GatherND" => layout::gather_nd(c),
        "Expand" => {
            let target = c.int_values(1).map(dims_of_values);
            let s = c.shape(0).zip(target);
            vec![info(
                c.elem(0),
                s.and_then(|(a, t)| shape::broadcast2(&a, &t)),
            )]
        }
        "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceSum" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => reduce(c),
        "ArgMax" | "ArgMin" => arg_reduce(c),
        "LayerNormalization" | "SimplifiedLayerNormalization" => layer_norm(c),
        "QuantizeLinear" => quantize_linear(c),
        "DequantizeLinear" => dequantize_linear(c),
        "Shape" => shape_of(c),
        "Size" => vec![info(dtype::INT64, Some(vec![]))],
        "ConstantOfShape" => constant_of_shape(c),
        "Range" => range(c),
        "TopK" => top_k(c),
        // [rank(x), number of nonzeros]: a data-dependent MoE dispatch (`Gather(x,
        // NonZero(Equal(ids, e)))`) keeps its rank through it.
        "NonZero" => vec![info(
            dtype::INT64,
            c.shape(0)
                .map(|s| vec![Dim::Known(s.len() as i64), Dim::Unknown]),
        )],
        // The same exports add the experts' outputs back by ScatterND: data's type and shape.
        "ScatterND" | "ScatterElements" => c.same(0),
        _ => Vec::new(),
    }
}

fn ms_op(c: &Node, op: &str) -> Vec<TensorInfo> {
    match op {
        // AllReduce sums across ranks: same type and shape.
        "QuickGelu" | "AllReduce" | "Gelu" | "FastGelu" | "BiasGelu" | "RotaryEmbedding" => {
            c.same(0)
        }
        "GroupQueryAttention" => group_query_attention(c),
        "MultiHeadAttention" => multi_head_attention(c),
        "Attention" => ms_attention(c),
        "MatMulNBits" => {
            let n = c.int("N", -1).filter(|&n| n > 0).map(Dim::Known);
            let shape = c.shape(0).zip(n).and_then(|(mut a, n)| {
                *a.last_mut()? = n;
                Some(a)
            });
            vec![info(c.elem(0), shape)]
        }
        "SimplifiedLayerNormalization" => layer_norm(c),
        // Outputs: output, mean, inv_std_var (float statistics), input_skip_bias_sum.
        "SkipSimplifiedLayerNormalization" | "SkipLayerNormalization" => {
            let x = c.info(0);
            let stats = info(dtype::FLOAT, None);
            vec![x.clone(), stats.clone(), stats, x]
        }
        _ => Vec::new(),
    }
}

/// `output [B, S, num_heads * head_size]` in the query's type; with packed QKV (no key input)
/// the query's last dim holds `num_heads + 2 * kv_num_heads` heads. The KV-cache outputs get
/// the type only.
fn group_query_attention(c: &Node) -> Vec<TensorInfo> {
    let q = c.info(0);
    let heads = c.int("num_heads", 0).unwrap_or(0);
    let kv_heads = c.int("kv_num_heads", 0).unwrap_or(0);
    let shape = q.shape.clone().and_then(|mut s| {
        if c.input(1).is_none() {
            let packed = heads.checked_add(kv_heads.checked_mul(2)?)?;
            let last = s.last_mut()?;
            *last = match known(last) {
                Some(d) if heads > 0 && kv_heads >= 0 && d % packed == 0 => {
                    Dim::Known(d / packed * heads)
                }
                _ => Dim::Unknown,
            };
        }
        Some(s)
    });
    let cache = info(q.elem_type, None);
    vec![info(q.elem_type, shape), cache.clone(), cache]
}

/// `com.microsoft::MultiHeadAttention` (ONNX Runtime's transformers optimizer): output 0 is
/// `[B, S, v_hidden]` in the query's type for a 3-D query — v_hidden the value's last dim (3-D
/// value) or heads × head size (4-D `[B, N, L, H]` value) —, as ORT's own inference gives. Packed
/// QKV / KV forms and the cache outputs are left unknown.
fn multi_head_attention(c: &Node) -> Vec<TensorInfo> {
    let shape = c
        .shape(0)
        .and_then(|q| match (q.as_slice(), c.shape(2).as_deref()) {
            ([b, s, _], Some([_, _, v])) => Some(vec![b.clone(), s.clone(), v.clone()]),
            ([b, s, _], Some([_, n, _, h])) => Some(vec![
                b.clone(),
                s.clone(),
                shape::product_dim(&[n.clone(), h.clone()]),
            ]),
            _ => None,
        });
    vec![info(c.elem(0), shape)]
}

/// `com.microsoft::Attention` (packed QKV weights `[input_hidden, q + k + v hidden]`): output 0
/// is `[B, S, v_hidden]` in the input's type, v_hidden from `qkv_hidden_sizes` or a third of the
/// weights' last dim, as ORT's own inference gives; the present output is left unknown.
fn ms_attention(c: &Node) -> Vec<TensorInfo> {
    let v_hidden = match c.ints("qkv_hidden_sizes").as_deref() {
        Some([_, _, v]) => Some(Dim::Known(*v)),
        _ => c
            .shape(1)
            .and_then(|w| w.last().and_then(known))
            .filter(|d| d % 3 == 0)
            .map(|d| Dim::Known(d / 3)),
    };
    let shape = c.shape(0).and_then(|x| match x.as_slice() {
        [b, s, _] => Some(vec![b.clone(), s.clone(), v_hidden.unwrap_or(Dim::Unknown)]),
        _ => None,
    });
    vec![info(c.elem(0), shape)]
}

/// The `com.mxfuse` ops of docs/ops.md.
fn mxfuse_op(c: &Node, op: &str) -> Vec<TensorInfo> {
    match op {
        "MxQuantize" => mx_outputs(c.shape(0)).to_vec(),
        "AddRmsNormMxQuant" => {
            // `flatten_rows = 1`: q, scale and normed are [rows, H] (x's leading dims
            // flattened, a MoE block's `Reshape(normed, [-1, H])` read into the op).
            let rows = match c.int("flatten_rows", 0) {
                Some(1) => c.shape(0).and_then(|s| {
                    let (h, lead) = s.split_last()?;
                    Some(vec![shape::product_dim(lead), h.clone()])
                }),
                _ => c.shape(0),
            };
            let [q, scale] = mx_outputs(rows.clone());
            vec![q, scale, c.info(0), info(c.elem(0), rows)]
        }
        "SwiGluMxQuant" => {
            let layout = c.string("layout", "separate").unwrap_or_default();
            let act = match layout.as_str() {
                "separate" => c.shape(0),
                // One gate_up input holding both halves along the last axis.
                "split_halves" | "interleaved" => c.shape(0).and_then(|mut s| {
                    let last = s.last_mut()?;
                    *last = known(last).map_or(Dim::Unknown, |k| Dim::Known(k / 2));
                    Some(s)
                }),
                _ => None,
            };
            mx_outputs(act).to_vec()
        }
        "MxMatMul" => {
            let out = c.int("output_dtype", 0).unwrap_or(0);
            let n_axis = if c.int("trans_b", 0) == Some(1) { 0 } else { 1 };
            let n = c.shape(2).and_then(|b| b.get(n_axis).cloned());
            let shape = c.shape(0).zip(n).and_then(|(mut a, n)| {
                *a.last_mut()? = n;
                Some(a)
            });
            vec![info(i32::try_from(out).unwrap_or(0), shape)]
        }
        _ => Vec::new(),
    }
}

/// `q: FLOAT8E4M3FN[..., K]` and `scale: FLOAT8E8M0[..., K/32]` for an activation `[..., K]`.
fn mx_outputs(act: Option<Vec<Dim>>) -> [TensorInfo; 2] {
    let scale = act.clone().and_then(|mut s| {
        let last = s.last_mut()?;
        *last = match known(last) {
            Some(k) if k % MX_BLOCK == 0 => Dim::Known(k / MX_BLOCK),
            _ => Dim::Unknown,
        };
        Some(s)
    });
    [
        info(dtype::FLOAT8E4M3FN, act),
        info(dtype::FLOAT8E8M0, scale),
    ]
}

/// Broadcast of all present inputs, with element type `elem`.
fn elementwise(c: &Node, elem: i32) -> Vec<TensorInfo> {
    let shapes: Vec<Option<Vec<Dim>>> = (0..c.input_count())
        .filter(|&s| c.input(s).is_some())
        .map(|s| c.shape(s))
        .collect();
    vec![info(elem, shape::broadcast(&shapes))]
}

fn gemm(c: &Node) -> Vec<TensorInfo> {
    // Operand dim `i` of a 2-D shape, after the optional transpose.
    let dim = |slot: usize, trans: &str, i: usize| -> Dim {
        let t = c.int(trans, 0).unwrap_or(0) == 1;
        c.shape(slot)
            .filter(|s| s.len() == 2)
            .map_or(Dim::Unknown, |s| s[if t { 1 - i } else { i }].clone())
    };
    let shape = vec![dim(0, "transA", 0), dim(1, "transB", 1)];
    vec![info(c.first_elem([0, 1, 2]), Some(shape))]
}

/// The Reduce* family: axes as attribute or (ReduceSum 13+, the rest 18+) input.
fn reduce(c: &Node) -> Vec<TensorInfo> {
    let keep = c.int("keepdims", 1) != Some(0);
    let noop = c.int("noop_with_empty_axes", 0) == Some(1);
    let shape = c.shape(0).and_then(|s| {
        let axes: Vec<usize> = match c.int_list("axes", 1) {
            IntList::Given(a) if !a.is_empty() => norm_axes(&a, s.len())?,
            IntList::NotConstant => {
                return keep.then(|| vec![Dim::Unknown; s.len()]);
            }
            _ if noop => return Some(s),
            _ => (0..s.len()).collect(),
        };
        Some(reduced(s, &axes, keep))
    });
    vec![info(c.elem(0), shape)]
}

/// `s` with the `axes` set to 1 (`keep`) or removed.
fn reduced(s: Vec<Dim>, axes: &[usize], keep: bool) -> Vec<Dim> {
    s.into_iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keep) {
            (false, _) => Some(d),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect()
}

fn arg_reduce(c: &Node) -> Vec<TensorInfo> {
    let keep = c.int("keepdims", 1) != Some(0);
    let shape = c.shape(0).and_then(|s| {
        let axis = norm_axis(c.int("axis", 0)?, s.len())?;
        Some(reduced(s, &[axis], keep))
    });
    vec![info(dtype::INT64, shape)]
}

/// LayerNormalization (Y, Mean, InvStdDev) and SimplifiedLayerNormalization (Y, inv_std_var):
/// statistics keep the dims before `axis` and are 1 from there on, in `stash_type`.
fn layer_norm(c: &Node) -> Vec<TensorInfo> {
    let x = c.info(0);
    let stash = c.int("stash_type", 1).unwrap_or(1);
    let stats_shape = x.shape.clone().and_then(|s| {
        let axis = norm_axis(c.int("axis", -1)?, s.len())?;
        let all: Vec<usize> = (axis..s.len()).collect();
        Some(reduced(s, &all, true))
    });
    let stats = info(i32::try_from(stash).unwrap_or(0), stats_shape);
    vec![x, stats.clone(), stats]
}

/// ONNX `Attention` (opset 23; torch's dynamo exporter writes it for `scaled_dot_product_attention`
/// from opset 23 on, so in every standard MX export): Y in Q's type, `[B, q_heads, S_q, v_head]`
/// from 4-D Q / V, `[B, S_q, q_num_heads · V_hidden / kv_num_heads]` from 3-D ones — what ONNX's
/// own inference gives (the last dim unknown without the head counts). Without it, every
/// layer after the attention had unknown shapes offline and its fusions were refused, and the
/// o_proj quantizer stayed an ONNX `QuantizeLinear` ONNX Runtime cannot load (probe 10). The
/// optional present key / value and QK outputs are left unknown, as ONNX leaves them.
fn attention(c: &Node) -> Vec<TensorInfo> {
    let shape = c
        .shape(0)
        .zip(c.shape(2))
        .and_then(|(q, v)| match (q.as_slice(), v.as_slice()) {
            ([b, h, s, _], [_, _, _, dv]) => {
                Some(vec![b.clone(), h.clone(), s.clone(), dv.clone()])
            }
            ([b, s, _], [_, _, v_hidden]) => {
                let heads = (c.int("q_num_heads", 0), c.int("kv_num_heads", 0));
                let last = match (known(v_hidden), heads) {
                    (Some(d), (Some(qh), Some(kvh))) if qh > 0 && kvh > 0 && d % kvh == 0 => {
                        Dim::Known(d / kvh * qh)
                    }
                    _ => Dim::Unknown,
                };
                Some(vec![b.clone(), s.clone(), last])
            }
            _ => None,
        });
    vec![info(c.elem(0), shape)]
}

/// Output type: `output_dtype` (opset 21+) when set, else the zero point's type, else uint8.
fn quantize_linear(c: &Node) -> Vec<TensorInfo> {
    let attr = if c.opset() >= 21 {
        c.int("output_dtype", 0).unwrap_or(0)
    } else {
        0
    };
    let elem = if attr != 0 {
        i32::try_from(attr).unwrap_or(0)
    } else if c.input(2).is_some() {
        c.elem(2)
    } else {
        UINT8
    };
    vec![info(elem, c.shape(0))]
}

/// Output type: `output_dtype` (opset 23+) when set, else the scale's type (opset 19+), else
/// float (opset 10-18). Blocked or per-axis scales do not change the shape.
fn dequantize_linear(c: &Node) -> Vec<TensorInfo> {
    let opset = c.opset();
    let attr = if opset >= 23 {
        c.int("output_dtype", 0).unwrap_or(0)
    } else {
        0
    };
    let elem = match attr {
        0 if opset >= 19 => c.elem(1),
        0 => dtype::FLOAT,
        t => i32::try_from(t).unwrap_or(0),
    };
    vec![info(elem, c.shape(0))]
}

/// int64 `[end - start]` (opset 15 `start` / `end` clamp like Slice).
fn shape_of(c: &Node) -> Vec<TensorInfo> {
    let len = c.shape(0).map_or(Dim::Unknown, |s| {
        let r = s.len() as i64;
        let clamp = |x: i64| (if x < 0 { x.saturating_add(r) } else { x }).clamp(0, r);
        let start = clamp(c.int("start", 0).unwrap_or(0));
        let end = clamp(c.int("end", r).unwrap_or(r));
        Dim::Known((end - start).max(0))
    });
    vec![info(dtype::INT64, Some(vec![len]))]
}

fn constant_of_shape(c: &Node) -> Vec<TensorInfo> {
    let elem = match c.g.attr(c.n, "value") {
        Some(AttrValue::Tensor(t)) => t.elem_type,
        Some(_) => 0,
        None => dtype::FLOAT,
    };
    let shape = match c.int_values(0) {
        Some(t) => Some(dims_of_values(t)),
        None => c.shape(0).and_then(|s| shape::unknown_dims(s.first()?)),
    };
    vec![info(elem, shape)]
}

/// 1-D, `max(ceil((limit - start) / delta), 0)` long when the three are constant, and as long
/// as `limit` (a number or a named dim) for `Range(0, limit, 1)`.
fn range(c: &Node) -> Vec<TensorInfo> {
    let scalar = |slot| match c.int_values(slot)?.as_slice() {
        [d] => Some(d.clone()),
        _ => None,
    };
    let len = match (scalar(0), scalar(1), scalar(2)) {
        (Some(Dim::Known(0)), Some(limit), Some(Dim::Known(1))) => match limit {
            Dim::Known(l) => Dim::Known(l.max(0)),
            other => other,
        },
        (Some(Dim::Known(start)), Some(Dim::Known(limit)), Some(Dim::Known(delta)))
            if delta != 0 =>
        {
            let span = i128::from(limit) - i128::from(start);
            let n = (span + i128::from(delta) - i128::from(delta.signum())) / i128::from(delta);
            i64::try_from(n.max(0)).map_or(Dim::Unknown, Dim::Known)
        }
        _ => float_range_len(c),
    };
    vec![info(c.first_elem([0, 1, 2]), Some(vec![len]))]
}

/// The length of a Range over float constants.
fn float_range_len(c: &Node) -> Dim {
    let scalar = |slot| scalar_f64(&c.g.const_value(c.input(slot)?)?);
    match (scalar(0), scalar(1), scalar(2)) {
        (Some(start), Some(limit), Some(delta)) if delta != 0.0 => {
            let n = ((limit - start) / delta).ceil().max(0.0);
            if n < i64::MAX as f64 {
                Dim::Known(n as i64)
            } else {
                Dim::Unknown
            }
        }
        _ => Dim::Unknown,
    }
}

/// Values and int64 indices, `k` long along `axis`.
fn top_k(c: &Node) -> Vec<TensorInfo> {
    let k = match c.input(1) {
        Some(_) => c.known_ints(1).and_then(|v| v.first().copied()),
        None => c.int("k", -1),
    }
    .filter(|&k| k >= 0);
    let shape = c.shape(0).and_then(|mut s| {
        let axis = norm_axis(c.int("axis", -1)?, s.len())?;
        s[axis] = k.map_or(Dim::Unknown, Dim::Known);
        Some(s)
    });
    vec![info(c.elem(0), shape.clone()), info(dtype::INT64, shape)]
}

/// `OneHot(indices, depth, values)`: `values`' type, `indices`' shape with `depth` inserted at
/// `axis` (in `[-r - 1, r]`). The depth is a positive integer constant, a named dim from a
/// tracked shape, or a float constant (ONNX casts it to int64: truncated); otherwise unknown.
fn one_hot(c: &Node) -> Vec<TensorInfo> {
    let depth = match c.int_values(1).as_deref() {
        Some([d @ Dim::Symbolic(_)]) => d.clone(),
        Some([Dim::Known(d)]) if *d > 0 => Dim::Known(*d),
        Some(_) => Dim::Unknown,
        None => match c.const_f64s(1).as_deref() {
            Some(&[d]) if d >= 1.0 && d < (1u64 << 53) as f64 => Dim::Known(d.trunc() as i64),
            _ => Dim::Unknown,
        },
    };
    let shape = c.shape(0).and_then(|mut s| {
        let at = norm_axis(c.int("axis", -1)?, s.len() + 1)?;
        s.insert(at, depth);
        Some(s)
    });
    vec![info(c.elem(2), shape)]
}
