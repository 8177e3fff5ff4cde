//! Loading and saving ONNX models (external data kept external).
