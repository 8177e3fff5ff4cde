//! One test per pattern-engine behaviour, on tiny graphs and test-only rules.

use std::sync::LazyLock;

use super::*;
use crate::ir::Graph;
use crate::pattern::predicates::dtype::FLOAT;
use crate::pipeline::{run_rules, PipelineOptions};
use crate::testing::{Attr, ModelBuilder};
use crate::view::{GraphView, MS_DOMAIN, ONNX_DOMAIN};

fn onnx(op: &'static str) -> OpId {
    OpId::new(ONNX_DOMAIN, op)
}

/// `y = Add(Mul(x, 2.0), b)` ⇒ `TestMulAdd(x, b)`. Mul is commutative; with `escape_mul`, the
/// Mul's output may be read outside (the replacement then produces it too).
struct MulAdd {
    pat: Pattern,
    x: V,
    b: V,
    mul_out: V,
}

fn mul_add(escape_mul: bool) -> MulAdd {
    let mut p = Pat::new();
    let x = p.input("x");
    let c = p.konst_scalar("two", 2.0);
    let mul_out = p.op(onnx("Mul")).args([x, c]).commutative().out();
    let b = p.input("b");
    let y = p.op(onnx("Add")).args([mul_out, b]).out();
    p.produces(y);
    if escape_mul {
        p.escaping(mul_out);
    }
    MulAdd {
        pat: p.finish(y),
        x,
        b,
        mul_out,
    }
}

struct MulAddRule(MulAdd);
static MUL_ADD: LazyLock<MulAddRule> = LazyLock::new(|| MulAddRule(mul_add(false)));
struct MulAddEscapingRule(MulAdd);
static MUL_ADD_ESC: LazyLock<MulAddEscapingRule> =
    LazyLock::new(|| MulAddEscapingRule(mul_add(true)));

fn emit_mul_add(site: &Site, (x, b, y, mul): ValueId4, e: &mut Emit<'_>) -> Result<(), String> {
    let mut spec = e.op("TestMulAdd").input(x).input(b).output(y);
    if site.produces(mul) {
        spec = spec.output(mul);
    }
    e.add(spec).map(|_| ())
}
type ValueId4 = (
    crate::view::ValueId,
    crate::view::ValueId,
    crate::view::ValueId,
    crate::view::ValueId,
);

macro_rules! mul_add_rule {
    ($t:ty, $name:literal) => {
        impl Rule for $t {
            const NAME: &'static str = $name;
            type Params = ValueId4;
            fn pattern(&self) -> &Pattern {
                &self.0.pat
            }
            fn check(&self, m: &Match<'_>, _: &RuleConfig) -> Result<Fuse<ValueId4>, Reject> {
                let x = m[self.0.x];
                if m.graph().value_name(x) == "refuse_me" {
                    return Err(Reject::new("x is called refuse_me"));
                }
                Ok(Fuse::new((x, m[self.0.b], m.root(), m[self.0.mul_out])))
            }
            fn rewrite(&self, site: &Site, p: ValueId4, e: &mut Emit<'_>) -> Result<(), String> {
                emit_mul_add(site, p, e)
            }
        }
    };
}
mul_add_rule!(MulAddRule, "test_mul_add");
mul_add_rule!(MulAddEscapingRule, "test_mul_add_escaping");

fn mul_add_graph(mul_args: [&str; 2], c: f32, extra_reader: bool) -> Graph {
    let mut b = ModelBuilder::new(17);
    b.input("x", FLOAT, &[4, 8]).input("b", FLOAT, &[4, 8]);
    b.init_f32("c", &[], &[c]);
    b.node("Mul", &mul_args, &["m"])
        .node("Add", &["m", "b"], &["y"]);
    b.output("y", FLOAT, &[4, 8]);
    if extra_reader {
        b.node("Relu", &["m"], &["r"]).output("r", FLOAT, &[4, 8]);
    }
    b.graph().unwrap()
}

fn try_rule(rule: &dyn DynRule, g: &Graph, value: &str) -> Attempt {
    let v = g.value_by_name(value).unwrap();
    rule.try_at(g, v, &RuleConfig::default())
}

fn refused_reason(a: Attempt) -> String {
    match a {
        Attempt::Refused { reason, .. } => reason,
        Attempt::NoMatch(r, _) => panic!("expected a refusal, got no match: {r}"),
        Attempt::Accepted(s, _) => panic!("expected a refusal, got accepted {s:?}"),
    }
}

fn ops(g: &Graph) -> Vec<String> {
    g.nodes()
        .iter()
        .map(|n| g.op_type(*n).to_string())
        .collect()
}

