//! A small graph interpreter for numeric differential tests of the rewrite rules: runs an
//! unfused graph op by op through `kernels::reference::onnx_ops` (the reference evaluator of the
//! standard ops, with the fused kernels' numeric conventions) and a rewritten graph's
//! `com.mxfuse` ops through `kernels::ops` (the kernels the provider runs).
//!
//! Only the ops the fusion patterns and their test graphs use are implemented; anything else is
//! an error naming the op, never a guess.

use std::collections::HashMap;

use graph_rewrites::ir::Graph;
use graph_rewrites::pattern::predicates::{dtype as onnx_dt, values_f64, values_i64};
use graph_rewrites::view::{is_quark_mx_op, AttrValue, ConstTensor, GraphView, NodeId, ValueId};
use kernels::codec::{e2m1_to_f32, e4m3_to_f32, e8m0_to_f32, f32_to_e4m3};
use kernels::ops::{NormTensors, SwiGluTensors, TensorMut, TensorRef};
use kernels::reference::math::mean_of_squares;
use kernels::reference::onnx_ops::{self as onnx, round_to, Tensor};
use kernels::{
    AddRmsNormAttrs, DType, MxDequantAttrs, MxMatMulAttrs, MxQuantAttrs, Serial, SwiGluAttrs,
};

/// A runtime value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// A float tensor (values exactly representable in its dtype).
    F(Tensor),
    /// FLOAT8E4M3FN or FLOAT8E8M0 bytes, or FLOAT4E2M1 packed two per byte.
    Bytes {
        dtype: DType,
        shape: Vec<usize>,
        data: Vec<u8>,
    },
    /// An int64 tensor (shapes, axes, split sizes).
    I64(Vec<i64>),
}

type Res<T> = Result<T, String>;

fn float_dtype(code: i32) -> Res<DType> {
    match code {
        onnx_dt::FLOAT => Ok(DType::F32),
        onnx_dt::FLOAT16 => Ok(DType::F16),
        onnx_dt::BFLOAT16 => Ok(DType::BF16),
        c => Err(format!("dtype {c} is not float")),
    }
}

fn const_val(t: &ConstTensor) -> Res<Val> {
    let shape: Vec<usize> = t.dims.iter().map(|d| *d as usize).collect();
    match t.elem_type {
        onnx_dt::INT64 | onnx_dt::INT32 => {
            values_i64(t).map(Val::I64).ok_or("bad int constant".into())
        }
        onnx_dt::FLOAT8E4M3FN => Ok(Val::Bytes {
            dtype: DType::E4M3,
            shape,
            data: t.raw.clone(),
        }),
        onnx_dt::FLOAT8E8M0 => Ok(Val::Bytes {
            dtype: DType::E8M0,
            shape,
            data: t.raw.clone(),
        }),
        // MXFP4 weights: packed two per byte, as ONNX stores them.
        onnx_dt::FLOAT4E2M1 => Ok(Val::Bytes {
            dtype: DType::E2M1,
            shape,
            data: t.raw.clone(),
        }),
        code => {
            let v = values_f64(t).ok_or("unreadable float constant")?;
            let v = v.into_iter().map(|x| x as f32).collect();
            Tensor::new(float_dtype(code)?, &shape, v)
                .map(Val::F)
                .map_err(|e| e.to_string())
        }
    }
}

/// The dims of a runtime value (an int64 vector is 1-D).
fn val_shape(v: &Val) -> Vec<usize> {
    match v {
        Val::F(t) => t.shape.clone(),
        Val::Bytes { shape, .. } => shape.clone(),
        Val::I64(x) => vec![x.len()],
    }
}

/// Raw little-endian bytes of a float tensor in its dtype.
pub fn to_bytes(t: &Tensor) -> Vec<u8> {
    let d = match t.dtype {
        DType::F16 => models::DType::F16,
        DType::BF16 => models::DType::Bf16,
        _ => models::DType::F32,
    };
    models::data::encode_floats(d, &t.data)
}

fn from_bytes(dtype: DType, shape: &[usize], raw: Vec<u8>) -> Res<Tensor> {
    let c = ConstTensor {
        elem_type: dtype.onnx_code(),
        dims: shape.iter().map(|d| *d as i64).collect(),
        raw,
    };
    let v = values_f64(&c).ok_or("undecodable float bytes")?;
    Tensor::new(dtype, shape, v.into_iter().map(|x| x as f32).collect()).map_err(|e| e.to_string())
}

