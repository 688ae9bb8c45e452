#!/usr/bin/env bash
# The GPU-side runner: runs, on a GPU machine, from the repository root, the stages asked
# for, with what `cargo xtask gpu-bundle` built into carry/ (the GPU machine has no Rust
# toolchain). Every stage's output goes to its own log; at the end the logs are packed into
# $OUT/gpu-run-logs.tar.gz and a table of stages, exit codes and times is printed and
# written to $OUT/summary.txt.
#
# usage: scripts/gpu-run.sh [--pass two-gpu] [--stages S,S,..] [--pes N] [--mps] [--size N[,N..]]
#   --pass two-gpu  the two-GPU pass (issue 21; BENCHMARKS.md, "The two-GPU pass"): stages
#              machine,api,ring,examples,project,example-tests,graph-bench,moe-bench,
#              halo-bench,bound-cost,shmem-bench,python at --size 1024,4096,16384 (needs
#              `cargo xtask gpu-bundle --twins --project`); a later --stages or --size
#              narrows it (a device call of at most 10 minutes takes it in two parts)
#   --stages   which, in this order (default: machine,cuda,api,ring,examples,example-tests):
#     machine        GPUs, driver, nvcc, NVSHMEM, environment
#     cuda           build the CUDA C++ twins (halo, moe, perftest) with this machine's nvcc
#                    (not needed when carry/cuda has them: `cargo xtask gpu-bundle --twins`)
#     mps-refusal    `shmem-run -n <GPUs+1> ring` without MPS: must fail, naming MPS
#     api            the device-API GPU suite on --pes PEs
#     ring           the ring: started directly, under `shmem-run -n PES`, and with SHMEM_SIM=1
#     examples       halo_exchange --verify against the CPU at 256^2, 1024^2 and 2048^2 (both
#                    variants), at 4096^2 with --variant auto, and moe_dispatch with its
#                    defaults, bf16 and fp8 (both modes, checked), on --pes PEs
#     project        the user's own project of `shmem new` (carry/bin/demo: `gpu-bundle
#                    --project`), its one binary copied to a directory without PTX, started
#                    directly and under shmem-run -n PES
#     example-tests  the halo-exchange and MoE GPU test suites (Rust and CUDA C++ kernels)
#     halo-bench     halo_exchange --compare against the CUDA C++ twin (both variants, f32 and
#                    f64) at each --size, then --variant auto there
#     moe-bench      moe_dispatch --compare against the CUDA C++ twin (128, 512, 4096 tokens;
#                    bf16 and fp8), the comparable shape (hidden 4096, 8 experts, top-2), then
#                    on a held stream (--hold-stream) with 64 and with 256 experts
#     bound-cost     with every wait bounded (SHMEM_WAIT_TIMEOUT=60s): halo-bench at the first
#                    --size, and moe-bench's held command at 64 experts
#     graph-bench    eager launches against CUDA graph replays: halo 1024^2, MoE 128 tokens
#     shmem-bench    the perftest curves against the CUDA C++ twins (needs 2 PEs)
#     mpirun         the API suite under mpirun -np 2 (needs `gpu-bundle --openmpi`)
#     python         the Python package (carry/wheels): its pytest suite on the simulator with
#                    CPU torch tensors, then under torchrun on CUDA tensors at 1 and --pes
#                    processes, and python/bench/bench_moe.py (with the PyTorch
#                    all_to_all_single baseline where each process has a GPU of its own: NCCL
#                    takes one rank per GPU)
#   --pes N    PEs for api, ring, examples, example-tests, benches (default: one per GPU)
#   --mps      start the CUDA MPS control daemon first (several PEs per GPU need it) and stop
#              it at the end
#   --size N[,N..]  grids of halo-bench (default 4096)
# The kernels come from carry/ptx, or from SHMEM_PTX_DIR when it is set (a variant build).
# Keeps NVSHMEM_DISABLE_NVLS=1 and NCCL_NVLS_ENABLE=0 in every process (never multicast).
set -uo pipefail
# A hangup of the terminal the runner was started from must not end the stages half-way:
# the runner runs in a session of its own and ignores SIGHUP.
if [ -z "${SHMEM_GPU_RUN_SESSION:-}" ]; then
  export SHMEM_GPU_RUN_SESSION=1
  exec setsid -w bash "$0" "$@" < /dev/null
