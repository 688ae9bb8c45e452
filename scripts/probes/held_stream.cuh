// What the launch probes (carveout.cu, completion_grid.cu) share: a wait that keeps the stream
// ahead of the GPU, as `moe_dispatch --hold-stream` keeps it, and the streaming kernel that
// runs before each timed launch (a grid-stride copy that takes no shared memory).
#pragma once
#include <cuda_runtime.h>

// Waits `ns` nanoseconds on the GPU (one thread), while the host enqueues what follows.
__global__ void spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
}

// Copies `n` 16-byte chunks from `a` to `b`, grid-stride.
__global__ void stream_copy(const uint4 *a, uint4 *b, size_t n) {
  size_t step = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += step) b[i] = a[i];
}
