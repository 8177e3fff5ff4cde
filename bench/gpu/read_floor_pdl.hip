// Bench only (issue 6 follow-up 45; appended to the GEMM module's text by read_floor_pdl.py): the
// least work a decode GEMM launched back to back under PDL must do — read every weight byte once
// and depend on the previous launch's output — with nothing else. Each thread xors its 16-byte
// words of a grid-stride share (U loads in flight a thread); with `pre` the whole share is read
// before the PDL wait, overlapping the previous launch as the fragment GEMM's first weights do;
// after the wait one word the previous launch stored is read (the dependency) and each warp stores
// one word. The values are not checked (launches race on out[0] by design: it is only the
// dependency); the time is the floor.
template <int U>
MX_DEV mx_u32 mx_read_share(const uint4* __restrict__ w, long long n16) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  mx_u32 x = 0;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = mx_ldg_once16(w + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = mx_ldg_once16(w + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  return x;
}
template <int U>
MX_DEV void mx_read_floor(const uint4* w, long long n16, float* out, int pre) {
  mx_u32 x = 0;
  if (pre) x = mx_read_share<U>(w, n16);
  MX_PDL_WAIT();
  MX_PDL_LAUNCH();
  if (!pre) x = mx_read_share<U>(w, n16);
  const float a = *reinterpret_cast<volatile float*>(out);  // stored by the previous launch
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) out[1 + blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)] = a + (float)(x & 1);
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = a + 1.0f;
}
#define MX_DEFINE_READ_FLOOR(U)                                                                  \
  extern "C" __global__ void __launch_bounds__(256)                                              \
      mx_read_floor_pdl_u##U(const uint4* w, long long n16, float* out, int pre) {               \
    mx_read_floor<U>(w, n16, out, pre);                                                          \
  }
MX_DEFINE_READ_FLOOR(2)
MX_DEFINE_READ_FLOOR(4)
MX_DEFINE_READ_FLOOR(8)
