// What the low-latency FP8 dispatch's bytes cost without the dispatch: at its shape (4096
// tokens, hidden 7168: read the bf16 rows, 58.7 MB; write e4m3 rows with a scale per 128
// values, 7168 + 224 bytes a row, 30.3 MB), on a held stream, each launch after a streaming
// copy of 128 MiB that leaves none of the rows in L2:
// - a device copy of half the bytes (`moe_dispatch`'s "the same bytes copied"; its share of
//   "the device copy" is against a 256 MiB copy's rate);
// - an empty kernel on the dispatch's grid;
// - the rows read and nothing written; read and half of each written, no arithmetic;
// - the rows quantised as the dispatch quantises them (amax of 128 values by 8 lanes'
//   shuffles, scale amax/448, e4m3 by cvt.satfinite), either flat (a grid-stride loop over
//   16-value units, U of them in flight a thread) or a block per row (224 threads, a row's
//   448 units two a thread, the next row's loaded while this one is stored), the dispatch's
//   copying warps without their metadata warp.
// - the quantiser followed by the least completion a dispatch can have at one PE (each block
//   fences and counts itself done; block 0 waits for the count), with each fence.
// On a GPU machine (sm_90 and up), all three sets or those named:
//   nvcc -O3 -arch=sm_90 -o /tmp/fp8_floor scripts/probes/fp8_floor.cu
//   /tmp/fp8_floor [shapes] [hints] [completion]
// or built here, with the toolkit the project installs (~/.cache/shmem-rs/cuda-toolkit), adding
// `-L ~/.cache/shmem-rs/cuda-toolkit/nvidia/cu13/lib` for its static runtime, and carried.
// (BENCHMARKS.md, "The FP8 dispatch's bytes without the dispatch", sixtieth session.)
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <vector>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "held_stream.cuh"
#include "../../examples/moe-dispatch/cuda/fp8_group.cuh"

constexpr size_t T = 4096, H = 7168, ROW_IN = H * 2, ROW_OUT = H + H / 128 * 4;
constexpr size_t UNITS_ROW = H / 16, UNITS = T * UNITS_ROW;

// A 16-byte load of data read once (HINT 1: with an L2 prefetch of 256 bytes).
template <int HINT = 0>
__device__ __forceinline__ uint4 ld_once(const uint4 *p) {
  uint4 v;
  if (HINT)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
}

// A 16-byte store (HINT 1: streaming, `.cs`).
template <int HINT = 0>
__device__ __forceinline__ void st16(void *p, uint4 v) {
  if (HINT)
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else
    *reinterpret_cast<uint4 *>(p) = v;
}

__global__ void empty(int *sink) {
  if (sink && threadIdx.x == 0 && blockIdx.x == 1u << 30) sink[0] = 1;
}

// Every 16-byte chunk of the rows read, U in flight a thread; nothing written unless the
// impossible happens.
template <int U>
__global__ void read_only(const uint4 *x, size_t n, uint32_t *sink) {
  size_t step = (size_t)gridDim.x * blockDim.x;
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += U * step) {
    uint4 v[U];
#pragma unroll
    for (int j = 0; j < U; j++) v[j] = i + j * step < n ? ld_once(x + i + j * step) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < U; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// A unit: 16 bf16 values (32 bytes in) to 16 bytes out, at the FP8 row's place.
__device__ __forceinline__ size_t in_at(size_t u) { return u / UNITS_ROW * (ROW_IN / 16) + u % UNITS_ROW * 2; }
__device__ __forceinline__ uint8_t *out_at(uint8_t *o, size_t u) { return o + u / UNITS_ROW * ROW_OUT + u % UNITS_ROW * 16; }

// Half of each unit's bytes written (the high byte of each value), no arithmetic.
template <int U, int LH = 0, int SH = 0>
__global__ void half_bytes(const uint4 *x, uint8_t *o) {
  size_t step = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < UNITS; i += U * step) {
    uint4 a[U], b[U];
#pragma unroll
    for (int j = 0; j < U; j++) {
      size_t u = i + j * step;
      if (u < UNITS) {
        a[j] = ld_once<LH>(x + in_at(u));
        b[j] = ld_once<LH>(x + in_at(u) + 1);
      }
    }
#pragma unroll
    for (int j = 0; j < U; j++) {
      size_t u = i + j * step;
      if (u < UNITS) {
        uint4 q = make_uint4(__byte_perm(a[j].x, a[j].y, 0x7531), __byte_perm(a[j].z, a[j].w, 0x7531),
                             __byte_perm(b[j].x, b[j].y, 0x7531), __byte_perm(b[j].z, b[j].w, 0x7531));
        st16<SH>(out_at(o, u), q);
      }
    }
  }
}

