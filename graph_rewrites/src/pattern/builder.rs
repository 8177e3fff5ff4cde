//! Declaring patterns: values (`V`) and nodes (`N`) as typed handles.
//!
//! A pattern is a small DAG read *backwards* from its root value: each value is a free input,
//! a constant, an output of a pattern node, or a choice between alternatives. A value handle used
//! twice (the quantizer reads `x` through both its scale path and `QuantizeLinear`) must bind the
//! same graph value both times.

use std::fmt;
use std::sync::Arc;

use super::opsets::OpId;
use crate::view::{AttrValue, ConstTensor, GraphView, NodeId};

/// A pattern value handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct V(pub(crate) u32);

/// A pattern node handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct N(pub(crate) u32);

/// Predicate on a constant's value.
pub type ConstPred = Arc<dyn Fn(&ConstTensor) -> bool + Send + Sync>;
/// Predicate on an attribute (`None` when the attribute is not set).
pub type AttrPredFn = Arc<dyn Fn(Option<&AttrValue>) -> bool + Send + Sync>;
/// Predicate on a whole candidate node, for conditions no single attribute or input states.
pub type NodePredFn = Arc<dyn Fn(&dyn GraphView, NodeId) -> bool + Send + Sync>;

pub(crate) enum VKind {
    /// Any value.
    Input,
    /// A constant (initializer or Constant output), optionally with a predicate on its content.
    Const(Option<(ConstPred, String)>),
    /// Output `index` of a pattern node.
    Out { node: N, index: usize },
    /// The first alternative that lets the whole pattern match.
    Alt(Vec<V>),
}

pub(crate) struct PValue {
    pub(crate) name: String,
    pub(crate) kind: VKind,
}

pub(crate) struct AttrPred {
    pub(crate) name: &'static str,
    pub(crate) desc: String,
    pub(crate) f: AttrPredFn,
}

pub(crate) struct PNode {
    pub(crate) op: OpId,
    pub(crate) args: Vec<V>,
    pub(crate) commutative: bool,
    /// Whether the node may have more (non-empty) inputs than `args`.
    pub(crate) extra_inputs: bool,
    pub(crate) attrs: Vec<AttrPred>,
    /// Node-level predicates with their descriptions.
    pub(crate) node_preds: Vec<(String, NodePredFn)>,
    /// A collective (AllReduce): must be removed by the match, never duplicated or dropped.
    pub(crate) collective: bool,
    /// The matched output must have exactly one reader (the pattern node that reads it).
    pub(crate) single_use: bool,
}

/// A finished pattern. Build with [`Pat`].
pub struct Pattern {
    pub(crate) values: Vec<PValue>,
    pub(crate) nodes: Vec<PNode>,
    pub(crate) root: V,
    /// Values the replacement always produces (e.g. the consumer MatMul's output).
    pub(crate) produces: Vec<V>,
    /// Values the replacement produces only when they are used outside the match.
    pub(crate) escaping: Vec<V>,
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Pattern(root={}, {} nodes)",
            self.values[self.root.0 as usize].name,
            self.nodes.len()
        )
    }
}

/// Pattern builder.
#[derive(Default)]
pub struct Pat {
    values: Vec<PValue>,
    nodes: Vec<PNode>,
    produces: Vec<V>,
    escaping: Vec<V>,
}

impl Pat {
    pub fn new() -> Self {
        Self::default()
    }

    fn value(&mut self, name: impl Into<String>, kind: VKind) -> V {
        self.values.push(PValue {
            name: name.into(),
            kind,
        });
        V(self.values.len() as u32 - 1)
    }

    /// Any value (a pattern input).
    pub fn input(&mut self, name: &str) -> V {
        self.value(name, VKind::Input)
    }

    /// Any constant value.
    pub fn konst(&mut self, name: &str) -> V {
        self.value(name, VKind::Const(None))
    }

    /// A constant whose content satisfies `pred` (`desc` is used in reject reasons).
    pub fn konst_where(
        &mut self,
        name: &str,
        desc: impl Into<String>,
        pred: impl Fn(&ConstTensor) -> bool + Send + Sync + 'static,
    ) -> V {
        self.value(name, VKind::Const(Some((Arc::new(pred), desc.into()))))
    }

    /// A constant holding exactly one float (any float dtype, any shape of one element)
    /// within a relative 1e-6 of `expected`.
    pub fn konst_scalar(&mut self, name: &str, expected: f64) -> V {
        self.konst_where(name, format!("a scalar constant {expected}"), move |t| {
            super::predicates::scalar_f64(t)
                .map(|v| (v - expected).abs() <= 1e-6 * expected.abs().max(1e-30))
                .unwrap_or(false)
        })
    }