fn f(v: Option<&Val>) -> Res<&Tensor> {
    match v {
        Some(Val::F(t)) => Ok(t),
        other => Err(format!("expected a float tensor, got {other:?}")),
    }
}

fn bytes(v: Option<&Val>) -> Res<(&[usize], &[u8])> {
    match v {
        Some(Val::Bytes { shape, data, .. }) => Ok((shape, data)),
        other => Err(format!("expected an fp8 tensor, got {other:?}")),
    }
}

fn ints(v: Option<&Val>) -> Res<&[i64]> {
    match v {
        Some(Val::I64(x)) => Ok(x),
        other => Err(format!("expected an int64 tensor, got {other:?}")),
    }
}

/// ONNX `Slice` (opset ≥ 10 inputs) along the last axis only, positive steps: the gate/up
/// spellings. Bounds are clamped as ONNX does (negative = from the end).
fn slice_last(x: &Tensor, ins: &[Option<Val>]) -> Res<Tensor> {
    let i = |k: usize| ins.get(k).and_then(|v| v.as_ref());
    let (starts, ends) = (ints(i(1))?, ints(i(2))?);
    let rank = x.shape.len();
    let axes = i(3)
        .map(|v| ints(Some(v)))
        .transpose()?
        .map(<[i64]>::to_vec);
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = i(4)
        .map(|v| ints(Some(v)))
        .transpose()?
        .map(<[i64]>::to_vec);
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    let st = match (axes.as_slice(), steps.as_slice()) {
        ([a], [s]) if rank > 0 && norm_axis(*a, rank) + 1 == rank && *s > 0 => *s,
        _ => {
            return Err(format!(
                "only one last-axis forward Slice is evaluated ({axes:?})"
            ))
        }
    };
    let d = *x.shape.last().ok_or("scalar")? as i64;
    let clamp = |v: i64| if v < 0 { v.saturating_add(d) } else { v }.clamp(0, d);
    let (s, e) = (clamp(starts[0]), clamp(ends[0]));
    let picked: Vec<usize> = (s..e).step_by(st as usize).map(|k| k as usize).collect();
    let data = x
        .data
        .chunks_exact(d as usize)
        .flat_map(|r| picked.iter().map(|k| r[*k]).collect::<Vec<_>>())
        .collect();
    let mut shape = x.shape.clone();
    shape[rank - 1] = picked.len();
    Tensor::new(x.dtype, &shape, data).map_err(|e| e.to_string())
}

fn scalar(v: Option<&Val>) -> Res<f32> {
    match f(v)?.data.as_slice() {
        [x] => Ok(*x),
        d => Err(format!("expected a scalar, got {} values", d.len())),
    }
}

fn attr_i(g: &Graph, n: NodeId, name: &str, default: i64) -> i64 {
    match g.attr(n, name) {
        Some(AttrValue::Int(v)) => v,
        _ => default,
    }
}

fn attr_f(g: &Graph, n: NodeId, name: &str, default: f32) -> f32 {
    match g.attr(n, name) {
        Some(AttrValue::Float(v)) => v,
        _ => default,
    }
}

fn attr_s(g: &Graph, n: NodeId, name: &str, default: &str) -> String {
    match g.attr(n, name) {
        Some(AttrValue::String(v)) => v,
        _ => default.into(),
    }
}

/// A node's attributes as the `(name, value)` strings the kernels' attribute parsers take.
fn attr_pairs(g: &Graph, n: NodeId) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in g.attr_names(n) {
        let v = match g.attr(n, &name) {
            Some(AttrValue::Int(i)) => i.to_string(),
            Some(AttrValue::Float(x)) => x.to_string(),
            Some(AttrValue::String(s)) => s,
            other => panic!("attribute {name} = {other:?}"),
        };
        out.push((name, v));
    }
    out
}

fn map(t: &Tensor, op: impl Fn(f32) -> f32) -> Tensor {
    Tensor {
        dtype: t.dtype,
        shape: t.shape.clone(),
        data: t.data.iter().map(|v| round_to(t.dtype, op(*v))).collect(),
    }
}

/// ONNX `Cast(to=FLOAT8E8M0, round_mode, saturate=1)` of one value, as `onnx.reference`
/// computes it: NaN and ±Inf give the NaN byte 0xFF (saturation only applies to finite values).
fn cast_e8m0(v: f32, up: bool) -> u8 {
    if !v.is_finite() {
        return 0xFF;
    }
    let bits = v.abs().to_bits();
    let (e, m) = ((bits >> 23) as i32, bits & 0x7F_FFFF);
    if e == 0 {
        // Zero or subnormal: below 2^-126; saturates to 2^-127 unless it rounds up to 2^-126.
        return u8::from(up && v.abs() > 2f32.powi(-127));
    }
    let biased = if up && m != 0 { e + 1 } else { e };
    biased.clamp(0, 254) as u8
}

