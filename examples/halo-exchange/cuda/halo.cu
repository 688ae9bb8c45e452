// CUDA C++ reference of the halo-exchange kernels (src/kernels.rs): the same algorithm,
// operation for operation, written the way a CUDA C++ NVSHMEM user would write it.
//
// Built into a cubin with NVSHMEM's device library (cuda/build.sh) and launched by the Rust
// host driver (src/host.rs, `--cuda`) with the same buffers, launch shape and timing as the
// Rust kernels, so that the comparison is device code against device code.
//
// Parameters mirror the Rust kernels: `Slice<T>` is the layout of `SymSlice<T>` (pointer,
// length), `Slab` that of `halo_exchange::Slab`.

#include <cstddef>
#include <cstdint>
#include <cuda/atomic>
#include <nvshmem.h>
#include <nvshmemx.h>

template <class T> struct Slice {
  T *ptr;
  size_t len;
};

struct Slab {
  uint32_t nx, rows;
  int32_t top_pe, bottom_pe;
  uint32_t top_rows, n_pes;
};

struct Bufs {
  Slice<uint64_t> sync;
  Slice<uint32_t> work;
  Slice<double> stats;
  Slice<double> norms;
};

// Points of the per-iteration kernel's edge row a thread updates a round, their loads
// together, then their stores (kernels.rs: EDGE_POINTS).
constexpr int EDGE_POINTS = 2;

// K points a round, then the rest one at a time (kernels.rs: update_row).
template <int K, class T>
__device__ __forceinline__ void update_row(const T *a, T *a_new, size_t nx, size_t row,
                                           uint32_t first, uint32_t stride, bool check,
                                           double &acc) {
  size_t base = row * nx;
  uint32_t x = 1 + first;
  if (K > 1) {
    for (; x + (size_t)(K - 1) * stride < nx - 1; x += K * stride) {
      size_t c0 = base + x;
      T v[K];
#pragma unroll
      for (int k = 0; k < K; k++) {
        size_t c = c0 + (size_t)k * stride;
        v[k] = (((a[c - 1] + a[c + 1]) + a[c - nx]) + a[c + nx]) * T(0.25);
      }
#pragma unroll
      for (int k = 0; k < K; k++) a_new[c0 + (size_t)k * stride] = v[k];
      if (check) {
#pragma unroll
        for (int k = 0; k < K; k++) {
          double d = (double)v[k] - (double)a[c0 + (size_t)k * stride];
          acc += d * d;
        }
      }
    }
  }
  for (; x < nx - 1; x += stride) {
    size_t c = base + x;
    T v = (((a[c - 1] + a[c + 1]) + a[c - nx]) + a[c + nx]) * T(0.25);
    a_new[c] = v;
    if (check) {
      double d = (double)v - (double)a[c];
      acc += d * d;
    }
  }
}

// The elements of T in 16 bytes (the Rust `Chunk`, a uint4 here) and access to them.
template <class T> struct Lanes;
template <> struct Lanes<float> {
  static constexpr int n = 4;
  static __device__ __forceinline__ float get(const uint4 &c, int i) {
    return __uint_as_float((&c.x)[i]);
  }
  static __device__ __forceinline__ void set(uint4 &c, int i, float v) {
    (&c.x)[i] = __float_as_uint(v);
  }
};
template <> struct Lanes<double> {
  static constexpr int n = 2;
  static __device__ __forceinline__ double get(const uint4 &c, int i) {
    return __hiloint2double((int)(&c.x)[2 * i + 1], (int)(&c.x)[2 * i]);
  }
  static __device__ __forceinline__ void set(uint4 &c, int i, double v) {
    (&c.x)[2 * i] = (unsigned)__double2loint(v);
    (&c.x)[2 * i + 1] = (unsigned)__double2hiint(v);
  }
};

template <class T>
__device__ __forceinline__ bool by_chunks(const T *a, const T *a_new, size_t nx) {
  return nx % Lanes<T>::n == 0 && (((uintptr_t)a | (uintptr_t)a_new) % 16) == 0;
}

