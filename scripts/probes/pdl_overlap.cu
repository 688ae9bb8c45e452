// Which launches overlap under programmatic dependent launch (the measurement behind
// shmem-host's rule that a cooperative launch is never a dependent one; BENCHMARKS.md,
// forty-sixth session). A first kernel waits up to 20 ms for a flag that its dependent sets
// before `griddepcontrol.wait`, and records whether it saw it, for every combination of: the
// first kernel cooperative or not, 1 or 132 blocks, calling `launch_dependents` or not; the
// dependent cooperative or not. On a GPU machine (sm_90 and up):
//   nvcc -arch=sm_90 -o /tmp/pdl_overlap scripts/probes/pdl_overlap.cu && /tmp/pdl_overlap
#include <cstdio>
#include <cuda_runtime.h>

__global__ void first(volatile unsigned *flag, unsigned *seen, int trigger) {
  if (trigger) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned s = 0;
    while (true) {
      if (*flag) {
        s = 1;
        break;
      }
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if (t - t0 > 20000000ull) break;
    }
    *seen = s;
  }
}

__global__ void second(volatile unsigned *flag) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *flag = 1;
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

int main() {
  unsigned *flag, *seen;
  cudaMalloc(&flag, 4);
  cudaMalloc(&seen, 4);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  for (int coop_a = 0; coop_a < 2; coop_a++)
    for (int coop_b = 0; coop_b < 2; coop_b++)
      for (int trigger = 0; trigger < 2; trigger++)
        for (int blocks_a = 1; blocks_a <= 132; blocks_a += 131) {
          cudaMemset(flag, 0, 4);
          cudaMemset(seen, 0, 4);
          cudaDeviceSynchronize();
          cudaLaunchConfig_t ca = {};
          ca.gridDim = blocks_a;
          ca.blockDim = 1024;
          ca.stream = st;
          cudaLaunchAttribute aa[1];
          aa[0].id = cudaLaunchAttributeCooperative;
          aa[0].val.cooperative = coop_a;
          ca.attrs = aa;
          ca.numAttrs = 1;
          cudaError_t e1 = cudaLaunchKernelEx(&ca, first, (volatile unsigned *)flag, seen, trigger);
          cudaLaunchConfig_t cb = {};
          cb.gridDim = 4;
          cb.blockDim = 256;
          cb.stream = st;
          cudaLaunchAttribute ab[2];
          ab[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
          ab[0].val.programmaticStreamSerializationAllowed = 1;
          ab[1].id = cudaLaunchAttributeCooperative;
          ab[1].val.cooperative = coop_b;
          cb.attrs = ab;
          cb.numAttrs = 2;
          cudaError_t e2 = cudaLaunchKernelEx(&cb, second, (volatile unsigned *)flag);
          cudaError_t e3 = cudaStreamSynchronize(st);
          unsigned s = 9;
          cudaMemcpy(&s, seen, 4, cudaMemcpyDeviceToHost);
          printf("first coop %d blocks %3d trigger %d | second coop %d : launches %d %d sync %d seen %u\n",
                 coop_a, blocks_a, trigger, coop_b, e1, e2, e3, s);
        }
  return 0;
}
