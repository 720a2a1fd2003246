#!/bin/bash
# Table 4's PTB-LSTM MIDX-pq and MIDX-rq at paper settings with another seed, on a lent GPU: the kept
# column (reference/paper, seed 0, CPU) has them 1.9% apart, rq behind pq, against the paper's order.
# Both side by side for at most $LIMIT seconds (benchmarks/gpu_runs.sh: cut runs ended with --finish,
# results packed into $OUT/midx_seeds.tgz, checkpoints of cut runs beside it in parts).
#
#   SEED=1 LIMIT=420 bash studies/midx_table4/gpu_midx_seeds.sh
#   SCALE=tiny DATASET=synthetic-lm-tiny DEVICE=cpu LIMIT=30 bash studies/midx_table4/gpu_midx_seeds.sh   # the script's own check
EXP=config/experiments/midx/table4.yaml METHODS="lstm_midx_pq lstm_midx_rq" SEED=${SEED:-1} NAME=midx_seeds \
  RUNS=${RUNS:-/tmp/midx_seeds} DATASET=${DATASET:-ptb} exec bash benchmarks/gpu_runs.sh
