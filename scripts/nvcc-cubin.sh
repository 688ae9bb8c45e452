#!/usr/bin/env bash
# Compiles CUDA C++ NVSHMEM kernels into one cubin, device-linked with NVSHMEM's static device
# library, for shmem-host's `Shmem::load_cuda_module`.
# usage: nvcc-cubin.sh ARCH OUT.cubin SRC.cu [nvcc flags...]
# nvcc: on PATH, else /usr/local/cuda/bin. NVSHMEM: NVSHMEM_HOME, else Python's site-packages
# (the nvidia-nvshmem-cu13 wheel).
set -euo pipefail
arch=$1 out=$2 src=$3
shift 3
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nv=${NVSHMEM_HOME:-$(python3 -c 'import site,os
for d in site.getsitepackages():
    p=os.path.join(d,"nvidia","nvshmem")
    if os.path.isfile(os.path.join(p,"include","nvshmem.h")): print(p); break')}
[ -f "$nv/include/nvshmem.h" ] || { echo "nvcc-cubin.sh: NVSHMEM headers not found (set NVSHMEM_HOME)" >&2; exit 1; }
cc=${arch#sm_}
obj=${out%.cubin}.o
"$nvcc" -O3 -std=c++17 -rdc=true -gencode "arch=compute_$cc,code=sm_$cc" -I"$nv/include" "$@" -c "$src" -o "$obj"
"$nvcc" -dlink -cubin -gencode "arch=compute_$cc,code=sm_$cc" "$obj" "$nv/lib/libnvshmem_device.a" -o "$out"
echo "built $out from $src ($("$nvcc" --version | tail -1); NVSHMEM $nv)"