fi
trap '' HUP
stages=machine,cuda,api,ring,examples,example-tests
pes="" mps=0 size=4096
while [ $# -gt 0 ]; do
  case "$1" in
    --pass)
      case $2 in
        two-gpu) stages=machine,api,ring,examples,project,example-tests,graph-bench,moe-bench,halo-bench,bound-cost,shmem-bench,python
                 size=1024,4096,16384 ;;
        *) echo "gpu-run.sh: unknown pass $2 (two-gpu)" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --pes) pes=$2; shift 2 ;;
    --mps) mps=1; shift ;;
    --size) size=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x carry/bin/shmem-run ] || { echo "gpu-run.sh: carry/ is missing: run \`cargo xtask gpu-bundle\` and carry it" >&2; exit 2; }
OUT=${OUT:-/tmp/shmem-out}
logs=$OUT/logs
mkdir -p "$logs"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 RUST_BACKTRACE=1
export SHMEM_PTX_DIR=${SHMEM_PTX_DIR:-$PWD/carry/ptx} SHMEM_GPU_TESTS=1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
pes=${pes:-$gpus}
export SHMEM_GPU_PES=$pes
# The CUDA C++ twins: SHMEM_CUDA_DIR if set, else carry/cuda when the bundle has them
# (`cargo xtask gpu-bundle --twins`), else those the cuda stage builds, kept for later runs
# on the same machine.
if [ -n "${SHMEM_CUDA_DIR:-}" ]; then cuda=$SHMEM_CUDA_DIR
elif [ -f carry/cuda/moe.cubin ]; then cuda=$PWD/carry/cuda
else cuda=/tmp/shmem-cuda; fi
summary=$OUT/summary.txt
: > "$summary"
# A stage cut by its time limit may leave PEs behind; they would skew the next one.
# Only processes whose program is under carry/bin (not a shell whose command line names one).
cleanup() { pkill -9 -f '^[^ ]*carry/bin/' 2>/dev/null; sleep 1; true; }
mps_start() { nvidia-cuda-mps-control -d && echo "MPS control daemon started"; }
mps_stop() { echo quit | nvidia-cuda-mps-control 2>/dev/null; sleep 1; true; }
# run LIMIT CMD...: one command of a stage, its exit code remembered in $rc.
rc=0
run() { local limit=$1; shift; echo "\$ $*"; timeout "$limit" "$@" < /dev/null; local r=$?; echo "exit $r"; [ $r -eq 0 ] || rc=$r; }

