//! Builders of MiniMax-M3-shaped test and benchmark ONNX graphs in every real export spelling.
//!
//! A [`DecoderConfig`] gives the shapes (hidden, intermediate, layers, dense/MoE, dtype, seed)
//! and a [`Spelling`]: one enum per axis of how exporters write the two fusable patterns
//! (`[AllReduce] → Add → RMSNorm → MXFP8 quantize` and `SwiGLU → MXFP8 quantize → MatMul`).
//!
//! ```no_run
//! use models::{DecoderConfig, NormSpelling, QuantSpelling};
//! let mut cfg = DecoderConfig::tiny();
//! cfg.spelling.norm = NormSpelling::SkipSimplified;
//! cfg.spelling.quant = QuantSpelling::Quark;
//! models::write(&cfg, std::path::Path::new("tiny.onnx")).unwrap();
//! ```
//!
//! Files: `config` (what to build), `builder` (prost graph builder), `data` (element encodings,
//! random source), `catalog` (the committed fixture set), `norm`, `swiglu`, `mx_quant`, `mlp`, `decoder` (the pieces), `external`
//! (inline / external / sparse weight placement).
pub mod builder;
pub mod catalog;
pub mod config;
pub mod data;
pub mod decoder;
pub mod error;
pub mod experts;
pub mod external;
pub mod mlp;
pub mod mx_quant;
pub mod norm;
pub mod swiglu;

use std::path::Path;

use graph_rewrites::onnx_pb::ModelProto;

pub use builder::BuiltModel;
pub use config::{
    AddOrder, DType, DecoderConfig, GammaForm, GateUpForm, NormSpelling, Preset, QuantSpelling,
    Spelling, SwigluSpelling, WeightForm, WeightStorage,
};
pub use decoder::{build_decoder, expected_fusions, FusionCounts};
pub use error::{Error, Result};
pub use external::WriteStats;

/// The complete model with inline weights (whatever `cfg.storage` says).
pub fn model_proto(cfg: &DecoderConfig) -> Result<ModelProto> {
    Ok(external::into_inline(build_decoder(cfg)?))
}

/// Builds `cfg` and writes it to `path`, weights placed as `cfg.storage` says.
pub fn write(cfg: &DecoderConfig, path: &Path) -> Result<WriteStats> {
    let external = matches!(cfg.storage, WeightStorage::External { .. });
    external::write_model(build_decoder(cfg)?, path, external)
}
