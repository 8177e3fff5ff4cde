//! The read-only graph interface the pattern matcher works on.
//!
//! Two implementations exist: the arena IR (`crate::ir::Graph`, used by the offline CLI and tests)
//! and the provider's adapter over ONNX Runtime's `OrtGraph` (used by the plugin EP's
//! `GetCapability`). Keeping the matcher on this trait is what lets both paths fuse exactly the
//! same subgraphs.
//!
//! Ids are dense indices chosen by the implementation; they are only meaningful for the view
//! that produced them.

use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::pipeline::weight_checks::WeightChecks;

/// A node of the viewed graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// A value (an edge: graph input, initializer, or node output) of the viewed graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValueId(pub u32);

/// The ONNX domain string of the default operator set. ONNX allows both "" and "ai.onnx".
pub const ONNX_DOMAIN: &str = "";
/// ONNX Runtime's contrib domain.
pub const MS_DOMAIN: &str = "com.microsoft";
/// AMD Quark's custom-op domain.
pub const QUARK_DOMAIN: &str = "com.amd.quark";
/// The Vitis AI custom-op domain: the deprecated names of AMD Quark's ops, which older Quark
/// releases and `quark.onnx.tools.convert_custom_ops` emit (`MXFixNeuron`, `BFPFixNeuron`, ...).
pub const VAI_DOMAIN: &str = "com.vai.quantize";
/// Every (domain, op type) spelling of AMD Quark's MX fake quant (one float input, the same float
/// out; attributes `element_dtype`, `block_size`, `rounding_mode`, `axis`): Quark's
/// `MXQuantizeDequantize` first, then its deprecated Vitis AI name `MXFixNeuron`, the same op.
/// The one place that says what "a Quark MX fake-quant node" is: rules, checks and the provider's
/// published schemas all read this list.
pub const QUARK_MX_OPS: &[(&str, &str)] = &[
    (QUARK_DOMAIN, "MXQuantizeDequantize"),
    (VAI_DOMAIN, "MXFixNeuron"),
];

/// Whether (`domain`, `op_type`) spells AMD Quark's MX fake quant ([`QUARK_MX_OPS`]).
pub fn is_quark_mx_op(domain: &str, op_type: &str) -> bool {
    QUARK_MX_OPS
        .iter()
        .any(|&(d, o)| d == domain && o == op_type)
}

/// Whether node `n` is AMD Quark's MX fake quant in any of its spellings ([`QUARK_MX_OPS`]).
pub fn is_quark_mx(g: &(impl GraphView + ?Sized), n: NodeId) -> bool {
    is_quark_mx_op(g.domain(n), g.op_type(n))
}
/// NVIDIA TensorRT's custom-op domain (TensorRT Model Optimizer's MXFP8 exports:
/// `TRT_MXFP8DynamicQuantize`, `TRT_MXFP8DequantizeLinear`; docs/ops.md, "ModelOpt spelling").
pub const TRT_DOMAIN: &str = "trt";
/// The domain of the ops mxfuse emits (documented in docs/ops.md).
pub const MXFUSE_DOMAIN: &str = "com.mxfuse";

/// Normalises a domain string: "ai.onnx" and "" are the same domain.
pub fn canonical_domain(domain: &str) -> &str {
    if domain == "ai.onnx" {
        ONNX_DOMAIN
    } else {
        domain
    }
}

/// One dimension of a tensor shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Known(i64),
    /// A symbolic dimension (`dim_param`), e.g. "batch".
    Symbolic(String),
    /// Neither value nor name is known.
    Unknown,
}

/// `64`, `batch`, or `?` for an unknown dim.
impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Known(k) => write!(f, "{k}"),
            Dim::Symbolic(n) => f.write_str(n),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// Element type and (optional) shape of a value. `elem_type` uses ONNX's
