#!/bin/bash
# RF-softmax Figures 1 and 2 at the paper settings on one lent GPU: the 8 RFF runs not yet kept (5 temperatures,
# 3 feature counts) side by side through gpu_runs.sh, their results packed into $OUT/rff_gpu.tgz (checkpoints left out).
# Local check: D=cpu S=tiny DS=synthetic-lm-tiny L=30 OUT=/tmp/o bash benchmarks/gpu_rff_figs.sh
set -u; D=${D:-cuda}; S=${S:-paper}; DS=${DS:-ptb}; L=${L:-430}
nvidia-smi --query-gpu=name,memory.used --format=csv 2>/dev/null; date +%T
O=$OUT; export -n OUT; unset OUT
(EXP=config/experiments/rff/fig1.yaml METHODS="rff_t03 rff_t04 rff_t06 rff_t07 rff_t08" SCALE=$S DATASET=$DS DEVICE=$D CKPT_MIN=3 LIMIT=$L RUNS=/tmp/r/fig1 bash benchmarks/gpu_runs.sh > $O/fig1.txt 2>&1) &
(EXP=config/experiments/rff/fig2.yaml METHODS="rff_d128 rff_d256 rff_d512" SCALE=$S DATASET=$DS DEVICE=$D CKPT_MIN=3 LIMIT=$L RUNS=/tmp/r/fig2 bash benchmarks/gpu_runs.sh > $O/fig2.txt 2>&1) &
sleep 60; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>/dev/null; tail -n 3 /tmp/r/fig*/*.log
wait; date +%T; cat $O/fig1.txt $O/fig2.txt
(cd /tmp/r && tar czf $O/rff_gpu.tgz --exclude checkpoint.pt .); ls -la $O
