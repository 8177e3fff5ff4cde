//! The arena IR.
pub struct Graph;
