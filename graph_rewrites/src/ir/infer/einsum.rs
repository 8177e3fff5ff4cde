//! `Einsum`: the output shape from the equation's subscripts. Each label's size is the size of
//! the operand dims it names; the ellipsis dims of the operands broadcast; the output is the
//! explicit `->` subscripts, or (implicit form) the ellipsis dims followed by the labels that
//! occur once, in ASCII order (numpy's and ONNX's rule). An equation that does not parse or does
//! not fit the operands' ranks gives no shape.

use std::collections::BTreeMap;

use super::node::{info, Node};
use super::shape::{broadcast2, unify};
use crate::view::{Dim, TensorInfo};

pub(super) fn einsum(c: &Node) -> Vec<TensorInfo> {
    let elem = c.first_elem(0..c.input_count());
    let shapes: Vec<Option<Vec<Dim>>> = (0..c.input_count()).map(|s| c.shape(s)).collect();
    let shape = c
        .string("equation", "")
        .and_then(|eq| einsum_shape(&eq, &shapes));
    vec![info(elem, shape)]
}

/// One operand's (or the output's) subscripts: its labels, and where among them the ellipsis
/// stands.
struct Term {
    labels: Vec<u8>,
    ellipsis: Option<usize>,
}

fn parse_term(t: &str) -> Option<Term> {
    let mut term = Term {
        labels: Vec::new(),
        ellipsis: None,
    };
    let mut rest = t.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b.is_ascii_alphabetic() {
            term.labels.push(b);
            rest = tail;
        } else if rest.starts_with(b"...") && term.ellipsis.is_none() {
            term.ellipsis = Some(term.labels.len());
            rest = &rest[3..];
        } else {
            return None;
        }
    }
    Some(term)
}

/// The output shape of `equation` on operands of these shapes (`None`: unknown rank).
pub(super) fn einsum_shape(equation: &str, shapes: &[Option<Vec<Dim>>]) -> Option<Vec<Dim>> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<Term> = lhs.split(',').map(parse_term).collect::<Option<_>>()?;
    if terms.len() != shapes.len() {
        return None;
    }
    let mut sizes: BTreeMap<u8, (Dim, usize)> = BTreeMap::new();
    // The broadcast ellipsis dims; `None` once an operand with an ellipsis has no known rank.
    let mut ellipsis = Some(Vec::new());
    for (t, s) in terms.iter().zip(shapes) {
        let n = t.labels.len();
        let (labels, ell) = match (s, t.ellipsis) {
            (Some(s), None) if s.len() == n => (s.clone(), Some(Vec::new())),
            (Some(_), None) => return None, // rank and subscripts disagree
            (Some(s), Some(at)) => {
                let k = s.len().checked_sub(n)?;
                let mut labels = s[..at].to_vec();
                labels.extend_from_slice(&s[at + k..]);
                (labels, Some(s[at..at + k].to_vec()))
            }
            (None, None) => (vec![Dim::Unknown; n], Some(Vec::new())),
            (None, Some(_)) => (vec![Dim::Unknown; n], None),
        };
        ellipsis = match (ellipsis, ell) {
            (Some(a), Some(b)) => Some(broadcast2(&a, &b)?),
            _ => None,
        };
        for (&l, d) in t.labels.iter().zip(labels) {
            let entry = sizes.entry(l).or_insert((d.clone(), 0));
            entry.0 = label_dim(&entry.0, &d)?;
            entry.1 += 1;
        }
    }
    let out = match rhs {
        Some(r) => {
            let t = parse_term(r)?;
            let mut seen = Vec::new();
            for &l in &t.labels {
                if seen.contains(&l) || !sizes.contains_key(&l) {
                    return None; // a repeated or unknown output label
                }
                seen.push(l);
            }
            t
        }
        None => Term {
            // BTreeMap order is ASCII order.
            labels: sizes
                .iter()
                .filter(|(_, (_, n))| *n == 1)
                .map(|(&l, _)| l)
                .collect(),
            ellipsis: terms.iter().any(|t| t.ellipsis.is_some()).then_some(0),
        },
    };
    let mut shape = Vec::new();
    for (i, l) in out.labels.iter().enumerate() {
        if out.ellipsis == Some(i) {
            shape.extend(ellipsis.clone()?);
        }
        shape.push(sizes.get(l)?.0.clone());
    }
    if out.ellipsis == Some(out.labels.len()) {
        shape.extend(ellipsis?);
    }
    Some(shape)
}

