// The host cost of one kernel launch through the CUDA driver on this machine, without mxfuse's
// runtime: an empty kernel with the decode GEMM's parameter list (ten values, the last a 24-byte
// struct) on a 384 x 128 grid, launched 2000 times (a device sync every 200, outside the timed
// part), best of 5. The floor the launchers' "host enqueue" figures (kernels/examples/
// prefill_bench.rs) compare with. Build and run (bench/gpu/device_launch_floor.sh):
//   nvcc -O2 -o launch_floor launch_floor.cu -lcuda && ./launch_floor
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

struct Epi {
  unsigned long long bias;
  int ld, cs;
  float alpha, beta;
};

extern "C" __global__ void k10(const void*, const void*, const void*, const void*, void*, int, int,
                               int, int, Epi) {}

template <class F>
static void timed(const char* what, F launch) {
  for (int i = 0; i < 200; ++i) launch();
  cudaDeviceSynchronize();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    double us = 0;
    for (int b = 0; b < 10; ++b) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 200; ++i) launch();
      us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      cudaDeviceSynchronize();
    }
    best = std::min(best, us / 2000);
  }
  std::printf("%-44s %6.2f us a launch\n", what, best);
}

int main() {
  cudaFree(nullptr);
  CUfunction f;
  if (cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&f), reinterpret_cast<const void*>(k10)) !=
      cudaSuccess) {
    std::printf("cudaGetFuncBySymbol failed\n");
    return 1;
  }
  CUcontext ctx;
  cuCtxGetCurrent(&ctx);
  void* p = nullptr;
  int m = 1, n = 6144, k = 768, pre = 1;
  Epi e{};
  void* args[] = {&p, &p, &p, &p, &p, &m, &n, &k, &pre, &e};
  CUstream s = nullptr;
  timed("cuLaunchKernel", [&] { cuLaunchKernel(f, 384, 1, 1, 128, 1, 1, 0, s, args, nullptr); });
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = 384;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  timed("cuLaunchKernelEx, PDL attribute", [&] { cuLaunchKernelEx(&cfg, f, args, nullptr); });
  timed("cuCtxSetCurrent + cuLaunchKernelEx, PDL", [&] {
    cuCtxSetCurrent(ctx);
    cuLaunchKernelEx(&cfg, f, args, nullptr);
  });
  timed("k10<<<>>> (runtime API)", [&] { k10<<<384, 128>>>(p, p, p, p, p, m, n, k, pre, e); });
  return 0;
}
