//! mxfuse graph rewriting: ONNX I/O, arena IR, pattern engine, rules, pipeline.
//!
//! Module ownership: `onnx_pb` (generated), `io` + `ir` + `error` + `cli` (model I/O, IR, CLI),
//! `view` + `pattern` + `rules` + `pipeline` (matching and rewriting).
pub mod cli;
pub mod error;
pub mod io;
pub mod ir;
pub mod onnx_pb;
pub mod pattern;
pub mod pipeline;
pub mod rules;
pub mod summary;
pub mod testing;
pub mod view;

pub use error::Error;
