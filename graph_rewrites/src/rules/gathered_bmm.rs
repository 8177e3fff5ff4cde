//! The batched MatMul that multiplies gathered MX experts with the tokens' activations, when rule
//! `mx_gather_dequant` can take it too (`MxGatherMatMul`, the stacked weights read in place).
//!
//! transformers' `batched_mm` experts, exported by torch dynamo, spell one expert projection as
//! `bmm(W[ids], x.unsqueeze(-1))` (`W [E, N, K]`, the weight first) or `bmm(x.unsqueeze(1),
//! W[ids])` (`W [E, K, N]`, the weight second). What must hold, each refusal a note (the
//! gathered dequantize still fuses alone):
//! * the Gather's output is read by that one MatMul only (and is not a graph output);
//! * the weight is MXFP8 (E4M3) or MXFP4 (E2M1) in blocks of 32 along K with K a multiple of 32
//!   (the MX GEMM contract), its dims known, gathered by a 1-D index along axis 0;
//! * weight first: the activation is `[S, K, 1]`; weight second: `[S, P, K]`, of the
//!   dequantize's float type. The sample dims may differ only where one is 1 (MatMul's batch
//!   broadcast, which `MxGatherMatMul` follows).

use crate::pattern::predicates::dtype;
use crate::view::{Dim, GraphView, NodeId, ValueId, ONNX_DOMAIN};

/// What `MxGatherMatMul` needs of an accepted bmm.
#[derive(Clone, Copy, Debug)]
pub struct Bmm {
    pub matmul: NodeId,
    pub act: ValueId,
    pub y: ValueId,
    /// The weight is the MatMul's first operand (`[E, N, K]`).
    pub trans_b: bool,
}

/// The dequantize being gathered: its values' element type and dims (where known), quantized
/// axis (normalized), block size and output type. A Quark fake-quantized float constant has the
/// E4M3 values and dims of what the rule quantizes it to.
pub struct Experts {
    pub elem_type: i32,
    pub dims: Option<Vec<usize>>,
    pub axis: i64,
    pub block_size: i64,
    pub output_dtype: i64,
}

/// `Ok(Some(bmm))` when the one reader of `gathered` (the Gather's output) is a bmm
/// `MxGatherMatMul` computes; `Ok(None)` when it is no MatMul at all; `Err(note)` when it is a
/// MatMul that cannot be taken, and why.
pub fn gathered_bmm(
    g: &dyn GraphView,
    gathered: ValueId,
    indices: ValueId,
    ex: &Experts,
) -> Result<Option<Bmm>, String> {
    let readers = g.consumers(gathered);
    let [(mm, _)] = &readers[..] else {
        return Ok(None);
    };
    let mm = *mm;
    if g.op_type(mm) != "MatMul" || g.domain(mm) != ONNX_DOMAIN || g.is_graph_output(gathered) {
        return Ok(None);
    }
    let name = g.node_label(mm);
    let inputs: Vec<Option<ValueId>> = g.inputs(mm).to_vec();
    let trans_b = match (
        inputs.first().copied().flatten(),
        inputs.get(1).copied().flatten(),
    ) {
        (Some(a), Some(b)) if a == gathered && b != gathered => true,
        (Some(a), Some(b)) if b == gathered && a != gathered => false,
        _ => return Err(format!("MatMul '{name}' reads the gathered experts twice")),
    };
    let act = if trans_b { inputs[1] } else { inputs[0] }.unwrap_or(gathered);
    let vtype = ex.elem_type;
    if vtype != dtype::FLOAT8E4M3FN && vtype != dtype::FLOAT4E2M1 {
        return Err(format!(
            "MatMul '{name}': the experts are {}, the MX GEMM reads FLOAT8E4M3FN or FLOAT4E2M1",
            dtype::name(vtype)
        ));
    }
    let Some(&[_, d1, d2]) = ex.dims.as_deref() else {
        return Err(format!(
            "MatMul '{name}': the stacked experts need known dims [E, ., .]"
        ));
    };
    // K: the quantized axis, which must be the weight's reduction axis of this MatMul.
    let (k_axis, k) = if trans_b {
        (2, d2 as i64)
    } else {
        (1, d1 as i64)
    };
    if ex.axis != k_axis || ex.block_size != 32 || k % 32 != 0 {
        return Err(format!(
            "MatMul '{name}': the experts are quantized along axis {} in blocks of {}; the MX GEMM needs blocks of 32 along K (axis {k_axis}, {k} long, a multiple of 32)",
            ex.axis, ex.block_size
        ));
    }
    let idx_rank = g
        .tensor_info(indices)
        .and_then(|i| i.shape)
        .map(|s| s.len());
    if idx_rank != Some(1) {
        return Err(format!(
            "MatMul '{name}': the expert ids must be 1-D (one per sample)"
        ));
    }
    let info = g.tensor_info(act);
    let adims = info
        .as_ref()
        .and_then(|i| i.shape.clone())
        .unwrap_or_default();
    let fits = match (trans_b, adims.as_slice()) {
        (true, [_, Dim::Known(kk), Dim::Known(1)]) => *kk == k,
        (false, [_, _, Dim::Known(kk)]) => *kk == k,
        _ => false,
    };
    if !fits {
        let want = if trans_b { "[S, K, 1]" } else { "[S, P, K]" };
        return Err(format!(
            "MatMul '{name}': the activation '{}' is not known to be {want} with K = {k}",
            g.value_name(act)
        ));
    }
    let at = info.map(|i| i.elem_type as i64).unwrap_or(0);
    if at != ex.output_dtype || !dtype::ACTIVATION.contains(&(at as i32)) {
        return Err(format!(
            "MatMul '{name}': the activation is {}, the experts dequantize to {}",
            dtype::name(at as i32),
            dtype::name(ex.output_dtype as i32)
        ));
    }
    Ok(Some(Bmm {
        matmul: mm,
        act,
        y: g.outputs(mm)[0],
        trans_b,
    }))
}