/// Block index of element `idx` of a tensor `shape` quantized along `axis` in blocks of 32.
fn scale_index(shape: &[usize], axis: usize, idx: usize) -> usize {
    let inner: usize = shape[axis + 1..].iter().product();
    let (outer, rest) = (idx / (inner * shape[axis]), idx % (inner * shape[axis]));
    let (a, i) = (rest / inner, rest % inner);
    let blocks = shape[axis].div_ceil(32);
    (outer * blocks + a / 32) * inner + i
}

fn norm_axis(axis: i64, rank: usize) -> usize {
    if axis < 0 {
        (axis + rank as i64) as usize
    } else {
        axis as usize
    }
}

/// Runs every node of `g` on `feeds`; returns every value by name.
pub fn run(g: &Graph, feeds: &HashMap<String, Val>) -> Res<HashMap<String, Val>> {
    let mut env = feeds.clone();
    for &n in g.nodes().iter() {
        let mut ins: Vec<Option<Val>> = Vec::new();
        for v in g.inputs(n) {
            ins.push(match v {
                None => None,
                Some(v) => Some(lookup(g, &env, *v)?),
            });
        }
        let outs =
            eval(g, n, &ins).map_err(|e| format!("{} '{}': {e}", g.op_type(n), g.node_name(n)))?;
        for (v, val) in g.outputs(n).iter().zip(outs) {
            if let Some(val) = val {
                env.insert(g.value_name(*v).to_string(), val);
            }
        }
    }
    Ok(env)
}

fn lookup(g: &Graph, env: &HashMap<String, Val>, v: ValueId) -> Res<Val> {
    if let Some(x) = env.get(g.value_name(v)) {
        return Ok(x.clone());
    }
    let c = g
        .const_value(v)
        .ok_or_else(|| format!("no value for '{}'", g.value_name(v)))?;
    const_val(&c)
}

