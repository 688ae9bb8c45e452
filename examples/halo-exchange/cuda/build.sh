#!/usr/bin/env bash
# Builds the CUDA C++ side of the halo-exchange comparison into OUT (default ./build):
#   halo.cubin          the NVSHMEM reference kernels (cuda/halo.cu), device-linked with
#                       libnvshmem_device.a, run by the Rust driver: `halo_exchange --cuda`;
#   halo_host_driven    the host-driven baseline (cudaMemcpyPeerAsync), a program of its own.
# usage: build.sh [ARCH (sm_90)] [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:-sm_90}
out=${2:-$here/build}
mkdir -p "$out"
"$here/../../../scripts/nvcc-cubin.sh" "$arch" "$out/halo.cubin" "$here/halo.cu"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" -O3 -std=c++17 -gencode "arch=compute_${arch#sm_},code=sm_${arch#sm_}" \
  "$here/halo_host_driven.cu" -o "$out/halo_host_driven"
echo "built $out/halo_host_driven"
