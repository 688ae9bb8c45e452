// CUDA C++ reference of the MoE kernels (src/kernels.rs): the same algorithm, operation for
// operation, written the way a CUDA C++ NVSHMEM user would write it.
//
// Built into a cubin with NVSHMEM's device library (cuda/build.sh) and launched by the Rust
// host driver (src/host.rs, `--cuda` / `--compare`) with the same buffers, launch shapes and
// timing as the Rust kernels. `Bufs` and `Shape` are the layouts of the Rust structs.
// Products and sums use __fmul_rn/__fadd_rn (no fused multiply-add), as the Rust kernels and
// the CPU reference do, so that all three agree bit for bit.

#include <cstdint>
#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "fp8_group.cuh"

struct Shape {
  uint32_t tokens, hidden, experts, top_k, n_pes, capacity, round, mode, dtype;
  uint32_t read_once;  // 1: the combine reads the expert rows not kept in L1 (as in Rust)
  uint32_t mapped;     // 1: every PE's memory is mapped here; the host launches the _mapped kernels
};

struct Bufs {
  uint16_t *x;
  int32_t *topk;
  float *weights;
  int32_t *send_pair, *send_slot;
  uint32_t *work, *counts, *base;
  uint64_t *scratch;
  uint16_t *recv_x;
  int32_t *recv_src, *recv_pair;
  float *recv_w;
  uint32_t *recv_count, *expert_count, *expert_offset;
  int32_t *expert_rows;
  uint16_t *expert_y, *comb_recv, *comb_stage, *out;
  uint64_t *signals;
  uint32_t *dropped;
};

enum : uint32_t { LOW_LATENCY = 0, THROUGHPUT = 1 };
enum : uint32_t { BF16 = 0, FP8 = 1 };
enum : size_t { LAYOUT_BARRIER = 0, ROW_CURSORS = 2 };
// Words from one counter of work to the next: each on a 128-byte line of its own (kernels.rs,
// COUNTER_STRIDE). Counter ROW_CURSORS + d: rows sent towards PE d; ROW_CURSORS + n + e: pair
// slots of expert e.
constexpr size_t COUNTER_STRIDE = 32;
__device__ __forceinline__ uint32_t *counter(const Bufs &b, size_t i) { return b.work + i * COUNTER_STRIDE; }
enum : size_t { SIG_DISPATCH = 0, SIG_COMBINE = 1, SIG_COUNTS = 2, SIG_SLOTS = 3, SIG_RESERVED = 4 };

__device__ __forceinline__ float bf16_to_f32(uint32_t b) { return __uint_as_float(b << 16); }

// lo and hi rounded to bf16 (to nearest, ties to even; NaN 0x7fff), lo in the low half: one
// cvt.rn.bf16x2.f32, as shmem_device::bf16::pack.
__device__ __forceinline__ uint32_t bf16_pack(float lo, float hi) {
  __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&p);
}

__device__ __forceinline__ float expert_scale(uint32_t e) {
  return __fadd_rn(1.0f, __fmul_rn((float)(e % 8), 0.125f));
}

__device__ __forceinline__ void widen(uint4 c, float v[8]) {
  uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[2 * i] = bf16_to_f32(w[i] & 0xffff);
    v[2 * i + 1] = bf16_to_f32(w[i] >> 16);
  }
}