fn eval(g: &Graph, n: NodeId, ins: &[Option<Val>]) -> Res<Vec<Option<Val>>> {
    let i = |k: usize| ins.get(k).and_then(|v| v.as_ref());
    let e = |r: kernels::Result<Tensor>| r.map(Val::F).map_err(|e| e.to_string());
    let one = |v: Val| Ok(vec![Some(v)]);
    let is_ints = |k: usize| matches!(i(k), Some(Val::I64(_)));
    match (g.domain(n), g.op_type(n)) {
        // Run-time block shapes (README: `Concat(Shape(x)[:-1], [K/32, 32])`, or Slice /
        // Gather + Unsqueeze of `Shape(x)`): int64 vectors, as the rules accept them.
        ("", "Shape") => {
            let dims = val_shape(i(0).ok_or("Shape without input")?);
            let r = dims.len() as i64;
            let clamp = |v: i64| if v < 0 { v + r } else { v }.clamp(0, r) as usize;
            let (s, e) = (
                clamp(attr_i(g, n, "start", 0)),
                clamp(attr_i(g, n, "end", r)),
            );
            one(Val::I64(
                dims[s..e.max(s)].iter().map(|d| *d as i64).collect(),
            ))
        }
        ("", "Concat") if is_ints(0) => {
            let parts: Res<Vec<&[i64]>> = (0..ins.len()).map(|k| ints(i(k))).collect();
            one(Val::I64(parts?.concat()))
        }
        ("", "Slice") if is_ints(0) => {
            let (v, s, e) = (ints(i(0))?, ints(i(1))?, ints(i(2))?);
            let d = v.len() as i64;
            let clamp = |x: i64| if x < 0 { x.saturating_add(d) } else { x }.clamp(0, d) as usize;
            let (s, e) = (clamp(s[0]), clamp(e[0]));
            one(Val::I64(v[s..e.max(s)].to_vec()))
        }
        ("", "Gather") if is_ints(0) => {
            let (v, idx) = (ints(i(0))?, ints(i(1))?);
            let d = v.len() as i64;
            let picked: Res<Vec<i64>> = idx
                .iter()
                .map(|&k| {
                    let k = if k < 0 { k + d } else { k };
                    v.get(k as usize)
                        .copied()
                        .ok_or(format!("index {k} out of range"))
                })
                .collect();
            one(Val::I64(picked?))
        }
        // An int64 vector keeps its values (Val::I64 has no shape).
        ("", "Unsqueeze" | "Squeeze") if is_ints(0) => one(i(0).cloned().ok_or("no input")?),
        ("", "Add") => one(e(onnx::add(f(i(0))?, f(i(1))?))?),
        ("", "Mul") => one(e(onnx::mul(f(i(0))?, f(i(1))?))?),
        ("", "Div") => one(e(onnx::div(f(i(0))?, f(i(1))?))?),
        ("", "Min") => one(e(onnx::min(f(i(0))?, f(i(1))?))?),
        ("", "Pow") if scalar(i(1))? == 2.0 => one(Val::F(onnx::pow2(f(i(0))?))),
        ("", "Sqrt") => one(Val::F(onnx::sqrt(f(i(0))?))),
        ("", "Reciprocal") => one(Val::F(onnx::reciprocal(f(i(0))?))),
        ("", "Sigmoid") => one(Val::F(onnx::sigmoid(f(i(0))?))),
        ("", "Abs") => one(Val::F(map(f(i(0))?, f32::abs))),
        ("", "Clip") => {
            let lo = i(1)
                .map(|v| scalar(Some(v)))
                .transpose()?
                .unwrap_or(f32::NEG_INFINITY);
            let hi = i(2)
                .map(|v| scalar(Some(v)))
                .transpose()?
                .unwrap_or(f32::INFINITY);
            one(Val::F(onnx::clip(f(i(0))?, lo, hi)))
        }
        ("", "Cast") => {
            let to = attr_i(g, n, "to", 0) as i32;
            let x = f(i(0))?;
            if to == onnx_dt::FLOAT8E8M0 {
                let up = attr_s(g, n, "round_mode", "up") == "up";
                let data = x.data.iter().map(|v| cast_e8m0(*v, up)).collect();
                return one(Val::Bytes {
                    dtype: DType::E8M0,
                    shape: x.shape.clone(),
                    data,
                });
            }
            one(e(onnx::cast(x, float_dtype(to)?))?)
        }
        ("", "ReduceMean") => one(e(onnx::reduce_mean_last(
            f(i(0))?,
            attr_i(g, n, "keepdims", 1) == 1,
        ))?),
        ("", "ReduceSum") => {
            // Last axis only (the norm spelling's `x²` summed before a `Div` by H): the axes
            // input (opset 13) or attribute must say so.
            let x = f(i(0))?;
            let axes = match (i(1), g.attr(n, "axes")) {
                (Some(v), _) => ints(Some(v))?.to_vec(),
                (None, Some(AttrValue::Ints(a))) => a,
                _ => return Err("ReduceSum without axes".into()),
            };
            let rank = x.shape.len() as i64;
            if axes.len() != 1 || norm_axis(axes[0], x.shape.len()) as i64 != rank - 1 {
                return Err(format!(
                    "ReduceSum over axes {axes:?}: only the last axis is run"
                ));
            }
            one(e(onnx::reduce_sum_last(
                x,
                attr_i(g, n, "keepdims", 1) == 1,
            ))?)
        }
        ("", "ReduceMax") => {
            // Last axis, keepdims = 0 (the quantize spelling); NaN propagates.
            let x = f(i(0))?;
            let k = *x.shape.last().ok_or("scalar")?;
            let data = x
                .data
                .chunks_exact(k)
                .map(|r| {
                    r.iter().fold(f32::NEG_INFINITY, |m, v| {
                        if v.is_nan() || m.is_nan() {
                            f32::NAN
                        } else {
                            m.max(*v)
                        }
                    })
                })
                .collect();
            one(e(Tensor::new(
                x.dtype,
                &x.shape[..x.shape.len() - 1],
                data,
            ))?)
        }
        ("", "Reshape") => {
            let x = f(i(0))?;
            let Some(Val::I64(spec)) = i(1) else {
                return Err("shape is not int64".into());
            };
            let mut shape: Vec<usize> = spec
                .iter()
                .enumerate()
                .map(|(k, d)| {
                    if *d == 0 {
                        x.shape[k]
                    } else {
                        (*d).max(1) as usize
                    }
                })
                .collect();
            if let Some(p) = spec.iter().position(|d| *d == -1) {
                let known: usize = shape
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| *k != p)
                    .map(|(_, d)| d)
                    .product();
                shape[p] = x.data.len() / known;
            }
            one(e(Tensor::new(x.dtype, &shape, x.data.clone()))?)
        }
        ("", "Transpose") => {
            // Rank 2 only (an [N, K] weight read as [K, N]): perm [1, 0] or none.
            let x = f(i(0))?;
            let perm_ok = match g.attr(n, "perm") {
                None => true,
                Some(AttrValue::Ints(p)) => p == [1, 0],
                Some(_) => false,
            };
            let [r, c] = x.shape[..] else {
                return Err("Transpose of a tensor that is not rank 2".into());
            };
            if !perm_ok {
                return Err("Transpose perm other than [1, 0]".into());
            }
            let data = (0..r * c).map(|t| x.data[(t % r) * c + t / r]).collect();
            one(e(Tensor::new(x.dtype, &[c, r], data))?)
        }
        ("", "Split") => {
            let x = f(i(0))?;
            let parts = g.outputs(n).len();
            let k = *x.shape.last().ok_or("scalar")?;
            let w = k / parts;
            let mut shape = x.shape.clone();
            *shape.last_mut().ok_or("scalar")? = w;
            (0..parts)
                .map(|p| {
                    let data = x
                        .data
                        .chunks_exact(k)
                        .flat_map(|r| r[p * w..(p + 1) * w].to_vec())
                        .collect();
                    e(Tensor::new(x.dtype, &shape, data)).map(Some)
                })
                .collect()
        }
        ("", "Slice") => one(Val::F(slice_last(f(i(0))?, ins)?)),
        ("", "MatMul") => one(e(onnx::matmul(f(i(0))?, f(i(1))?))?),
        ("", "Gemm") => {
            if attr_i(g, n, "transA", 0) != 0 {
                return Err("Gemm transA = 1".into());
            }
            let c = i(2).map(|v| f(Some(v))).transpose()?;
            one(e(onnx::gemm(
                f(i(0))?,
                f(i(1))?,
                c,
                attr_f(g, n, "alpha", 1.0),
                attr_f(g, n, "beta", 1.0),
                attr_i(g, n, "transB", 0) != 0,
            ))?)
        }
        ("", "Sum") => {
            let mut acc = f(i(0))?.clone();
            for k in 1..ins.len() {
                acc = onnx::add(&acc, f(i(k))?).map_err(|e| e.to_string())?;
            }
            one(Val::F(acc))
        }
        ("com.microsoft", "QuickGelu") => one(Val::F(onnx::quick_gelu(
            f(i(0))?,
            attr_f(g, n, "alpha", 1.702),
        ))),
        ("", "Swish") => one(Val::F(swish(f(i(0))?, attr_f(g, n, "alpha", 1.0))?)),
        ("", "SwiGLU") => one(e(onnx::mul(
            &swish(f(i(0))?, attr_f(g, n, "alpha", 1.0))?,
            f(i(1))?,
        ))?),
        ("", "RMSNormalization" | "SimplifiedLayerNormalization") => one(e(
            onnx::rms_normalization(f(i(0))?, f(i(1))?, attr_f(g, n, "epsilon", 1e-5)),
        )?),
        ("com.microsoft", "SkipSimplifiedLayerNormalization") => {
            skip_norm(f(i(0))?, f(i(1))?, f(i(2))?, attr_f(g, n, "epsilon", 1e-12))
        }
        ("", "QuantizeLinear") => {
            let x = f(i(0))?;
            let (_, s) = bytes(i(1))?;
            let axis = norm_axis(attr_i(g, n, "axis", 1), x.shape.len());
            let data = x
                .data
                .iter()
                .enumerate()
                .map(|(k, v)| f32_to_e4m3(v / e8m0_to_f32(s[scale_index(&x.shape, axis, k)]), true))
                .collect();
            one(Val::Bytes {
                dtype: DType::E4M3,
                shape: x.shape.clone(),
                data,
            })
        }
        ("", "DequantizeLinear") => {
            let (shape, q) = bytes(i(0))?;
            let (_, s) = bytes(i(1))?;
            let axis = norm_axis(attr_i(g, n, "axis", 1), shape.len());
            let out_t = g
                .tensor_info(g.outputs(n)[0])
                .map(|t| t.elem_type)
                .unwrap_or(onnx_dt::FLOAT);
            let fp4 = matches!(
                i(0),
                Some(Val::Bytes {
                    dtype: DType::E2M1,
                    ..
                })
            );
            let value = |k: usize| {
                if fp4 {
                    e2m1_to_f32(q[k / 2] >> (4 * (k % 2)))
                } else {
                    e4m3_to_f32(q[k])
                }
            };
            let data = (0..shape.iter().product::<usize>())
                .map(|k| value(k) * e8m0_to_f32(s[scale_index(shape, axis, k)]))
                .collect();
            one(e(Tensor::new(float_dtype(out_t)?, shape, data))?)
        }
        (d, op) if is_quark_mx_op(d, op) => {
            one(Val::F(quark_fake_quant(f(i(0))?, attr_i(g, n, "axis", 1))?))
        }
        ("com.mxfuse", op) => mxfuse(g, n, op, ins),
        (d, op) => Err(format!(
            "op {d}::{op} is not implemented by the test evaluator"
        )),
    }
}