#[test]
fn matches_declared_argument_order() {
    let g = mul_add_graph(["x", "c"], 2.0, false);
    assert!(matches!(
        try_rule(&*MUL_ADD, &g, "y"),
        Attempt::Accepted(..)
    ));
}

#[test]
fn commutative_matches_swapped_args() {
    let g = mul_add_graph(["c", "x"], 2.0, false);
    let Attempt::Accepted(site, _) = try_rule(&*MUL_ADD, &g, "y") else {
        panic!("no match")
    };
    assert_eq!(site.nodes.len(), 2);
}

#[test]
fn non_commutative_op_does_not_match_swapped_args() {
    // Add is not declared commutative: y = Add(b, m) does not match Add(m, b).
    let mut b = ModelBuilder::new(17);
    b.input("x", FLOAT, &[4, 8])
        .input("b", FLOAT, &[4, 8])
        .init_f32("c", &[], &[2.0]);
    b.node("Mul", &["x", "c"], &["m"])
        .node("Add", &["b", "m"], &["y"])
        .output("y", FLOAT, &[4, 8]);
    let g = b.graph().unwrap();
    match try_rule(&*MUL_ADD, &g, "y") {
        Attempt::NoMatch(why, _) => assert!(why.contains("Mul"), "{why}"),
        _ => panic!("matched swapped non-commutative args"),
    }
}

#[test]
fn constant_predicate_rejects_other_value() {
    let g = mul_add_graph(["x", "c"], 3.0, false);
    match try_rule(&*MUL_ADD, &g, "y") {
        Attempt::NoMatch(why, _) => assert!(why.contains("scalar constant 2"), "{why}"),
        _ => panic!("matched Mul by 3 as Mul by 2"),
    }
}

#[test]
fn interior_value_used_outside_rejects() {
    let g = mul_add_graph(["x", "c"], 2.0, true);
    let why = refused_reason(try_rule(&*MUL_ADD, &g, "y"));
    assert!(
        why.contains("interior value 'm'") && why.contains("Relu"),
        "{why}"
    );
}

#[test]
fn interior_value_that_is_graph_output_rejects() {
    let mut b = ModelBuilder::new(17);
    b.input("x", FLOAT, &[4, 8])
        .input("b", FLOAT, &[4, 8])
        .init_f32("c", &[], &[2.0]);
    b.node("Mul", &["x", "c"], &["m"])
        .node("Add", &["m", "b"], &["y"]);
    b.output("y", FLOAT, &[4, 8]).output("m", FLOAT, &[4, 8]);
    let why = refused_reason(try_rule(&*MUL_ADD, &b.graph().unwrap(), "y"));
    assert!(why.contains("graph output"), "{why}");
}

#[test]
fn escaping_value_allowed_and_reproduced() {
    let mut g = mul_add_graph(["x", "c"], 2.0, true);
    let report = run_rules(&mut g, &[&*MUL_ADD_ESC], &PipelineOptions::default()).unwrap();
    assert_eq!(report.counts["test_mul_add_escaping"], 1);
    assert_eq!(ops(&g), ["TestMulAdd", "Relu"]);
    // The escaping value keeps its name and now comes from the fused node.
    let m = g.value_by_name("m").unwrap();
    let (p, slot) = g.producer(m).unwrap();
    assert_eq!((g.op_type(p), slot), ("TestMulAdd", 1));
}

#[test]
fn check_reject_reason_is_reported() {
    let mut b = ModelBuilder::new(17);
    b.input("refuse_me", FLOAT, &[4, 8])
        .input("b", FLOAT, &[4, 8])
        .init_f32("c", &[], &[2.0]);
    b.node("Mul", &["refuse_me", "c"], &["m"])
        .node("Add", &["m", "b"], &["y"])
        .output("y", FLOAT, &[4, 8]);
    let mut g = b.graph().unwrap();
    let report = run_rules(&mut g, &[&*MUL_ADD], &PipelineOptions::default()).unwrap();
    assert_eq!(report.counts["test_mul_add"], 0);
    assert_eq!(report.rejections.len(), 1);
    assert_eq!(report.rejections[0].reason, "x is called refuse_me");
    assert_eq!(report.rejections[0].at, "Add_1");
    assert_eq!(
        ops(&g),
        ["Mul", "Add"],
        "a refused site must be left unchanged"
    );
}

