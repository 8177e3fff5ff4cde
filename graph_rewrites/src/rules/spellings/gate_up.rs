//! Where a SwiGLU reads gate and up: the spellings rule `swiglu_mxquant_matmul` accepts.
//!
//! Search pattern => (gate, up) from one fused `gate_up [..., 2I]` tensor, or two separate values
//!
//! ```text
//! gate, up = Split(gate_up, axis=-1)                        halves, gate first  ⇒ split_halves
//! gate = Slice(gate_up, 0, I, -1),  up = Slice(gate_up, I, 2I, -1)       halves ⇒ split_halves
//! gate = Slice(gate_up, 0, END, -1, 2), up = Slice(gate_up, 1, END, -1, 2)  even/odd ⇒ interleaved
//! gate, up = any two values of the same shape                                   ⇒ separate
//! ```
//!
//! Key points:
//! * A Slice is read as the exact index set it selects along the last axis (start, step, count
//!   after ONNX's clamping of negative and out-of-range bounds), so every equivalent spelling
//!   (`ends = INT64_MAX`, `ends = 2I`, `starts = -2I`, ...) is recognised and nothing else is.
//! * Slice bounds must be constants; a Slice may also list other axes if it keeps them whole
//!   (start 0, end past any size, step 1: torch's `x[:, :, 0::2]`). Slice-1 (attributes) and
//!   Slice-10+ (inputs) are both read.
//! * Both gate and up must come from the same spelling of the same tensor: a Slice on one side
//!   only is refused (the Slice would be removed with the fusion).
//!
//! Not handled: Split into unequal parts or with up first, up on the even elements, a gate/up
//! split along another axis, Slice bounds computed at run time.

use crate::pattern::opsets::since_version;
use crate::pattern::predicates::{attr_int, dtype, values_i64};
use crate::pattern::{Match, OpId, Pat, Reject, N, V};
use crate::reject;
use crate::view::{AttrValue, Dim, GraphView, NodeId, ValueId, ONNX_DOMAIN};

/// Handles of the gate/up subpattern.
#[derive(Clone, Copy, Debug)]
pub struct GateUpPat {
    /// The fused `[..., 2I]` tensor (bound when a Split or a Slice matched).
    pub gate_up: V,
    pub gate: V,
    pub up: V,
    pub split: N,
    pub slice_gate: N,
    pub slice_up: N,
}

fn onnx(op: &'static str) -> OpId {
    OpId::new(ONNX_DOMAIN, op)
}

