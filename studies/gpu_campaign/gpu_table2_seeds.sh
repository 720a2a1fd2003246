#!/bin/bash
# Table 2 on a lent GPU (one 15-minute lease): seed SEED (default 1) of its 87K rows METHODS (default Full, Random 1%,
# Optimal 1%, HF-A; one epoch each, as the kept seed-0 runs: `--stop-after 1`, then `--finish`), side by side on the
# one GPU through gpu_runs.sh, for `table2_seeds`; then, with the time left and the 750K set carried, the step rates of
# Full, Random and HF-A on the paper's own 750K identities (batch 256), or with CUDA_TESTS=1 tests/test_cuda.py.
# Outputs in $OUT (the device tool's folder): table2_seeds.tgz (unpack into
# results/paper/class_selection/fig2/synthetic-faces-87k/), <method>.log, train_step_class_selection_table2_750k_paper_cuda.{json,md}.
# Carry data/processed/{synthetic-faces-87k,synthetic-faces-750k} and .whl. HF (1%) (50 trees rebuilt every 100 steps:
# 73 ms a step on an H100, ~10 min an epoch) does not fit a lease beside other runs, HF-A does (392 s an epoch beside
# HF); a cut run cannot go on elsewhere (an 87K run's checkpoint, weights and Adam's moments, is 341 MiB: too large to
# come back from a lease), so train HF on a CPU core.
#   BUDGET=540 bash studies/gpu_campaign/gpu_table2_seeds.sh
#   SEED=2 METHODS="full random_1 optimal_1" BUDGET=480 CUDA_TESTS=1 bash studies/gpu_campaign/gpu_table2_seeds.sh
set -u
BUDGET=${BUDGET:-540}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; lscpu | grep -m1 "Model name"
E=config/experiments/class_selection/fig2.yaml
mkdir -p /tmp/runs_out   # gpu_runs.sh's OUT: checkpoint parts of a cut run stay behind
OUT=/tmp/runs_out EXP=$E DATASET=synthetic-faces-87k SEED=${SEED:-1} STOP_AFTER=1 METHODS=${METHODS:-"full random_1 optimal_1 hf_a"} \
  READ_AHEAD=3 NAME=table2_seeds LIMIT=$((BUDGET - 150)) bash benchmarks/gpu_runs.sh
cp /tmp/runs_out/table2_seeds.tgz /tmp/gpu_runs/*.log "$OUT/"
left=$((BUDGET - SECONDS))
echo "== $SECONDS s used, $left s left"
[ "$left" -gt 40 ] && [ -f data/processed/synthetic-faces-750k/dataset.npz ] && timeout "$left" python3 benchmarks/train_step.py --experiment $E --scale paper \
  --dataset synthetic-faces-750k --processed data/processed/synthetic-faces-750k/dataset.npz --device cuda --steps 20 \
  --methods full random_1 hf_a --read-ahead 4 --skip-eval --out-dir "$OUT" --name train_step_class_selection_table2_750k_paper_cuda \
  2>&1 | grep -v '^{' | tail -n 12
left=$((BUDGET - SECONDS))
[ "${CUDA_TESTS:-0}" = 1 ] && [ "$left" -gt 30 ] && timeout "$left" python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -n 15
exit 0
