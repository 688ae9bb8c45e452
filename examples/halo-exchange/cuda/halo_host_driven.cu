// Host-driven halo exchange: what users do without NVSHMEM. One process drives every GPU;
// each iteration launches the Jacobi kernel on every GPU, then copies the edge rows into the
// neighbours' halo rows with cudaMemcpyPeerAsync, ordered by events. Same grid, partition,
// update formula and initial values as the NVSHMEM versions (src/lib.rs, src/kernels.rs).
//
// usage: halo_host_driven NX NY ITERS [GPUS] [--verify]
// Prints one line: "host-driven nx ny gpus iters us_per_iter".

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static double initial(uint64_t seed, uint32_t nx, uint32_t ny, uint32_t y, uint32_t x) {
  if (y == 0) return 1.0;
  if (y == ny - 1) return 2.0;
  if (x == 0 || x == nx - 1) return 1.0 + (double)y / (double)(ny - 1);
  uint64_t z = seed ^ ((((uint64_t)y << 32) | x) * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / (double)(1ull << 53);
}

// Rows [start, start + rows) of the interior for GPU `pe` of `n` (as halo_exchange::partition).
static void partition(uint32_t ny, uint32_t pe, uint32_t n, uint32_t *start, uint32_t *rows) {
  uint32_t interior = ny - 2, base = interior / n, rem = interior % n;
  *rows = base + (pe < rem ? 1 : 0);
  *start = 1 + pe * base + (pe < rem ? pe : rem);
}

// Updates local rows 1..=rows (grid-stride over rows, as the NVSHMEM kernels' interior).
__global__ void jacobi(const float *a, float *a_new, size_t nx, size_t rows) {
  for (size_t row = 1 + blockIdx.x; row <= rows; row += gridDim.x) {
    size_t base = row * nx;
    for (size_t x = 1 + threadIdx.x; x < nx - 1; x += blockDim.x) {
      size_t c = base + x;
      a_new[c] = (((a[c - 1] + a[c + 1]) + a[c - nx]) + a[c + nx]) * 0.25f;
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s NX NY ITERS [GPUS] [--verify]\n", argv[0]);
    return 2;
  }
  uint32_t nx = atoi(argv[1]), ny = atoi(argv[2]), iters = atoi(argv[3]);
  int ngpu = 0;
  CK(cudaGetDeviceCount(&ngpu));
  int n = argc > 4 && argv[4][0] != '-' ? atoi(argv[4]) : ngpu;
  bool verify = argc > 4 && !strcmp(argv[argc - 1], "--verify");
  if (n < 1 || n > ngpu || ny - 2 < (uint32_t)n) {
    fprintf(stderr, "bad GPU count %d (have %d) for %u rows\n", n, ngpu, ny);
    return 2;
  }
  const uint64_t seed = 0x5eed;
  std::vector<float *> a(n), a_new(n);
  std::vector<uint32_t> start(n), rows(n);
  std::vector<cudaStream_t> st(n);
  std::vector<cudaEvent_t> computed(n), copied(n);
  int blocks = 0;
  for (int d = 0; d < n; d++) {
    partition(ny, d, n, &start[d], &rows[d]);
    CK(cudaSetDevice(d));
    for (int p = 0; p < n; p++)
      if (p != d && (p == d - 1 || p == d + 1)) {
        int ok = 0;
        CK(cudaDeviceCanAccessPeer(&ok, d, p));
        if (ok) CK(cudaDeviceEnablePeerAccess(p, 0));
      }
    size_t len = (size_t)(rows[d] + 2) * nx;
    CK(cudaMalloc(&a[d], len * sizeof(float)));
    CK(cudaMalloc(&a_new[d], len * sizeof(float)));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&computed[d], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&copied[d], cudaEventDisableTiming));
    CK(cudaEventRecord(copied[d], st[d]));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d));
    blocks = sms * 4;
  }
  auto run = [&](uint32_t count) {
    for (uint32_t it = 0; it < count; it++) {
      for (int d = 0; d < n; d++) {
        CK(cudaSetDevice(d));
        if (d > 0) CK(cudaStreamWaitEvent(st[d], copied[d - 1], 0));
        if (d + 1 < n) CK(cudaStreamWaitEvent(st[d], copied[d + 1], 0));
        int g = (int)rows[d] < blocks ? (int)rows[d] : blocks;
        jacobi<<<g, 512, 0, st[d]>>>(a[d], a_new[d], nx, rows[d]);
        CK(cudaGetLastError());
        CK(cudaEventRecord(computed[d], st[d]));
      }
      for (int d = 0; d < n; d++) {
        CK(cudaSetDevice(d));
        size_t row = (size_t)nx * sizeof(float);
        if (d > 0) {  // my first row -> the bottom halo of the GPU above
          CK(cudaStreamWaitEvent(st[d], computed[d - 1], 0));
          CK(cudaMemcpyPeerAsync(a_new[d - 1] + (size_t)(rows[d - 1] + 1) * nx, d - 1,
                                 a_new[d] + nx, d, row, st[d]));
        }
        if (d + 1 < n) {  // my last row -> the top halo of the GPU below
          CK(cudaStreamWaitEvent(st[d], computed[d + 1], 0));
          CK(cudaMemcpyPeerAsync(a_new[d + 1], d + 1, a_new[d] + (size_t)rows[d] * nx, d, row,
                                 st[d]));
        }
        CK(cudaEventRecord(copied[d], st[d]));
      }
      std::swap(a, a_new);
    }
    for (int d = 0; d < n; d++) {
      CK(cudaSetDevice(d));
      CK(cudaStreamSynchronize(st[d]));
    }
  };
  // Both grids of every GPU to the initial slab, halos included.
  auto reset = [&]() {
    for (int d = 0; d < n; d++) {
      CK(cudaSetDevice(d));
      size_t len = (size_t)(rows[d] + 2) * nx;
      std::vector<float> h(len);
      for (uint32_t r = 0; r < rows[d] + 2; r++)
        for (uint32_t x = 0; x < nx; x++)
          h[(size_t)r * nx + x] = (float)initial(seed, nx, ny, start[d] - 1 + r, x);
      CK(cudaMemcpy(a[d], h.data(), len * sizeof(float), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(a_new[d], h.data(), len * sizeof(float), cudaMemcpyHostToDevice));
    }
  };
  reset();
  run(10);  // warm-up
  // Reset both grids (the warm-up moved them on) and time `iters` iterations.
  reset();
  cudaEvent_t t0, t1;
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventRecord(t0, st[0]));
  for (int d = 1; d < n; d++) CK(cudaStreamWaitEvent(st[d], t0, 0));
  run(iters);
  CK(cudaSetDevice(0));
  CK(cudaEventRecord(t1, st[0]));
  CK(cudaEventSynchronize(t1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, t0, t1));
  printf("host-driven %u %u %d %u %.3f\n", nx, ny, n, iters, ms * 1e3 / iters);
  if (verify) {  // the whole grid against a CPU Jacobi with the same arithmetic
    std::vector<float> g((size_t)nx * ny), g2;
    for (uint32_t y = 0; y < ny; y++)
      for (uint32_t x = 0; x < nx; x++) g[(size_t)y * nx + x] = (float)initial(seed, nx, ny, y, x);
    g2 = g;
    for (uint32_t it = 0; it < iters; it++) {
      for (size_t y = 1; y + 1 < ny; y++)
        for (size_t x = 1; x + 1 < nx; x++) {
          size_t c = y * nx + x;
          g2[c] = (((g[c - 1] + g[c + 1]) + g[c - nx]) + g[c + nx]) * 0.25f;
        }
      std::swap(g, g2);
    }
    size_t bad = 0;
    for (int d = 0; d < n; d++) {
      CK(cudaSetDevice(d));
      std::vector<float> h((size_t)rows[d] * nx);
      CK(cudaMemcpy(h.data(), a[d] + nx, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < h.size(); i++)
        if (memcmp(&h[i], &g[(size_t)start[d] * nx + i], sizeof(float))) bad++;
    }
    printf("host-driven verify: %zu points differ\n", bad);
    if (bad) return 1;
  }
  return 0;
}