#[test]
fn rewrite_names_nodes_deterministically_and_tags_rule() {
    let mut g = mul_add_graph(["x", "c"], 2.0, false);
    let report = run_rules(&mut g, &[&*MUL_ADD], &PipelineOptions::default()).unwrap();
    assert_eq!(report.fusions[0].created, ["Add_1/test_mul_add"]);
    assert_eq!(report.fusions[0].replaced, ["Mul_0", "Add_1"]);
    let model = g.to_model();
    let node = &model.graph.as_ref().unwrap().node[0];
    assert_eq!(node.domain.as_deref(), Some("com.mxfuse"));
    let tag = node
        .metadata_props
        .iter()
        .find(|p| p.key.as_deref() == Some(RULE_METADATA_KEY));
    assert_eq!(tag.and_then(|p| p.value.as_deref()), Some("test_mul_add"));
    // The constant that only the Mul read is dead now and removed.
    assert!(model.graph.as_ref().unwrap().initializer.is_empty());
}

#[test]
fn second_pass_fuses_nothing() {
    let mut g = mul_add_graph(["x", "c"], 2.0, false);
    run_rules(&mut g, &[&*MUL_ADD], &PipelineOptions::default()).unwrap();
    let again = run_rules(&mut g, &[&*MUL_ADD], &PipelineOptions::default()).unwrap();
    assert_eq!(again.counts["test_mul_add"], 0);
}

/// `y = Mul(AllReduce(x), 2.0)`: the AllReduce is a collective the match must absorb whole.
struct ArMul {
    pat: Pattern,
    x: V,
}
static AR_MUL: LazyLock<ArMul> = LazyLock::new(|| {
    let mut p = Pat::new();
    let x = p.input("x");
    let ar = p
        .op(OpId::new(MS_DOMAIN, "AllReduce"))
        .args([x])
        .collective()
        .out();
    let c = p.konst_scalar("two", 2.0);
    let y = p.op(onnx("Mul")).args([ar, c]).commutative().out();
    p.produces(y);
    ArMul {
        pat: p.finish(y),
        x,
    }
});

impl Rule for ArMul {
    const NAME: &'static str = "test_ar_mul";
    type Params = (crate::view::ValueId, crate::view::ValueId);
    fn pattern(&self) -> &Pattern {
        &self.pat
    }
    fn check(&self, m: &Match<'_>, _: &RuleConfig) -> Result<Fuse<Self::Params>, Reject> {
        Ok(Fuse::new((m[self.x], m.root())))
    }
    fn rewrite(&self, _: &Site, (x, y): Self::Params, e: &mut Emit<'_>) -> Result<(), String> {
        e.add(e.op("TestArMul").input(x).output(y)).map(|_| ())
    }
}

fn ar_graph(ar_inputs: &[&str], other_reader: bool) -> Graph {
    let mut b = ModelBuilder::new(17);
    b.opset(MS_DOMAIN, 1)
        .input("x", FLOAT, &[4, 8])
        .input("x2", FLOAT, &[4, 8])
        .init_f32("c", &[], &[2.0]);
    b.node_in(MS_DOMAIN, "AllReduce", ar_inputs, &["r"], &[])
        .node("Mul", &["r", "c"], &["y"]);
    b.output("y", FLOAT, &[4, 8]);
    if other_reader {
        b.node("Relu", &["r"], &["z"]).output("z", FLOAT, &[4, 8]);
    }
    b.graph().unwrap()
}

#[test]
fn collective_absorbed_when_fusion_is_its_only_reader() {
    let mut g = ar_graph(&["x"], false);
    let report = run_rules(&mut g, &[&*AR_MUL], &PipelineOptions::default()).unwrap();
    assert_eq!(report.counts["test_ar_mul"], 1);
    assert_eq!(ops(&g), ["TestArMul"]);
}

#[test]
fn collective_with_another_consumer_rejects() {
    let g = ar_graph(&["x"], true);
    let why = refused_reason(try_rule(&*AR_MUL, &g, "y"));
    assert!(why.contains("collective AllReduce"), "{why}");
}

#[test]
fn pinned_arity_rejects_variadic_collective_with_two_inputs() {
    let g = ar_graph(&["x", "x2"], false);
    match try_rule(&*AR_MUL, &g, "y") {
        Attempt::NoMatch(why, _) => assert!(why.contains("2 inputs"), "{why}"),
        _ => panic!("an AllReduce of two inputs must not match"),
    }
}

/// `y = Mul(any_of(Sigmoid(x), x), x)`: needs backtracking into the second alternative when
/// the first binds `x` to a value the second Mul input contradicts.
struct AltRule {
    pat: Pattern,
    sig: N,
}
static ALT: LazyLock<AltRule> = LazyLock::new(|| {
    let mut p = Pat::new();
    let x = p.input("x");
    let sig = p.op(onnx("Sigmoid")).args([x]).node();
    let s = p.out(sig, 0);
    let u = p.any_of("sigmoid_or_x", [s, x]);
    let y = p.op(onnx("Mul")).args([u, x]).out();
    p.produces(y);
    AltRule {
        pat: p.finish(y),
        sig,
    }
});

