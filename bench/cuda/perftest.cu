// CUDA C++ references of the benchmark kernels (src/kernels.rs): same names, parameters and
// control flow, written as a CUDA C++ NVSHMEM user would. Built into a cubin with NVSHMEM's
// device library (scripts/nvcc-cubin.sh) and launched by the same Rust host code as the Rust
// kernels (`shmem-bench --cuda perftest.cubin`), so the two differ only in device code.
//
// `Slice<T>` is the layout of shmem-device's `SymSlice<T>` (pointer, length).

#include <cstddef>
#include <cstdint>
#include <cuda/atomic>
#include <nvshmem.h>
#include <nvshmemx.h>

template <class T> struct Slice {
  T *ptr;
  size_t len;
};

enum { THREAD = 0, WARP = 1, BLOCK = 2 };
enum { PUT = 0, GET = 1 };
enum { LAT_PUT = 0, LAT_GET = 1, LAT_P = 2, LAT_G = 3 };

__device__ __forceinline__ void unit_part(uint32_t scope, size_t bytes, size_t *off,
                                          size_t *len) {
  size_t blk = blockIdx.x, nblk = gridDim.x, per_block = bytes / nblk;
  if (scope == THREAD) {
    size_t per = per_block / blockDim.x;
    *off = blk * per_block + threadIdx.x * per;
    *len = per;
  } else if (scope == WARP) {
    size_t nw = (blockDim.x + 31) / 32, per = per_block / nw;
    *off = blk * per_block + (threadIdx.x / 32) * per;
    *len = per;
  } else {
    *off = blk * per_block;
    *len = per_block;
  }
}

__device__ __forceinline__ void grid_barrier(uint32_t *counter, uint32_t k) {
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> c(*counter);
    uint32_t target = k * gridDim.x;
    c.fetch_add(1u, cuda::memory_order_acq_rel);
    while (c.load(cuda::memory_order_acquire) < target) {
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void move_nbi(uint32_t kind, uint32_t scope, uint8_t *dst,
                                         uint8_t *src, size_t off, size_t len, int peer) {
  if (kind == PUT) {
    if (scope == THREAD) nvshmem_putmem_nbi(dst + off, src + off, len, peer);
    else if (scope == WARP) nvshmemx_putmem_nbi_warp(dst + off, src + off, len, peer);
    else nvshmemx_putmem_nbi_block(dst + off, src + off, len, peer);
  } else {
    if (scope == THREAD) nvshmem_getmem_nbi(dst + off, src + off, len, peer);
    else if (scope == WARP) nvshmemx_getmem_nbi_warp(dst + off, src + off, len, peer);
    else nvshmemx_getmem_nbi_block(dst + off, src + off, len, peer);
  }
}

extern "C" __global__ void __launch_bounds__(1024) bw(uint32_t kind, uint32_t scope, uint8_t *dst, uint8_t *src,
                              size_t bytes, uint32_t iters, uint32_t sync_each,
                              uint32_t *counter, int peer) {
  size_t off, len;
  unit_part(scope, bytes, &off, &len);
  for (uint32_t i = 0; i < iters; i++) {
    if (len > 0) move_nbi(kind, scope, dst, src, off, len, peer);
    if (sync_each) grid_barrier(counter, i + 1);
  }
  nvshmem_quiet();
}

extern "C" __global__ void __launch_bounds__(1024) p_bw(uint32_t *dst, size_t words, uint32_t iters, int peer) {
  size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (uint32_t i = 0; i < iters; i++)
    for (size_t w = first; w < words; w += stride) nvshmem_uint32_p(dst + w, i ^ (uint32_t)w, peer);
  nvshmem_quiet();
}

extern "C" __global__ void __launch_bounds__(1024) latency(uint32_t op, uint32_t scope, uint8_t *dst, uint8_t *src,
                                   size_t bytes, uint32_t iters, int peer, uint32_t *out) {
  uint32_t *word = (uint32_t *)dst;
  uint32_t acc = 0;
  for (uint32_t i = 0; i < iters; i++) {
    if (op == LAT_PUT) {
      if (scope == THREAD) nvshmem_putmem(dst, src, bytes, peer);
      else if (scope == WARP) nvshmemx_putmem_warp(dst, src, bytes, peer);
      else nvshmemx_putmem_block(dst, src, bytes, peer);
    } else if (op == LAT_GET) {
      if (scope == THREAD) nvshmem_getmem(dst, src, bytes, peer);
      else if (scope == WARP) nvshmemx_getmem_warp(dst, src, bytes, peer);
      else nvshmemx_getmem_block(dst, src, bytes, peer);
    } else if (op == LAT_P) {
      nvshmem_uint32_p(word, i, peer);
    } else {
      acc += nvshmem_uint32_g(word, peer);
    }
    if (op == LAT_PUT || op == LAT_P) nvshmem_quiet();
  }
  if (op == LAT_G && threadIdx.x == 0) *out = acc;
}

extern "C" __global__ void __launch_bounds__(1024) ping_pong(uint32_t kind, uint8_t *dst, uint8_t *src, size_t bytes,
                                     uint64_t *sig, uint32_t iters, int peer) {
  int me = nvshmem_my_pe();
  for (uint64_t i = 1; i <= iters; i++) {
    if (me != 0) {
      if (threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, i);
      __syncthreads();
    }
    if (kind == 0) nvshmemx_signal_op(sig, i, NVSHMEM_SIGNAL_SET, peer);
    else nvshmemx_putmem_signal_block(dst, src, bytes, sig, i, NVSHMEM_SIGNAL_SET, peer);
    if (me == 0) {
      if (threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, i);
      __syncthreads();
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) alltoall_lat(Slice<uint8_t> dest, Slice<uint8_t> src,
                                        uint32_t iters) {
  size_t per_pe = src.len / nvshmem_n_pes();
  for (uint32_t i = 0; i < iters; i++)
    nvshmemx_alltoallmem_block(NVSHMEM_TEAM_WORLD, dest.ptr, src.ptr, per_pe);
}
