#!/bin/bash
# Issue #50, GPU steps near their floor, in one lease: does a step with `train.draws: device` make no host
# synchronisation, and what does that buy at MIDX Table 4's paper settings on PTB? Three steps, each with its
# own time limit; logs and outputs gather in $LOGS, packed after each step into $OUT/gpu_draws.tgz.
#   1. tests/test_cuda.py (device draws against their exact q, a sync-free sampled step, a device-draws run resumed);
#   2. benchmarks/train_step.py on every Table 4 method, draws cpu and device: ms a step alone and chained, host
#      syncs a step by source line (train_step_midx_table4_paper_ptb_cuda_draws.{json,md});
#   3. benchmarks/train_concurrency.py: k runs of lstm_midx_pq with device draws on the one GPU;
#   4. (GRAPH_DATASETS, e.g. "ptb wikitext-2") every Table 4 method's steps replayed from CUDA graphs
#      (train_step.py --cuda-graph; heads that cannot be captured are left out, saying why), per dataset:
#      train_step_midx_table4_paper_<dataset>_cuda_graph.{json,md}, what `train: {draws: device, cuda_graph: true}`
#      would make Table 4 cost (studies/cuda_graphs measured 1.2-2.0 ms a step for five PTB methods by hand).
#   5. (HFA_DATASETS, e.g. "synthetic-faces-87k synthetic-faces-750k") class selection's HF-A timed phase by phase
#      (train_step.py times each phase's trees and T): train_step_class_selection_fig2_paper_<dataset>_cuda.{json,md},
#      which paper_cost then reads in place of the first-phase records (750K without its minutes-long evaluation).
# Carry data/processed/ptb (and wikitext-2 for step 4, synthetic-faces-* for step 5: 2 KB each) and .whl (benchmarks/gpu_env.sh). A check on the CPU (no GPU: steps 2-3 only):
#   DEVICE=cpu STEPS=2 METHODS=lstm_midx_pq K="1" SKIP_TESTS=1 bash benchmarks/gpu_draws.sh
# PYTEST_K: a -k expression for step 1; every process runs on one CPU thread, as the DAG's jobs.
set -u
LOGS=${LOGS:-/tmp/gpu_draws} DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-30}
mkdir -p "$LOGS"
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/gpu_draws.tgz" -C "$LOGS" . ; }
. benchmarks/gpu_env.sh
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step() {  # step NAME SECONDS command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s (limit $limit)"; tail -n 4 "$LOGS/$name.log"
}
[ -z "${SKIP_TESTS:-}" ] && { step pytest_cuda 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py ${PYTEST_K:+-k "$PYTEST_K"}; pack; }
step train_step 200 python3 benchmarks/train_step.py --experiment config/experiments/midx/table4.yaml --scale paper \
  --dataset ptb --processed data/processed/ptb/dataset.npz --device "$DEVICE" --steps "$STEPS" --skip-eval --threads 1 \
  --draws cpu device ${METHODS:+--methods $METHODS} --name "train_step_midx_table4_paper_ptb_${DEVICE}_draws" --out-dir "$LOGS"
grep "^| " "$LOGS/train_step.log"; pack
step concurrency 130 python3 benchmarks/train_concurrency.py --experiment config/experiments/midx/table4.yaml \
  --dataset ptb --processed data/processed/ptb/dataset.npz --method lstm_midx_pq --k ${K:-1 4 8} --steps 200 \
  --device "$DEVICE" --draws device --name "train_concurrency_ptb_${DEVICE}_draws"
cp benchmarks/out/train_concurrency_ptb_"${DEVICE}"_draws.* "$LOGS/" 2>/dev/null; grep "^| " "$LOGS/concurrency.log"; pack
for ds in ${GRAPH_DATASETS:-}; do
  step "graph_$ds" "${GRAPH_S:-150}" python3 benchmarks/train_step.py --experiment config/experiments/midx/table4.yaml \
    --scale paper --dataset "$ds" --processed "data/processed/$ds/dataset.npz" --device "$DEVICE" --steps "$STEPS" \
    --threads 1 --cuda-graph ${METHODS:+--methods $METHODS} --name "train_step_midx_table4_paper_${ds}_${DEVICE}_graph" \
    --out-dir "$LOGS"
  grep "^| \|left out" "$LOGS/graph_$ds.log"; pack
done
for ds in ${HFA_DATASETS:-}; do
  skip=""; [ "$ds" = synthetic-faces-750k ] && skip=--skip-eval
  step "hfa_$ds" "${HFA_S:-240}" python3 benchmarks/train_step.py --experiment config/experiments/class_selection/fig2.yaml \
    --scale paper --dataset "$ds" --processed "data/processed/$ds/dataset.npz" --device "$DEVICE" --steps "${HFA_STEPS:-10}" \
    --threads 1 --methods hf_a $skip --name "train_step_class_selection_fig2_paper_${ds}_${DEVICE}" --out-dir "$LOGS"
  grep "^| " "$LOGS/hfa_$ds.log"; pack
done
exit 0
