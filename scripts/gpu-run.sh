#!/usr/bin/env bash
# Runs on the GPU machine (nvidia-h200-x2), from the repository root, with carry/ made by
# scripts/gpu-bundle.sh: the ring example, then the whole GPU test suite. Logs go to $OUT.
# Keeps the machine's NVSHMEM_DISABLE_NVLS=1 and NCCL_NVLS_ENABLE=0 (never multicast).
set -uo pipefail
OUT=${OUT:-/tmp/shmem-out}
mkdir -p "$OUT"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 RUST_BACKTRACE=1
export SHMEM_PTX_DIR=$PWD/carry/ptx SHMEM_GPU_TESTS=1
{
  echo "== machine"; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m
  env | grep -E '^(NVSHMEM|NCCL)_' | sort
  echo "== ring (launches itself on every GPU)"
  carry/bin/ring; echo "exit $?"
  echo "== ring under shmem-run -n 2"
  carry/bin/shmem-run -n 2 -- carry/bin/ring; echo "exit $?"
  echo "== shmem-run with a failing PE (must stop the other and name PE 1)"
  carry/bin/shmem-run -n 2 -- /bin/sh -c 'if [ "$SHMEM_RANK" = 1 ]; then exit 7; fi; sleep 60'; echo "exit $?"
} 2>&1 | tee "$OUT/ring.log"
echo "== GPU test suite" | tee "$OUT/gpu-tests.log"
carry/bin/gpu-tests --test-threads=1 2>&1 | tee -a "$OUT/gpu-tests.log"
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/gpu-tests.log"

echo "== mpirun -np 2 (Open MPI 5.0.11 wheel; the runtime picks NVSHMEM's MPI bootstrap)" | tee "$OUT/mpirun.log"
if [ -x carry/ompi/bin/mpirun ]; then
  export OPAL_PREFIX=$PWD/carry/ompi PATH=$PWD/carry/ompi/bin:$PATH
  export LD_LIBRARY_PATH=$PWD/carry/ompi/lib:$PWD/carry/ompi/lib/openmpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  mpi=(mpirun --allow-run-as-root -np 2 -x NVSHMEM_DISABLE_NVLS -x NCCL_NVLS_ENABLE -x SHMEM_PTX_DIR -x SHMEM_GPU_TESTS -x LD_LIBRARY_PATH -x RUST_BACKTRACE)
  {
    timeout 120 "${mpi[@]}" carry/bin/ring; echo "ring exit $?"
    for t in $(carry/bin/gpu-tests --list 2>/dev/null | sed -n 's/: test$//p'); do
      timeout 120 "${mpi[@]}" carry/bin/gpu-tests "$t" --exact --test-threads=1; echo "$t exit $?"
    done
  } 2>&1 | tee -a "$OUT/mpirun.log"
fi