/// Declares the gate/up sources: Split halves, two Slices of one tensor, or two free values.
pub fn gate_up(p: &mut Pat) -> GateUpPat {
    let gate_up = p.input("gate_up");
    // Split sizes and Slice bounds are optional / constant inputs: the check reads them.
    let split = p.op(onnx("Split")).args([gate_up]).extra_inputs().node();
    let (half0, half1) = (p.out(split, 0), p.out(split, 1));
    let slice_gate = p.op(onnx("Slice")).args([gate_up]).extra_inputs().node();
    let slice_up = p.op(onnx("Slice")).args([gate_up]).extra_inputs().node();
    let (sliced_gate, sliced_up) = (p.out(slice_gate, 0), p.out(slice_up, 0));
    let gate_in = p.input("gate");
    let up_in = p.input("up");
    let gate = p.any_of("swiglu_gate", [half0, sliced_gate, gate_in]);
    let up = p.any_of("swiglu_up", [half1, sliced_up, up_in]);
    GateUpPat {
        gate_up,
        gate,
        up,
        split,
        slice_gate,
        slice_up,
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

fn elem(g: &dyn GraphView, v: ValueId) -> i32 {
    g.tensor_info(v).map(|i| i.elem_type).unwrap_or(0)
}

fn shape(g: &dyn GraphView, v: ValueId) -> Option<Vec<Dim>> {
    g.tensor_info(v).and_then(|i| i.shape)
}

/// gate/up as one fused input (Split or Slices) or two separate ones. `t` and `i` are the
/// activation's dtype and last dim.
pub fn check_gate_up(m: &Match<'_>, h: &GateUpPat, t: i32, i: i64) -> Result<GateUp, Reject> {
    let g = m.graph();
    let fused = if let Some(split) = m.node(h.split) {
        split_halves(m, h, split, i)?
    } else {
        match (m.node(h.slice_gate), m.node(h.slice_up)) {
            (None, None) => {
                return Ok(GateUp::Separate {
                    gate: m[h.gate],
                    up: m[h.up],
                })
            }
            (Some(sg), Some(su)) => sliced(m, h, sg, su, i)?,
            (sg, su) => {
                let n = sg
                    .or(su)
                    .ok_or_else(|| reject!("internal: no Slice bound"))?;
                return Err(reject!(
                    "only one of gate and up is a Slice ('{}') of '{}': both must slice the same tensor",
                    g.node_name(n),
                    g.value_name(m[h.gate_up])
                ));
            }
        }
    };
    let gu = m[h.gate_up];
    if elem(g, gu) != t || shape(g, gu).and_then(|s| s.last().cloned()) != Some(Dim::Known(2 * i)) {
        return Err(reject!(
            "gate/up source '{}' is not [..., {}] of {}",
            g.value_name(gu),
            2 * i,
            dtype::name(t)
        ));
    }
    Ok(fused)
}

/// `Split(gate_up)` into exactly (gate, up), two halves of the last axis.
fn split_halves(m: &Match<'_>, h: &GateUpPat, split: NodeId, i: i64) -> Result<GateUp, Reject> {
    let g = m.graph();
    let name = g.node_name(split);
    let outs = g.outputs(split);
    if outs.len() != 2 || outs[0] != m[h.gate] || outs[1] != m[h.up] {
        return Err(reject!(
            "Split '{name}' must give exactly (gate, up) in that order"
        ));
    }
    let gu = m[h.gate_up];
    let rank = shape(g, gu).map(|s| s.len()).unwrap_or(0);
    let axis = attr_int(g.attr(split, "axis"), 0).unwrap_or(i64::MIN);
    if rank == 0 || !(axis == -1 || axis == rank as i64 - 1) {
        return Err(reject!(
            "Split '{name}' splits axis {axis}, not the last axis"
        ));
    }
    // Sizes: input 1 (Split-13+) or the `split` attribute (Split-2/11); absent = equal parts.
    let sizes = match (
        g.inputs(split).get(1).copied().flatten(),
        g.attr(split, "split"),
    ) {
        (Some(v), _) => Some(g.const_value(v).and_then(|c| values_i64(&c))),
        (None, Some(AttrValue::Ints(a))) => Some(Some(a)),
        (None, Some(_)) => Some(None),
        (None, None) => None,
    };
    if let Some(sizes) = sizes {
        if sizes.as_deref() != Some(&[i, i]) {
            return Err(reject!(
                "Split '{name}' sizes {sizes:?} are not two halves of {i}"
            ));
        }
    }
    Ok(GateUp::SplitHalves(gu))
}

/// Two Slices of one tensor: halves or even/odd elements of the last axis, gate first.
fn sliced(m: &Match<'_>, h: &GateUpPat, sg: NodeId, su: NodeId, i: i64) -> Result<GateUp, Reject> {
    let g = m.graph();
    let gu = m[h.gate_up];
    if sg == su {
        return Err(reject!(
            "gate and up are the same Slice '{}'",
            g.node_name(sg)
        ));
    }
    let rank = shape(g, gu).map(|s| s.len()).unwrap_or(0);
    if rank == 0 {
        return Err(reject!(
            "sliced tensor '{}' has no known rank",
            g.value_name(gu)
        ));
    }
    let (gr, ur) = (
        last_axis_range(g, sg, rank, 2 * i)?,
        last_axis_range(g, su, rank, 2 * i)?,
    );
    let halves = (LastAxisRange::new(0, 1, i), LastAxisRange::new(i, 1, i));
    let interleaved = (LastAxisRange::new(0, 2, i), LastAxisRange::new(1, 2, i));
    if (gr, ur) == halves {
        Ok(GateUp::SplitHalves(gu))
    } else if (gr, ur) == interleaved {
        Ok(GateUp::Interleaved(gu))
    } else {
        Err(reject!(
            "Slices '{}' (gate: {gr}) and '{}' (up: {ur}) of '{}' are neither halves nor even/odd elements of {} (gate first)",
            g.node_name(sg),
            g.node_name(su),
            g.value_name(gu),
            2 * i
        ))
    }
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

impl std::fmt::Display for LastAxisRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} elements from {} step {}",
            self.count, self.start, self.step
        )
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

/// Reads a Slice's bounds from its attributes (Slice-1) or constant inputs (Slice-10+).
fn slice_bounds(g: &dyn GraphView, n: NodeId) -> Result<SliceBounds, Reject> {
    let name = g.node_name(n);
    let ints = |a: Option<AttrValue>| match a {
        Some(AttrValue::Ints(v)) => Some(v),
        _ => None,
    };
    let (starts, ends, axes, steps) = if since_version(g, ONNX_DOMAIN, "Slice") == Some(1) {
        let starts = ints(g.attr(n, "starts"));
        let ends = ints(g.attr(n, "ends"));
        (starts, ends, ints(g.attr(n, "axes")), None)
    } else {
        let input = |slot: usize| -> Result<Option<Vec<i64>>, Reject> {
            match g.inputs(n).get(slot).copied().flatten() {
                None => Ok(None),
                Some(v) => g
                    .const_value(v)
                    .and_then(|c| values_i64(&c))
                    .map(Some)
                    .ok_or_else(|| {
                        reject!(
                            "Slice '{name}' input {slot} '{}' is not a constant integer tensor",
                            g.value_name(v)
                        )
                    }),
            }
        };
        (input(1)?, input(2)?, input(3)?, input(4)?)
    };
    let (Some(starts), Some(ends)) = (starts, ends) else {
        return Err(reject!("Slice '{name}' has no starts/ends"));
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    let k = starts.len();
    let mut seen = axes.clone();
    seen.sort_unstable();
    seen.dedup();
    // (Repeated axes are invalid ONNX; `-1` and `rank - 1` repeating each other is caught below.)
    if ends.len() != k || axes.len() != k || steps.len() != k || seen.len() != k {
        return Err(reject!(
            "Slice '{name}' starts/ends/axes/steps have different lengths or repeat an axis"
        ));
    }
    Ok(SliceBounds {
        starts,
        ends,
        axes,
        steps,
    })
}

/// The last-axis range a Slice selects from a rank-`rank` tensor whose last dim is `dim`;
/// every other sliced axis must be kept whole.
fn last_axis_range(
    g: &dyn GraphView,
    n: NodeId,
    rank: usize,
    dim: i64,
) -> Result<LastAxisRange, Reject> {
    let name = g.node_name(n);
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
            return Err(reject!(
                "Slice '{name}' axis {} is out of range for rank {rank}",
                b.axes[k]
            ));
        }
        let (start, end, step) = (b.starts[k], b.ends[k], b.steps[k]);
        if axis != rank as i64 - 1 {
            if start != 0 || end < TO_THE_END || step != 1 {
                return Err(reject!(
                    "Slice '{name}' also slices axis {axis}: only the last axis may be sliced"
                ));
            }
            continue;
        }
        if std::mem::replace(&mut last_seen, true) {
            return Err(reject!("Slice '{name}' names the last axis twice"));
        }
        if step <= 0 {
            return Err(reject!(
                "Slice '{name}' has step {step}: only forward slices are fused"
            ));
        }
        // ONNX: negative bounds count from the end, then clamp to [0, dim] (positive steps).
        let clamp = |v: i64| if v < 0 { v.saturating_add(dim) } else { v }.clamp(0, dim);
        let (s, e) = (clamp(start), clamp(end));
        let count = if e > s { (e - s + step - 1) / step } else { 0 };
        range = LastAxisRange::new(s, step, count);
    }
    Ok(range)
}
