#!/usr/bin/env bash
# Runs on the GPU machine (nvidia-h200-x2), from the repository root, with carry/ made by
# scripts/gpu-bundle.sh. Stages, each under its own time limit, logs in $OUT:
#   1. halo-exchange GPU tests (Rust kernels and the CUDA C++ reference, 1 and 2 PEs);
#   2. halo-exchange benchmark (examples/halo-exchange/bench.sh);
#   3. shmem-bench, Rust against CUDA C++ (bench/run.sh);
#   4. the device-API GPU suite and the ring under shmem-run (regressions);
#   5. with MPIRUN=1: the suite again under mpirun -np 2 (Open MPI wheel).
# Keeps the machine's NVSHMEM_DISABLE_NVLS=1 and NCCL_NVLS_ENABLE=0 (never multicast).
set -uo pipefail
OUT=${OUT:-/tmp/shmem-out}
mkdir -p "$OUT"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 RUST_BACKTRACE=1
export SHMEM_PTX_DIR=$PWD/carry/ptx SHMEM_GPU_TESTS=1
stage() { echo "== $* ($(date -u +%T))"; }
# A stage cut by its time limit may leave PEs behind; they would skew the next stage.
cleanup() { pkill -9 -f 'carry/bin/' 2>/dev/null; pkill -9 -f halo_host_driven 2>/dev/null; sleep 1; true; }
{
  stage machine; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  nvidia-smi topo -m; nvcc --version | tail -2
  python3 -c 'import importlib.metadata as m; print("nvidia-nvshmem-cu13", m.version("nvidia-nvshmem-cu13"))'
  env | grep -E '^(NVSHMEM|NCCL)_' | sort
} 2>&1 | tee "$OUT/machine.log"

{
  stage "halo-exchange: CUDA C++ build"
  examples/halo-exchange/cuda/build.sh sm_90 "$OUT/halo-cuda"
  stage "halo-exchange GPU tests"
  SHMEM_HALO_CUBIN=$OUT/halo-cuda/halo.cubin timeout 150 carry/bin/halo-tests --test-threads=1
  echo "exit $?"
} 2>&1 | tee "$OUT/halo-tests.log"
cleanup

stage "halo-exchange benchmark" | tee "$OUT/halo-bench-stage.log"
timeout 220 examples/halo-exchange/bench.sh "$OUT" 2>&1 | tail -40
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/halo-bench-stage.log"
cleanup
python3 examples/halo-exchange/summarize.py "$OUT/halo-results.jsonl" 2>&1 | tee "$OUT/halo-table.md"

if [ -d carry/ptx-b ]; then
  # An A/B pass: a second build of the halo kernels (carry/ptx-b), same method.
  stage "halo-exchange benchmark, kernels of carry/ptx-b" | tee -a "$OUT/halo-bench-stage.log"
  mkdir -p "$OUT/b" && cp -r "$OUT/halo-cuda" "$OUT/b/"
  SHMEM_PTX_DIR=$PWD/carry/ptx-b timeout 200 examples/halo-exchange/bench.sh "$OUT/b" > /dev/null 2>&1
  python3 examples/halo-exchange/summarize.py "$OUT/b/halo-results.jsonl" 2>&1 | tee "$OUT/b/halo-table.md"
  cleanup
fi

stage "shmem-bench" | tee "$OUT/bench-stage.log"
timeout 170 bench/run.sh "$OUT/bench" 2>&1 | tee "$OUT/bench.log" | grep -v '^\[pe 0\] \{1,3\}[0-9]' | tail -30
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/bench-stage.log"
cleanup

{
  stage "ring, then the device-API GPU suite under shmem-run (put/get now copy peer-to-peer themselves)"
  timeout 30 carry/bin/ring; echo "ring exit $?"
  timeout 150 carry/bin/gpu-tests --test-threads=1; echo "exit $?"
} 2>&1 | tee "$OUT/gpu-tests.log" | tail -25

if [ "${MPIRUN:-0}" = 1 ] && [ -x carry/ompi/bin/mpirun ]; then
  export OPAL_PREFIX=$PWD/carry/ompi PATH=$PWD/carry/ompi/bin:$PATH
  export LD_LIBRARY_PATH=$PWD/carry/ompi/lib:$PWD/carry/ompi/lib/openmpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  mpi=(mpirun --allow-run-as-root -np 2 -x NVSHMEM_DISABLE_NVLS -x NCCL_NVLS_ENABLE -x SHMEM_PTX_DIR -x SHMEM_GPU_TESTS -x LD_LIBRARY_PATH -x RUST_BACKTRACE)
  for t in $(carry/bin/gpu-tests --list 2>/dev/null | sed -n 's/: test$//p'); do
    timeout 120 "${mpi[@]}" carry/bin/gpu-tests "$t" --exact --test-threads=1; echo "$t exit $?"
  done 2>&1 | tee "$OUT/mpirun.log"
fi
stage done
# At most 8 files come back from the device tool: keep the results, pack the logs.
rm -rf "$OUT"/halo-cuda "$OUT"/b/halo-cuda "$OUT"/bench/perftest.o "$OUT"/bench/perftest.cubin
(cd "$OUT" && tar czf /tmp/logs.tar.gz --exclude=halo-table.md --exclude=b/halo-table.md \
  --exclude=halo-results.jsonl --exclude=bench/bench.json --exclude=bench/bench.png \
  --exclude=bench/table.txt . && find . -type f ! -name halo-table.md ! -name halo-results.jsonl \
  ! -name bench.json ! -name bench.png ! -name table.txt -delete && mv /tmp/logs.tar.gz .)
ls -R "$OUT"
