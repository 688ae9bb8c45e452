#!/usr/bin/env bash
# The benchmark on the GPU machine, in one command: builds the CUDA C++ kernels with nvcc,
# runs shmem-bench (Rust and C++ interleaved), plots. From the repository root, with the Rust
# side built beforehand (`cargo xtask gpu-bundle` puts it in carry/).
# usage: bench/run.sh OUT_DIR [shmem-bench options...]
# env: SHMEM_BENCH (the binary, default carry/bin/shmem-bench), SHMEM_PTX_DIR (default
#      carry/ptx), ARCH (default sm_90).
set -euo pipefail
out=${1:?usage: bench/run.sh OUT_DIR [options]}
shift
mkdir -p "$out"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0
export SHMEM_PTX_DIR=${SHMEM_PTX_DIR:-$PWD/carry/ptx}
scripts/nvcc-cubin.sh "${ARCH:-sm_90}" "$out/perftest.cubin" bench/cuda/perftest.cu
"${SHMEM_BENCH:-carry/bin/shmem-bench}" --cuda "$out/perftest.cubin" --out "$out" "$@"
python3 bench/plot.py "$out/bench.json" "$out/bench.png"