/// `Swish(alpha)` by its ONNX function body: `Mul(X, Sigmoid(Mul(alpha, X)))`, each op rounded.
fn swish(x: &Tensor, alpha: f32) -> Res<Tensor> {
    let ax = onnx::mul(x, &Tensor::scalar(x.dtype, alpha)).map_err(|e| e.to_string())?;
    onnx::mul(x, &onnx::sigmoid(&ax)).map_err(|e| e.to_string())
}

/// ORT's SkipSimplifiedLayerNormalization: fp32 sum (rounded only for output 3), divide, γ in fp32.
fn skip_norm(a: &Tensor, b: &Tensor, gamma: &Tensor, eps: f32) -> Res<Vec<Option<Val>>> {
    let h = *a.shape.last().ok_or("scalar")?;
    let (mut y, mut sum) = (Vec::new(), Vec::new());
    for (ra, rb) in a.data.chunks_exact(h).zip(b.data.chunks_exact(h)) {
        let s: Vec<f32> = ra.iter().zip(rb).map(|(x, r)| x + r).collect();
        let d = (mean_of_squares(&s) + eps).sqrt();
        y.extend(s.iter().zip(&gamma.data).map(|(v, g)| v / d * g));
        sum.extend(s);
    }
    let t = |v| {
        Tensor::new(a.dtype, &a.shape, v)
            .map(|t| Some(Val::F(t)))
            .map_err(|e| e.to_string())
    };
    Ok(vec![t(y)?, None, None, t(sum)?])
}

