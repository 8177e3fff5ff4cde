//! The EP's GPU device: which hardware device the factory offers, the device memory ORT
//! allocates through us, the copies between host and device, and the GPU executor of a fused
//! node.
//!
//! * [`device`]: device selection in `GetSupportedDevices` (a GPU `OrtEpDevice` when the
//!   `kernels::gpu` driver loads, else one log line and the CPU device only) and the session's
//!   [`Placement`] chosen in `CreateEp`.
//! * [`memory`]: [`DeviceMemory`], the allocation and copy primitives (GPU driver, or host memory
//!   standing in for device memory in tests).
//! * [`allocator`] (with [`block_cache`]: freed device blocks reused by size class) /
//!   [`data_transfer`] / [`memcpy_kernels`]: the `OrtAllocator`,
//!   `OrtDataTransferImpl` and `MemcpyFromHost` / `MemcpyToHost` kernels ORT needs once an EP's
//!   tensors live in device memory.
//! * [`program`]: [`GpuProgram`], a fused node's `com.mxfuse` steps run by the GPU launchers on
//!   device pointers.
//! * [`boundary`]: the claimed groups a device placement leaves to ORT because a tensor at their
//!   edge has a type ORT cannot copy between host and device (E8M0 scales).
//! * [`ep_api`]: the `OrtEpApi` members and plugin structs this module needs beyond `ffi`.
pub mod allocator;
pub mod block_cache;
pub mod boundary;
pub mod data_transfer;
pub mod device;
pub mod ep_api;
pub mod matmul_group;
pub mod memcpy_kernels;
pub mod memory;
pub mod program;

pub use device::Placement;
pub use memory::DeviceMemory;
pub use program::GpuProgram;
