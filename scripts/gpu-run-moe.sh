#!/usr/bin/env bash
# Runs on the GPU machine (nvidia-h200-x2, or x4/x8 for scale-out), from the repository root,
# with carry/ made by scripts/gpu-bundle.sh. Stages, each under its own time limit, logs in
# $OUT:
#   1. the MoE GPU tests (Rust kernels, and the CUDA C++ reference built here with nvcc);
#   2. the README's example run (`moe_dispatch` with its defaults: both modes, checked);
#   3. the MoE benchmark: Rust against CUDA C++ (--compare), then the PyTorch baseline
#      (torch_baseline.py under torchrun), joined into moe-table.md;
#   4. halo_exchange's progress lines (the watcher fixed after session 2's last run).
# Keeps the machine's NVSHMEM_DISABLE_NVLS=1 and NCCL_NVLS_ENABLE=0 (never multicast).
set -uo pipefail
OUT=${OUT:-/tmp/shmem-out}
mkdir -p "$OUT"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 RUST_BACKTRACE=1
export SHMEM_PTX_DIR=$PWD/carry/ptx SHMEM_GPU_TESTS=1
moe=examples/moe-dispatch
n=$(nvidia-smi -L | wc -l)
py=/opt/torch/.venv/bin/python
[ -x "$py" ] || py=python3
stage() { echo "== $* ($(date -u +%T))"; }
cleanup() { pkill -9 -f 'carry/bin/' 2>/dev/null; pkill -9 -f torch_baseline 2>/dev/null; sleep 1; true; }
{
  stage machine; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  nvidia-smi topo -m; nvcc --version | tail -2
  python3 -c 'import importlib.metadata as m; print("nvidia-nvshmem-cu13", m.version("nvidia-nvshmem-cu13"))'
  "$py" -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  env | grep -E '^(NVSHMEM|NCCL)_' | sort
} 2>&1 | tee "$OUT/machine.log"

{
  stage "moe: CUDA C++ build"
  $moe/cuda/build.sh sm_90 "$OUT/moe-cuda"
  stage "moe GPU tests ($n PEs where the test does not name a count)"
  SHMEM_MOE_CUBIN=$OUT/moe-cuda/moe.cubin timeout ${TESTS_S:-170} carry/bin/moe-tests --test-threads=1
  echo "exit $?"
} 2>&1 | tee "$OUT/moe-tests.log" | tail -30
cleanup

{
  stage "moe_dispatch with its defaults (the README's command)"
  timeout 90 carry/bin/moe_dispatch
  echo "exit $?"
  stage "moe_dispatch --routing skewed --capacity 40 (drops reported)"
  timeout 60 carry/bin/moe_dispatch --routing skewed --capacity 40 --tokens 256 --rounds 3
  echo "exit $?"
} 2>&1 | tee "$OUT/moe-example.log" | tail -30
cleanup

{
  stage "moe benchmark: Rust against CUDA C++"
  timeout ${BENCH_S:-200} carry/bin/moe_dispatch --compare "$OUT/moe-cuda/moe.cubin" \
    --tokens 128,4096 --experts 64,256 --reps 5 --rounds 10
  echo "exit $?"
  stage "moe on one PE (no cross-GPU traffic: the local work's floor)"
  timeout 60 carry/bin/moe_dispatch --pes 1 --tokens 4096 --experts 64 --no-verify --rounds 10
  echo "exit $?"
} 2>&1 | tee "$OUT/moe-compare.log" | grep -v 'RESULT' | tail -24
cleanup
{
  stage "moe benchmark: PyTorch baseline"
  timeout ${TORCH_S:-120} "$py" -m torch.distributed.run --nproc_per_node "$n" \
    $moe/torch_baseline.py --tokens 128,4096 --experts 64,256 --reps 20
  echo "exit $?"
} 2>&1 | tee "$OUT/moe-torch.log" | tail -8
cleanup
python3 $moe/summarize.py "$OUT/moe-compare.log" "$OUT/moe-torch.log" 2>&1 | tee "$OUT/moe-table.md"

{
  stage "halo_exchange progress lines"
  timeout 40 carry/bin/halo_exchange --size 2048 --iters 4000 --check-every 500
  echo "exit $?"
} 2>&1 | tee "$OUT/halo-progress.log" | tail -12
cleanup
stage done
rm -rf "$OUT"/moe-cuda
(cd "$OUT" && tar czf /tmp/logs.tar.gz . && find . -type f ! -name moe-table.md -delete && mv /tmp/logs.tar.gz .)
ls -R "$OUT"
