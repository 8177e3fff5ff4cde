//! Builders of test/bench ONNX graphs.
