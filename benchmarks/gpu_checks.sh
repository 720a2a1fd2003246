#!/bin/bash
# The GPU session's checks, in one script (a lent GPU machine: its own python3 with torch and CUDA; no
# network). Each step has its own time limit, so one that hangs leaves the others their time; the timed
# benchmarks run alone, the CPU-heavy parity sweep last. Logs and outputs gather in $LOGS (default
# /tmp/gpu_checks), packed after every step into $OUT/gpu_checks.tgz when OUT is set (the device tool's folder).
#
#   bash benchmarks/gpu_checks.sh            # needs data/processed/{wikitext-2,synthetic-*-tiny} (ptb too with TRAIN_STEP=1),
#                                            # data/features/ and data/parity_commands.txt
#                                            # (python benchmarks/device_parity.py commands --scale tiny)
# The first run (an H200, 193 s in all) had no ffi_kernels step; it is second now, as it has no result yet.
# Python environment: benchmarks/gpu_env.sh.
set -u
LOGS=${LOGS:-/tmp/gpu_checks}
mkdir -p "$LOGS"
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/gpu_checks.tgz" -C "$LOGS" . ; }
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, xcbench; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 1

step() {  # step NAME SECONDS command...: one check, its log in $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s (limit $limit)"; tail -n 6 "$LOGS/$name.log"
}

step pytest_cuda 80 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_ffi_triton.py; pack
step ffi_kernels 60 python3 benchmarks/ffi_kernels.py
cp benchmarks/out/ffi_kernels.* "$LOGS/" 2>/dev/null; pack
step selectors_cuda 150 python3 benchmarks/selector_bench.py --device cuda --n 1000000 --step-n 1000000 --kmeans-n \
  --name selectors_cuda
cp benchmarks/out/selectors_cuda.* "$LOGS/" 2>/dev/null; pack
if [ -n "${TRAIN_STEP:-}" ]; then  # step rates (measured on the H200: benchmarks/out/train_step_*_cuda.md)
  for ds in ptb:60 wikitext-2:100; do
    lim=${ds#*:}; ds=${ds%:*}
    step train_step_$ds $lim python3 benchmarks/train_step.py --experiment config/experiments/midx/table4.yaml \
      --scale paper --dataset "$ds" --processed "data/processed/$ds/dataset.npz" --device cuda --steps 10 \
      --name "train_step_midx_table4_paper_${ds}_cuda"
    # the xcbench lm table's ten heads (WikiText-2's 30 runs wait for a GPU: 8-30 CPU-h each)
    step train_step_xcbench_lm_$ds $((lim * 2)) python3 benchmarks/train_step.py --experiment \
      config/experiments/xcbench/lm.yaml --scale paper --dataset "$ds" --processed "data/processed/$ds/dataset.npz" \
      --device cuda --steps 10 --name "train_step_xcbench_lm_paper_${ds}_cuda"
  done
  cp benchmarks/out/train_step_*_cuda.* "$LOGS/" 2>/dev/null; pack
fi
step train_concurrency 110 python3 benchmarks/train_concurrency.py --experiment config/experiments/midx/table4.yaml \
  --dataset wikitext-2 --processed data/processed/wikitext-2/dataset.npz --method tf_midx_pq --k 1 2 4 8 --steps 300 \
  --name train_concurrency_cuda
cp benchmarks/out/train_concurrency_cuda.* "$LOGS/" 2>/dev/null; pack
if [ -n "${DET_COST:-}" ]; then  # xcbench's deterministic CUDA kernels against torch's atomic ones, alternating
  M="lstm_full lstm_uniform lstm_midx_pq lstm_midx_rq tf_full tf_unigram tf_midx_pq tf_rff"
  for mode in det atomic det2; do
    f=""; [ $mode = atomic ] && f=--nondeterministic
    step train_step_$mode 70 python3 benchmarks/train_step.py --experiment config/experiments/midx/table4.yaml --scale paper \
      --dataset ptb --processed data/processed/ptb/dataset.npz --device cuda --steps 20 --methods $M $f \
      --name train_step_midx_table4_paper_ptb_cuda_$mode
  done
  cp benchmarks/out/train_step_midx_table4_paper_ptb_cuda_{det,atomic,det2}.* "$LOGS/" 2>/dev/null; pack
fi
step parity ${PARITY_S:-100} python3 benchmarks/device_parity.py run --commands data/parity_commands.txt \
  --device cuda cpu --jobs 14 --root /tmp/parity
(cd /tmp/parity && find . -name meta.json -o -name parity_run.json -o -name metrics.json | tar czf - -T -) > "$LOGS/parity.tgz"
pack; ls -la "$LOGS"