// The unit (a, b) quantised with its group's scale (its octet of lanes' amax): 16 e4m3
// bytes; the scale to *scale_at when the lane is its octet's first.
__device__ __forceinline__ uint4 quantize(uint4 a, uint4 b, float &scale) {
  uint32_t m = magnitude(a, b);
  for (int step = 4; step > 0; step /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, step));
  float inv;
  fp8_scales(__uint_as_float(m << 16), scale, inv);
  uint32_t w[4], in[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    uint32_t two[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
      uint32_t v = in[2 * k + e];
      float2 p = make_float2(__fmul_rn(__uint_as_float(v << 16), inv), __fmul_rn(__uint_as_float(v & 0xffff0000u), inv));
      two[e] = __nv_cvt_float2_to_fp8x2(p, __NV_SATFINITE, __NV_E4M3);
    }
    w[k] = two[0] | two[1] << 16;
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int SH = 0>
__device__ __forceinline__ void store_unit(uint8_t *o, size_t u, uint4 q, float scale) {
  st16<SH>(out_at(o, u), q);
  if (u % 8 == 0) *reinterpret_cast<float *>(o + u / UNITS_ROW * ROW_OUT + H + u % UNITS_ROW / 8 * 4) = scale;
}

// Flat: a grid-stride loop over the units, U in flight a thread (the grid's threads a
// multiple of 32, so that a group's 8 units are an octet of lanes).
template <int U, int LH = 0, int SH = 0>
__device__ __forceinline__ void quant_units(const uint4 *x, uint8_t *o) {
  size_t step = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < UNITS; i += U * step) {
    uint4 a[U], b[U];
#pragma unroll
    for (int j = 0; j < U; j++) {
      size_t u = min(i + j * step, UNITS - 1);
      a[j] = ld_once<LH>(x + in_at(u));
      b[j] = ld_once<LH>(x + in_at(u) + 1);
    }
#pragma unroll
    for (int j = 0; j < U; j++) {
      float sc;
      uint4 q = quantize(a[j], b[j], sc);
      if (i + j * step < UNITS) store_unit<SH>(o, i + j * step, q, sc);
    }
  }
}

template <int U, int LH = 0, int SH = 0>
__global__ void quant_flat(const uint4 *x, uint8_t *o) {
  quant_units<U, LH, SH>(x, o);
}

// The least completion a dispatch can have at one PE: each block, once its threads are done,
// fences and adds 1 to a counter; block 0 waits for the whole grid's adds of launch `round`
// (1, 2, ...). F: the block's fence: 0 none (the add's release alone), 1 fence.acq_rel.gpu,
// 2 fence.acq_rel.sys, 3 fence.sc.sys (what nvshmem_quiet is on mapped memory; a dispatch's
// puts to other GPUs need system scope).
template <int F>
__device__ __forceinline__ void least_completion(unsigned long long *count, unsigned long long round) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (F == 1) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    if (F == 2) asm volatile("fence.acq_rel.sys;" ::: "memory");
    if (F == 3) asm volatile("fence.sc.sys;" ::: "memory");
    asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(count) : "memory");
    if (blockIdx.x == 0) {
      unsigned long long v;
      do asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(count) : "memory");
      while (v < round * gridDim.x);
    }
  }
}

// quant_flat<U>, then least_completion<F>.
template <int U, int F>
__global__ void quant_flat_done(const uint4 *x, uint8_t *o, unsigned long long *count, unsigned long long round) {
  quant_units<U>(x, o);
  least_completion<F>(count, round);
}

