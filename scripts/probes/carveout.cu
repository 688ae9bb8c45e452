// What a kernel's launch costs between its events when the SMs must change their
// shared-memory carveout for it: an empty kernel on 528 blocks of 256 threads (the
// low-latency `bf16` dispatch's grid at 4096 tokens on an H200), with or without the
// dispatch's 44,416 bytes of dynamic shared memory a block, cooperative or not, after a
// streaming kernel that takes no shared memory, at the driver's carveout or at the largest.
// The stream is kept ahead of the GPU (a 5 ms wait first), as `--hold-stream` keeps it.
// On a GPU machine (sm_90 and up):
//   nvcc -arch=sm_90 -o /tmp/carveout scripts/probes/carveout.cu && /tmp/carveout
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#include "held_stream.cuh"


__global__ void empty(int *sink) {
  extern __shared__ int smem[];
  if (sink && threadIdx.x == 0 && blockIdx.x == 1u << 30) sink[0] = smem[0];
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  const size_t bytes = 64u << 20, n = bytes / 16;
  uint4 *a, *b;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMemset(a, 1, bytes);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  cudaFuncSetAttribute(empty, cudaFuncAttributeMaxDynamicSharedMemorySize, 44416);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int reps = 60;
  printf("%-10s %-6s %-5s %-16s %s\n", "prev", "smem", "coop", "target carveout",
         "empty kernel between its events, us (median of 55; min)");
  for (int prev_carve = -1; prev_carve <= 100; prev_carve += 101)
    for (int target_carve = -1; target_carve <= 100; target_carve += 101)
      for (int smem = 0; smem <= 44416; smem += 44416)
        for (int coop = 0; coop < 2; coop++) {
          cudaFuncSetAttribute(stream_copy, cudaFuncAttributePreferredSharedMemoryCarveout, prev_carve);
          cudaFuncSetAttribute(empty, cudaFuncAttributePreferredSharedMemoryCarveout, target_carve);
          std::vector<float> t;
          std::vector<cudaEvent_t> ev(2 * reps);
          for (auto &e : ev) cudaEventCreate(&e);
          spin<<<1, 1, 0, st>>>(5000000ull);
          for (int r = 0; r < reps; r++) {
            stream_copy<<<528, 256, 0, st>>>(a, b, n);
            cudaEventRecord(ev[2 * r], st);
            int *sink = nullptr;
            void *args[] = {&sink};
            if (coop)
              cudaLaunchCooperativeKernel((void *)empty, 528, 256, args, smem, st);
            else
              empty<<<528, 256, smem, st>>>(sink);
            cudaEventRecord(ev[2 * r + 1], st);
          }
          cudaError_t err = cudaStreamSynchronize(st);
          if (err != cudaSuccess) {
            printf("error: %s\n", cudaGetErrorString(err));
            return 1;
          }
          for (int r = 5; r < reps; r++) {
            float ms;
            cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]);
            t.push_back(ms * 1000);
          }
          for (auto &e : ev) cudaEventDestroy(e);
          printf("%-10s %-6d %-5d %-16s %.2f (%.2f)\n", prev_carve < 0 ? "driver" : "largest", smem, coop,
                 target_carve < 0 ? "driver" : "largest", median(t), *std::min_element(t.begin(), t.end()));
        }
  return 0;
}
