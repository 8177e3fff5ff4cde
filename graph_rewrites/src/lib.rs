//! mxfuse graph rewriting: ONNX I/O, arena IR, pattern engine, rules, pipeline.
pub mod onnx_pb;
pub mod view;
