#!/bin/bash
# RF-softmax Figures 1 and 2 at the paper settings on one lent GPU: the runs of F1 (Figure 1's temperatures) and F2
# (Figure 2's feature counts) side by side through gpu_runs.sh for at most L seconds (a run cut by then is tested at
# its best epoch), their results packed into $OUT/rff_gpu.tgz (checkpoints left out: 54 MB each, too many to return).
# The lease of 2026-11-28 ran the defaults (8 runs, 80-95 s an epoch each, cut after epoch 4 at L=400). Two side by
# side take 49-56 s an epoch (H200, 2026-11-29: 17 s to the first step, 10 epochs about 535 s): L=525 cut T = 0.6
# and 0.7 about 10 s before their 10th epoch ended, so give two runs L=560 and the call timeout_s=600:
#   F1="rff_t04 rff_t05" F2="" L=560 bash benchmarks/gpu_rff_figs.sh     # T = 0.4 against 0.5 on one device
# Local check: D=cpu S=tiny DS=synthetic-lm-tiny L=30 OUT=/tmp/o bash benchmarks/gpu_rff_figs.sh
set -u; D=${D:-cuda}; S=${S:-paper}; DS=${DS:-ptb}; L=${L:-430}
F1=${F1-rff_t03 rff_t04 rff_t06 rff_t07 rff_t08}; F2=${F2-rff_d128 rff_d256 rff_d512}
nvidia-smi --query-gpu=name,memory.used --format=csv 2>/dev/null; date +%T
O=$OUT; export -n OUT; unset OUT
run() {  # fig methods
  [ -n "$2" ] && EXP=config/experiments/rff/$1.yaml METHODS="$2" SCALE=$S DATASET=$DS DEVICE=$D CKPT_MIN=3 LIMIT=$L \
    RUNS=/tmp/r/$1 bash benchmarks/gpu_runs.sh > "$O/$1.txt" 2>&1
}
run fig1 "$F1" & run fig2 "$F2" &
sleep 60; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>/dev/null; tail -n 3 /tmp/r/fig*/*.log
wait; date +%T; cat "$O"/fig*.txt
(cd /tmp/r && tar czf "$O/rff_gpu.tgz" --exclude checkpoint.pt .); ls -la "$O"
