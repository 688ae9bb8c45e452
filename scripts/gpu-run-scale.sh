#!/usr/bin/env bash
# Runs on a GPU machine with more than 2 GPUs (nvidia-h200-x4 / -x8), from the repository root,
# with carry/ made by scripts/gpu-bundle.sh: the device-API suite, halo-exchange correctness
# (checked against the CPU reference) and halo strong scaling on every GPU. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/shmem-out}
mkdir -p "$OUT"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 RUST_BACKTRACE=1
export SHMEM_PTX_DIR=$PWD/carry/ptx SHMEM_GPU_TESTS=1
n=$(nvidia-smi -L | wc -l)
stage() { echo "== $* ($(date -u +%T))"; }
{
  stage "machine: $n GPUs"; nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m
  stage "device-API suite on $n PEs"
  SHMEM_GPU_PES=$n timeout 120 carry/bin/gpu-tests --test-threads=1 2>&1 | grep -E "^test |test result|panicked|error" ; echo "exit ${PIPESTATUS[0]}"
  stage "halo-exchange against the CPU reference on $n PEs"
  for args in "--nx 130 --ny 97" "--nx 40 --ny $((n + 2))" "--nx 257 --ny 203"; do
    for t in f32 f64; do for v in persistent per-iteration; do
      timeout 60 carry/bin/halo_exchange --pes "$n" $args --iters 23 --check-every 5 --type $t --variant $v --verify --quiet 2>&1 | grep -E "verify|differ|error|halo_exchange:"
      echo "$args $t $v exit ${PIPESTATUS[0]}"
    done; done
  done
  examples/halo-exchange/cuda/build.sh sm_90 "$OUT/halo-cuda" > /dev/null
  for size_iters in 4096:1000 16384:200; do
    size=${size_iters%:*} iters=${size_iters#*:}
    for pes in $n 2 1; do
      stage "halo ${size}^2 on $pes GPUs"
      timeout 100 carry/bin/halo_exchange --pes "$pes" --size "$size" --iters "$iters" --check-every 0 --quiet \
        --compare "$OUT/halo-cuda/halo.cubin" --reps 3 2>&1 | grep -E "us/iter|RESULT|error"
      timeout 60 "$OUT/halo-cuda/halo_host_driven" "$size" "$size" "$iters" "$pes"
    done
  done
  stage done
} 2>&1 | tee "$OUT/scale.log"
rm -rf "$OUT/halo-cuda"