impl Rule for AltRule {
    const NAME: &'static str = "test_alt";
    type Params = bool;
    fn pattern(&self) -> &Pattern {
        &self.pat
    }
    fn check(&self, m: &Match<'_>, _: &RuleConfig) -> Result<Fuse<bool>, Reject> {
        Ok(Fuse::new(m.node(self.sig).is_some()))
    }
    fn rewrite(&self, _: &Site, _: bool, _: &mut Emit<'_>) -> Result<(), String> {
        Err("not applied in tests".into())
    }
}

#[test]
fn alternative_first_choice() {
    let mut b = ModelBuilder::new(17);
    b.input("a", FLOAT, &[4])
        .node("Sigmoid", &["a"], &["s"])
        .node("Mul", &["s", "a"], &["y"])
        .output("y", FLOAT, &[4]);
    let Attempt::Accepted(site, p) = try_rule(&*ALT, &b.graph().unwrap(), "y") else {
        panic!()
    };
    assert!(
        *p.downcast::<bool>().unwrap(),
        "Sigmoid alternative expected"
    );
    assert_eq!(site.nodes.len(), 2);
}

#[test]
fn alternative_backtracks_when_later_constraint_fails() {
    // y = Mul(s, s): the Sigmoid alternative binds x = a, but the second input is s, not a.
    // Only the plain alternative (x = s) fits.
    let mut b = ModelBuilder::new(17);
    b.input("a", FLOAT, &[4])
        .node("Sigmoid", &["a"], &["s"])
        .node("Mul", &["s", "s"], &["y"])
        .output("y", FLOAT, &[4]);
    let Attempt::Accepted(site, p) = try_rule(&*ALT, &b.graph().unwrap(), "y") else {
        panic!("no match")
    };
    assert!(
        !*p.downcast::<bool>().unwrap(),
        "plain alternative expected"
    );
    assert_eq!(site.nodes.len(), 1);
}

#[test]
fn op_identity_checks_since_version() {
    // Cast-24 is the first Cast that knows FLOAT8E8M0; a model at opset 21 has Cast-21.
    let strict = OpId {
        domain: ONNX_DOMAIN,
        op_type: "Cast",
        versions: &[24, 25],
        aliases: &[],
    };
    // Cast-28 (opset 28) is a version the list does not name: refused, not read as Cast-25.
    for (opset, ok) in [(21, false), (24, true), (25, true), (27, true), (28, false)] {
        let mut b = ModelBuilder::new(opset);
        b.input("a", FLOAT, &[4])
            .node_in("", "Cast", &["a"], &["c"], &[("to", Attr::I(1))])
            .output("c", FLOAT, &[4]);
        let g = b.graph().unwrap();
        assert_eq!(strict.accepts(&g, g.nodes()[0]), ok, "opset {opset}");
    }
}

#[test]
fn attribute_predicate_uses_schema_default() {
    let mut p = Pat::new();
    let x = p.input("x");
    let y = p
        .op(onnx("ReduceMax"))
        .args([x])
        .extra_inputs()
        .attr_int("keepdims", Some(1), 1)
        .out();
    let pat = p.finish(y);
    for (attrs, ok) in [
        (vec![], true),
        (vec![("keepdims", Attr::I(1))], true),
        (vec![("keepdims", Attr::I(0))], false),
    ] {
        let mut b = ModelBuilder::new(18);
        b.input("a", FLOAT, &[4, 8])
            .node_in("", "ReduceMax", &["a"], &["y"], &attrs)
            .output("y", FLOAT, &[4, 1]);
        let g = b.graph().unwrap();
        let root = g.value_by_name("y").unwrap();
        assert_eq!(matcher::Matcher::new(&g, &pat).run(root).is_ok(), ok);
    }
}

#[test]
fn one_handle_binds_one_value() {
    // Mul(x, x) must not match Mul(a, b).
    let mut p = Pat::new();
    let x = p.input("x");
    let y = p.op(onnx("Mul")).args([x, x]).out();
    let pat = p.finish(y);
    let mut b = ModelBuilder::new(17);
    b.input("a", FLOAT, &[4])
        .input("b", FLOAT, &[4])
        .node("Mul", &["a", "b"], &["y"])
        .output("y", FLOAT, &[4]);
    let g = b.graph().unwrap();
    let err = matcher::Matcher::new(&g, &pat)
        .run(g.value_by_name("y").unwrap())
        .unwrap_err();
    assert!(err.contains("must be one value"), "{err}");
}