/// `TensorProto.DataType` numbering (1 = FLOAT, 10 = FLOAT16, 16 = BFLOAT16, 17 = FLOAT8E4M3FN,
/// 24 = FLOAT8E8M0, ...); 0 means unknown.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TensorInfo {
    pub elem_type: i32,
    /// `None` when the rank is unknown.
    pub shape: Option<Vec<Dim>>,
}

/// An attribute value, decoded.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(ConstTensor),
    /// Graphs, sparse tensors, type protos...: present but not decoded.
    Other,
}

/// A constant tensor's value as little-endian raw bytes in ONNX's layout for `elem_type`
/// (the same bytes `TensorProto.raw_data` would hold).
#[derive(Clone, Debug, PartialEq)]
pub struct ConstTensor {
    pub elem_type: i32,
    pub dims: Vec<i64>,
    pub raw: Vec<u8>,
}

/// A constant's bytes as [`GraphView::const_bytes`] gives them: borrowed where the view holds
/// them in memory (an inline initializer, ONNX Runtime's initializer), read otherwise (external
/// data). The layout is [`ConstTensor`]'s.
#[derive(Debug)]
pub struct ConstBytes<'a> {
    pub elem_type: i32,
    pub dims: Vec<i64>,
    pub raw: Cow<'a, [u8]>,
}

impl From<ConstTensor> for ConstBytes<'_> {
    fn from(t: ConstTensor) -> Self {
        ConstBytes {
            elem_type: t.elem_type,
            dims: t.dims,
            raw: Cow::Owned(t.raw),
        }
    }
}

/// Rewrite-time work on constants that the checks of one scan would otherwise repeat (a Quark
/// weight quantized and checked against Quark's kernel, read by several MatMuls or tried by
/// several rules), keyed by value id. It lives as long as one scan of the rules over an
/// unchanging graph ([`Memoized`]), so a value id always names the same bytes. Verdicts that
/// outlive the scan (a pipeline run's refusals, an EP session's checks) are in its
/// [`WeightChecks`], keyed by the weight's content instead.
#[derive(Default)]
pub struct ConstMemo {
    values: Mutex<HashMap<ValueId, Arc<dyn Any + Send + Sync>>>,
    checks: Option<Arc<WeightChecks>>,
    /// The largest Quark weight the check reads (setting `quark_weight_max_mib`); `None`:
    /// [`crate::ir::QUARK_WEIGHT_MAX_BYTES`].
    quark_max_bytes: Option<u64>,
}

impl ConstMemo {
    /// The memoized `T` of `v`, or `make()` (stored unless `v` already holds another type).
    pub fn get_or_make<T: Clone + Send + Sync + 'static>(
        &self,
        v: ValueId,
        make: impl FnOnce() -> T,
    ) -> T {
        let lock = || self.values.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = lock().get(&v).and_then(|a| a.downcast_ref::<T>()) {
            return t.clone();
        }
        // Not locked while `make` runs (it may take seconds on a large weight).
        let t = make();
        lock().entry(v).or_insert_with(|| Arc::new(t.clone()));
        t
    }

    /// The Quark weight verdicts shared beyond this scan, if any.
    pub fn weight_checks(&self) -> Option<&WeightChecks> {
        self.checks.as_deref()
    }

    /// The largest Quark fake-quantized weight (bytes) the rules read to quantize and check it.
    pub fn quark_max_bytes(&self) -> u64 {
        self.quark_max_bytes
            .unwrap_or(crate::ir::QUARK_WEIGHT_MAX_BYTES)
    }
}

impl std::fmt::Debug for ConstMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.values.lock().map_or(0, |m| m.len());
        write!(f, "ConstMemo({n} entries, checks {:?})", self.checks)
    }
}

