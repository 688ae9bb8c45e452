#!/usr/bin/env bash
# Builds the CUDA C++ side of the MoE comparison into OUT (default ./build):
#   moe.cubin   the NVSHMEM reference kernels (cuda/moe.cu), device-linked with
#               libnvshmem_device.a, run by the Rust driver: `moe_dispatch --cuda/--compare`.
# usage: build.sh [ARCH (sm_90)] [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:-sm_90}
out=${2:-$here/build}
mkdir -p "$out"
"$here/../../../scripts/nvcc-cubin.sh" "$arch" "$out/moe.cubin" "$here/moe.cu"
