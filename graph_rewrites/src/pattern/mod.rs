//! The pattern engine.
//!
//! A rule declares a pattern (a small DAG of op identities, constants, attribute predicates,
//! commutative arguments and alternatives), a `check` that turns a structural match into typed
//! parameters or a reason to refuse, and a `rewrite` that emits the replacement:
//!
//! ```text
//! pattern ──match──▶ Match ──check──▶ Fuse<Params> ──safety──▶ Site ──rewrite──▶ new nodes
//!                      │                   │                     │
//!                   NoMatch            Refused(reason)      Refused(reason)
//! ```
//!
//! Safety defaults (engine-level, every rule gets them): no value produced inside a match may
//! be read outside it or be a graph output unless the replacement re-produces it (declared with
//! `produces`/`escaping`); a collective must be absorbed whole — never duplicated, never dropped.
pub mod builder;
pub mod emit;
pub mod matched;
pub(crate) mod matcher;
pub mod opsets;
pub mod predicates;
pub mod rule;

pub use builder::{OpBuilder, Pat, Pattern, N, V};
pub use emit::{Emit, NodeSpec, RULE_METADATA_KEY};
pub use matched::{Fuse, Match, Reject, Site};
pub use opsets::OpId;
pub use rule::{parse_flag, Attempt, DynRule, Rule, RuleConfig, SETTINGS};

#[cfg(test)]
mod tests;
