//! ONNX backend node tests (testdata/onnx_node, converted by testdata/onnx_node_to_text.py):
//! float8 QuantizeLinear/DequantizeLinear against the codecs (exact), RMSNormalization against
//! `reference::onnx_ops::rms_normalization` (the expected outputs are numpy's f32 pairwise mean,
//! ours the pinned f64 lane mean, so they may differ in the last ulps).

use half::f16;
use kernels::codec::{e4m3_to_f32, f32_to_e4m3};
use kernels::reference::onnx_ops::{self as onnx, Tensor};
use kernels::DType;
use std::collections::HashMap;

struct Case {
    op: String,
    attrs: HashMap<String, String>,
    /// (kind, dtype, dims, raw values) in file order.
    tensors: Vec<(String, String, Vec<usize>, Vec<u32>)>,
}

fn load(name: &str) -> Case {
    let path = format!(
        "{}/testdata/onnx_node/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("committed node case");
    let mut case = Case {
        op: String::new(),
        attrs: HashMap::new(),
        tensors: Vec::new(),
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "op" => case.op = f[1].to_owned(),
            "attr" => {
                case.attrs.insert(f[1].to_owned(), f[2].to_owned());
            }
            kind => {
                let dims = if f[3] == "-" {
                    Vec::new()
                } else {
                    f[3].split(',').map(|d| d.parse().unwrap()).collect()
                };
                let vals = f[4]
                    .split(',')
                    .map(|h| u32::from_str_radix(h, 16).unwrap())
                    .collect();
                case.tensors
                    .push((kind.to_owned(), f[2].to_owned(), dims, vals));
            }
        }
    }
    case
}

fn as_f32(dtype: &str, raw: &[u32]) -> Vec<f32> {
    raw.iter()
        .map(|&b| match dtype {
            "f32" => f32::from_bits(b),
            "f16" => f16::from_bits(b as u16).to_f32(),
            _ => e4m3_to_f32(b as u8),
        })
        .collect()
}

#[test]
fn quantizelinear_e4m3fn() {
    let c = load("test_quantizelinear_e4m3fn");
    assert_eq!(c.op, "QuantizeLinear");
    let x = as_f32("f32", &c.tensors[0].3);
    let scale = f32::from_bits(c.tensors[1].3[0]);
    let saturate = c.attrs.get("saturate").is_none_or(|s| s == "1");
    let got: Vec<u32> = x
        .iter()
        .map(|&v| f32_to_e4m3(v / scale, saturate) as u32)
        .collect();
    assert_eq!(got, c.tensors[3].3);
}

#[test]
fn dequantizelinear_e4m3fn() {
    for name in [
        "test_dequantizelinear_e4m3fn",
        "test_dequantizelinear_e4m3fn_float16",
    ] {
        let c = load(name);
        assert_eq!(c.op, "DequantizeLinear");
        let scale = as_f32(&c.tensors[1].1, &c.tensors[1].3)[0];
        let out = c.tensors.last().unwrap();
        for (&b, &want) in c.tensors[0].3.iter().zip(&out.3) {
            let y = e4m3_to_f32(b as u8) * scale;
            let got = if out.1 == "f16" {
                f16::from_f32(y).to_bits() as u32
            } else {
                y.to_bits()
            };
            assert_eq!(got, want, "{name}: byte {b:#x}");
        }
    }
}

#[test]
fn rms_normalization_cases() {
    for name in [
        "test_rms_normalization_2d_axis1",
        "test_rms_normalization_2d_axis_negative_1",
        "test_rms_normalization_3d_axis_negative_1_epsilon",
        "test_rms_normalization_4d_axis_negative_1",
        "test_rms_normalization_4d_axis_negative_2",
        "test_rms_normalization_default_axis",
    ] {
        let c = load(name);
        assert_eq!(c.op, "RMSNormalization");
        let (_, _, dims, xr) = &c.tensors[0];
        let rank = dims.len() as i64;
        let axis: i64 = c.attrs.get("axis").map_or(-1, |a| a.parse().unwrap());
        let axis = if axis < 0 { axis + rank } else { axis } as usize;
        let eps: f32 = c.attrs.get("epsilon").map_or(1e-5, |e| e.parse().unwrap());
        // Normalising over axes axis.. equals the last-axis op on [outer, inner]; the scale
        // broadcasts as a suffix of the normalised shape.
        let inner: usize = dims[axis..].iter().product();
        let scale = as_f32("f32", &c.tensors[1].3);
        let scale: Vec<f32> = (0..inner).map(|i| scale[i % scale.len()]).collect();
        let x = Tensor::new(DType::F32, &[xr.len() / inner, inner], as_f32("f32", xr)).unwrap();
        let s = Tensor::new(DType::F32, &[inner], scale).unwrap();
        let y = onnx::rms_normalization(&x, &s, eps).unwrap();
        let want = as_f32("f32", &c.tensors[2].3);
        for (g, w) in y.data.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 4.0 * f32::EPSILON * w.abs().max(1e-30),
                "{name}: {g} vs {w}"
            );
        }
    }
}
