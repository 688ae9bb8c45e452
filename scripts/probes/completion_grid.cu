// What a dispatch's launch and completion cost between its events on grids of the same
// threads in blocks of different sizes: 132 x 1024, 264 x 512, 528 x 256 (the low-latency
// `bf16` dispatch's grid at 4096 tokens on an H200) and 1056 x 128, launched cooperatively
// after a streaming kernel, the stream kept ahead of the GPU (a 5 ms wait first). Each block
// does, by mode: nothing (0); a barrier and thread 0's add to a counter (1); with a
// system-scope fence before the add (2); and block 0 then waits for every block's add (3),
// the dispatch's completion chain without its rows (BENCHMARKS.md, fifty-seventh session).
// On a GPU machine:
//   nvcc -arch=sm_90 -o /tmp/completion_grid scripts/probes/completion_grid.cu && /tmp/completion_grid
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#include "held_stream.cuh"

// The modes above.
__global__ void arrive(unsigned *ctr, unsigned target, int mode) {
  if (mode >= 1) {
    __syncthreads();
    if (threadIdx.x == 0) {
      if (mode >= 2) __threadfence_system();
      atomicAdd(ctr, 1u);
      if (blockIdx.x == 0 && mode >= 3) while (atomicAdd(ctr, 0u) < target) {}
    }
  }
}
int main() {
  const size_t bytes = 64u << 20, n = bytes / 16;
  uint4 *a, *b; unsigned *ctr;
  cudaMalloc(&a, bytes); cudaMalloc(&b, bytes); cudaMalloc(&ctr, 4);
  cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  const int reps = 60;
  int grids[][2] = {{132, 1024}, {264, 512}, {528, 256}, {1056, 128}};
  printf("blocks x threads, mode (0 empty, 1 barrier+add, 2 +system fence, 3 +block 0 waits): "
         "median (min) us between events\n");
  for (int mode = 0; mode < 4; mode++)
    for (auto &g : grids) {
      std::vector<cudaEvent_t> ev(2 * reps);
      for (auto &e : ev) cudaEventCreate(&e);
      spin<<<1, 1, 0, st>>>(5000000ull);
      for (int r = 0; r < reps; r++) {
        stream_copy<<<528, 256, 0, st>>>(a, b, n);
        cudaMemsetAsync(ctr, 0, 4, st);
        cudaEventRecord(ev[2 * r], st);
        unsigned target = g[0]; void *args[] = {&ctr, &target, &mode};
        cudaLaunchCooperativeKernel((void *)arrive, g[0], g[1], args, 0, st);
        cudaEventRecord(ev[2 * r + 1], st);
      }
      if (cudaStreamSynchronize(st) != cudaSuccess) { printf("error\n"); return 1; }
      std::vector<float> t;
      for (int r = 5; r < reps; r++) {
        float ms;
        cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]);
        t.push_back(ms * 1000);
      }
      std::sort(t.begin(), t.end());
      printf("%5d x %4d mode %d: %.2f (%.2f)\n", g[0], g[1], mode, t[t.size() / 2], t[0]);
      for (auto &e : ev) cudaEventDestroy(e);
    }
}
