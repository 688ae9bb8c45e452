#!/usr/bin/env bash
# The halo-exchange benchmark on the GPU machine (built beforehand by `cargo xtask gpu-bundle`):
# Rust kernels (persistent, per-iteration) next to the CUDA C++ NVSHMEM reference, interleaved
# in one process per configuration, plus the host-driven baseline, on 2 GPUs and on 1.
# usage: examples/halo-exchange/bench.sh OUT_DIR
# Writes OUT_DIR/halo-bench.log and OUT_DIR/halo-results.jsonl; summarize.py makes the table.
set -uo pipefail
out=${1:?usage: bench.sh OUT_DIR}
mkdir -p "$out"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0
export SHMEM_PTX_DIR=${SHMEM_PTX_DIR:-$PWD/carry/ptx}
bin=${HALO_BIN:-carry/bin/halo_exchange}
here=examples/halo-exchange
[ -f "$out/halo-cuda/halo.cubin" ] && [ -x "$out/halo-cuda/halo_host_driven" ] \
  || "$here/cuda/build.sh" "${ARCH:-sm_90}" "$out/halo-cuda" || exit 1
log=$out/halo-bench.log
: > "$out/halo-results.jsonl"
for size_iters in 1024:5000 4096:1000 16384:200; do
  size=${size_iters%:*} iters=${size_iters#*:}
  for pes in 2 1; do
    echo "== ${size}^2 f32, $pes PE(s), $iters iterations" | tee -a "$log"
    timeout 240 "$bin" --pes "$pes" --size "$size" --iters "$iters" --check-every 0 --quiet \
      --compare "$out/halo-cuda/halo.cubin" --reps 5 2>&1 | tee -a "$log" \
      | sed -n 's/^\[pe 0\] RESULT //p' >> "$out/halo-results.jsonl"
    for rep in 1 2 3; do
      timeout 120 "$out/halo-cuda/halo_host_driven" "$size" "$size" "$iters" "$pes" 2>&1 | tee -a "$log" \
        | awk -v pes="$pes" '/^host-driven/ {printf "{\"nx\":%s,\"ny\":%s,\"pes\":%s,\"iters\":%s,\"variant\":\"HostDriven\",\"us\":%s}\n",$2,$3,$4,$5,$6}' \
        >> "$out/halo-results.jsonl"
    done
  done
done
echo "== host-driven baseline self-check" | tee -a "$log"
"$out/halo-cuda/halo_host_driven" 258 131 37 2 --verify 2>&1 | tee -a "$log"
echo "== f64, 4096^2, 2 PEs" | tee -a "$log"
timeout 240 "$bin" --pes 2 --size 4096 --iters 1000 --type f64 --check-every 0 --quiet \
  --compare "$out/halo-cuda/halo.cubin" --reps 3 2>&1 | tee -a "$log" \
  | sed -n 's/^\[pe 0\] RESULT //p' >> "$out/halo-results.jsonl"
echo "== example run with progress (4096^2, 2000 iterations)" | tee -a "$log"
timeout 120 "$bin" --size 4096 --iters 2000 --check-every 200 2>&1 | tee -a "$log"
echo "== SASS of the hot kernels" | tee -a "$log"
cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
"$cuobjdump" -sass -fun step_f32 "$SHMEM_PTX_DIR/sm_90/halo-exchange.cubin" > "$out/sass-rust-step_f32.txt" 2>&1
"$cuobjdump" -sass -fun step_f32 "$out/halo-cuda/halo.cubin" > "$out/sass-cuda-step_f32.txt" 2>&1
for k in persistent_f32; do
  "$cuobjdump" -sass -fun $k "$SHMEM_PTX_DIR/sm_90/halo-exchange.cubin" > "$out/sass-rust-$k.txt" 2>&1
  "$cuobjdump" -sass -fun $k "$out/halo-cuda/halo.cubin" > "$out/sass-cuda-$k.txt" 2>&1
done
"$cuobjdump" -res-usage "$SHMEM_PTX_DIR/sm_90/halo-exchange.cubin" "$out/halo-cuda/halo.cubin" > "$out/res-usage.txt" 2>&1
wc -l "$out"/sass-*.txt | tee -a "$log"
