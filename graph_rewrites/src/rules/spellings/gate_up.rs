//! Where a SwiGLU reads gate and up: the sources rule `swiglu_mxquant_matmul` absorbs.
//!
//! Search pattern => gate, up: any two values; then, walking back from them,
//!
//! ```text
//! gate, up = Split(gate_up, axis=-1) halves, gate first                      ⇒ split_halves(gate_up)
//! gate = Slice(gate_up, 0, I, -1),      up = Slice(gate_up, I, 2I, -1)       ⇒ split_halves(gate_up)
//! gate = Slice(gate_up, 0, END, -1, 2), up = Slice(gate_up, 1, END, -1, 2)   ⇒ interleaved(gate_up)
//! anything else                                                              ⇒ separate(gate, up)
//! ```
//!
//! Key points:
//! * The Split / Slices are found by walking back from gate and up (not declared in the
//!   pattern), so a source the fused op cannot read as one tensor is never a refusal: the fused
//!   op reads gate and up as they are (`separate`) and the Split / Slices stay in the graph.
//!   They are absorbed only when every reader of their outputs is inside the fusion.
//! * A Slice is read as the exact index set it selects along the last axis (start, step, count
//!   after ONNX's clamping of negative and out-of-range bounds), so every equivalent spelling
//!   (`ends = INT64_MAX`, `ends = 2I`, `starts = -2I`, ...) is recognised and nothing else is.
//! * Slice bounds must be constants; a Slice may also list other axes if it keeps them whole
//!   (start 0, end past any size, step 1: torch's `x[:, :, 0::2]`). Slice-1 (attributes) and
//!   Slice-10+ (inputs) are both read; Split sizes from input 1 or the Split-2/11 attribute.
//!
//! Not absorbed (read as `separate`): a Split into unequal parts, more than two parts or with
//! up first; up on the even elements; Slices of another axis or with run-time bounds; a
//! Split / Slice output read outside the fusion.

use crate::pattern::opsets::since_version;
use crate::pattern::predicates::{attr_int, values_i64};
use crate::pattern::{Match, Pat, V};
use crate::view::{AttrValue, Dim, GraphView, NodeId, ValueId, ONNX_DOMAIN};

/// Handles of the gate/up values.
#[derive(Clone, Copy, Debug)]
pub struct GateUpPat {
    pub gate: V,
    pub up: V,
}

/// Declares gate and up (their sources are found by [`check_gate_up`]).
pub fn gate_up(p: &mut Pat) -> GateUpPat {
    GateUpPat {
        gate: p.input("gate"),
        up: p.input("up"),
    }
}

/// Where the fused op reads gate and up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateUp {
    /// One `[..., 2I]` input, gate = first half, up = second half (layout `split_halves`).
    SplitHalves(ValueId),
    /// One `[..., 2I]` input, gate = even, up = odd elements (layout `interleaved`).
    Interleaved(ValueId),
    /// Two `[..., I]` inputs (layout `separate`).
    Separate { gate: ValueId, up: ValueId },
}

impl GateUp {
    /// The values the fused op reads.
    pub fn values(&self) -> Vec<ValueId> {
        match self {
            GateUp::SplitHalves(gu) | GateUp::Interleaved(gu) => vec![*gu],
            GateUp::Separate { gate, up } => vec![*gate, *up],
        }
    }
}

/// What the fused op reads, and the Split / Slice nodes it absorbs to read it.
#[derive(Clone, Debug)]
pub struct GateUpSource {
    pub inputs: GateUp,
    pub absorbed: Vec<NodeId>,
}

fn shape(g: &dyn GraphView, v: ValueId) -> Option<Vec<Dim>> {
    g.tensor_info(v).and_then(|i| i.shape)
}