/// Quark's MXQuantizeDequantize (fp8_e4m3, block 32) along `axis`, by the project's Quark
/// reference kernel (`kernels::reference::quark_mx`: the largest exponent sets the scale, NaN and
/// Inf ignored for it and passed through, the scale not clamped to E8M0's range), in f32 on the
/// widened input, the output rounded to the input's type.
fn quark_fake_quant(x: &Tensor, axis: i64) -> Res<Tensor> {
    use kernels::reference::quark_mx::{quark_mx_fake_quant, IntRounding, QuarkElement};
    let rank = x.shape.len();
    let ax = norm_axis(axis, rank);
    if ax >= rank {
        return Err(format!("axis {axis} of a rank-{rank} tensor"));
    }
    let (outer, len) = (x.shape[..ax].iter().product::<usize>(), x.shape[ax]);
    let inner = x.shape[ax + 1..].iter().product::<usize>();
    // Rows along `axis`: [outer, inner, len].
    let mut rows = vec![0f32; x.data.len()];
    for o in 0..outer {
        for l in 0..len {
            for i in 0..inner {
                rows[(o * inner + i) * len + l] = x.data[(o * len + l) * inner + i];
            }
        }
    }
    let mut y = vec![0f32; rows.len()];
    quark_mx_fake_quant(
        &rows,
        &mut y,
        len,
        32,
        QuarkElement::Fp8E4M3,
        IntRounding::HalfEven,
    )
    .map_err(|e| e.to_string())?;
    let mut out = vec![0f32; y.len()];
    for o in 0..outer {
        for l in 0..len {
            for i in 0..inner {
                out[(o * len + l) * inner + i] = y[(o * inner + i) * len + l];
            }
        }
    }
    Tensor::new(x.dtype, &x.shape, out).map_err(|e| e.to_string())
}

fn kerr(e: kernels::KernelError) -> String {
    e.to_string()
}

