#!/usr/bin/env bash
# Builds the CUDA C++ twins that the GPU tests and benchmarks compare the Rust kernels with,
# each device-linked with NVSHMEM (scripts/nvcc-cubin.sh: nvcc on PATH, NVSHMEM_HOME or
# Python's NVSHMEM wheel): halo.cubin, moe.cubin and perftest.cubin in OUT. Used by
# gpu-run.sh's cuda stage (the GPU machine's nvcc) and `cargo xtask gpu-bundle --twins`
# (nvcc from pip, here).
# usage: build-twins.sh ARCH OUT
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
arch=$1 out=$2
mkdir -p "$out"
for twin in halo:examples/halo-exchange/cuda/halo.cu moe:examples/moe-dispatch/cuda/moe.cu \
  perftest:bench/cuda/perftest.cu; do
  name=${twin%%:*}
  "$root/scripts/nvcc-cubin.sh" "$arch" "$out/$name.cubin" "$root/${twin#*:}"
  rm -f "$out/$name.o" # an intermediate of nvcc-cubin.sh
done