/// The size of a label named by two operand dims: `None` for two different sizes, unknown where
/// a size 1 might broadcast.
fn label_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    Some(match (a, b) {
        _ if a == b => a.clone(),
        (Dim::Known(x), Dim::Known(y)) if *x != 1 && *y != 1 => return None,
        (Dim::Known(1), _) | (_, Dim::Known(1)) => Dim::Unknown,
        _ => unify(a, b),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(spec: &str) -> Option<Vec<Dim>> {
        Some(
            spec.split(',')
                .filter(|s| !s.is_empty())
                .map(|x| match x {
                    "?" => Dim::Unknown,
                    x => x.parse().map_or(Dim::Symbolic(x.into()), Dim::Known),
                })
                .collect(),
        )
    }

    #[test]
    fn explicit_implicit_and_ellipsis_forms() {
        let ab = [d("b,s,64"), d("64,128")];
        assert_eq!(einsum_shape("bsd,de->bse", &ab), d("b,s,128"));
        assert_eq!(einsum_shape("bsd, de -> bse", &ab), d("b,s,128"));
        // Implicit: labels occurring once, ASCII order (`e` before `s`; `d` is summed).
        assert_eq!(einsum_shape("bsd,de", &ab), d("b,128,s"));
        assert_eq!(einsum_shape("Bsd,de", &ab), d("b,128,s"));
        assert_eq!(einsum_shape("...d,de->...e", &ab), d("b,s,128"));
        assert_eq!(einsum_shape("...d,de", &ab), d("b,s,128"));
        assert_eq!(einsum_shape("b...,de->...b", &ab), d("s,64,b"));
        assert_eq!(einsum_shape("ii->i", &[d("4,4")]), d("4"));
        assert_eq!(einsum_shape("ii", &[d("4,4")]), d(""));
        // Ellipsis dims broadcast; a size 1 against a label leaves the size unknown.
        assert_eq!(
            einsum_shape("...ij,...jk->...ik", &[d("2,1,3,4"), d("5,4,6")]),
            d("2,5,3,6")
        );
        assert_eq!(einsum_shape("ij,jk->ik", &[d("3,1"), d("4,5")]), d("3,5"));
        assert_eq!(einsum_shape("ij,j->i", &[d("3,1"), d("4")]), d("3"));
        assert_eq!(einsum_shape("ij,ij->ij", &[d("1,4"), d("3,4")]), d("?,4"));
        // Unknown operand shapes: the rank is still the subscripts'.
        assert_eq!(einsum_shape("ij,jk->ik", &[None, d("4,s")]), d("?,s"));
        assert_eq!(einsum_shape("...j,jk->...k", &[None, d("4,5")]), None);
    }

    #[test]
    fn invalid_equations_give_no_shape() {
        let ab = [d("b,s,64"), d("64,128")];
        for eq in [
            "",
            "bsd->bs",      // two operands, one term
            "bsd,de,ef->b", // three terms
            "bs,de->bs",    // rank 2 for a rank-3 operand
            "bsd,de->bsx",  // output label not in the inputs
            "bsd,de->bbe",  // repeated output label
            "b1d,de->be",   // not a letter
            "b..d,de->be",  // two dots
            "......,de->e", // two ellipses
        ] {
            assert_eq!(einsum_shape(eq, &ab), None, "{eq}");
        }
        // `d` is 64 in one operand and 32 in the other.
        assert_eq!(einsum_shape("bsd,de->bse", &[d("b,s,64"), d("32,8")]), None);
        // An ellipsis wider than the operand's rank.
        assert_eq!(einsum_shape("abcd...,de->e", &ab), None);
    }
}
