#!/usr/bin/env bash
# Builds the CUDA C++ side of the halo-exchange comparison into OUT (default ./build):
#   halo.cubin          the NVSHMEM reference kernels, device-linked with libnvshmem_device.a,
#                       loaded by the Rust host driver (`halo_exchange --cuda halo.cubin`);
#   halo_host_driven    the host-driven baseline (cudaMemcpyPeerAsync), a program of its own.
# usage: build.sh [ARCH (sm_90)] [OUT]
# Finds nvcc on PATH or in /usr/local/cuda/bin, NVSHMEM in NVSHMEM_HOME or in Python's
# site-packages (the nvidia-nvshmem-cu13 wheel).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:-sm_90}
out=${2:-$here/build}
mkdir -p "$out"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nv=${NVSHMEM_HOME:-$(python3 -c 'import site,os
for d in site.getsitepackages():
    p=os.path.join(d,"nvidia","nvshmem")
    if os.path.isdir(os.path.join(p,"include")): print(p); break')}
[ -f "$nv/include/nvshmem.h" ] || { echo "build.sh: NVSHMEM headers not found (set NVSHMEM_HOME)" >&2; exit 1; }
cc=${arch#sm_}
"$nvcc" -O3 -std=c++17 -rdc=true -gencode "arch=compute_$cc,code=sm_$cc" -I"$nv/include" \
  -c "$here/halo.cu" -o "$out/halo.o"
"$nvcc" -dlink -cubin -gencode "arch=compute_$cc,code=sm_$cc" "$out/halo.o" \
  "$nv/lib/libnvshmem_device.a" -o "$out/halo.cubin"
"$nvcc" -O3 -std=c++17 -gencode "arch=compute_$cc,code=sm_$cc" "$here/halo_host_driven.cu" \
  -o "$out/halo_host_driven"
echo "built $out/halo.cubin $out/halo_host_driven ($("$nvcc" --version | tail -1), NVSHMEM $nv)"