    /// Starts a node of op `op`.
    pub fn op(&mut self, op: OpId) -> OpBuilder<'_> {
        OpBuilder {
            p: self,
            node: PNode {
                op,
                args: Vec::new(),
                commutative: false,
                extra_inputs: false,
                attrs: Vec::new(),
                node_preds: Vec::new(),
                collective: false,
                single_use: false,
            },
        }
    }

    /// Output `index` of node `n`.
    pub fn out(&mut self, n: N, index: usize) -> V {
        let name = format!("{}:{index}", self.nodes[n.0 as usize].op.op_type);
        self.value(name, VKind::Out { node: n, index })
    }

    /// A value matched by the first alternative that lets the whole pattern match.
    pub fn any_of(&mut self, name: &str, alts: impl IntoIterator<Item = V>) -> V {
        self.value(name, VKind::Alt(alts.into_iter().collect()))
    }

    /// Declares a value the replacement always produces.
    pub fn produces(&mut self, v: V) {
        self.produces.push(v);
    }

    /// Declares a value that may be used outside the match; the replacement produces it
    /// whenever it is.
    pub fn escaping(&mut self, v: V) {
        self.escaping.push(v);
    }

    /// Finishes the pattern with `root` as the value matching starts from.
    pub fn finish(self, root: V) -> Pattern {
        Pattern {
            values: self.values,
            nodes: self.nodes,
            root,
            produces: self.produces,
            escaping: self.escaping,
        }
    }
}

/// Builder of one pattern node.
pub struct OpBuilder<'p> {
    p: &'p mut Pat,
    node: PNode,
}

impl<'p> OpBuilder<'p> {
    /// The node's inputs, in order.
    pub fn args(mut self, args: impl IntoIterator<Item = V>) -> Self {
        self.node.args = args.into_iter().collect();
        self
    }

    /// Two-input op whose inputs may come in either order.
    pub fn commutative(mut self) -> Self {
        self.node.commutative = true;
        self
    }

    /// Allows inputs beyond the declared args (optional inputs the rule checks itself).
    pub fn extra_inputs(mut self) -> Self {
        self.node.extra_inputs = true;
        self
    }

    /// Marks a collective: it must be removed by the match, never duplicated or dropped.
    pub fn collective(mut self) -> Self {
        self.node.collective = true;
        self
    }

    /// Requires the matched output to be read by exactly one node and not be a graph output:
    /// lets a pattern prefer, of two candidates, the one it can absorb.
    pub fn single_use(mut self) -> Self {
        self.node.single_use = true;
        self
    }

    /// Requires attribute `name` to satisfy `f` (`None` = attribute not set).
    pub fn attr_where(
        mut self,
        name: &'static str,
        desc: impl Into<String>,
        f: impl Fn(Option<&AttrValue>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.node.attrs.push(AttrPred {
            name,
            desc: desc.into(),
            f: Arc::new(f),
        });
        self
    }

    /// Requires the candidate node to satisfy `f` (`desc` is used in near-miss reasons).
    pub fn node_where(
        mut self,
        desc: impl Into<String>,
        f: impl Fn(&dyn GraphView, NodeId) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.node.node_preds.push((desc.into(), Arc::new(f)));
        self
    }

    /// Requires an int attribute equal to `expected`, where `default` is the schema default.
    pub fn attr_int(self, name: &'static str, default: Option<i64>, expected: i64) -> Self {
        self.attr_where(name, format!("{name} = {expected}"), move |a| match a {
            Some(AttrValue::Int(v)) => *v == expected,
            None => default == Some(expected),
            _ => false,
        })
    }

    /// Requires a string attribute equal to `expected`, where `default` is the schema default.
    pub fn attr_str(
        self,
        name: &'static str,
        default: Option<&'static str>,
        expected: &'static str,
    ) -> Self {
        self.attr_where(name, format!("{name} = \"{expected}\""), move |a| match a {
            Some(AttrValue::String(v)) => v == expected,
            None => default == Some(expected),
            _ => false,
        })
    }

    /// Finishes the node.
    pub fn node(self) -> N {
        self.finish().1
    }

    /// Finishes the node and returns its first output.
    pub fn out(self) -> V {
        let (p, n) = self.finish();
        p.out(n, 0)
    }

    fn finish(self) -> (&'p mut Pat, N) {
        let OpBuilder { p, node } = self;
        p.nodes.push(node);
        let n = N(p.nodes.len() as u32 - 1);
        (p, n)
    }
}