/// gate/up as one fused tensor (behind a Split or two Slices the fusion can absorb) or as two
/// separate values. `t` and `i` are the activation's dtype and last dim (gate/up are `[..., i]`
/// of `t`, already checked).
pub fn check_gate_up(m: &Match<'_>, h: &GateUpPat, t: i32, i: i64) -> GateUpSource {
    let g = m.graph();
    let (gate, up) = (m[h.gate], m[h.up]);
    let fused = match (g.producer(gate), g.producer(up)) {
        (Some((pg, 0)), Some((pu, 1))) if pg == pu => split_halves(m, pg, t, i),
        (Some((pg, 0)), Some((pu, 0))) if pg != pu => sliced(m, pg, pu, t, i),
        _ => None,
    };
    fused.unwrap_or(GateUpSource {
        inputs: GateUp::Separate { gate, up },
        absorbed: Vec::new(),
    })
}

/// Whether `v` disappears with the fusion: read only by matched nodes, not a graph output.
fn read_only_inside(m: &Match<'_>, v: ValueId) -> bool {
    let g = m.graph();
    let inside = m.nodes();
    !g.is_graph_output(v) && g.consumers(v).iter().all(|(c, _)| inside.contains(c))
}

/// Whether `gu` can be the fused op's one input: `[..., 2i]` of `t`.
fn fused_tensor_ok(g: &dyn GraphView, gu: ValueId, t: i32, i: i64) -> bool {
    let ok_type = g.tensor_info(gu).is_some_and(|x| x.elem_type == t);
    ok_type && shape(g, gu).and_then(|s| s.last().cloned()) == Some(Dim::Known(2 * i))
}

fn is_onnx(g: &dyn GraphView, n: NodeId, op: &str) -> bool {
    g.domain(n) == ONNX_DOMAIN && g.op_type(n) == op
}

/// `Split(gate_up)` into exactly two halves of the last axis, (gate, up) in that order.
fn split_halves(m: &Match<'_>, split: NodeId, t: i32, i: i64) -> Option<GateUpSource> {
    let g = m.graph();
    let outs = g.outputs(split);
    if !is_onnx(g, split, "Split") || outs.len() != 2 {
        return None;
    }
    let (gate, up) = (outs[0], outs[1]);
    let gu = g.inputs(split).first().copied().flatten()?;
    let rank = shape(g, gu).map_or(0, |s| s.len());
    let axis = attr_int(g.attr(split, "axis"), 0)?;
    if rank == 0 || !(axis == -1 || axis == rank as i64 - 1) {
        return None;
    }
    // Sizes: input 1 (Split-13+) or the `split` attribute (Split-2/11); absent = equal parts.
    let sizes = match (
        g.inputs(split).get(1).copied().flatten(),
        g.attr(split, "split"),
    ) {
        (Some(v), _) => Some(g.const_value(v).and_then(|c| values_i64(&c))?),
        (None, Some(AttrValue::Ints(a))) => Some(a),
        (None, Some(_)) => return None,
        (None, None) => None,
    };
    let halves = sizes.is_none_or(|s| s == [i, i]);
    let absorbable = read_only_inside(m, gate) && read_only_inside(m, up);
    (halves && absorbable && fused_tensor_ok(g, gu, t, i)).then(|| GateUpSource {
        inputs: GateUp::SplitHalves(gu),
        absorbed: vec![split],
    })
}

/// Two Slices of one tensor: halves or even/odd elements of the last axis, gate first.
fn sliced(m: &Match<'_>, sg: NodeId, su: NodeId, t: i32, i: i64) -> Option<GateUpSource> {
    let g = m.graph();
    if !is_onnx(g, sg, "Slice") || !is_onnx(g, su, "Slice") {
        return None;
    }
    let gu = g.inputs(sg).first().copied().flatten()?;
    if g.inputs(su).first().copied().flatten() != Some(gu) || !fused_tensor_ok(g, gu, t, i) {
        return None;
    }
    let absorbable = [sg, su]
        .iter()
        .all(|n| g.outputs(*n).iter().all(|v| read_only_inside(m, *v)));
    let rank = shape(g, gu).map_or(0, |s| s.len());
    let ranges = (
        last_axis_range(g, sg, rank, 2 * i)?,
        last_axis_range(g, su, rank, 2 * i)?,
    );
    let halves = (LastAxisRange::new(0, 1, i), LastAxisRange::new(i, 1, i));
    let interleaved = (LastAxisRange::new(0, 2, i), LastAxisRange::new(1, 2, i));
    let inputs = if ranges == halves {
        GateUp::SplitHalves(gu)
    } else if ranges == interleaved {
        GateUp::Interleaved(gu)
    } else {
        return None;
    };
    absorbable.then(|| GateUpSource {
        inputs,
        absorbed: vec![sg, su],
    })
}