// Rows row0..row0+n of chunk column v, the three rows the stencil reads in registers; the
// border columns are stored with their value in `a` (the same in both grids).
template <class T>
__device__ __forceinline__ void update_strip(const T *a, T *a_new, size_t nx, size_t w,
                                             size_t row0, uint32_t n, size_t v, bool check,
                                             double &acc) {
  using L = Lanes<T>;
  bool first = v == 0, last = v == w - 1;
  const T *src = a + row0 * nx + v * L::n;
  T *dst = a_new + row0 * nx + v * L::n;
  uint4 up = *(const uint4 *)(src - nx), cur = *(const uint4 *)src;
  for (uint32_t k = 0; k < n; k++) {
    uint4 down = *(const uint4 *)(src + nx);
    T left = src[-1], right = src[L::n];
    uint4 out = cur;
#pragma unroll
    for (int i = 0; i < L::n; i++) {
      T l = i == 0 ? left : L::get(cur, i - 1);
      T x = i + 1 == L::n ? right : L::get(cur, i + 1);
      T val = (((l + x) + L::get(up, i)) + L::get(down, i)) * T(0.25);
      bool border = (i == 0 && first) || (i + 1 == L::n && last);
      L::set(out, i, border ? L::get(cur, i) : val);
    }
    *(uint4 *)dst = out;
    if (check) {
#pragma unroll
      for (int i = 0; i < L::n; i++) {
        double d = (double)L::get(out, i) - (double)L::get(cur, i);
        acc += d * d;
      }
    }
    up = cur;
    cur = down;
    src += nx;
    dst += nx;
  }
}

// Bands of `height` rows, `w` strips each: one strip per interior thread (kernels.rs: strips).
__device__ __forceinline__ void strips(uint32_t m, uint32_t w, uint32_t threads,
                                       uint32_t &height, uint32_t &count) {
  uint32_t bands = max(threads / w, 1u);
  height = (m + bands - 1) / bands;
  count = (m + height - 1) / height * w;
}

template <int K, class T>
__device__ __forceinline__ double iterate(const T *a, T *a_new, const Bufs &b, Slab s,
                                          uint64_t epoch, bool check) {
  size_t blk = blockIdx.x, nblk = gridDim.x, tid = threadIdx.x, bs = blockDim.x;
  size_t nx = s.nx, rows = s.rows;
  double acc = 0.0;
  if (blk == 0 || (blk == 1 && rows >= 2)) {
    size_t row = blk == 0 ? 1 : rows;
    bool to_top = blk == 0 && s.top_pe >= 0;
    bool to_bottom = (blk == 1 || rows == 1) && s.bottom_pe >= 0;
    if (tid == 0) {
      if (to_top) nvshmem_signal_wait_until(b.sync.ptr + 0, NVSHMEM_CMP_GE, epoch);
      if (to_bottom) nvshmem_signal_wait_until(b.sync.ptr + 1, NVSHMEM_CMP_GE, epoch);
    }
    __syncthreads();
    update_row<K>(a, a_new, nx, row, tid, bs, check, acc);
    // No barrier before the send: nvshmemx_putmem_signal_block meets the block on entry.
    T *src = a_new + row * nx;
    if (to_top)
      nvshmemx_putmem_signal_block(a_new + (s.top_rows + 1) * nx, src, nx * sizeof(T),
                                   b.sync.ptr + 1, epoch + 1, NVSHMEM_SIGNAL_SET, s.top_pe);
    if (to_bottom)
      nvshmemx_putmem_signal_block(a_new, src, nx * sizeof(T), b.sync.ptr + 0, epoch + 1,
                                   NVSHMEM_SIGNAL_SET, s.bottom_pe);
  } else if (blk >= 2 && rows > 2) {
    if (by_chunks(a, a_new, nx)) {
      uint32_t w = nx / Lanes<T>::n, threads = (nblk - 2) * bs, height, count;
      strips(rows - 2, w, threads, height, count);
      for (uint32_t i = (blk - 2) * bs + tid; i < count; i += threads) {
        uint32_t row0 = 2 + i / w * height;
        update_strip(a, a_new, nx, w, row0, min(height, (uint32_t)rows - row0), i % w, check,
                     acc);
      }
    } else {
      for (size_t row = 2 + (blk - 2); row < rows; row += nblk - 2)
        update_row<1>(a, a_new, nx, row, tid, bs, check, acc);
    }
  }
  return acc;
}