// The `bf16` dispatch's bytes for comparison: the rows copied whole (58.7 MB read and
// written), U chunks in flight a thread, then (DONE) the least completion with a system-scope
// fence, as quant_flat_done<U, 3>.
template <int U, bool DONE>
__global__ void copy_flat(const uint4 *x, uint4 *y, unsigned long long *count, unsigned long long round) {
  const size_t n = T * ROW_IN / 16;
  size_t step = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += U * step) {
    uint4 a[U];
#pragma unroll
    for (int j = 0; j < U; j++) a[j] = ld_once(x + min(i + j * step, n - 1));
#pragma unroll
    for (int j = 0; j < U; j++)
      if (i + j * step < n) y[i + j * step] = a[j];
  }
  if (DONE) least_completion<3>(count, round);
}

// A block per row (224 threads, 2 units a thread), the next row's loads issued before this
// row is quantised and stored: the dispatch's copying warps.
__global__ void quant_row(const uint4 *x, uint8_t *o) {
  constexpr uint32_t BS = 224;
  uint32_t t = threadIdx.x;
  size_t r = blockIdx.x;
  if (r >= T) return;
  uint4 cur[4], nxt[4];
  auto fetch = [&](uint4 v[4], size_t row) {
    size_t u0 = row * UNITS_ROW + t, u1 = u0 + BS;
    v[0] = ld_once(x + in_at(u0));
    v[1] = ld_once(x + in_at(u0) + 1);
    v[2] = ld_once(x + in_at(u1));
    v[3] = ld_once(x + in_at(u1) + 1);
  };
  fetch(cur, r);
  for (;;) {
    size_t nr = r + gridDim.x;
    if (nr < T) fetch(nxt, nr);
    float s0, s1;
    uint4 q0 = quantize(cur[0], cur[1], s0), q1 = quantize(cur[2], cur[3], s1);
    store_unit(o, r * UNITS_ROW + t, q0, s0);
    store_unit(o, r * UNITS_ROW + t + BS, q1, s1);
    if (nr >= T) break;
    r = nr;
#pragma unroll
    for (int j = 0; j < 4; j++) cur[j] = nxt[j];
  }
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t in_bytes = T * ROW_IN, out_bytes = T * ROW_OUT, flush_bytes = 128u << 20;
  uint4 *x, *fa, *fb;
  uint8_t *o;
  uint32_t *sink;
  cudaMalloc(&x, in_bytes);
  cudaMalloc(&o, std::max(out_bytes, in_bytes));
  cudaMalloc(&fa, flush_bytes);
  cudaMalloc(&fb, flush_bytes);
  cudaMalloc(&sink, 4);
  cudaMemset(x, 0x3c, in_bytes);
  cudaMemset(fa, 1, flush_bytes);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  const int reps = 40;
  const size_t total = in_bytes + out_bytes;
  printf("%d SMs; rows read %.1f MB, written %.1f MB, %.1f MB in all; each line: median of %d (min), "
         "us, and the rate of %.1f MB\n",
         sms, in_bytes / 1e6, out_bytes / 1e6, total / 1e6, reps - 5, total / 1e6);
  auto run = [&](const char *name, auto launch) {
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto &e : ev) cudaEventCreate(&e);
    spin<<<1, 1, 0, st>>>(5000000ull);
    for (int r = 0; r < reps; r++) {
      stream_copy<<<sms * 4, 256, 0, st>>>(fa, fb, flush_bytes / 16);
      cudaEventRecord(ev[2 * r], st);
      launch();
      cudaEventRecord(ev[2 * r + 1], st);
    }
    cudaError_t err = cudaStreamSynchronize(st);
    if (err != cudaSuccess) {
      printf("%s: error: %s\n", name, cudaGetErrorString(err));
      exit(1);
    }
    std::vector<float> t;
    for (int r = 5; r < reps; r++) {
      float ms;
      cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]);
      t.push_back(ms * 1000);
    }
    for (auto &e : ev) cudaEventDestroy(e);
    float m = median(t);
    printf("%-34s %8.2f (%8.2f) us  %7.1f GB/s\n", name, m, *std::min_element(t.begin(), t.end()), total / (m * 1e3));
  };
  // Every value is 0x3c3c (0.01147): each group's scale is that over 448, each e4m3 byte 448
  // (0x7e). Checked on the last row after each quantiser's runs.
  auto check = [&](const char *what) {
    std::vector<uint8_t> row(ROW_OUT);
    cudaMemset(o + (T - 1) * ROW_OUT, 0, ROW_OUT);
    cudaDeviceSynchronize();
    return [&, what, row]() mutable {
      cudaMemcpy(row.data(), o + (T - 1) * ROW_OUT, ROW_OUT, cudaMemcpyDeviceToHost);
      float want = 0.0f, got;
      uint32_t bits = 0x3c3cu << 16;
      memcpy(&want, &bits, 4);
      want = want * (1.0f / 448.0f);
      bool ok = std::all_of(row.begin(), row.begin() + H, [](uint8_t b) { return b == 0x7e; });
      for (size_t g = 0; g < H / 128; g++) {
        memcpy(&got, row.data() + H + 4 * g, 4);
        ok = ok && got == want;
      }
      if (!ok) {
        printf("%s: wrong output\n", what);
        exit(1);
      }
    };
  };
  auto checked = [&](const char *what, auto launch) {
    auto done = check(what);
    run(what, launch);
    done();
  };
  char name[64];
  // Which sets to run: the arguments (`shapes`, `hints`, `completion`), else all three.
  auto want = [&](const char *set) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; i++)
      if (!strcmp(argv[i], set)) return true;
    return false;
  };
  run("device copy of half the bytes", [&] { cudaMemcpyAsync(o, x, total / 2, cudaMemcpyDeviceToDevice, st); });
  run("device copy of the rows read", [&] { cudaMemcpyAsync(o, x, in_bytes, cudaMemcpyDeviceToDevice, st); });
  run("empty kernel, 528 x 256", [&] { empty<<<528, 256, 0, st>>>(nullptr); });
  if (want("shapes")) {
    // The rows read alone, half of each written, quantised: grids and loads in flight.
    for (int k : {4, 8}) {
      snprintf(name, sizeof name, "read only, U 4, %d x 256", sms * k);
      run(name, [&] { read_only<4><<<sms * k, 256, 0, st>>>(x, in_bytes / 16, sink); });
    }
    for (int k : {4, 8}) {
      snprintf(name, sizeof name, "half bytes, U 2, %d x 256", sms * k);
      run(name, [&] { half_bytes<2><<<sms * k, 256, 0, st>>>(x, o); });
      snprintf(name, sizeof name, "half bytes, U 4, %d x 256", sms * k);
      run(name, [&] { half_bytes<4><<<sms * k, 256, 0, st>>>(x, o); });
    }
    run("half bytes, U 1, 2112 x 128", [&] { half_bytes<1><<<sms * 16, 128, 0, st>>>(x, o); });
    run("half bytes, U 2, 2112 x 128", [&] { half_bytes<2><<<sms * 16, 128, 0, st>>>(x, o); });
    for (int k : {4, 8}) {
      snprintf(name, sizeof name, "quant flat, U 1, %d x 256", sms * k);
      checked(name, [&] { quant_flat<1><<<sms * k, 256, 0, st>>>(x, o); });
      snprintf(name, sizeof name, "quant flat, U 2, %d x 256", sms * k);
      checked(name, [&] { quant_flat<2><<<sms * k, 256, 0, st>>>(x, o); });
      snprintf(name, sizeof name, "quant flat, U 4, %d x 256", sms * k);
      checked(name, [&] { quant_flat<4><<<sms * k, 256, 0, st>>>(x, o); });
    }
    checked("quant flat, U 1, 4224 x 64", [&] { quant_flat<1><<<sms * 32, 64, 0, st>>>(x, o); });
    checked("quant flat, U 1, 1056 x 128", [&] { quant_flat<1><<<sms * 8, 128, 0, st>>>(x, o); });
    checked("quant flat, U 1, 2112 x 128", [&] { quant_flat<1><<<sms * 16, 128, 0, st>>>(x, o); });
    checked("quant flat, U 2, 2112 x 128", [&] { quant_flat<2><<<sms * 16, 128, 0, st>>>(x, o); });
    checked("quant flat, U 1, 264 x 1024", [&] { quant_flat<1><<<sms * 2, 1024, 0, st>>>(x, o); });
    for (int k : {3, 4, 6, 8}) {
      snprintf(name, sizeof name, "quant row, %d x 224", sms * k);
      checked(name, [&] { quant_row<<<sms * k, 224, 0, st>>>(x, o); });
    }
  }
  if (want("hints")) {
    // The loads' and stores' cache hints.
    run("half bytes, U 2, 1056 x 256", [&] { half_bytes<2><<<sms * 8, 256, 0, st>>>(x, o); });
    run("half bytes, L2::256B", [&] { half_bytes<2, 1, 0><<<sms * 8, 256, 0, st>>>(x, o); });
    run("half bytes, .cs stores", [&] { half_bytes<2, 0, 1><<<sms * 8, 256, 0, st>>>(x, o); });
    run("half bytes, both", [&] { half_bytes<2, 1, 1><<<sms * 8, 256, 0, st>>>(x, o); });
    checked("quant flat, U 2, 1056 x 256", [&] { quant_flat<2><<<sms * 8, 256, 0, st>>>(x, o); });
    checked("quant flat, L2::256B", [&] { quant_flat<2, 1, 0><<<sms * 8, 256, 0, st>>>(x, o); });
    checked("quant flat, .cs stores", [&] { quant_flat<2, 0, 1><<<sms * 8, 256, 0, st>>>(x, o); });
    checked("quant flat, both", [&] { quant_flat<2, 1, 1><<<sms * 8, 256, 0, st>>>(x, o); });
    checked("quant flat, U 1, both, 264 x 1024", [&] { quant_flat<1, 1, 1><<<sms * 2, 1024, 0, st>>>(x, o); });
  }
  if (want("completion")) {
    // The least completion after the quantiser, with each fence; the `bf16` dispatch's bytes
    // (58.7 MB read and written: the rates printed are of 89.0 MB) copied, with and without it.
    unsigned long long *count, round[12] = {};
    cudaMalloc(&count, 96);
    cudaMemset(count, 0, 96);
    uint4 *y = reinterpret_cast<uint4 *>(o);
    run("rows copied whole, U 2, 528 x 256", [&] { copy_flat<2, false><<<sms * 4, 256, 0, st>>>(x, y, count, 0); });
    run("rows copied whole, U 1, 2112 x 128", [&] { copy_flat<1, false><<<sms * 16, 128, 0, st>>>(x, y, count, 0); });
    run("the same, fence.sc.sys, U 2, 528 x 256",
        [&] { copy_flat<2, true><<<sms * 4, 256, 0, st>>>(x, y, count + 8, ++round[8]); });
    run("the same, fence.sc.sys, U 1, 2112 x 128",
        [&] { copy_flat<1, true><<<sms * 16, 128, 0, st>>>(x, y, count + 9, ++round[9]); });
    const char *fences[4] = {"no fence", "fence.acq_rel.gpu", "fence.acq_rel.sys", "fence.sc.sys"};
    checked("quant flat, U 1, 2112 x 128", [&] { quant_flat<1><<<sms * 16, 128, 0, st>>>(x, o); });
    checked("quant flat, U 2, 528 x 256", [&] { quant_flat<2><<<sms * 4, 256, 0, st>>>(x, o); });
    for (int f = 0; f < 4; f++) {
      auto *k1 = f == 0 ? quant_flat_done<1, 0> : f == 1 ? quant_flat_done<1, 1> : f == 2 ? quant_flat_done<1, 2> : quant_flat_done<1, 3>;
      auto *k2 = f == 0 ? quant_flat_done<2, 0> : f == 1 ? quant_flat_done<2, 1> : f == 2 ? quant_flat_done<2, 2> : quant_flat_done<2, 3>;
      snprintf(name, sizeof name, "U 1, 2112 x 128, %s", fences[f]);
      checked(name, [&] { k1<<<sms * 16, 128, 0, st>>>(x, o, count + f, ++round[f]); });
      snprintf(name, sizeof name, "U 2, 528 x 256, %s", fences[f]);
      checked(name, [&] { k2<<<sms * 4, 256, 0, st>>>(x, o, count + 4 + f, ++round[4 + f]); });
    }
  }
  return 0;
}