__device__ __forceinline__ uint4 narrow(const float v[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; i++) w[i] = bf16_pack(v[2 * i], v[2 * i + 1]);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void warps(uint32_t &lane, uint32_t &gw, uint32_t &nw) {
  uint32_t wpb = (blockDim.x + 31) / 32;
  lane = threadIdx.x % 32;
  gw = blockIdx.x * wpb + threadIdx.x / 32;
  nw = gridDim.x * wpb;
}

__device__ __forceinline__ uint32_t warp_or(uint32_t v) {
  for (int m = 16; m > 0; m /= 2) v |= __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

constexpr size_t LAYOUT_CHUNK = 32;  // a warp's tokens, a lane each: a chunk is one ballot
constexpr size_t LAYOUT_SEGMENT = 4;  // chunks a unit of the layout takes, in one warp
constexpr unsigned LOOKBACK_SLEEP_NS = 256;  // an expert column's last unit's backoff in the layout
constexpr size_t MAX_TOP_K = 16;

__device__ __forceinline__ size_t layout_segments(const Shape &s) {
  return (s.tokens + LAYOUT_CHUNK * LAYOUT_SEGMENT - 1) / (LAYOUT_CHUNK * LAYOUT_SEGMENT);
}
// The scratch word of this PE's pairs of expert e in the units before unit sg (seg_prefix_at).
__device__ __forceinline__ size_t seg_prefix_at(const Shape &s, uint32_t e, size_t sg) {
  size_t segs = layout_segments(s);
  return (s.experts + s.n_pes) * segs + e * segs + sg;
}

// One unit of the layout's scan (scan_unit in Rust): column col's hits among the
// LAYOUT_SEGMENT chunks of tokens from first, this lane's token of each. Into found[i], this
// lane's token's choice plus one (0: none) in the low byte and its rank among the unit's hits
// above it; returns the unit's hits. With N = 8 (K <= 8) every chunk's choices are loaded
// before any is tested, each lane's token clamped into the tokens; else a chunk's at a time.
// The loads past K are conditional (nvcc issues them together; one H100, against MAX_TOP_K
// words and masked tests: 16.2 / 20.3 / 21.6 us at 128 / 512 / 4096 tokens against 18.2 /
// 23.0 / 23.6, so the twin keeps them).
template <size_t N>
__device__ __forceinline__ uint32_t scan_unit(const Bufs &b, const Shape &s, uint32_t col, size_t first,
                                              uint32_t lane, uint32_t found[LAYOUT_SEGMENT]) {
  size_t k_n = s.top_k, t_n = s.tokens;
  uint32_t e_n = s.experts, l_n = e_n / s.n_pes;
  // The column's experts, lo .. lo + width: itself, or the destination's L.
  uint32_t lo = col < e_n ? col : (col - e_n) * l_n, width = col < e_n ? 1 : l_n;
  constexpr bool together = N <= 8;
  int32_t e[LAYOUT_SEGMENT][N];
  auto load = [&](size_t i) {
    size_t t = min(first + i * LAYOUT_CHUNK + lane, t_n - 1);
#pragma unroll
    for (size_t k = 0; k < N; k++) e[i][k] = k < k_n ? b.topk[t * k_n + k] : -1;
  };
  if (together) {
#pragma unroll
    for (size_t i = 0; i < LAYOUT_SEGMENT; i++) load(i);
  }
  uint32_t below = (1u << lane) - 1, hits = 0;
#pragma unroll
  for (size_t i = 0; i < LAYOUT_SEGMENT; i++) {
    if (!together) load(i);
    // One range test a choice; -1 (no expert, or past K) is never in range.
    int hit = -1;
    if (first + i * LAYOUT_CHUNK + lane < t_n) {
#pragma unroll
      for (size_t k = 0; k < N; k++)
        if ((uint32_t)e[i][k] - lo < width) hit = (int)k;
    }
    uint32_t mask = __ballot_sync(0xffffffffu, hit >= 0);
    found[i] = hit >= 0 ? (hits + __popc(mask & below)) << 8 | (uint32_t)(hit + 1) : 0;
    hits += __popc(mask);
  }
  return hits;
}

// Programmatic dependent launch (shmem_device::pdl in Rust): the layout lets the throughput
// dispatch start at once; the dispatch waits for the layout where it first needs its words.
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Units of the layout that place this PE's rows, each counted in signals[SIG_SLOTS] once
// done (kernels.rs, slot_units).
__device__ __forceinline__ uint64_t slot_units(const Shape &s) {
  return (uint64_t)s.n_pes * layout_segments(s);
}
// Throughput mode: waits, in one warp, until this round's layout has placed every row of
// this PE, with acquire loads (kernels.rs, wait_slots).
__device__ __forceinline__ void wait_slots(const Bufs &b, const Shape &s) {
  if (threadIdx.x % 32 == 0) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device> slots(b.signals[SIG_SLOTS]);
    uint64_t want = (uint64_t)s.round * slot_units(s);
    while (slots.load(cuda::memory_order_acquire) < want) {
    }
  }
  __syncwarp();
}

// Throughput mode's layout (kernels.rs, layout): it leaves each pair's rank within its unit and
// the pairs of the expert's earlier units in scratch, which send adds.
__device__ __forceinline__ void layout(Bufs b, Shape s) {
  pdl_launch_dependents();
  uint32_t me = nvshmem_my_pe(), n = s.n_pes, e_n = s.experts;
  size_t t_n = s.tokens;
  uint32_t l_n = e_n / n;
  uint32_t lane, gw, nw;
  warps(lane, gw, nw);
  size_t row_len = e_n + n, mine = me * row_len;
  size_t segs = layout_segments(s);
  size_t units = row_len * segs;
  // This launch's tag: one more than the generation, which the launch's last block moves on
  // by one. A unit publishes its hits with the tag; a later unit of the same column waits
  // for its earlier units' words to carry it.
  uint32_t *generation = b.work + LAYOUT_BARRIER + 1;
  uint64_t tag = (uint64_t)*(volatile uint32_t *)generation + 1;
  // The destinations' columns first: the dispatch's rows wait only for those (SIG_SLOTS),
  // its metadata for the whole launch.
  for (size_t u = gw; u < units; u += nw) {
    uint32_t c = u / segs, col = c < n ? e_n + c : c - n;
    size_t sg = u % segs, unit = col * segs + sg, first = sg * LAYOUT_SEGMENT * LAYOUT_CHUNK;
    uint32_t found[LAYOUT_SEGMENT];
    uint32_t hits = s.top_k <= 8 ? scan_unit<8>(b, s, col, first, lane, found)
                                 : scan_unit<MAX_TOP_K>(b, s, col, first, lane, found);
    if (lane == 0) *(volatile uint64_t *)&b.scratch[unit] = tag << 32 | hits;
    if (col < e_n) {
      // The pairs' ranks within the unit; the column's last unit waits for the earlier ones
      // and writes every unit's prefix and the column's total (kernels.rs, layout).
#pragma unroll
      for (size_t i = 0; i < LAYOUT_SEGMENT; i++) {
        size_t t = first + i * LAYOUT_CHUNK + lane;
        uint32_t f = found[i];
        if (t < t_n && f) b.send_pair[t * s.top_k + (f & 0xff) - 1] = (int32_t)(f >> 8);
      }
      if (sg + 1 == segs) {
        uint32_t carry = 0;
        for (size_t c0 = 0; c0 < segs; c0 += 32) {
          size_t c = c0 + lane;
          uint32_t h = 0;
          if (c < sg) {
            uint64_t *word = b.scratch + col * segs + c, v;
            while ((v = *(volatile uint64_t *)word) < tag << 32) __nanosleep(LOOKBACK_SLEEP_NS);
            h = (uint32_t)v;
          } else if (c == sg) {
            h = hits;
          }
          uint32_t x = h;  // inclusive: the hits of units c0 ..= c
          for (uint32_t off = 1; off < 32; off *= 2) {
            uint32_t y = __shfl_sync(0xffffffffu, x, lane >= off ? lane - off : 0);
            if (lane >= off) x += y;
          }
          if (c < segs) b.scratch[seg_prefix_at(s, col, c)] = carry + x - h;
          carry += __shfl_sync(0xffffffffu, x, 31);
        }
        if (lane == 0) b.counts[mine + col] = carry;
      }
      continue;
    }
    // A destination's column: the hits of its earlier units, polled at once.
    uint32_t before = 0;
    for (size_t c = lane; c < sg; c += 32)
      before +=
          (uint32_t)nvshmem_signal_wait_until(b.scratch + col * segs + c, NVSHMEM_CMP_GE, tag << 32);
    for (int m = 16; m > 0; m /= 2) before += __shfl_xor_sync(0xffffffffu, before, m);
#pragma unroll
    for (size_t i = 0; i < LAYOUT_SEGMENT; i++) {
      size_t t = first + i * LAYOUT_CHUNK + lane;
      if (t >= t_n) continue;
      uint32_t f = found[i];
      b.send_slot[t * n + (col - e_n)] = f ? (int32_t)(before + (f >> 8)) : -1;
    }
    if (lane == 0 && sg + 1 == segs) b.counts[mine + col] = before + hits;
    // This unit's rows are placed: the warp's slot writes, then one release.
    __syncwarp();
    if (lane == 0)
      cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(b.signals[SIG_SLOTS])
          .fetch_add(1, cuda::memory_order_release);
  }
  // The block's units are done: thread 0 counts it in; the grid's last block goes on.
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> c(b.work[LAYOUT_BARRIER]), g(*generation);
    last = c.fetch_add(1, cuda::memory_order_acq_rel) + 1 == gridDim.x;
    if (last) {
      c.store(0, cuda::memory_order_relaxed);
      g.store((uint32_t)tag, cuda::memory_order_relaxed);
    }
  }
  if (!__syncthreads_or(last)) return;
  uint32_t tid = threadIdx.x;
  // This PE's row to every other PE; its own stays here (no signal to itself).
  if (tid < n && tid != me)
    nvshmem_putmem_signal(b.counts + mine, b.counts + mine, row_len * sizeof(uint32_t),
                          b.signals + SIG_COUNTS, 1, NVSHMEM_SIGNAL_ADD, tid);
  if (tid == 0 && n > 1)
    nvshmem_signal_wait_until(b.signals + SIG_COUNTS, NVSHMEM_CMP_GE, (uint64_t)s.round * (n - 1));
  __syncthreads();
  volatile uint32_t *counts = b.counts;
  auto cnt = [&](uint32_t src, uint32_t e) { return counts[src * (e_n + n) + e]; };
  uint32_t cap = s.capacity, w = threadIdx.x / 32, nwb = blockDim.x / 32;
  // This PE's rows from each source, loaded before the experts' sums, stored after them.
  uint32_t rows = w == 0 && lane < n ? cnt(lane, e_n + me) : 0;
  // The block's warps take the experts 32 at a time: expert e's kept pairs, and those of the
  // experts before it on its PE (seg) by a segmented warp scan, plus those of its PE's
  // experts before the warp's 32 (carry, a warp sum of their own loads) (kernels.rs, layout).
  for (uint32_t c0 = 32 * w; c0 < e_n; c0 += 32 * nwb) {
    uint32_t e = c0 + lane, total = 0, before = 0;
    bool live = e < e_n;
    if (live)
      for (uint32_t src = 0; src < n; src++) {
        uint32_t c = cnt(src, e);
        total += c;
        before += src < me ? c : 0;
      }
    uint32_t kept = min(total, cap), carry = 0;
    for (uint32_t e2 = c0 / l_n * l_n + lane; e2 < c0; e2 += 32) {
      uint32_t t2 = 0;
      for (uint32_t src = 0; src < n; src++) t2 += cnt(src, e2);
      carry += min(t2, cap);
    }
    for (uint32_t m = 16; m > 0; m /= 2) carry += __shfl_xor_sync(0xffffffffu, carry, m);
    uint32_t first = live ? e / l_n * l_n : e, x = kept;
    for (uint32_t off = 1; off < 32; off *= 2) {
      uint32_t y = __shfl_up_sync(0xffffffffu, x, off);
      x += lane >= off && e - off >= first ? y : 0;
    }
    x += first < c0 ? carry : 0;
    uint32_t seg = x - kept;
    if (live) {
      b.base[e] = seg + before;
      uint32_t lim = seg + cap;
      b.base[e_n + e] = lim < seg ? 0xffffffffu : lim;
      if (e / l_n == me) {
        uint32_t l = e % l_n, pre = 0;
        for (uint32_t src = 0; src < n; src++) {
          uint32_t c = cnt(src, e), i = l * n + src;
          b.expert_offset[i] = seg + pre;
          b.expert_count[i] = min(c, cap > pre ? cap - pre : 0u);
          pre += c;
        }
      }
    }
  }
  if (w == 0 && lane < n) b.recv_count[lane] = rows;
}
extern "C" __global__ void moe_layout(Bufs b, Shape s) { layout(b, s); }

// This lane's choice of token t and its weight (lanes K and up: -1 and 0), which send takes:
// the dispatch's inputs, which a throughput dispatch may load before it waits for its layout
// (kernels.rs, pick).
struct Pick {
  int32_t e;
  float w;
};
__device__ __forceinline__ Pick pick(const Bufs &b, const Shape &s, size_t t, uint32_t lane) {
  if (lane >= s.top_k) return Pick{-1, 0.0f};
  return Pick{b.topk[t * s.top_k + lane], b.weights[t * s.top_k + lane]};
}

// Sends token t's metadata to PE d if any of its experts is there (one warp): its source
// index, weights and pairs, and each pair's slot; send_slot[t][d] then holds the row's slot on
// d (-1: not sent there), which it also returns to every lane. The caller sends the row. In
// low-latency mode the slot is t, and where the token does not go to d this marks row t from
// here on d as empty (source index -1); with ROWS a row sent is counted here, else the caller
// counts it (send_bulk: its copying warp, or its metadata warps' tally).
// A low-latency pair's slot: an atomic on its expert's counter, or with `base` reserved
// already for the block (reserve_pairs): base[e] plus the pair's rank[k] (rank: the token's).
template <bool ROWS, class R>
__device__ __forceinline__ int32_t send(const Bufs &b, R reach, const Shape &s, size_t t, uint32_t d, uint32_t lane, Pick pk,
                                        const uint32_t *base = nullptr, const uint16_t *rank = nullptr) {
  bool tp = s.mode == THROUGHPUT;
  uint32_t me = nvshmem_my_pe(), n = s.n_pes, e_n = s.experts, cap = s.capacity;
  size_t k_n = s.top_k, t_n = s.tokens;
  uint32_t l_n = e_n / n;
  size_t pair_cursors = ROW_CURSORS + n;
  bool mine = lane < k_n;
  int32_t e = pk.e;
  float w = pk.w;
  uint32_t dest = e >= 0 ? (uint32_t)e / l_n : 0xffffffffu;
  if (d == 0 && mine && e < 0) b.send_pair[t * k_n + lane] = -2;
  if (__ballot_sync(0xffffffffu, dest == d) == 0) {
    if (!tp && lane == 0) {
      b.send_slot[t * n + d] = -1;
      reach.p(b.recv_src + (size_t)(me * (uint32_t)t_n + (uint32_t)t), -1, d);
    }
    return -1;
  }
  // Low latency: the pairs' slots from atomics; the row's is the token's own, and the rows
  // sent to d are counted (a reduction: nothing waits for it).
  uint32_t c = 0xffffffffu;
  if (!tp) {
    if (lane == 0) {
      if (ROWS) atomicAdd(counter(b, ROW_CURSORS + d), 1u);
      b.send_slot[t * n + d] = (int32_t)t;
    }
    if (dest == d) c = base ? base[e] + rank[lane] : atomicAdd(counter(b, pair_cursors + (uint32_t)e), 1u);
  }
  uint32_t slot = tp ? (uint32_t)b.send_slot[t * n + d] : (uint32_t)t;
  size_t row = (size_t)(me * (uint32_t)t_n + slot);  // rows fit in 32 bits (the host checks)
  int32_t pair = -1;
  if (dest == d) {
    uint32_t eu = (uint32_t)e;
    size_t q = t * k_n + lane;
    if (tp) {
      // The pair's rank within its unit, after the expert's pairs of the earlier units.
      size_t sg = t / (LAYOUT_CHUNK * LAYOUT_SEGMENT);
      uint32_t pre = (uint32_t)b.scratch[seg_prefix_at(s, eu, sg)];
      uint32_t p = b.base[eu] + pre + (uint32_t)b.send_pair[q];
      if (p < b.base[e_n + eu]) pair = (int32_t)p;
    } else if (c < cap) {
      pair = (int32_t)(((eu % l_n) * n + me) * cap + c);
    }
    if (pair < 0)
      atomicAdd(b.dropped, 1u);
    else
      reach.p(b.expert_rows + pair, (int)row, d);
    b.send_pair[q] = pair;
  }
  if (mine) {
    size_t to = row * k_n + lane;
    reach.p(b.recv_pair + to, pair, d);
    reach.p(b.recv_w + to, w, d);
  }
  if (lane == 31) reach.p(b.recv_src + row, (int)t, d);
  return (int32_t)slot;
}

