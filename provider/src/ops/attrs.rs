//! Attributes of one `com.mxfuse` node, with typed getters that turn a wrong type into an error.

use std::collections::BTreeMap;

use graph_rewrites::view::AttrValue;

use super::schema::{AttrKind, OpSchema};
use crate::error::{Error, Result};

/// A node's attributes by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs {
    op: String,
    values: BTreeMap<String, AttrValue>,
}

impl Attrs {
    /// Attributes of an `op` node; names not in its schema are rejected.
    pub fn new(schema: &OpSchema, values: BTreeMap<String, AttrValue>) -> Result<Self> {
        for (name, value) in &values {
            let Some((_, kind)) = schema.attrs.iter().find(|(n, _)| n == name) else {
                return Err(Error::invalid(format!(
                    "{}: unknown attribute {name:?}",
                    schema.name
                )));
            };
            let ok = matches!(
                (kind, value),
                (AttrKind::Int, AttrValue::Int(_))
                    | (AttrKind::Float, AttrValue::Float(_))
                    | (AttrKind::String, AttrValue::String(_))
            );
            if !ok {
                return Err(Error::invalid(format!(
                    "{}: attribute {name:?} has the wrong type ({value:?})",
                    schema.name
                )));
            }
        }
        Ok(Attrs {
            op: schema.name.to_string(),
            values,
        })
    }

    /// The attributes as `(name, text)` pairs, the form `kernels`' attribute parsers take.
    /// Floats are written with `{:?}`, which round-trips an f32 exactly.
    pub fn as_pairs(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    AttrValue::Int(i) => i.to_string(),
                    AttrValue::Float(f) => format!("{f:?}"),
                    AttrValue::String(s) => s.clone(),
                    other => format!("{other:?}"),
                };
                (k.clone(), text)
            })
            .collect()
    }

    /// An int attribute, or `default` when absent.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        match self.values.get(name) {
            Some(AttrValue::Int(v)) => *v,
            _ => default,
        }
    }

    /// A string attribute, or `default` when absent.
    pub fn string<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        match self.values.get(name) {
            Some(AttrValue::String(v)) => v,
            _ => default,
        }
    }

    /// The op these attributes belong to.
    pub fn op(&self) -> &str {
        &self.op
    }
}
