//! ONNX Runtime integration: custom-op library (`RegisterCustomOps`) and plugin EP
//! (`CreateEpFactories` / `ReleaseEpFactory`).