/// The `com.mxfuse` ops through the kernels' op-level API.
fn mxfuse(g: &Graph, n: NodeId, op: &str, ins: &[Option<Val>]) -> Res<Vec<Option<Val>>> {
    let pairs = attr_pairs(g, n);
    let pairs = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let i = |k: usize| ins.get(k).and_then(|v| v.as_ref());
    let fb = |t: &Tensor| (t.dtype, t.shape.clone(), to_bytes(t));
    let scale_shape = |s: &[usize]| kernels::ops::scale_shape(s).map_err(kerr);
    match op {
        "MxQuantize" => {
            let (dt, shape, xb) = fb(f(i(0))?);
            let (mut q, mut s) = (
                vec![0u8; xb.len() / dt.size()],
                vec![0u8; xb.len() / dt.size() / 32],
            );
            let ss = scale_shape(&shape)?;
            kernels::ops::mx_quantize(
                TensorRef::new(dt, &shape, &xb).map_err(kerr)?,
                TensorMut::new(DType::E4M3, &shape, &mut q).map_err(kerr)?,
                TensorMut::new(DType::E8M0, &ss, &mut s).map_err(kerr)?,
                &MxQuantAttrs::from_pairs(pairs).map_err(kerr)?,
                &Serial,
            )
            .map_err(kerr)?;
            Ok(quant_outputs(shape, q, ss, s))
        }
        "AddRmsNormMxQuant" => {
            let attrs = AddRmsNormAttrs::from_pairs(pairs).map_err(kerr)?;
            let (dt, shape, xb) = fb(f(i(0))?);
            let res = i(1).map(|v| f(Some(v)).map(fb)).transpose()?;
            let (gdt, gshape, gb) = fb(f(i(2))?);
            let outs = g.outputs(n).len();
            let ss = scale_shape(&shape)?;
            let (mut q, mut s) = (
                vec![0u8; xb.len() / dt.size()],
                vec![0u8; xb.len() / dt.size() / 32],
            );
            let (mut r, mut y) = (vec![0u8; xb.len()], vec![0u8; xb.len()]);
            kernels::ops::add_rms_norm_mx_quant(
                TensorRef::new(dt, &shape, &xb).map_err(kerr)?,
                res.as_ref()
                    .map(|(d, s, b)| TensorRef::new(*d, s, b))
                    .transpose()
                    .map_err(kerr)?,
                TensorRef::new(gdt, &gshape, &gb).map_err(kerr)?,
                NormTensors {
                    q: TensorMut::new(DType::E4M3, &shape, &mut q).map_err(kerr)?,
                    scale: TensorMut::new(DType::E8M0, &ss, &mut s).map_err(kerr)?,
                    residual_out: if outs > 2 {
                        Some(TensorMut::new(dt, &shape, &mut r).map_err(kerr)?)
                    } else {
                        None
                    },
                    normed: if outs > 3 {
                        Some(TensorMut::new(dt, &shape, &mut y).map_err(kerr)?)
                    } else {
                        None
                    },
                },
                &attrs,
                &Serial,
            )
            .map_err(kerr)?;
            let mut out = quant_outputs(shape.clone(), q, ss, s);
            if outs > 2 {
                out.push(Some(Val::F(from_bytes(dt, &shape, r)?)));
            }
            if outs > 3 {
                out.push(Some(Val::F(from_bytes(dt, &shape, y)?)));
            }
            Ok(out)
        }
        "SwiGluMxQuant" => {
            let attrs = SwiGluAttrs::from_pairs(pairs).map_err(kerr)?;
            let a = fb(f(i(0))?);
            let b = i(1).map(|v| f(Some(v)).map(fb)).transpose()?;
            let mut shape = a.1.clone();
            if b.is_none() {
                *shape.last_mut().ok_or("scalar")? /= 2;
            }
            let ss = scale_shape(&shape)?;
            let len: usize = shape.iter().product();
            let (mut q, mut s) = (vec![0u8; len], vec![0u8; len / 32]);
            let ar = TensorRef::new(a.0, &a.1, &a.2).map_err(kerr)?;
            let input = match &b {
                Some((d, sh, by)) => SwiGluTensors::Separate {
                    gate: ar,
                    up: TensorRef::new(*d, sh, by).map_err(kerr)?,
                },
                None => SwiGluTensors::Fused(ar),
            };
            kernels::ops::swiglu_mx_quant(
                input,
                TensorMut::new(DType::E4M3, &shape, &mut q).map_err(kerr)?,
                TensorMut::new(DType::E8M0, &ss, &mut s).map_err(kerr)?,
                &attrs,
                &Serial,
            )
            .map_err(kerr)?;
            Ok(quant_outputs(shape, q, ss, s))
        }
        "MxDequantize" => {
            let attrs = MxDequantAttrs::from_pairs(pairs).map_err(kerr)?;
            let (xs, x) = bytes(i(0))?;
            let (ss, s) = bytes(i(1))?;
            let xt = match i(0) {
                Some(Val::Bytes { dtype, .. }) => *dtype,
                _ => DType::E4M3,
            };
            let count: usize = xs.iter().product();
            let mut y = vec![0u8; count * attrs.output_dtype.size()];
            kernels::ops::mx_dequantize(
                TensorRef::new(xt, xs, x).map_err(kerr)?,
                TensorRef::new(DType::E8M0, ss, s).map_err(kerr)?,
                TensorMut::new(attrs.output_dtype, xs, &mut y).map_err(kerr)?,
                &attrs,
                &Serial,
            )
            .map_err(kerr)?;
            Ok(vec![Some(Val::F(from_bytes(attrs.output_dtype, xs, y)?))])
        }
        "MxMatMul" => {
            let attrs = MxMatMulAttrs::from_pairs(pairs).map_err(kerr)?;
            // No a_scale: a float a (rule mx_weight_matmul).
            let (a_dt, a_shape, a_bytes, a_scale) = match (i(0), i(1)) {
                (Some(Val::F(a)), None) => (a.dtype, a.shape.clone(), to_bytes(a), None),
                (a, s) => {
                    let ((qs, q), (ss, s)) = (bytes(a)?, bytes(s)?);
                    (DType::E4M3, qs.to_vec(), q.to_vec(), Some((ss, s)))
                }
            };
            let qs = &a_shape;
            let bias = match i(4) {
                None => None,
                Some(Val::F(c)) => Some(fb(c)),
                other => return Err(format!("MxMatMul bias {other:?}")),
            };
            let (b, bscale) = match (i(2), i(3)) {
                (Some(Val::F(w)), None) => (fb(w), None),
                (
                    Some(Val::Bytes { dtype, shape, data }),
                    Some(Val::Bytes {
                        shape: s2,
                        data: d2,
                        ..
                    }),
                ) => (
                    (*dtype, shape.clone(), data.clone()),
                    Some((s2.clone(), d2.clone())),
                ),
                other => return Err(format!("MxMatMul weight {other:?}")),
            };
            let (_, _, _, yshape) =
                kernels::ops::mx_matmul_dims(qs, &b.1, attrs.trans_b).map_err(kerr)?;
            let mut y = vec![0u8; yshape.iter().product::<usize>() * attrs.output_dtype.size()];
            let a = TensorRef::new(a_dt, qs, &a_bytes).map_err(kerr)?;
            let b_ref = TensorRef::new(b.0, &b.1, &b.2).map_err(kerr)?;
            let b_scale = bscale
                .as_ref()
                .map(|(sh, d)| TensorRef::new(DType::E8M0, sh, d))
                .transpose()
                .map_err(kerr)?;
            let bias = bias
                .as_ref()
                .map(|(dt, sh, d)| TensorRef::new(*dt, sh, d))
                .transpose()
                .map_err(kerr)?;
            let y_ref = TensorMut::new(attrs.output_dtype, &yshape, &mut y).map_err(kerr)?;
            match a_scale {
                Some((ss, s)) => kernels::ops::mx_matmul(
                    a,
                    TensorRef::new(DType::E8M0, ss, s).map_err(kerr)?,
                    b_ref,
                    b_scale,
                    bias,
                    y_ref,
                    &attrs,
                    &Serial,
                ),
                None => {
                    kernels::ops::mx_matmul_float_a(a, b_ref, b_scale, bias, y_ref, &attrs, &Serial)
                }
            }
            .map_err(kerr)?;
            Ok(vec![Some(Val::F(from_bytes(
                attrs.output_dtype,
                &yshape,
                y,
            )?))])
        }
        other => Err(format!(
            "com.mxfuse::{other} is not implemented by the test evaluator"
        )),
    }
}

/// The `(q, scale)` outputs of an MX quantizing op: E4M3 bytes `q` of `shape`, E8M0 bytes `s`
/// of `scale_shape`.
fn quant_outputs(
    shape: Vec<usize>,
    q: Vec<u8>,
    scale_shape: Vec<usize>,
    s: Vec<u8>,
) -> Vec<Option<Val>> {
    vec![
        Some(Val::Bytes {
            dtype: DType::E4M3,
            shape,
            data: q,
        }),
        Some(Val::Bytes {
            dtype: DType::E8M0,
            shape: scale_shape,
            data: s,
        }),
    ]
}
