//! The pattern engine.