/// The elements a Slice selects along the last axis: `start, start + step, ...`, `count` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LastAxisRange {
    start: i64,
    step: i64,
    count: i64,
}

impl LastAxisRange {
    fn new(start: i64, step: i64, count: i64) -> Self {
        LastAxisRange { start, step, count }
    }
}

/// Slice bounds, one entry per sliced axis.
struct SliceBounds {
    starts: Vec<i64>,
    ends: Vec<i64>,
    axes: Vec<i64>,
    steps: Vec<i64>,
}

/// An end at or past this keeps everything up to the end of any real tensor dimension
/// (exporters write INT64_MAX or INT32_MAX).
const TO_THE_END: i64 = i32::MAX as i64;

/// Reads a Slice's bounds from its attributes (Slice-1) or constant inputs (Slice-10+); `None`
/// when they are not constants or not consistent.
fn slice_bounds(g: &dyn GraphView, n: NodeId) -> Option<SliceBounds> {
    let ints = |a: Option<AttrValue>| match a {
        Some(AttrValue::Ints(v)) => Some(v),
        _ => None,
    };
    let (starts, ends, axes, steps) = if since_version(g, ONNX_DOMAIN, "Slice") == Some(1) {
        let starts = ints(g.attr(n, "starts"));
        let ends = ints(g.attr(n, "ends"));
        (starts, ends, ints(g.attr(n, "axes")), None)
    } else {
        // An absent optional input is `Some(None)`; a present one must be a constant.
        let input = |slot: usize| match g.inputs(n).get(slot).copied().flatten() {
            None => Some(None),
            Some(v) => g.const_value(v).and_then(|c| values_i64(&c)).map(Some),
        };
        (input(1)?, input(2)?, input(3)?, input(4)?)
    };
    let (starts, ends) = (starts?, ends?);
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    let k = starts.len();
    let mut seen = axes.clone();
    seen.sort_unstable();
    seen.dedup();
    // (Repeated axes are invalid ONNX; `-1` and `rank - 1` repeating each other is caught below.)
    let consistent = ends.len() == k && axes.len() == k && steps.len() == k && seen.len() == k;
    consistent.then_some(SliceBounds {
        starts,
        ends,
        axes,
        steps,
    })
}

/// The last-axis range a Slice selects from a rank-`rank` tensor whose last dim is `dim`; `None`
/// unless every other sliced axis is kept whole and the step is positive.
fn last_axis_range(g: &dyn GraphView, n: NodeId, rank: usize, dim: i64) -> Option<LastAxisRange> {
    let b = slice_bounds(g, n)?;
    let mut range = LastAxisRange::new(0, 1, dim);
    let mut last_seen = false;
    for k in 0..b.axes.len() {
        let axis = if b.axes[k] < 0 {
            b.axes[k] + rank as i64
        } else {
            b.axes[k]
        };
        if rank == 0 || !(0..rank as i64).contains(&axis) {
            return None;
        }
        let (start, end, step) = (b.starts[k], b.ends[k], b.steps[k]);
        if axis != rank as i64 - 1 {
            if start != 0 || end < TO_THE_END || step != 1 {
                return None;
            }
            continue;
        }
        // `-1` and `rank - 1` both naming the last axis (invalid ONNX), or a backward slice.
        if std::mem::replace(&mut last_seen, true) || step <= 0 {
            return None;
        }
        // ONNX: negative bounds count from the end, then clamp to [0, dim] (positive steps).
        let clamp = |v: i64| if v < 0 { v.saturating_add(dim) } else { v }.clamp(0, dim);
        let (s, e) = (clamp(start), clamp(end));
        let count = if e > s { (e - s + step - 1) / step } else { 0 };
        range = LastAxisRange::new(s, step, count);
    }
    Some(range)
}