__device__ __forceinline__ void finish_check(const Bufs &b, Slab s, size_t check, double acc) {
  for (int m = 16; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  cuda::atomic_ref<double, cuda::thread_scope_device> partial(b.stats.ptr[0]);
  if ((threadIdx.x & 31) == 0) partial.fetch_add(acc, cuda::memory_order_release);
  __syncthreads();
  if (threadIdx.x != 0) return;
  cuda::atomic_ref<uint32_t, cuda::thread_scope_device> done(b.work.ptr[1]);
  if (done.fetch_add(1u, cuda::memory_order_acq_rel) + 1 != gridDim.x) return;
  size_t me = nvshmem_my_pe(), n = s.n_pes;
  double local = partial.load(cuda::memory_order_acquire);
  partial.store(0.0, cuda::memory_order_relaxed);
  done.store(0u, cuda::memory_order_relaxed);
  double *slot = b.norms.ptr + check * n + me;
  for (size_t pe = 0; pe < n; pe++) nvshmem_double_p(slot, local, (int)pe);
  nvshmem_fence();
  for (size_t pe = 0; pe < n; pe++)
    nvshmemx_signal_op(b.sync.ptr + 2, 1, NVSHMEM_SIGNAL_ADD, (int)pe);
  nvshmem_signal_wait_until(b.sync.ptr + 2, NVSHMEM_CMP_GE, (check + 1) * n);
  double total = 0.0;
  for (size_t pe = 0; pe < n; pe++) total += ((volatile double *)b.norms.ptr)[check * n + pe];
  b.stats.ptr[1 + check] = total;
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

template <class T>
__device__ __forceinline__ void step(T *a, T *a_new, Bufs b, Slab s, uint64_t epoch, int check) {
  double acc = iterate<EDGE_POINTS>(a, a_new, b, s, epoch, check >= 0);
  if (check >= 0) finish_check(b, s, (size_t)check, acc);
}

template <class T>
__device__ __forceinline__ void persistent(T *a, T *a_new, Bufs b, Slab s, uint32_t iters,
                                           uint32_t check_every) {
  size_t check = 0;
  for (uint32_t it = 0; it < iters; it++) {
    bool checking = check_every > 0 && (it + 1) % check_every == 0;
    double acc = iterate<1>(a, a_new, b, s, it, checking);
    if (checking) finish_check(b, s, check++, acc);
    grid_barrier(b.work.ptr + 0, it + 1);
    T *t = a;
    a = a_new;
    a_new = t;
  }
}

#define HALO_KERNELS(T, STEP, PERSISTENT)                                                   \
  extern "C" __global__ void __launch_bounds__(512, 3) STEP(T *a, T *a_new, Slice<uint64_t> sync, Slice<uint32_t> work, \
                                  Slice<double> stats, Slice<double> norms, Slab slab,        \
                                  uint64_t epoch, int check) {                                \
    step<T>(a, a_new, Bufs{sync, work, stats, norms}, slab, epoch, check);                    \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(512, 2) PERSISTENT(T *a, T *a_new, Slice<uint64_t> sync,                 \
                                        Slice<uint32_t> work, Slice<double> stats,            \
                                        Slice<double> norms, Slab slab, uint32_t iters,       \
                                        uint32_t check_every) {                               \
    persistent<T>(a, a_new, Bufs{sync, work, stats, norms}, slab, iters, check_every);        \
  }

HALO_KERNELS(float, step_f32, persistent_f32)
HALO_KERNELS(double, step_f64, persistent_f64)
