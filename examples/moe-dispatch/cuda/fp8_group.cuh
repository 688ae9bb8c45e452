// The FP8 dispatch's arithmetic on a group of 128 bf16 values that both the CUDA C++ twin
// (moe.cu) and the floor probe (scripts/probes/fp8_floor.cu) use: the group's amax and its
// scale, as the Rust kernels compute them (kernels.rs and shmem-device's fp8).
#pragma once
#include <cstdint>
#include <cuda_bf16.h>

// A group's scale and its inverse from its largest magnitude (at least 1e-4): amax * (1/448)
// and 448 / amax, as DeepEP's low-latency dispatch computes them (lib.rs, fp8::scales).
__device__ __forceinline__ void fp8_scales(float amax, float &scale, float &inv) {
  float a = fmaxf(amax, 1e-4f);
  scale = __fmul_rn(a, 1.0f / 448.0f);
  inv = __fdiv_rn(448.0f, a);
}

// The largest magnitude of two chunks' sixteen bf16 values, as the bits of a bf16 (NaNs
// count as 0): the amax of the widened values, without widening. __hmax2 lets a NaN lose to
// the number held, and what is held starts at 0, so a NaN never wins.
__device__ __forceinline__ uint32_t magnitude(uint4 a, uint4 b) {
  uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  __nv_bfloat162 m = __floats2bfloat162_rn(0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < 8; i++) {
    uint32_t abs = w[i] & 0x7fff7fffu;
    m = __hmax2(m, *reinterpret_cast<const __nv_bfloat162 *>(&abs));
  }
  uint32_t bits = *reinterpret_cast<const uint32_t *>(&m);
  return max(bits & 0xffffu, bits >> 16);
}