// Chunks a thread holds in registers while its block copies a row (send_held).
constexpr uint32_t HELD = 4;

// Chunk j of the batch at chunk first of copying thread tid of bs: first + tid + j * bs, or
// with PAIRED two adjacent chunks, j / 2 batches of bs pairs apart.
template <bool PAIRED>
__device__ __forceinline__ uint32_t held_chunk(uint32_t first, uint32_t j, uint32_t tid, uint32_t bs) {
  return PAIRED ? first + 2 * (tid + j / 2 * bs) + j % 2 : first + tid + j * bs;
}

// A 16-byte load of data read once, not kept in L1, if live, else zeros: one predicated
// load (Chunk::load_global_once_if in Rust; a generic address of global memory is its global
// address, so the load takes `p` as it is).
__device__ __forceinline__ uint4 load_once_if(bool live, const uint4 *p) {
  uint4 v = make_uint4(0, 0, 0, 0);
  asm("{ .reg .pred q; setp.ne.u32 q, %5, 0; @q ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4]; }"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "l"(p), "r"((uint32_t)live));
  return v;
}

// The held chunks of a batch (PAIRED: the FP8 dispatch's, read once, not kept in L1).
template <bool PAIRED>
__device__ __forceinline__ void load_held(uint4 v[HELD], const uint4 *from, uint32_t first, uint32_t chunks,
                                          uint32_t tid, uint32_t bs) {
#pragma unroll
  for (uint32_t j = 0; j < HELD; j++) {
    uint32_t c = held_chunk<PAIRED>(first, j, tid, bs);
    v[j] = PAIRED ? load_once_if(c < chunks, from + c) : c < chunks ? from[c] : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ void store_held(const uint4 v[HELD], uint4 *to, uint32_t first, uint32_t chunks,
                                           uint32_t tid, uint32_t bs) {
#pragma unroll
  for (uint32_t j = 0; j < HELD; j++) {
    uint32_t c = held_chunk<false>(first, j, tid, bs);
    if (c < chunks) to[c] = v[j];
  }
}

constexpr uint32_t PAIRS = HELD / 2;

// Quantises what load_held<true> loaded: each pair of chunks (16 values) becomes 16 e4m3
// bytes with its group's scale; a group (128 values, 8 pairs) is 8 lanes', whose amax their
// shuffles find.
__device__ __forceinline__ void quantize_held(const uint4 v[HELD], uint4 q[PAIRS], float scale[PAIRS]) {
  uint32_t m[PAIRS];
#pragma unroll
  for (uint32_t i = 0; i < PAIRS; i++) m[i] = magnitude(v[2 * i], v[2 * i + 1]);
  for (int step = 4; step > 0; step /= 2) {
#pragma unroll
    for (uint32_t i = 0; i < PAIRS; i++) m[i] = max(m[i], __shfl_xor_sync(0xffffffffu, m[i], step));
  }
#pragma unroll
  for (uint32_t i = 0; i < PAIRS; i++) {
    float sc, inv;
    fp8_scales(__uint_as_float(m[i] << 16), sc, inv);
    uint32_t w[4];
#pragma unroll
    for (int half = 0; half < 2; half++) {
      float x[8];
      widen(v[2 * i + half], x);
#pragma unroll
      for (int k = 0; k < 2; k++) {
        uint32_t two[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float2 pair = make_float2(__fmul_rn(x[4 * k + 2 * e], inv), __fmul_rn(x[4 * k + 2 * e + 1], inv));
          two[e] = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
        }
        w[2 * half + k] = two[0] | two[1] << 16;
      }
    }
    q[i] = make_uint4(w[0], w[1], w[2], w[3]);
    scale[i] = sc;
  }
}

// Stores what quantize_held made into the sent row at `to` (h e4m3 bytes, then the scales).
__device__ __forceinline__ void store_fp8(const uint4 q[PAIRS], const float scale[PAIRS], uint16_t *to, size_t h,
                                          uint32_t first, uint32_t tid, uint32_t bs) {
  uint32_t chunks = h / 8;
  uint4 *bytes = reinterpret_cast<uint4 *>(to);
  float *scales = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(to) + h);
#pragma unroll
  for (uint32_t i = 0; i < PAIRS; i++) {
    uint32_t c = held_chunk<true>(first, 2 * i, tid, bs);
    if (c < chunks) {
      bytes[c / 2] = q[i];
      if (c % 16 == 0) scales[c / 16] = scale[i];
    }
  }
}

// How a kernel reaches the other PEs' memory, fixed when it is compiled (kernels.rs, Reach):
// Probed asks NVSHMEM for each PE's address and puts where it has none; Mapped, for the
// _mapped kernels the host launches where every PE's memory is mapped here, has no code for
// that: it assumes the address is there, as Rust does (shmem_device::hint::assume).
// p: NVSHMEM's p, for Mapped a store through the peer address; quiet: NVSHMEM's quiet, for
// Mapped (where everything sent was stores) a fence at system scope (kernels.rs, Reach::p and
// Reach::quiet).
struct Probed {
  static constexpr bool ALL = false;
  __device__ __forceinline__ void *ptr(const void *p, int pe) const { return nvshmem_ptr(p, pe); }
  __device__ __forceinline__ void p(int *dest, int v, int pe) const { nvshmem_int_p(dest, v, pe); }
  __device__ __forceinline__ void p(float *dest, float v, int pe) const { nvshmem_float_p(dest, v, pe); }
  __device__ __forceinline__ void quiet() const { nvshmem_quiet(); }
};
struct Mapped {
  static constexpr bool ALL = true;
  __device__ __forceinline__ void *ptr(const void *p, int pe) const {
    void *q = nvshmem_ptr(p, pe);
    __builtin_assume(q != nullptr);
    return q;
  }
  template <class T> __device__ __forceinline__ void p(T *dest, T v, int pe) const { *(T *)ptr(dest, pe) = v; }
  __device__ __forceinline__ void quiet() const { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
};

// Row `row` of this PE's region of recv_x (kernels.rs, row_at).
__device__ __forceinline__ uint16_t *row_at(const Bufs &b, const Shape &s, size_t row) {
  return b.recv_x + ((size_t)nvshmem_my_pe() * s.tokens + row) * s.hidden;
}

// Where token t's row goes on PE d (its row of recv_x there), nullptr if it is not sent
// there; peer is that row's address here when d's memory is mapped, else nullptr.
template <class R>
__device__ __forceinline__ uint16_t *target(const Bufs &b, R reach, const Shape &s, size_t t, uint32_t d, uint16_t *&peer) {
  int32_t slot = b.send_slot[t * s.n_pes + d];
  if (slot < 0) return peer = nullptr;
  uint16_t *at = row_at(b, s, slot);
  peer = (uint16_t *)reach.ptr(at, d);
  return at;
}

// This lane's choice of token t (its expert; -1 from lane K on), from which routed finds the
// token's PEs.
__device__ __forceinline__ int32_t choice(const Bufs &b, const Shape &s, size_t t, uint32_t lane) {
  return lane >= s.top_k ? -1 : b.topk[t * s.top_k + lane];
}

// Low latency: the PEs a token goes to, from its choices (each lane's e; bit d: one of its
// experts is on d; whole warps, a ballot a PE), which each_mapped takes; send_bulk's copying
// warp counts the rows from it unless its metadata warps tally them (early_counts). A copying
// warp loads the choices when it starts a row and finds the PEs once the row's data is there
// (kernels.rs, routed).
// PE d's ballot tests e against its experts' range, d L .. (d + 1) L (no division).
__device__ __forceinline__ uint32_t routed(const Shape &s, int32_t e) {
  uint32_t l_n = s.experts / s.n_pes, mask = 0, lo = 0;
  for (uint32_t d = 0; d < s.n_pes; d++, lo += l_n)
    if (__ballot_sync(0xffffffffu, (uint32_t)e - lo < l_n)) mask |= 1u << d;
  return mask;
}

// How a copying thread finds the PEs token t's row goes to (kernels.rs, Placed): from
// send_slot[t], complete (slots), or in low-latency mode from the routing, the mask routed
// found.
struct Placed {
  bool slots;
  uint32_t mask;
};

// Calls f(peer) with the address here of token t's row on each PE it goes to whose memory is
// mapped here; returns whether it goes to some PE whose memory is not. With slots, where
// send_slot says (target); else row t of this PE's region on every PE its experts are on,
// from the routing, so that the row waits for none of the metadata.
template <class F, class R>
__device__ __forceinline__ bool each_mapped(const Bufs &b, R reach, const Shape &s, size_t t, Placed by, F f) {
  bool unmapped = false;
  for (uint32_t d = 0; d < s.n_pes; d++) {
    uint16_t *peer;
    if (by.slots) {
      if (!target(b, reach, s, t, d, peer)) continue;
    } else {
      if (!(by.mask >> d & 1)) continue;
      peer = (uint16_t *)reach.ptr(row_at(b, s, t), d);
    }
    if (peer)
      f(peer);
    else
      unmapped = true;
  }
  return unmapped;
}

// Tokens whose metadata a block sends at once, a warp per (token, destination): W / n in
// throughput mode (at least one), LOW_LATENCY_GROUP in low-latency mode, whose send waits for
// atomics (kernels.rs, group_len).
constexpr uint32_t LOW_LATENCY_GROUP = 2;
__device__ __forceinline__ uint32_t group_len(const Shape &s) {
  if (s.mode != THROUGHPUT) return LOW_LATENCY_GROUP;
  uint32_t g = blockDim.x / 32 / s.n_pes;
  return g ? g : 1;
}

// The bf16 dispatches through registers (kernels.rs, send_grouped), where the build or the
// launch has no bulk copies: the block takes its tokens group_len at a time. In
// low-latency mode its warps send the group's metadata (a warp per (token, destination))
// while the threads load the first batch of the group's first row (a warp that sends loads
// after it); in throughput mode the block's first warp waits for the layout to have placed
// the rows (wait_slots) and the block meets it, before the first group, and the block sends
// its tokens' metadata after its last row, once the whole layout is out. Then the threads
// store the
// group's rows batch by batch (store(t, first, v) with v = fetch(t, first)) into every PE
// they go to whose memory is mapped here, where send_slot says; in low-latency mode after a
// barrier, as send writes send_slot there. store returns whether some destination of t is not
// mapped; then, after a barrier, the group's (token, destination) warps call put(t, d, target).
template <class Fetch, class Store, class Put, class R>
__device__ __forceinline__ void send_grouped(const Bufs &b, R reach, const Shape &s, Fetch fetch, Store store, Put put) {
  uint32_t n = s.n_pes, w = threadIdx.x / 32, nw = blockDim.x / 32, lane = threadIdx.x % 32;
  size_t t_n = s.tokens, h = s.hidden, stride = gridDim.x;
  uint32_t g_n = group_len(s), units = g_n * n, batch = HELD * blockDim.x;
  uint32_t chunks = (uint32_t)(h / 8);
  uint32_t nb = (chunks + batch - 1) / batch;
  bool tp = s.mode == THROUGHPUT;
  // Throughput mode: the rows once the layout has placed them, waited for once by the
  // block's first warp, which the others meet (kernels.rs, send_grouped, waits at the first
  // group; here, in the first group, nvcc spilled 4 bytes).
  if (tp && blockIdx.x < t_n) {
    if (w == 0) wait_slots(b, s);
    __syncthreads();
  }
  for (size_t t0 = blockIdx.x; t0 < t_n; t0 += g_n * stride) {
    uint4 v[HELD];
    for (uint32_t u = w; u < units && !tp; u += nw) {
      size_t t = t0 + u / n * stride;
      if (t < t_n) send<true>(b, reach, s, t, u % n, lane, pick(b, s, t, lane));
    }
    size_t rows = (t_n - t0 + stride - 1) / stride;
    uint32_t steps = (uint32_t)(rows < g_n ? rows : g_n) * nb;
    fetch(v, t0, 0, threadIdx.x, blockDim.x);
    // The rows wait for the group's slots in low-latency mode (send writes them there; in
    // throughput mode the layout kernel did).
    if (!tp) __syncthreads();
    bool unmapped = false;
    for (uint32_t j = 0;;) {
      unmapped |= store(t0 + j / nb * stride, j % nb * batch, v, Placed{true, 0}, threadIdx.x, blockDim.x);
      if (++j == steps) break;
      fetch(v, t0 + j / nb * stride, j % nb * batch, threadIdx.x, blockDim.x);
    }
    if (unmapped) {
      __syncthreads();
      for (uint32_t u = w; u < units; u += nw) {
        size_t t = t0 + u / n * stride;
        uint32_t d = u % n;
        if (t >= t_n) continue;
        uint16_t *peer, *at = target(b, reach, s, t, d, peer);
        if (at && !peer) put(t, d, at);
      }
    }
  }
  // Throughput mode: the metadata of all the block's tokens after its last row, once the whole
  // layout is out (kernels.rs, send_grouped).
  if (tp) {
    // The warp's first unit's choices and weights are on their way while it waits (kernels.rs).
    size_t t1 = blockIdx.x + w / n * stride;
    bool ahead = w < units && t1 < t_n;
    Pick first = ahead ? pick(b, s, t1, lane) : Pick{-1, 0.0f};
    pdl_wait();
    for (size_t t0 = blockIdx.x; t0 < t_n; t0 += g_n * stride)
      for (uint32_t u = w; u < units; u += nw) {
        size_t t = t0 + u / n * stride;
        if (t >= t_n) continue;
        send<true>(b, reach, s, t, u % n, lane, ahead ? first : pick(b, s, t, lane));
        ahead = false;
      }
  }
}

// Completes the block's puts, p's and AMOs for its thread 0 (every thread calls it). When
// every PE's memory is mapped here they were plain stores: after the barrier, one quiet
// (a system-scope fence) on thread 0 orders them all before its later operations. Else
// every issuing thread quiets its own first.
// A round's arrivals at a signal word from one PE's whole grid, whatever its size: block 0
// adds ARRIVAL - (G - 1), every other block 1 (arrive, by one thread once the block's puts
// are complete); round R waits for R * n * ARRIVAL (wait_arrivals).
constexpr uint64_t ARRIVAL = 1ull << 32;
// pe's copy of the counter cur, left at zero: through the mapped address, else g and p
// (then put is set: the p needs this thread's quiet).
// (MAPPED: pe is mapped.)
template <bool MAPPED, class R>
__device__ __forceinline__ uint32_t take(uint32_t *cur, R reach, uint32_t pe, bool &put) {
  volatile uint32_t *q = (volatile uint32_t *)reach.ptr(cur, pe);
  if (q) {
    uint32_t c = *q;
    *q = 0;
    return c;
  }
  if (MAPPED) return 0;
  uint32_t c = nvshmem_uint32_g(cur, pe);
  nvshmem_uint32_p(cur, 0, pe);
  put = true;
  return c;
}
// This block's share of its PE's ARRIVAL at PE d's copy of a signal word, where blocks
// 0..own add to this PE's own copy (arrival_share in Rust): of the B blocks that add to d's
// (own for this PE, else the grid's), block 0 adds ARRIVAL - (B - 1), every other 1, a block
// from B on nothing.
__device__ __forceinline__ uint64_t arrival_share(uint32_t d, uint32_t own) {
  uint32_t blocks = d == (uint32_t)nvshmem_my_pe() ? own : gridDim.x;
  return blockIdx.x == 0 ? ARRIVAL - (blocks - 1) : (uint64_t)(blockIdx.x < blocks);
}
__device__ __forceinline__ void arrive(uint64_t *sig, uint32_t n, uint32_t own) {
  for (uint32_t d = 0; d < n; d++) {
    uint64_t v = arrival_share(d, own);
    if (v) nvshmemx_signal_op(sig, v, NVSHMEM_SIGNAL_ADD, d);
  }
}
__device__ __forceinline__ void wait_arrivals(uint64_t *sig, uint32_t round, uint32_t n) {
  nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, (uint64_t)round * n * ARRIVAL);
}

// Whether every PE's memory is mapped here; at one PE without the lookup (all_mapped in Rust).
template <class R>
__device__ __forceinline__ bool all_mapped(const Bufs &b, R reach, uint32_t n) {
  if constexpr (R::ALL) {
    return true;
  } else {
    bool mapped = true;
    if (n == 1) return true;
    for (uint32_t d = 0; d < n; d++) mapped = mapped && reach.ptr(b.signals, d) != nullptr;
    return mapped;
  }
}
// The group's puts complete, then the block's arrival at sig on every PE (arrive_group in
// Rust; the group: whole warps meeting at `meet`, this thread the rank-th): with every PE
// mapped, lane d of the group's first warp looks PE d's copy up before the barrier, fences and
// adds the block's share there; else every thread's quiet first, then rank 0 fences and
// signals. Only blocks 0..own add to this PE's own copy; a block with nothing to add (one PE,
// the block not below own) returns at once.
template <class Meet, class R>
__device__ __forceinline__ void arrive_group(const Bufs &b, R reach, uint64_t *sig, uint32_t n, uint32_t own, uint32_t rank,
                                             Meet meet) {
  if (n == 1 && blockIdx.x >= own) return;
  bool first = rank < 32;
  unsigned long long *peer = first && rank < n ? (unsigned long long *)reach.ptr(sig, rank) : nullptr;
  bool mapped = all_mapped(b, reach, n);
  if (!mapped) reach.quiet();
  meet();
  if (mapped) {
    if (first) {
      reach.quiet();
      uint64_t v = arrival_share(rank, own);
      if (peer && v) atomicAdd_system(peer, (unsigned long long)v);
    }
  } else if (rank == 0) {
    __threadfence();
    arrive(sig, n, own);
  }
}
template <class R>
__device__ __forceinline__ void arrive_block(const Bufs &b, R reach, uint64_t *sig, uint32_t n, uint32_t own) {
  arrive_group(b, reach, sig, n, own, threadIdx.x, [] { __syncthreads(); });
}
// Low latency: what each source sent here, from its cursors towards this PE, then reset; a
// thread a counter, threads 0..bs of the block (pull_counts in Rust). MAPPED: every source
// is mapped (counts_early).
template <bool MAPPED, class R>
__device__ __forceinline__ void pull_counts(const Bufs &b, R reach, const Shape &s, uint32_t tid, uint32_t bs) {
  uint32_t me = nvshmem_my_pe(), n = s.n_pes, cap = s.capacity, l_n = s.experts / n;
  size_t pair_cursors = ROW_CURSORS + n;
  bool put = false;
  for (uint32_t i = tid; i < n * l_n; i += bs) {
    uint32_t src = i / l_n, l = i % l_n;
    uint32_t c = take<MAPPED>(counter(b, pair_cursors + me * l_n + l), reach, src, put);
    size_t at = l * n + src;
    b.expert_count[at] = min(c, cap);
    b.expert_offset[at] = (l * n + src) * cap;
  }
  uint32_t r = (tid + bs - (n * l_n) % bs) % bs;
  if (r < n) b.recv_count[r] = take<MAPPED>(counter(b, ROW_CURSORS + me), reach, r, put);
  if (put) nvshmem_quiet();
}
// Low latency, in a block's metadata warps (threads of them meeting at `meet`, this thread
// the rank-th) once its pair slots and rows are counted (counts_early in Rust): with every PE
// mapped, the block's arrival at signals[SIG_RESERVED] on every PE; in block 0, then every
// PE's grid's, the word back to zero, and the counts read while the copying warps still move
// rows.
template <class Meet, class R>
__device__ __forceinline__ void counts_early(const Bufs &b, R reach, const Shape &s, uint32_t rank, uint32_t threads,
                                             Meet meet) {
  uint32_t n = s.n_pes;
  uint64_t *sig = b.signals + SIG_RESERVED;
  if (!all_mapped(b, reach, n)) return;
  arrive_group(b, reach, sig, n, gridDim.x, rank, meet);
  if (blockIdx.x != 0) return;
  if (rank == 0) {
    uint64_t all = (uint64_t)n * ARRIVAL;
    nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, all);
    atomicAdd_system((unsigned long long *)sig, (unsigned long long)(0 - all));
  }
  meet();
  pull_counts<true>(b, reach, s, rank, threads);
}

