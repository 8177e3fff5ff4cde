//! `libmxfuse_ep.so`: the mxfuse ONNX Runtime integration.
//!
//! One shared library, two ways in:
//! * `RegisterCustomOps` — a classic custom-op library registering the `com.mxfuse` ops
//!   (docs/ops.md), so models rewritten offline by the `mxfuse` CLI run on ORT's CPU EP;
//! * `CreateEpFactories` / `ReleaseEpFactory` — a plugin execution provider,
//!   `MxFuseExecutionProvider`, that runs the rewrite rules on ORT's graph at session creation
//!   and executes the fused subgraphs with our kernels (no offline step).
//!
//! Every exported function catches panics and reports errors as `OrtStatus`.
pub mod capability;
pub mod custom_ops;
pub mod ep;
pub mod error;
pub mod factory;
pub mod ffi;
pub mod gpu;
pub mod kernel_io;
pub mod logging;
pub mod ops;
pub mod options;
pub mod ort_attrs;
pub mod ort_graph_view;
pub mod ort_types;
pub mod program;
mod program_slots;
pub mod shapes;
pub mod tensor;
pub mod view_subgraphs;
pub mod view_to_model;

mod exports;
