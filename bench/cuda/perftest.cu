// CUDA C++ references of the benchmark kernels (src/kernels.rs): same names, parameters and
// control flow, each the kernel of the NVSHMEM perftest of the same name
// (perftest/device/), calling the NVSHMEM functions that perftest calls. Built into a cubin
// with NVSHMEM's device library (scripts/nvcc-cubin.sh) and launched by the same Rust host
// code as the Rust kernels (`shmem-bench --cuda perftest.cubin`), so the two differ only in
// device code.
//
// `Slice<T>` is the layout of shmem-device's `SymSlice<T>` (pointer, length).

#include <climits>
#include <cstddef>
#include <cstdint>
#include <nvshmem.h>
#include <nvshmemx.h>

template <class T> struct Slice {
  T *ptr;
  size_t len;
};

enum { THREAD = 0, WARP = 1, BLOCK = 2 };
enum { PUT = 0, GET = 1 };

// The perftests' grid barrier: counter[0] counts every arrival so far, counter[1] holds the
// last released epoch; the last block to arrive (after a quiet when asked) releases it.
__device__ __forceinline__ void inter_cta_barrier(volatile unsigned int *counter,
                                                  unsigned int epoch, bool quiet_last) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned int arrived = atomicInc((unsigned int *)counter, UINT_MAX);
    if (arrived == gridDim.x * epoch - 1) {
      if (quiet_last) nvshmem_quiet();
      counter[1] = epoch;
    }
    while (counter[1] != epoch) {
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void cta_quiet() {
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
  __syncthreads();
}

// shmem_put_bw / shmem_get_bw for one KIND and SCOPE, one kernel each as the perftests build
// them (put_bw_thread ... get_bw_block below).
template <int KIND, int SCOPE>
__device__ __forceinline__ void bw(double *data, size_t len, uint32_t iters, uint32_t sync_each,
                                   unsigned int *counter, int peer) {
  size_t per_block = len / gridDim.x, off, n;
  if (SCOPE == THREAD) {
    n = per_block / blockDim.x;
    off = threadIdx.x * n;
  } else if (SCOPE == WARP) {
    n = per_block / ((blockDim.x + 31) / 32);
    off = (threadIdx.x / 32) * n;
  } else {
    n = per_block;
    off = 0;
  }
  double *d = data + blockIdx.x * per_block + off;
  for (uint32_t i = 0; i < iters; i++) {
    if (KIND == PUT) {
      if (SCOPE == THREAD) nvshmem_double_put_nbi(d, d, n, peer);
      else if (SCOPE == WARP) nvshmemx_double_put_nbi_warp(d, d, n, peer);
      else nvshmemx_double_put_nbi_block(d, d, n, peer);
    } else {
      if (SCOPE == THREAD) nvshmem_double_get_nbi(d, d, n, peer);
      else if (SCOPE == WARP) nvshmemx_double_get_nbi_warp(d, d, n, peer);
      else nvshmemx_double_get_nbi_block(d, d, n, peer);
    }
    if (sync_each) inter_cta_barrier(counter, i + 1, false);
  }
  if (sync_each) inter_cta_barrier(counter, iters + 1, true);
  else cta_quiet();
}

#define BW_KERNEL(NAME, KIND, SCOPE)                                                           \
  extern "C" __global__ void __launch_bounds__(1024, 1)                                        \
      NAME(double *data, size_t len, uint32_t iters, uint32_t sync_each,                       \
           unsigned int *counter, int peer) {                                                  \
    bw<KIND, SCOPE>(data, len, iters, sync_each, counter, peer);                               \
  }
BW_KERNEL(put_bw_thread, PUT, THREAD)
BW_KERNEL(put_bw_warp, PUT, WARP)
BW_KERNEL(put_bw_block, PUT, BLOCK)
BW_KERNEL(get_bw_thread, GET, THREAD)
BW_KERNEL(get_bw_warp, GET, WARP)
BW_KERNEL(get_bw_block, GET, BLOCK)

// shmem_p_bw, 32-bit elements, stride 1.
extern "C" __global__ void __launch_bounds__(1024, 1)
    p_bw(uint32_t *data, size_t len, uint32_t iters, unsigned int *counter, int peer) {
  const size_t unroll = 2, threads = (size_t)gridDim.x * blockDim.x;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, slice = unroll * threads;
  for (uint32_t i = 0; i < iters; i++) {
    size_t j = 0;
    for (; j + slice < len; j += slice) {
      for (size_t u = 0; u < unroll; u++) {
        size_t idx = j + u * threads + tid;
        nvshmem_uint32_p(data + idx, data[idx], peer);
      }
      __syncthreads();
    }
    for (size_t u = 0; u < unroll; u++) {
      size_t idx = j + u * threads + tid;
      if (idx < len) nvshmem_uint32_p(data + idx, data[idx], peer);
    }
    inter_cta_barrier(counter, i + 1, false);
  }
  inter_cta_barrier(counter, iters + 1, true);
}

// shmem_put_latency and shmem_get_latency for one SCOPE, one kernel each (put_latency_thread
// ... get_latency_block below).
template <int SCOPE>
__device__ __forceinline__ void put_latency(int *data, size_t len, uint32_t iters, int peer) {
  for (uint32_t i = 0; i < iters; i++) {
    if (SCOPE == THREAD) {
      nvshmem_int_put_nbi(data, data, len, peer);
      nvshmem_quiet();
    } else if (SCOPE == WARP) {
      nvshmemx_int_put_warp(data, data, len, peer);
      cta_quiet();
    } else {
      nvshmemx_int_put_block(data, data, len, peer);
      cta_quiet();
    }
  }
}

template <int SCOPE>
__device__ __forceinline__ void get_latency(int *data, size_t len, uint32_t iters, int peer) {
  for (uint32_t i = 0; i < iters; i++) {
    if (SCOPE == THREAD) {
      nvshmem_int_get_nbi(data, data, len, peer);
      nvshmem_quiet();
    } else if (SCOPE == WARP) {
      nvshmemx_int_get_nbi_warp(data, data, len, peer);
      cta_quiet();
    } else {
      nvshmemx_int_get_nbi_block(data, data, len, peer);
      cta_quiet();
    }
  }
}

#define LATENCY_KERNEL(NAME, BODY, SCOPE)                                                      \
  extern "C" __global__ void __launch_bounds__(1024, 1)                                        \
      NAME(int *data, size_t len, uint32_t iters, int peer) {                                  \
    BODY<SCOPE>(data, len, iters, peer);                                                       \
  }
LATENCY_KERNEL(put_latency_thread, put_latency, THREAD)
LATENCY_KERNEL(put_latency_warp, put_latency, WARP)
LATENCY_KERNEL(put_latency_block, put_latency, BLOCK)
LATENCY_KERNEL(get_latency_thread, get_latency, THREAD)
LATENCY_KERNEL(get_latency_warp, get_latency, WARP)
LATENCY_KERNEL(get_latency_block, get_latency, BLOCK)

// shmem_p_latency.
extern "C" __global__ void __launch_bounds__(1024, 1)
    p_latency(int *data, size_t len, uint32_t iters, int peer) {
  for (uint32_t i = 0; i < iters; i++) {
    for (size_t j = threadIdx.x; j < len; j += blockDim.x) nvshmem_int_p(data + j, data[j], peer);
    cta_quiet();
  }
}

// shmem_g_latency (the perftest's `pull`).
extern "C" __global__ void __launch_bounds__(1024, 1)
    g_latency(int *data, size_t len, uint32_t iters, int peer) {
  for (uint32_t i = 0; i < iters; i++) {
    for (size_t j = threadIdx.x; j < len; j += blockDim.x) data[j] = nvshmem_int_g(data + j, peer);
    __syncthreads();
  }
}

// shmem_signal_ping_pong_latency.
extern "C" __global__ void __launch_bounds__(1024, 1)
    signal_ping_pong(uint64_t *sig, uint32_t iters, int peer) {
  int me = nvshmem_my_pe();
  for (uint64_t i = 1; i <= iters; i++) {
    if (me != 0) {
      nvshmem_uint64_wait_until(sig, NVSHMEM_CMP_EQ, i);
      nvshmemx_signal_op(sig, i, NVSHMEM_SIGNAL_SET, peer);
    } else {
      nvshmemx_signal_op(sig, i, NVSHMEM_SIGNAL_SET, peer);
      nvshmem_uint64_wait_until(sig, NVSHMEM_CMP_EQ, i);
    }
  }
  nvshmem_quiet();
}

// shmem_put_signal_ping_pong_latency (its thread-scope kernel).
extern "C" __global__ void __launch_bounds__(1024, 1)
    put_signal_ping_pong(int *data, uint64_t *sig, size_t len, uint32_t iters, int peer) {
  int me = nvshmem_my_pe();
  for (uint64_t i = 1; i <= iters; i++) {
    if (me != 0) {
      nvshmem_uint64_wait_until(sig, NVSHMEM_CMP_EQ, i);
      nvshmem_int_put_signal_nbi(data, data, len, sig, i, NVSHMEM_SIGNAL_SET, peer);
    } else {
      nvshmem_int_put_signal_nbi(data, data, len, sig, i, NVSHMEM_SIGNAL_SET, peer);
      nvshmem_uint64_wait_until(sig, NVSHMEM_CMP_EQ, i);
    }
  }
  nvshmem_quiet();
}

// alltoall_latency, its 32-bit block-scope curve.
extern "C" __global__ void __launch_bounds__(1024, 1)
    alltoall_latency(Slice<int32_t> dest, Slice<int32_t> src, uint32_t iters) {
  size_t per_pe = src.len / nvshmem_n_pes();
  for (uint32_t i = 0; i < iters; i++)
    nvshmemx_int32_alltoall_block(NVSHMEM_TEAM_WORLD, dest.ptr, src.ptr, per_pe);
}