/// Read-only access to a graph, enough for pattern matching.
///
/// Contract:
/// * `nodes()` is in a topological order.
/// * `consumers(v)` lists every (node, input slot) that reads `v`, including uses inside
///   subgraphs of control-flow nodes (reported as a use by the control-flow node itself).
/// * `const_value` returns `Some` only for values whose content is fixed for every run
///   (initializers that are not graph inputs, outputs of `Constant` nodes may be included).
///   Implementations may refuse large or external tensors by returning `None`; rules must then
///   refuse the fusion with a reason, never guess.
pub trait GraphView {
    /// Nodes in topological order.
    fn nodes(&self) -> Cow<'_, [NodeId]>;
    fn op_type(&self, n: NodeId) -> &str;
    /// The node's domain, already canonical ("" for ONNX).
    fn domain(&self, n: NodeId) -> &str;
    fn node_name(&self, n: NodeId) -> &str;
    /// Input slots; `None` marks an omitted optional input ("" in ONNX).
    fn inputs(&self, n: NodeId) -> &[Option<ValueId>];
    fn outputs(&self, n: NodeId) -> &[ValueId];
    fn attr(&self, n: NodeId, name: &str) -> Option<AttrValue>;
    /// Names of all attributes set on the node (to reject unknown attributes).
    fn attr_names(&self, n: NodeId) -> Vec<String>;
    /// The opset version imported for `domain` by the model (canonical domain), if any.
    fn opset(&self, domain: &str) -> Option<i64>;

    fn value_name(&self, v: ValueId) -> &str;
    fn producer(&self, v: ValueId) -> Option<(NodeId, usize)>;
    fn consumers(&self, v: ValueId) -> Cow<'_, [(NodeId, usize)]>;
    fn is_graph_output(&self, v: ValueId) -> bool;
    fn is_graph_input(&self, v: ValueId) -> bool;
    fn tensor_info(&self, v: ValueId) -> Option<TensorInfo>;
    fn const_value(&self, v: ValueId) -> Option<ConstTensor>;
    /// The bytes of constant `v` when they are at most `max_bytes`, borrowed where the view
    /// holds them (the Quark weight check reads weights far above `const_value`'s cap, up to
    /// gigabytes, and needs no copy of its own). Default: `const_value`, within its own cap.
    fn const_bytes(&self, v: ValueId, max_bytes: u64) -> Option<ConstBytes<'_>> {
        self.const_value(v)
            .filter(|t| t.raw.len() as u64 <= max_bytes)
            .map(ConstBytes::from)
    }
    /// Whether `v` is a constant (initializer / Constant output) even if its bytes are not
    /// loaded (e.g. external data). Weights of a MatMul only need this, not the bytes.
    fn is_constant(&self, v: ValueId) -> bool;

    /// The view's [`ConstMemo`], if it keeps one (checks then share their work on constants).
    fn memo(&self) -> Option<&ConstMemo> {
        None
    }

    /// How messages name a node: its name, or (exporters may leave names empty) its op type and
    /// first output.
    fn node_label(&self, n: NodeId) -> String {
        match self.node_name(n) {
            "" => {
                let out = self.outputs(n).first().map_or("", |&v| self.value_name(v));
                format!("{} -> {out}", self.op_type(n))
            }
            name => name.to_string(),
        }
    }
}

/// Why `v` is not a constant, for a refusal that needs one: `""`, or, for a graph input, that it
/// may be an initializer a run overrides (ONNX lets a graph input carry an initializer as its
/// default; ONNX Runtime then treats it as a run-time value, and so do the rules). New-user probe
/// 12: "'c18' must be a constant" named a value the user saw among the initializers.
pub fn not_constant_note(g: &dyn GraphView, v: ValueId) -> &'static str {
    if g.is_graph_input(v) {
        " (it is a graph input, a run-time value even where an initializer of that name gives it a default: a run may override it; to fuse, keep such a constant out of the graph's inputs)"
    } else {
        ""
    }
}

