#!/usr/bin/env bash
# Runs on the GPU machine (nvidia-h200-x2), from the repository root, with carry/ made by
# `LEAN=1 scripts/gpu-bundle.sh`: the regression pass after a host-side change (session 4:
# shmem-host's backend split for the CPU simulator). Stages, logs in $OUT:
#   1. the device-API GPU suite; the ring started directly (GPUs chosen) and with
#      SHMEM_SIM=1 (the simulator chosen on a GPU machine);
#   2. the halo-exchange and MoE GPU tests (Rust kernels and the CUDA C++ references);
#   3. the README's example runs (halo_exchange, moe_dispatch with their defaults);
#   4. short Rust-against-C++ benchmarks of both, to compare with the committed results.
# Keeps the machine's NVSHMEM_DISABLE_NVLS=1 and NCCL_NVLS_ENABLE=0 (never multicast).
set -uo pipefail
OUT=${OUT:-/tmp/shmem-out}
mkdir -p "$OUT"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 RUST_BACKTRACE=1
export SHMEM_PTX_DIR=$PWD/carry/ptx SHMEM_GPU_TESTS=1
stage() { echo "== $* ($(date -u +%T))"; }
cleanup() { pkill -9 -f 'carry/bin/' 2>/dev/null; sleep 1; true; }
{
  stage machine; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
  python3 -c 'import importlib.metadata as m; print("nvidia-nvshmem-cu13", m.version("nvidia-nvshmem-cu13"))'
  env | grep -E '^(NVSHMEM|NCCL)_' | sort
  stage "CUDA C++ builds"
  examples/halo-exchange/cuda/build.sh sm_90 "$OUT/halo-cuda" && examples/moe-dispatch/cuda/build.sh sm_90 "$OUT/moe-cuda"
  echo "exit $?"
} > "$OUT/1-machine.log" 2>&1

{
  stage "device-API GPU suite"
  timeout 150 carry/bin/gpu-tests --test-threads=1; echo "exit $?"
  stage "ring, started directly"
  timeout 30 carry/bin/ring; echo "exit $?"
  stage "ring with SHMEM_SIM=1"
  SHMEM_SIM=1 timeout 30 carry/bin/ring; echo "exit $?"
} > "$OUT/2-api-ring.log" 2>&1
cleanup
{
  stage "halo-exchange GPU tests"
  SHMEM_HALO_CUBIN=$OUT/halo-cuda/halo.cubin timeout 150 carry/bin/halo-tests --test-threads=1; echo "exit $?"
  cleanup
  stage "moe GPU tests"
  SHMEM_MOE_CUBIN=$OUT/moe-cuda/moe.cubin timeout 170 carry/bin/moe-tests --test-threads=1; echo "exit $?"
} > "$OUT/3-example-tests.log" 2>&1
cleanup
{
  stage "halo_exchange with its defaults (the README's command)"
  timeout 60 carry/bin/halo_exchange; echo "exit $?"
  cleanup
  stage "moe_dispatch with its defaults"
  timeout 90 carry/bin/moe_dispatch; echo "exit $?"
} > "$OUT/4-examples.log" 2>&1
cleanup
{
  stage "halo benchmark: Rust against CUDA C++, 4096^2 f32"
  timeout 90 carry/bin/halo_exchange --compare "$OUT/halo-cuda/halo.cubin" --size 4096 --iters 500 --reps 3
  echo "exit $?"
  cleanup
  stage "moe benchmark: Rust against CUDA C++, 256 experts"
  timeout 120 carry/bin/moe_dispatch --compare "$OUT/moe-cuda/moe.cubin" --tokens 128,4096 --experts 256 --reps 3 --rounds 10
  echo "exit $?"
} > "$OUT/5-bench.log" 2>&1
cleanup
stage done
rm -rf "$OUT/halo-cuda" "$OUT/moe-cuda"
tail -n 4 "$OUT"/*.log