stage_machine() {
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvidia-smi -L; nvcc --version | tail -2
  python3 -c 'import importlib.metadata as m; print("nvidia-nvshmem-cu13", m.version("nvidia-nvshmem-cu13"))'
  env | grep -E '^(NVSHMEM|NCCL|SHMEM|CUDA_MPS)_' | sort
  echo "PEs: $pes on $gpus GPU(s); MPS requested: $mps"
}
stage_cuda() { run 600 scripts/build-twins.sh sm_90 "$cuda"; }
stage_mps_refusal() {
  local n=$((gpus + 1)) t0=$SECONDS
  echo "\$ shmem-run -n $n carry/bin/ring   (no MPS running: must fail and name MPS)"
  out=$(timeout 60 carry/bin/shmem-run -n $n carry/bin/ring 2>&1); local r=$?
  echo "$out"; echo "exit $r after $((SECONDS - t0)) s"
  if [ $r -ne 0 ] && grep -q "CUDA MPS" <<<"$out"; then echo "refused as expected"; else echo "NOT REFUSED"; rc=1; fi
}
stage_api() { run 400 carry/bin/gpu-tests --test-threads=1; }
stage_ring() {
  run 60 carry/bin/ring --pes "$pes"
  run 60 carry/bin/shmem-run -n "$pes" carry/bin/ring
  SHMEM_SIM=1 run 60 carry/bin/ring
}
stage_examples() {
  local n v
  for n in 256 1024 2048; do
    for v in per-iteration persistent; do
      run 120 carry/bin/halo_exchange --pes "$pes" --size $n --iters 200 --verify --variant $v
      cleanup
    done
  done
  # The default, auto: both timed, the faster run (the summary names it with both times).
  run 120 carry/bin/halo_exchange --pes "$pes" --size 4096 --iters 200 --check-every 50
  cleanup
  run 180 carry/bin/moe_dispatch --pes "$pes" --dtype both
}
stage_project() {
  [ -x carry/bin/demo ] || { echo "no carry/bin/demo: build with \`cargo xtask gpu-bundle --project\`"; rc=2; return; }
  # The binary alone, in a directory with no PTX: its kernels are embedded.
  local away=/tmp/shmem-project here=$PWD
  rm -rf "$away" && mkdir -p "$away" && cp carry/bin/demo "$away/"
  pushd "$away" > /dev/null || { rc=2; return; }
  SHMEM_PES=$pes run 60 ./demo
  run 60 "$here/carry/bin/shmem-run" -n "$pes" ./demo
  popd > /dev/null || rc=2
}
stage_example_tests() {
  SHMEM_HALO_CUBIN=$cuda/halo.cubin run 300 carry/bin/halo-tests --test-threads=1
  cleanup
  SHMEM_MOE_CUBIN=$cuda/moe.cubin run 300 carry/bin/moe-tests --test-threads=1
}
stage_halo_bench() {
  local n ty
  for n in ${size//,/ }; do
    for ty in f32 f64; do
      run 300 carry/bin/halo_exchange --pes "$pes" --compare "$cuda/halo.cubin" --size "$n" --type $ty --iters 500 --reps 5 --quiet
      cleanup
    done
    # auto: both variants timed on this GPU first, the faster runs; the summary names it.
    run 120 carry/bin/halo_exchange --pes "$pes" --size "$n" --iters 500 --check-every 0 --quiet
    cleanup
  done
}
stage_graph_bench() {
  # Eager launches against CUDA graphs of the same work: a small halo (launch-bound) and
  # MoE at 128 tokens.
  run 300 carry/bin/halo_exchange --pes "$pes" --compare "$cuda/halo.cubin" --size 1024 --iters 1000 --graph 100 --reps 5 --quiet
  cleanup
  run 300 carry/bin/moe_dispatch --pes "$pes" --compare "$cuda/moe.cubin" --tokens 128 --experts 64 --reps 5 --rounds 10 --graph 100
}
stage_moe_bench() {
  run 400 carry/bin/moe_dispatch --pes "$pes" --compare "$cuda/moe.cubin" --tokens 128,512,4096 --experts 64 --dtype both --reps 5 --rounds 10
  # A shape published figures use (Mixtral: hidden 4096, 8 experts, top-2), reported as
  # cross-GPU bytes and as all received bytes.
  cleanup
  run 300 carry/bin/moe_dispatch --pes "$pes" --compare "$cuda/moe.cubin" --tokens 4096 --hidden 4096 --experts 8 --top-k 2 --dtype both --reps 5 --rounds 10
  # The same rounds enqueued on a held stream: the GPU's time alone, without the gaps where
  # the GPU waited for the host's next launch.
  cleanup
  moe_held 64
  cleanup
  moe_held 256
}
moe_held() { run 400 carry/bin/moe_dispatch --pes "$pes" --compare "$cuda/moe.cubin" --tokens 128,512,4096 --experts "$1" --dtype both --reps 5 --rounds 10 --hold-stream; }
stage_bound_cost() {
  export SHMEM_WAIT_TIMEOUT=60s
  size=${size%%,*} stage_halo_bench
  cleanup
  moe_held 64
  unset SHMEM_WAIT_TIMEOUT
}
stage_shmem_bench() {
  run 500 carry/bin/shmem-run -n "$pes" carry/bin/shmem-bench --cuda "$cuda/perftest.cubin" --out "$OUT/bench" --reps 5
}
stage_python() {
  local py=/tmp/shmem-py
  if [ ! -d $py/shmem_rs ]; then
    local extra=(); python3 -c 'import numpy' 2>/dev/null || extra=(numpy)
    python3 -c 'import pytest' 2>/dev/null || extra+=(pytest)
    run 120 python3 -m pip install -q --no-index --find-links carry/wheels --target $py shmem-rs "${extra[@]}"
  fi
  export PYTHONPATH=$py${PYTHONPATH:+:$PYTHONPATH}
  python3 -c 'import torch, shmem_rs; print("torch", torch.__version__, "shmem_rs from", shmem_rs.__file__)'
  # The suite on the CPU simulator with CPU torch tensors beside NumPy arrays (CI has no torch).
  SHMEM_SIM=1 run 300 python3 -m pytest -q -p no:cacheprovider python/tests
  local tr=(python3 -m torch.distributed.run --standalone)
  for n in $(printf '%s\n' 1 "$pes" | sort -un); do
    local share=(); [ "$mps" -eq 1 ] && share=(env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / n)))
    SHMEM_PY_GPU=1 run 300 "${share[@]}" "${tr[@]}" --nproc_per_node "$n" -m pytest -q -p no:cacheprovider python/tests
    run 120 "${share[@]}" "${tr[@]}" --nproc_per_node "$n" python/examples/moe_layer.py
    cleanup
    local base=(); [ "$n" -le "$gpus" ] && base=(--baseline)
    run 400 "${share[@]}" "${tr[@]}" --nproc_per_node "$n" python/bench/bench_moe.py --reps 20 "${base[@]}"
    cleanup
  done
}
stage_mpirun() {
  [ -x carry/ompi/bin/mpirun ] || { echo "no carry/ompi: build with \`cargo xtask gpu-bundle --openmpi\`"; rc=2; return; }
  export OPAL_PREFIX=$PWD/carry/ompi PATH=$PWD/carry/ompi/bin:$PATH
  export LD_LIBRARY_PATH=$PWD/carry/ompi/lib:$PWD/carry/ompi/lib/openmpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local mpi=(mpirun --allow-run-as-root -np 2 -x NVSHMEM_DISABLE_NVLS -x NCCL_NVLS_ENABLE -x SHMEM_PTX_DIR -x SHMEM_GPU_TESTS -x LD_LIBRARY_PATH -x RUST_BACKTRACE)
  for t in $(carry/bin/gpu-tests --list 2>/dev/null | sed -n 's/: test$//p'); do
    run 120 "${mpi[@]}" carry/bin/gpu-tests "$t" --exact --test-threads=1
  done
}

[ "$mps" = 1 ] && mps_start
i=0
for s in ${stages//,/ }; do
  f=stage_${s//-/_}
  if ! declare -F "$f" >/dev/null; then echo "gpu-run.sh: unknown stage $s (see --help)" >&2; rc=2; continue; fi
  i=$((i + 1)); rc=0; t0=$SECONDS
  log=$logs/$(printf %02d $i)-$s.log
  echo "== $s ($(date -u +%T))"
  { echo "== $s"; "$f"; } > "$log" 2>&1
  cleanup
  printf '%-14s exit %-3s %4d s  %s\n' "$s" "$rc" $((SECONDS - t0)) "$(grep -cE '^exit 0$' "$log") commands ok, $(grep -cE '^exit [1-9]' "$log") failed" | tee -a "$summary"
done
[ "$mps" = 1 ] && mps_stop
# At most 8 files come back from the device tool: pack the logs.
(cd "$OUT" && tar czf gpu-run-logs.tar.gz logs && rm -rf logs)
echo "logs: $OUT/gpu-run-logs.tar.gz"