// The bf16 dispatches by bulk copies (send_bulk in Rust): BULK_SLOTS slots of
// shared memory, a piece of a row (at most BULK_PIECE bytes) each, after their barriers' line
// and the block's rows towards each PE (a word a PE from ROW_TALLY): BULK_HEADER bytes.
constexpr uint32_t BULK_SLOTS = 3;
constexpr uint32_t BULK_PIECE = 14336;
constexpr uint32_t BULK_HEADER = 256;
constexpr uint32_t ROW_TALLY = 128;
__device__ __forceinline__ uint32_t bulk_piece(const Shape &s) { return min(s.hidden * 2, BULK_PIECE); }
__device__ __forceinline__ uint32_t bulk_slot_bytes(const Shape &s) { return (bulk_piece(s) + 127) / 128 * 128; }
// The pair slots a block reserves at once (reserve_pairs): with at most RESERVE_EXPERTS
// experts and RESERVE_PAIRS (token, choice) pairs a block; the table (a word an expert, then
// a u16 a pair) follows the barriers' line, the slots follow the table on a line of their own.
constexpr uint32_t RESERVE_EXPERTS = 256;
constexpr uint32_t RESERVE_PAIRS = 512;
// The low-latency FP8 dispatch's metadata blocks (send_by_role): one block in
// ROLE_META_SHARE, reserving their pair slots at once from ROLE_RESERVE_FROM tokens, with at
// most FP8_RESERVE_PAIRS pairs (as in Rust).
constexpr uint32_t FP8_RESERVE_PAIRS = 2048;
constexpr uint32_t ROLE_META_SHARE = 6;
constexpr uint32_t ROLE_RESERVE_FROM = 9;
// The throughput FP8 dispatch's metadata blocks (send_units_throughput): the last n + 1 in
// TP_META_SHARE at n PEs, at most half the grid (as in Rust).
constexpr uint32_t TP_META_SHARE = 12;
// Of a grid of g blocks at n PEs (tp_meta_blocks in Rust).
__device__ __forceinline__ uint32_t tp_meta_blocks(uint32_t g, uint32_t n) {
  return max(min(g * (n + 1) / TP_META_SHARE, g / 2), 1u);
}
// The blocks of the low-latency FP8 dispatch that send the metadata (role_meta_blocks in Rust).
__device__ __forceinline__ uint32_t role_meta_blocks() { return max(gridDim.x / ROLE_META_SHARE, 1u); }
// Whether the low-latency bf16 dispatch by bulk copies sends its counts early: with at least
// EARLY_COUNTS_TOKENS tokens a block (early_counts in Rust).
constexpr uint32_t EARLY_COUNTS_TOKENS = 4;
// (Where every block reserves its pair slots at once: the same in every block.)
__device__ __forceinline__ bool early_counts(const Shape &s) {
  uint32_t g = gridDim.x;
  return s.mode == LOW_LATENCY && s.tokens >= EARLY_COUNTS_TOKENS * g && s.experts <= RESERVE_EXPERTS &&
         (s.tokens + g - 1) / g * s.top_k <= RESERVE_PAIRS;
}
__device__ __forceinline__ uint32_t bulk_slots_offset(const Shape &s) {
  uint32_t table = s.experts <= RESERVE_EXPERTS ? s.experts * 4 + RESERVE_PAIRS * 2 : 0;
  return BULK_HEADER + (table + 127) / 128 * 128;
}
// Shape::dispatch_shared_bytes for the low-latency bf16 path.
__device__ __forceinline__ uint32_t bulk_shared_bytes(const Shape &s) {
  return bulk_slots_offset(s) + BULK_SLOTS * bulk_slot_bytes(s);
}
__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
  uint32_t v;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
}
extern __shared__ __align__(128) uint8_t dispatch_smem[];
// The block's pair slots reserved at once (reserve_pairs in Rust): the metadata warps (mts
// threads meeting at named barrier 1, this one the mt-th) count the block's pairs of each
// expert in `base` (each pair's rank among them in `rank`), add each count to the expert's
// counter once, and leave in base[e] the block's first slot.
__device__ __forceinline__ void reserve_pairs(const Bufs &b, const Shape &s, uint32_t mt, uint32_t mts, uint32_t count,
                                              size_t t0, size_t stride, uint32_t *base, uint16_t *rank) {
  uint32_t k_n = s.top_k, e_n = s.experts, n = s.n_pes;
  for (uint32_t e = mt; e < e_n; e += mts) base[e] = 0;
  asm volatile("bar.sync 1, %0;" ::"r"(mts) : "memory");
  for (uint32_t p = mt; p < count * k_n; p += mts) {
    int32_t e = b.topk[(t0 + p / k_n * stride) * k_n + p % k_n];
    if (e >= 0) rank[p] = (uint16_t)atomicAdd(&base[e], 1u);
  }
  asm volatile("bar.sync 1, %0;" ::"r"(mts) : "memory");
  for (uint32_t e = mt; e < e_n; e += mts)
    if (uint32_t c = base[e]) base[e] = atomicAdd(counter(b, ROW_CURSORS + n + e), c);
  asm volatile("bar.sync 1, %0;" ::"r"(mts) : "memory");
}

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n\tfence.mbarrier_init.release.cluster;" ::"r"(smem_u32(bar)),
               "r"(count)
               : "memory");
}
__device__ __forceinline__ void bar_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t *bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void copy_to_shared(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void copy_to_global(void *dst, const void *src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_u32(src)), "r"(bytes)
               : "memory");
}