/// A view with a [`ConstMemo`]: what one scan of the rules looks at (`pipeline`), so that checks
/// share their work on constants for exactly that scan (nothing outlives an edit of the graph).
pub struct Memoized<'a> {
    g: &'a dyn GraphView,
    memo: ConstMemo,
}

impl<'a> Memoized<'a> {
    /// A scan whose Quark weight checks also share `checks` (kept beyond the scan) and read
    /// Quark weights up to `quark_max_bytes` (`None`: the default,
    /// [`crate::ir::QUARK_WEIGHT_MAX_BYTES`]).
    pub fn with_checks(
        g: &'a dyn GraphView,
        checks: Arc<WeightChecks>,
        quark_max_bytes: Option<u64>,
    ) -> Self {
        Memoized {
            g,
            memo: ConstMemo {
                checks: Some(checks),
                quark_max_bytes,
                ..ConstMemo::default()
            },
        }
    }
}

/// The [`GraphView`] methods a wrapper view forwards unchanged to its field `$g` (all but
/// `const_value`, which every wrapper has a reason to see, and the provided ones): write
/// `forward_graph_view!(g);` inside the `impl GraphView` block, then the methods it changes.
#[macro_export]
macro_rules! forward_graph_view {
    ($g:ident) => {
        fn nodes(&self) -> std::borrow::Cow<'_, [$crate::view::NodeId]> {
            self.$g.nodes()
        }
        fn op_type(&self, n: $crate::view::NodeId) -> &str {
            self.$g.op_type(n)
        }
        fn domain(&self, n: $crate::view::NodeId) -> &str {
            self.$g.domain(n)
        }
        fn node_name(&self, n: $crate::view::NodeId) -> &str {
            self.$g.node_name(n)
        }
        fn inputs(&self, n: $crate::view::NodeId) -> &[Option<$crate::view::ValueId>] {
            self.$g.inputs(n)
        }
        fn outputs(&self, n: $crate::view::NodeId) -> &[$crate::view::ValueId] {
            self.$g.outputs(n)
        }
        fn attr(&self, n: $crate::view::NodeId, name: &str) -> Option<$crate::view::AttrValue> {
            self.$g.attr(n, name)
        }
        fn attr_names(&self, n: $crate::view::NodeId) -> Vec<String> {
            self.$g.attr_names(n)
        }
        fn opset(&self, domain: &str) -> Option<i64> {
            self.$g.opset(domain)
        }
        fn value_name(&self, v: $crate::view::ValueId) -> &str {
            self.$g.value_name(v)
        }
        fn producer(&self, v: $crate::view::ValueId) -> Option<($crate::view::NodeId, usize)> {
            self.$g.producer(v)
        }
        fn consumers(
            &self,
            v: $crate::view::ValueId,
        ) -> std::borrow::Cow<'_, [($crate::view::NodeId, usize)]> {
            self.$g.consumers(v)
        }
        fn is_graph_output(&self, v: $crate::view::ValueId) -> bool {
            self.$g.is_graph_output(v)
        }
        fn is_graph_input(&self, v: $crate::view::ValueId) -> bool {
            self.$g.is_graph_input(v)
        }
        fn tensor_info(&self, v: $crate::view::ValueId) -> Option<$crate::view::TensorInfo> {
            self.$g.tensor_info(v)
        }
        fn is_constant(&self, v: $crate::view::ValueId) -> bool {
            self.$g.is_constant(v)
        }
    };
}

impl GraphView for Memoized<'_> {
    forward_graph_view!(g);
    fn const_value(&self, v: ValueId) -> Option<ConstTensor> {
        self.g.const_value(v)
    }
    fn const_bytes(&self, v: ValueId, max_bytes: u64) -> Option<ConstBytes<'_>> {
        self.g.const_bytes(v, max_bytes)
    }
    fn memo(&self) -> Option<&ConstMemo> {
        Some(&self.memo)
    }
    fn node_label(&self, n: NodeId) -> String {
        self.g.node_label(n)
    }
}
