// mxfuse GPU portability layer: the one place where HIP (ROCm) and CUDA differ.
//
// Every kernel file is written once in HIP style and compiled at run time by hipRTC (ROCm) or NVRTC
// (CUDA). The runtime (kernels/src/gpu/sources.rs) concatenates this header, mx_common.h and the
// kernel files into one translation unit, so no #include is needed and no SDK header is read.
// Only what both toolchains share is used: __global__, __shared__, __syncthreads, the bit-cast
// intrinsics, fmaxf/fabsf/sqrtf/expf/rintf, vector types. Warp-level code goes through the macros
// below, because the wavefront is 64 lanes on CDNA and the warp 32 lanes on NVIDIA: never write a
// literal 32 for a lane count.
#pragma once

#if defined(__HIP_DEVICE_COMPILE__) || defined(__HIPCC_RTC__) || defined(__HIP__)
#define MX_HIP 1
// GCN / CDNA (gfx9: MI300 gfx942, MI355X gfx950) always run 64-lane wavefronts. Elsewhere (RDNA:
// wave32 unless built for wave64) the compiler's macro says; clang 20 marks that macro deprecated
// (a warning on every use), so the CDNA targets this project is for do not read it.
#if defined(__GFX9__)
#define MX_WARP 64
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define MX_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define MX_WARP 64
#endif
#define MX_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define MX_SHFL(v, src) __shfl((v), (src))
#else
#define MX_CUDA 1
#define MX_WARP 32
#define MX_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define MX_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src))
#endif

// Single-instruction conversions: bf16/f16 (sm_80+) and the saturating E4M3 pair convert (sm_89+).
// Each replaces a software routine of mx_common.h with identical results (checked bit for bit by
// bench/gpu/check.py); elsewhere the software routines run.
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
#define MX_NV_CVT16 1
#endif
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
#define MX_NV_CVT_E4M3 1
#endif

// Hopper/Ada tensor-core fp8 MMA (mma.sync ... e4m3) is NVIDIA-only PTX; AMD builds take the
// portable GEMM path (see mx_matmul.hip).
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
#define MX_NV_FP8_MMA 1
#endif
// Hopper thread-block clusters (__cluster_dims__, barrier.cluster, distributed shared memory): the
// split-K decode GEMM (mx_matmul_splitk.hip).
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define MX_NV_CLUSTER 1
#endif

// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute may start while the previous kernel of its stream still runs.
// MX_PDL_WAIT blocks until that kernel has completed and its writes are visible: every kernel calls
// it before its first read of data another kernel may write (and before its first write), so the
// attribute can never change results. MX_PDL_LAUNCH lets the next kernel start early (it still
// waits in its own MX_PDL_WAIT). Both are no-ops for an ordinary launch and on other targets.
#if defined(MX_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define MX_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define MX_PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define MX_PDL_WAIT() \
  do {            \
  } while (0)
#define MX_PDL_LAUNCH() \
  do {              \
  } while (0)
#endif

// Kernel entry for kernels that read nothing before the previous kernel is done. The next kernel
// may launch only once this one is past its wait: launching it at entry would let a chain of
// launches run ahead of the kernel that is actually working, each parked on an SM (measured: the
// multi-block-per-SM kernels got slower on the H200).
#define MX_PDL_ENTRY() \
  MX_PDL_WAIT();       \
  MX_PDL_LAUNCH()

#define MX_DEV __device__ __forceinline__

// NVRTC and hipRTC ship no <stdint.h>: fixed-width names of our own.
typedef unsigned char mx_u8;
typedef unsigned short mx_u16;
typedef unsigned int mx_u32;
typedef unsigned long long mx_u64;