// Warp 0 moves the block's rows through the slots (lane 0 copies a piece in two pieces ahead,
// then out to every mapped PE the token goes to: low latency, found from the routing;
// throughput, into the layout's slots); the other warps send the metadata; rows to unmapped
// PEs go afterwards (kernels.rs, send_bulk).
template <class Put, class R>
__device__ __forceinline__ void send_bulk(const Bufs &b, R reach, const Shape &s, Put put) {
  uint32_t n = s.n_pes, w = threadIdx.x / 32, nw = blockDim.x / 32, lane = threadIdx.x % 32;
  size_t t_n = s.tokens, h = s.hidden, stride = gridDim.x, t0 = blockIdx.x;
  uint32_t count = t0 < t_n ? (uint32_t)((t_n - t0 + stride - 1) / stride) : 0;
  bool unmapped = false, tp = s.mode == THROUGHPUT;
  if (w == 0) {
    uint64_t *bar = reinterpret_cast<uint64_t *>(dispatch_smem);
    uint8_t *slots = dispatch_smem + bulk_slots_offset(s);
    uint32_t slot_bytes = bulk_slot_bytes(s);
    if (lane == 0)
      for (uint32_t i = 0; i < BULK_SLOTS; i++) bar_init(&bar[i], 1);
    __syncwarp();
    uint32_t row_bytes = s.hidden * 2, piece = bulk_piece(s);
    uint32_t pieces = (row_bytes + piece - 1) / piece, steps = count * pieces;
    auto load = [&](uint32_t k) {
      if (lane != 0) return;
      uint32_t off = k % pieces * piece, len = min(piece, row_bytes - off), i = k % BULK_SLOTS;
      size_t t = t0 + k / pieces * stride;
      bar_expect_tx(&bar[i], len);
      copy_to_shared(slots + i * slot_bytes, reinterpret_cast<const uint8_t *>(b.x + t * h) + off, len, &bar[i]);
    };
    for (uint32_t k = 0; k < steps && k + 1 < BULK_SLOTS; k++) load(k);
    if (tp) wait_slots(b, s);  // the layout's dependent: its slots once the rows are placed
    int32_t e = -1;     // this lane's choice of the row's token
    uint32_t rows = 0;  // lane d: the rows counted towards d (unless the metadata warps tally them)
    for (uint32_t k = 0; k < steps; k++) {
      size_t t = t0 + k / pieces * stride;
      uint32_t off = k % pieces * piece, len = min(piece, row_bytes - off), i = k % BULK_SLOTS;
      if (off == 0 && !tp) e = choice(b, s, t, lane);
      if (k + BULK_SLOTS - 1 < steps) {
        if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        load(k + BULK_SLOTS - 1);
      }
      // Every lane waits; routed's ballots keep them together, so none still polls a phase
      // lane 0 has armed again (kernels.rs, send_bulk).
      bar_wait(&bar[i], k / BULK_SLOTS % 2);
      // Throughput mode: the layout placed the rows (send_slot); the warp meets here instead.
      Placed by{true, 0};
      if (tp) {
        __syncwarp();
      } else {
        uint32_t mask = routed(s, e);
        if (off == 0) rows += mask >> lane & 1;
        by = Placed{false, mask};
      }
      unmapped |= each_mapped(b, reach, s, t, by, [&](uint16_t *peer) {
        if (lane == 0) copy_to_global(reinterpret_cast<uint8_t *>(peer) + off, slots + i * slot_bytes, len);
      });
      if (lane == 0) asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    if (!early_counts(s) && rows) atomicAdd(counter(b, ROW_CURSORS + lane), rows);
    if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;" ::: "memory");
  } else {
    // Throughput mode: the warp's first token's choices and weights on their way while it waits
    // for the layout (kernels.rs, send_bulk).
    bool ahead = tp && w - 1 < count * n;
    Pick first = ahead ? pick(b, s, t0 + (w - 1) / n * stride, lane) : Pick{-1, 0.0f};
    if (tp) pdl_wait();
    // With several tokens, the block's pair slots reserved at once (reserve_pairs).
    uint32_t k_n = s.top_k, e_n = s.experts, mt = threadIdx.x - 32, mts = (nw - 1) * 32;
    uint32_t *base = reinterpret_cast<uint32_t *>(dispatch_smem + BULK_HEADER);
    uint16_t *rank = reinterpret_cast<uint16_t *>(base + e_n);
    // Where the counts go early, the block's rows towards PE d tallied here, then added to
    // its row cursor once; else warp 0 counts them (kernels.rs, send_bulk).
    uint32_t *tally = reinterpret_cast<uint32_t *>(dispatch_smem + ROW_TALLY);
    bool early = early_counts(s);
    bool reserved = !tp && count > 1 && e_n <= RESERVE_EXPERTS && count * k_n <= RESERVE_PAIRS;
    if (reserved) {
      if (early && mt < n) tally[mt] = 0;
      reserve_pairs(b, s, mt, mts, count, t0, stride, base, rank);
    }
    for (uint32_t u = w - 1; u < count * n; u += nw - 1) {
      size_t t = t0 + u / n * stride;
      int32_t sent = send<false>(b, reach, s, t, u % n, lane, ahead ? first : pick(b, s, t, lane),
                                 reserved ? base : nullptr, reserved ? rank + u / n * k_n : nullptr);
      if (early && lane == 0 && sent >= 0) atomicAdd(&tally[u % n], 1u);
      ahead = false;
    }
    if (early) {
      auto meet = [&] { asm volatile("bar.sync 1, %0;" ::"r"(mts) : "memory"); };
      meet();
      if (mt < n && tally[mt]) atomicAdd(counter(b, ROW_CURSORS + mt), tally[mt]);
      counts_early(b, reach, s, mt, mts, meet);
    }
  }
  if (__syncthreads_or(unmapped)) {
    for (uint32_t u = w; u < count * n; u += nw) {
      size_t t = t0 + u / n * stride;
      uint32_t d = u % n;
      uint16_t *peer, *at = target(b, reach, s, t, d, peer);
      if (at && !peer) put(t, d, at);
    }
  }
}
#endif

// The bf16 dispatches: by bulk copies (send_bulk) where the build has them (sm_90 and up),
// else, and in the register kernels (REGISTERS), through registers (send_grouped), the block
// loading each row once for all its destinations. From sm_90 each way is a kernel of its own
// (send_held in Rust); the bulk one stops (Rust: a panic) where launched without its shared
// memory or with one warp a block (Shape::dispatch_by_registers picks the kernel).
// Returns whether the block's metadata warps sent the counts on their own (counts_early).
template <bool REGISTERS, class R> __device__ __forceinline__ bool send_held(const Bufs &b, R reach, const Shape &s) {
  size_t h = s.hidden;
  uint32_t chunks = h / 8;
  auto put = [&](size_t t, uint32_t d, uint16_t *target) {
    nvshmemx_putmem_nbi_warp(target, b.x + t * h, h * sizeof(uint16_t), d);
  };
#if __CUDA_ARCH__ >= 900
  if (!REGISTERS) {
    if (blockDim.x <= 32 || dynamic_smem_bytes() < bulk_shared_bytes(s)) __trap();
    send_bulk(b, reach, s, put);
    return early_counts(s);
  }
#endif
  send_grouped(
      b, reach, s,
      [&](uint4 raw[HELD], size_t t, uint32_t first, uint32_t tid, uint32_t bs) {
        load_held<false>(raw, reinterpret_cast<const uint4 *>(b.x + t * h), first, chunks, tid, bs);
      },
      [&](size_t t, uint32_t first, const uint4 v[HELD], Placed by, uint32_t tid, uint32_t bs) {
        return each_mapped(b, reach, s, t, by,
                           [&](uint16_t *peer) { store_held(v, (uint4 *)peer, first, chunks, tid, bs); });
      },
      put);
  return false;
}

struct Quantised {
  uint4 q[PAIRS];
  float scale[PAIRS];
};

// The FP8 dispatches' copying warps, warp gw of nrw (kernels.rs, copy_units): they take the
// rows' units of 1024 values in turn, load a unit, quantise it in registers and store it into
// every PE the row goes to whose memory is mapped here: low latency, row t there, found from
// the routing; TP, the layout's slot. meet() runs once, after the first unit's loads are
// issued. A unit towards a PE that is not mapped is staged, and put there after the warp's
// last unit, out of the copying loop, whose registers NVSHMEM's put would crowd.
template <bool TP, class Meet, class R>
__device__ __forceinline__ void copy_units(const Bufs &b, R reach, const Shape &s, uint32_t gw, uint32_t nrw, Meet meet) {
  uint32_t n = s.n_pes, lane = threadIdx.x % 32;
  size_t h = s.hidden, t_n = s.tokens;
  uint32_t chunks = (uint32_t)(h / 8), per_row = (chunks + 127) / 128, units = (uint32_t)t_n * per_row;
  bool staged = false, met = false;
  for (uint32_t u = gw; u < units; u += nrw) {
    size_t t = u / per_row;
    uint32_t first = u % per_row * 128;
    uint4 raw[HELD];
    load_held<true>(raw, reinterpret_cast<const uint4 *>(b.x + t * h), first, chunks, lane, 32);
    if (!met) {
      meet();
      met = true;
    }
    int32_t e = TP ? -1 : choice(b, s, t, lane);
    Quantised v;
    quantize_held(raw, v.q, v.scale);
    Placed by = TP ? Placed{true, 0} : Placed{false, routed(s, e)};
    bool unmapped =
        each_mapped(b, reach, s, t, by, [&](uint16_t *peer) { store_fp8(v.q, v.scale, peer, h, first, lane, 32); });
    if (unmapped) {
      store_fp8(v.q, v.scale, b.comb_stage + t * h, h, first, lane, 32);
      staged = true;
    }
  }
  if (!met) meet();
  if (staged) {
    __syncwarp();
    for (uint32_t u = gw; u < units; u += nrw) {
      size_t t = u / per_row, f = u % per_row * 128;
      uint16_t *stage = b.comb_stage + t * h;
      size_t bytes = min(h / 2, 4 * f + 512) - 4 * f, groups = min(h / 128, f / 16 + 8) - f / 16;
      size_t scales = h / 2 + 2 * (f / 16);
      auto put = [&](uint16_t *at, uint32_t d) {
        nvshmemx_putmem_nbi_warp(at + 4 * f, stage + 4 * f, bytes * 2, d);
        nvshmemx_putmem_nbi_warp(at + scales, stage + scales, groups * 4, d);
      };
      if (TP) {
        for (uint32_t d = 0; d < n; d++) {
          uint16_t *peer, *at = target(b, reach, s, t, d, peer);
          if (at && !peer) put(at, d);
        }
        continue;
      }
      uint32_t mask = routed(s, choice(b, s, t, lane));
      uint16_t *at = row_at(b, s, t);
      for (uint32_t d = 0; d < n; d++) {
        if (!(mask >> d & 1) || reach.ptr(at, d)) continue;
        put(at, d);
      }
    }
  }
}

// The low-latency FP8 dispatch, its blocks split by role (kernels.rs, send_by_role): the
// first of every ROLE_META_SHARE blocks (M, at least one) send the metadata, block mb the
// tokens mb, mb + M, ..., their pair slots reserved at once from ROLE_RESERVE_FROM tokens
// where the table holds them, then a warp per (token, PE). The other blocks' warps take the
// rows' units of 1024 values in turn, quantise them in registers and store them into every PE
// they go to whose memory is mapped here; a unit towards a PE that is not is staged, and put
// there after the warp's last unit. It takes two blocks at least (DispatchPath::min_blocks).
template <class R>
__device__ __forceinline__ void send_by_role(const Bufs &b, R reach, const Shape &s) {
  uint32_t n = s.n_pes, lane = threadIdx.x % 32, w = threadIdx.x / 32, wpb = blockDim.x / 32;
  uint32_t g = gridDim.x, meta_blocks = role_meta_blocks();
  size_t t_n = s.tokens;
  if (blockIdx.x < meta_blocks) {
    size_t mb = blockIdx.x;
    uint32_t count = mb < t_n ? (uint32_t)((t_n - mb + meta_blocks - 1) / meta_blocks) : 0u, k_n = s.top_k;
    uint32_t *base = reinterpret_cast<uint32_t *>(dispatch_smem + BULK_HEADER);
    uint16_t *rank = reinterpret_cast<uint16_t *>(base + s.experts);
    bool reserved = s.experts <= RESERVE_EXPERTS &&
                    dynamic_smem_bytes() >= BULK_HEADER + s.experts * 4 + FP8_RESERVE_PAIRS * 2 &&
                    count >= ROLE_RESERVE_FROM && count * k_n <= FP8_RESERVE_PAIRS;
    if (reserved) reserve_pairs(b, s, threadIdx.x, blockDim.x, count, mb, meta_blocks, base, rank);
    uint32_t rows = 0;
    for (uint32_t u = w; u < count * n; u += wpb) {
      uint32_t i = u / n, d = u % n;
      size_t t = mb + (size_t)i * meta_blocks;
      int32_t sent = reserved ? send<false>(b, reach, s, t, d, lane, pick(b, s, t, lane), base, rank + i * k_n)
                              : send<false>(b, reach, s, t, d, lane, pick(b, s, t, lane));
      rows += sent >= 0 && lane == d;
    }
    if (rows) atomicAdd(counter(b, ROW_CURSORS + lane), rows);
    return;
  }
  copy_units<false>(b, reach, s, (blockIdx.x - meta_blocks) * wpb + w, (g - meta_blocks) * wpb, [] {});
}

// The throughput FP8 dispatch, its blocks split by role (kernels.rs, send_units_throughput):
// the grid's last n + 1 of every TP_META_SHARE blocks at n PEs (M, at least one, at most half)
// send the metadata, block g - M + mb the tokens mb, mb + M, ..., a warp per (token, PE), once
// the whole layout is out, each warp's next token's choices and weights loaded while it sends
// the one before. The other blocks' warps copy the rows' units among theirs: each loads its
// first unit, the block's first warp then waits for the layout to have placed the rows
// (wait_slots) and the block meets it. It takes two blocks at least (DispatchPath::min_blocks).
template <class R>
__device__ __forceinline__ void send_units_throughput(const Bufs &b, R reach, const Shape &s) {
  uint32_t n = s.n_pes, lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32, g = gridDim.x;
  uint32_t meta = tp_meta_blocks(g, n), copying = g - meta;
  if (blockIdx.x < copying) {
    copy_units<true>(b, reach, s, blockIdx.x * nw + w, copying * nw, [&] {
      if (w == 0) wait_slots(b, s);
      __syncthreads();
    });
    return;
  }
  size_t mb = blockIdx.x - copying, t_n = s.tokens;
  uint32_t count = mb < t_n ? (uint32_t)((t_n - mb + meta - 1) / meta) : 0u;
  uint32_t u = w;
  Pick next = u < count * n ? pick(b, s, mb + (size_t)(u / n) * meta, lane) : Pick{-1, 0.0f};
  pdl_wait();
  for (; u < count * n; u += nw) {
    size_t t = mb + (size_t)(u / n) * meta;
    Pick pk = next;
    uint32_t later = u + nw;
    if (later < count * n) next = pick(b, s, mb + (size_t)(later / n) * meta, lane);
    send<true>(b, reach, s, t, u % n, lane, pk);
  }
}

// A dispatch kernel per path, as in Rust (DispatchPath): its own registers set its occupancy.
enum DispatchPath {
  LOW_LATENCY_PATH,
  THROUGHPUT_PATH,
  FP8_LOW_LATENCY_PATH,
  FP8_THROUGHPUT_PATH
};

template <DispatchPath PATH, bool REGISTERS = false, class R> __device__ __forceinline__ void dispatch(Bufs b, R reach, Shape s) {
  // The bf16 paths and the low-latency FP8 one fix the mode and the type, as in Rust, so that
  // every test of them folds. The throughput FP8 one reads the mode at run time (fixed, ptxas
  // spilled 8 bytes at 80 registers); this file's dispatch never reads the type.
  if (PATH == LOW_LATENCY_PATH) s.mode = LOW_LATENCY, s.dtype = BF16;
  if (PATH == THROUGHPUT_PATH) s.mode = THROUGHPUT, s.dtype = BF16;
  if (PATH == FP8_LOW_LATENCY_PATH) s.mode = LOW_LATENCY;
  const bool fp8 = PATH == FP8_LOW_LATENCY_PATH || PATH == FP8_THROUGHPUT_PATH;
  bool tp = s.mode == THROUGHPUT;
  uint32_t n = s.n_pes;
  // Whether the metadata warps sent the counts on their own, and read them in block 0 where
  // every PE is mapped (counts_early).
  bool early = false;
  if (PATH == FP8_LOW_LATENCY_PATH)
    send_by_role(b, reach, s);
  else if (fp8)
    send_units_throughput(b, reach, s);
  else
    early = send_held<REGISTERS>(b, reach, s);
  // Whether block 0 reads the counts after the wait (as in Rust): then the blocks that took
  // this PE's cursors signal it too, and only they; else block 0 alone.
  bool pulls = !tp && !(early && all_mapped(b, reach, n));
  uint32_t own = !pulls ? 1 : PATH == FP8_LOW_LATENCY_PATH ? role_meta_blocks() : gridDim.x;
  uint64_t *sig = b.signals + SIG_DISPATCH;
  arrive_block(b, reach, sig, n, own);
  if (threadIdx.x == 0 && blockIdx.x == 0) wait_arrivals(sig, s.round, n);
  if (blockIdx.x != 0 || !pulls) return;
  // Low latency, block 0 once every PE's grid has arrived.
  __syncthreads();
  pull_counts<false>(b, reach, s, threadIdx.x, blockDim.x);
}

// Register budgets: the throughput bf16 kernel takes 56 under 64 (four blocks of 256
// threads an SM, as the Rust kernel from sm_90), the FP8 ones 64 as in Rust (four; the
// throughput one, by units since the seventy-sixth session, without spills). The
// low-latency bf16 kernel takes 64 as in Rust, without spills: with its bulk copies it took
// 0.99 of its time at 80 (three blocks an SM) at 4096 tokens on one H200, held
// (BENCHMARKS.md, forty-second session). (Before them it spilled 44 bytes at 64 and was
// fastest at 80: seventeenth session.)
extern "C" __global__ void __maxnreg__(64) moe_dispatch(Bufs b, Shape s) {
  dispatch<LOW_LATENCY_PATH>(b, Probed{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_mapped(Bufs b, Shape s) {
  dispatch<LOW_LATENCY_PATH>(b, Mapped{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_throughput(Bufs b, Shape s) {
  dispatch<THROUGHPUT_PATH>(b, Probed{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_throughput_mapped(Bufs b, Shape s) {
  dispatch<THROUGHPUT_PATH>(b, Mapped{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_registers(Bufs b, Shape s) {
  dispatch<LOW_LATENCY_PATH, true>(b, Probed{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_registers_mapped(Bufs b, Shape s) {
  dispatch<LOW_LATENCY_PATH, true>(b, Mapped{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_throughput_registers(Bufs b, Shape s) {
  dispatch<THROUGHPUT_PATH, true>(b, Probed{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_throughput_registers_mapped(Bufs b, Shape s) {
  dispatch<THROUGHPUT_PATH, true>(b, Mapped{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_fp8(Bufs b, Shape s) {
  dispatch<FP8_LOW_LATENCY_PATH>(b, Probed{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_fp8_mapped(Bufs b, Shape s) {
  dispatch<FP8_LOW_LATENCY_PATH>(b, Mapped{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_fp8_throughput(Bufs b, Shape s) {
  dispatch<FP8_THROUGHPUT_PATH>(b, Probed{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_dispatch_fp8_throughput_mapped(Bufs b, Shape s) {
  dispatch<FP8_THROUGHPUT_PATH>(b, Mapped{}, s);
}

constexpr size_t EXPERT_CHUNKS = 4;  // chunks a lane of the stand-in experts loads before it converts any

// f(c, load(c)) for c = lane, lane + 32, ... below n, in order, the loads of EXPERT_CHUNKS such c
// issued before the first of their f.
template <typename Load, typename F>
__device__ __forceinline__ void batched(size_t n, size_t lane, Load load, F f) {
  using T = decltype(load(size_t{0}));
  size_t c = lane;
  for (; c + 32 * (EXPERT_CHUNKS - 1) < n; c += 32 * EXPERT_CHUNKS) {
    T v[EXPERT_CHUNKS];
#pragma unroll
    for (size_t j = 0; j < EXPERT_CHUNKS; j++) v[j] = load(c + 32 * j);
#pragma unroll
    for (size_t j = 0; j < EXPERT_CHUNKS; j++) f(c + 32 * j, v[j]);
  }
  for (; c < n; c += 32) f(c, load(c));
}

struct Fp8Chunk {
  uint4 q;  // sixteen e4m3 values
  float g;  // their group's scale
};

extern "C" __global__ void moe_experts(Bufs b, Shape s) {
  uint32_t me = nvshmem_my_pe(), n = s.n_pes;
  size_t h = s.hidden;
  uint32_t l_n = s.experts / n;
  size_t per = min(s.capacity, s.tokens);
  uint32_t lane, gw, nw;
  warps(lane, gw, nw);
  size_t blocks = (size_t)l_n * n;
  // The q-th pairs of every (local expert, source) before the (q + 1)-th (as the Rust kernel's
  // for_each_pair): the kept pairs go to as many warps as there are pairs, whatever the grid.
  for (size_t i = gw; i < blocks * per; i += nw) {
    size_t blk = i % blocks, q = i / blocks;
    if (q >= b.expert_count[blk]) continue;
    size_t pair = b.expert_offset[blk] + q;
    size_t row = b.expert_rows[pair];
    float scale = expert_scale(me * l_n + blk / n);
    const uint4 *src = reinterpret_cast<const uint4 *>(b.recv_x + row * h);
    uint4 *dst = reinterpret_cast<uint4 *>(b.expert_y + pair * h);
    if (s.dtype == FP8) {
      // 16 values a chunk; the group's scale after the row's h bytes.
      const float *scales = reinterpret_cast<const float *>(reinterpret_cast<const uint8_t *>(src) + h);
      batched(h / 16, lane, [&](size_t c) { return Fp8Chunk{src[c], scales[c / 8]}; },
              [&](size_t c, Fp8Chunk x) {
                uint32_t w[4] = {x.q.x, x.q.y, x.q.z, x.q.w};
#pragma unroll
                for (int half = 0; half < 2; half++) {
                  float y[8];
#pragma unroll
                  for (int i = 0; i < 8; i++) {
                    int k = 8 * half + i;
                    __half_raw v = __nv_cvt_fp8_to_halfraw((w[k / 4] >> (8 * (k % 4))) & 0xff, __NV_E4M3);
                    y[i] = __fmul_rn(__fmul_rn(__half2float(__half(v)), x.g), scale);
                  }
                  dst[2 * c + half] = narrow(y);
                }
              });
      continue;
    }
    batched(h / 8, lane, [&](size_t c) { return src[c]; }, [&](size_t c, uint4 q) {
      float v[8];
      widen(q, v);
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] = __fmul_rn(v[j], scale);
      dst[c] = narrow(v);
    });
  }
}

constexpr size_t SEGMENT_CHUNKS = 2;  // chunks per lane and row in a unit (512 bf16)
constexpr size_t ROW_GROUP = 2;       // rows loaded together before the first add

// Loads chunks c0 + 32 j + lane (j < SEGMENT_CHUNKS, below `chunks`) of every non-null row
// (all loads first; with ONCE not kept in L1), then adds them in row order, times their
// weights, to acc: acc = acc + w * y, or acc = w * y for the first row while *fresh (then
// cleared).
template <bool ONCE>
__device__ __forceinline__ void accumulate(float acc[SEGMENT_CHUNKS][8],
                                           const uint4 *const rows[ROW_GROUP],
                                           const float w[ROW_GROUP], uint32_t c0, uint32_t chunks,
                                           bool &fresh) {
  uint32_t lane = threadIdx.x % 32;
  uint4 v[ROW_GROUP][SEGMENT_CHUNKS];
#pragma unroll
  for (size_t i = 0; i < ROW_GROUP; i++)
#pragma unroll
    for (size_t j = 0; j < SEGMENT_CHUNKS; j++) {
      uint32_t c = c0 + 32 * (uint32_t)j + lane;
      bool live = rows[i] && c < chunks;
      v[i][j] = ONCE ? load_once_if(live, rows[i] + c) : live ? rows[i][c] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
  for (size_t i = 0; i < ROW_GROUP; i++) {
    if (!rows[i]) continue;
#pragma unroll
    for (size_t j = 0; j < SEGMENT_CHUNKS; j++) {
      float y[8];
      widen(v[i][j], y);
#pragma unroll
      for (int e = 0; e < 8; e++) {
        float p = __fmul_rn(w[i], y[e]);
        acc[j][e] = fresh ? p : __fadd_rn(acc[j][e], p);
      }
    }
    fresh = false;
  }
}

__device__ __forceinline__ void store_segment(float acc[SEGMENT_CHUNKS][8], uint4 *row, uint32_t c0,
                                              uint32_t chunks) {
  uint32_t lane = threadIdx.x % 32;
#pragma unroll
  for (size_t j = 0; j < SEGMENT_CHUNKS; j++) {
    uint32_t c = c0 + 32 * (uint32_t)j + lane;
    if (c < chunks) row[c] = narrow(acc[j]);
  }
}

// The combine, reading the expert rows with accumulate<ONCE> (s.read_once picks it).
template <bool ONCE, class R> __device__ __forceinline__ void combine_reading(Bufs b, R reach, Shape s) {
  uint32_t me = nvshmem_my_pe(), n = s.n_pes;
  size_t k_n = s.top_k, t_n = s.tokens, h = s.hidden;
  uint32_t l_n = s.experts / n;
  uint32_t lane, gw, nw;
  warps(lane, gw, nw);
  bool mine = lane < k_n;
  size_t chunks = h / 8, per_seg = 32 * SEGMENT_CHUNKS, segs = (chunks + per_seg - 1) / per_seg;
  uint32_t t32 = t_n, segs32 = segs;  // 32-bit unit numbers: 64-bit division is a call
  // 1. Each received row's weighted sum into its source's comb_recv, or for this PE's own
  //    tokens into out.
  for (uint32_t u = gw; u < n * t32 * segs32; u += nw) {
    // The sources' rows interleaved (row j of every source, from the next PE on, then row
    // j + 1): peer stores and local ones at the same time.
    uint32_t v = u / segs32, src = (me + 1 + v % n) % n, j = v / n;
    size_t r = (size_t)src * t32 + j, c0 = (size_t)(u % segs32) * per_seg;
    // Whether the row is there: in throughput mode the rows are packed below the count; in
    // low-latency mode row j is token j's, its source index -1 when it did not come. The
    // source index is loaded together with the count (in bounds either way): both decide.
    int32_t ts = b.recv_src[r];
    uint32_t count = b.recv_count[src];
    if ((ts < 0) | (s.mode == THROUGHPUT && j >= count)) continue;
    size_t t = ts;
    int32_t pair = mine ? b.recv_pair[r * k_n + lane] : -1;
    float w = mine ? b.recv_w[r * k_n + lane] : 0.0f;
    uint16_t *target = b.comb_recv + (me * t_n + t) * h;
    uint16_t *dst;
    bool staged = false;
    if (src == me) {
      dst = b.out + t * h;
    } else {
      dst = (uint16_t *)reach.ptr(target, src);
      if (!dst) {
        dst = b.comb_stage + r * h;
        staged = true;
      }
    }
    float acc[SEGMENT_CHUNKS][8] = {};
    bool fresh = false;  // the sum starts from +0
    for (size_t k = 0; k < k_n; k += ROW_GROUP) {
      const uint4 *rows[ROW_GROUP];
      float ws[ROW_GROUP];
#pragma unroll
      for (size_t i = 0; i < ROW_GROUP; i++) {
        int32_t pk = __shfl_sync(0xffffffffu, pair, k + i);  // lanes from K on hold -1
        ws[i] = __shfl_sync(0xffffffffu, w, k + i);
        rows[i] = pk >= 0 ? reinterpret_cast<const uint4 *>(b.expert_y + pk * h) : nullptr;
      }
      accumulate<ONCE>(acc, rows, ws, c0, chunks, fresh);
    }
    store_segment(acc, reinterpret_cast<uint4 *>(dst), c0, chunks);
    if (staged) {
      size_t len = min(chunks - c0, per_seg) * 8;
      nvshmemx_putmem_nbi_warp(target + c0 * 8, b.comb_stage + r * h + c0 * 8, len * sizeof(uint16_t), src);
    }
  }
  arrive_block(b, reach, b.signals + SIG_COMBINE, n, gridDim.x);
  if (threadIdx.x == 0) wait_arrivals(b.signals + SIG_COMBINE, s.round, n);
  __syncthreads();
  // 3. Each token: its destinations' sums in PE order, the first as it is (its own PE's from
  //    out); nothing to do when its experts are all on this PE.
  for (uint32_t u = gw; u < t32 * segs32; u += nw) {
    size_t t = u / segs32, c0 = (size_t)(u % segs32) * per_seg;
    int32_t e = mine ? b.topk[t * k_n + lane] : -1;
    uint32_t mask = warp_or(e >= 0 ? 1u << ((uint32_t)e / l_n) : 0u);
    if (mask == 1u << me) continue;
    uint16_t *out = b.out + t * h;
    float acc[SEGMENT_CHUNKS][8] = {};
    bool fresh = true;
    float ones[ROW_GROUP];  // unweighted: one per row, whatever ROW_GROUP is
#pragma unroll
    for (size_t i = 0; i < ROW_GROUP; i++) ones[i] = 1.0f;
    for (uint32_t m = mask; m != 0;) {
      const uint4 *rows[ROW_GROUP];
#pragma unroll
      for (size_t i = 0; i < ROW_GROUP; i++) {
        rows[i] = nullptr;
        if (m != 0) {
          size_t d = __ffs(m) - 1;
          m &= m - 1;
          rows[i] = reinterpret_cast<const uint4 *>(d == me ? out : b.comb_recv + (d * t_n + t) * h);
        }
      }
      accumulate<false>(acc, rows, ones, c0, chunks, fresh);
    }
    store_segment(acc, reinterpret_cast<uint4 *>(out), c0, chunks);
  }
}

// 64 registers: four blocks of 256 threads an SM (as the Rust kernel's max_registers).
extern "C" __global__ void __maxnreg__(64) moe_combine(Bufs b, Shape s) {
  if (s.read_once)
    combine_reading<true>(b, Probed{}, s);
  else
    combine_reading<false>(b, Probed{}, s);
}
extern "C" __global__ void __maxnreg__(64) moe_combine_mapped(Bufs b, Shape s) {
  if (s.read_once)
    combine_reading<true>(b, Mapped{}, s);
  else
    combine_reading<false>(b, Mapped{}, s);
}
