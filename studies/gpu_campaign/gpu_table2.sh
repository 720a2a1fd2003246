#!/bin/bash
# Table 2 of the class-selection paper on a lent GPU (one 15-minute lease): step rates of Full, Random and
# HF-A at paper settings on the 87K faces (with and without batch read-ahead), then Full's 5 epochs of
# table2_epochs (its CPU epoch is 3.2 h) through gpu_runs.sh, then, with the time left, the WikiText-2 step
# rate of MIDX Table 4 (planning its GPU runs). Outputs in $OUT (the device tool's folder): train_step_*.{json,md},
# table2_epochs_full.tgz (the run folder; unpack into results/paper/class_selection/table2_epochs/
# synthetic-faces-87k/), full.log. Carry data/processed/{synthetic-faces-87k,wikitext-2} and .whl.
#   BUDGET=560 bash studies/gpu_campaign/gpu_table2.sh
set -u
BUDGET=${BUDGET:-560}
. benchmarks/gpu_env.sh
export OPENBLAS_NUM_THREADS=1   # the read-ahead threads each run single-threaded numpy
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; lscpu | grep -m1 "Model name"
E=config/experiments/class_selection/table2_epochs.yaml D=synthetic-faces-87k
TS=(python3 benchmarks/train_step.py --experiment $E --scale paper --dataset $D
    --processed data/processed/$D/dataset.npz --device cuda --steps 20 --out-dir "$OUT")
timeout 120 "${TS[@]}" --methods full random_1 hf_a --read-ahead 4 --name train_step_class_selection_table2_paper_cuda \
  2>&1 | grep -v '^{'
timeout 60 "${TS[@]}" --methods full --read-ahead 0 --name train_step_class_selection_table2_paper_cuda_inline \
  2>&1 | grep -v '^{' | tail -n 3
mkdir -p /tmp/runs_out   # gpu_runs.sh's OUT: its checkpoint parts (270 MB for a cut Full) stay behind
OUT=/tmp/runs_out EXP=$E DATASET=$D METHODS=full READ_AHEAD=4 NAME=table2_epochs_full \
  LIMIT=$((BUDGET - SECONDS - 90)) bash benchmarks/gpu_runs.sh
cp /tmp/runs_out/table2_epochs_full.tgz /tmp/gpu_runs/full.log "$OUT/"
left=$((BUDGET - SECONDS))
echo "== $SECONDS s used, $left s left"
[ "$left" -gt 45 ] && timeout "$left" python3 benchmarks/train_step.py --experiment config/experiments/midx/table4.yaml \
  --scale paper --dataset wikitext-2 --processed data/processed/wikitext-2/dataset.npz --device cuda --steps 10 \
  --out-dir "$OUT" --name train_step_midx_table4_paper_wikitext-2_cuda 2>&1 | grep -v '^{' | tail -n 22
exit 0
