//! GPU kernels: HIP single-source (also compiles as CUDA) and the runtime loaders.
