#!/bin/bash
# Table 4's PTB-LSTM MIDX-pq and MIDX-rq at paper settings with another seed, on a lent GPU: the kept
# column (reference/paper-cpu, seed 0, CPU) has them 1.9% apart, rq behind pq, against the paper's order.
# Both run side by side on the one GPU for at most $LIMIT seconds; a run the limit cuts is ended with
# --finish (its selected epoch tested, marked cut). Results in $RUNS/<method>/seed<SEED>, packed into
# $OUT/midx_seeds.tgz, checkpoints of cut runs beside it in parts (resumable anywhere: `xcbench train ... --out`).
# The seed is not in table4.yaml's seeds: the script adds it for its runs and puts the file back on exit.
#
#   SEED=1 LIMIT=420 bash benchmarks/gpu_midx_seeds.sh
#   SCALE=tiny DATASET=synthetic-lm-tiny DEVICE=cpu LIMIT=30 bash benchmarks/gpu_midx_seeds.sh   # the script's own check
set -u
SEED=${SEED:-1} LIMIT=${LIMIT:-420} RUNS=${RUNS:-/tmp/midx_seeds} SCALE=${SCALE:-paper} DATASET=${DATASET:-ptb} DEVICE=${DEVICE:-cuda}
. benchmarks/gpu_env.sh
cp config/experiments/midx/table4.yaml /tmp/table4.yaml.orig && trap 'cp /tmp/table4.yaml.orig config/experiments/midx/table4.yaml' EXIT
sed -i "s/^seeds: \[0\]/seeds: [0, $SEED]/" config/experiments/midx/table4.yaml
train() {  # [TMO=seconds] train METHOD [--finish]
  ${TMO:+timeout $TMO} python3 -m xcbench train --experiment config/experiments/midx/table4.yaml --scale "$SCALE" \
    --dataset "$DATASET" --method "$1" --seed "$SEED" --processed "data/processed/$DATASET/dataset.npz" \
    --device "$DEVICE" --threads 1 --out "$RUNS/$1/seed$SEED" "${@:2}" >> "$RUNS/$1.log" 2>&1
}
mkdir -p "$RUNS"
for m in lstm_midx_pq lstm_midx_rq; do TMO=$LIMIT train $m & done
wait
for m in lstm_midx_pq lstm_midx_rq; do
  ck="$RUNS/$m/seed$SEED/checkpoint.pt"
  # a run the limit cut: its checkpoint (the weights and the best epoch's copy: over the tool's 16 MiB a file on the
  # H200) goes back in 15 MiB parts before --finish tests its selected epoch; here: cat <m>_seed<S>_checkpoint.pt.part*
  # > results/.../<m>/seed<S>/checkpoint.pt, and `xcbench train` with that --out continues it
  if [ ! -f "$RUNS/$m/seed$SEED/metrics.json" ]; then
    [ -n "${OUT:-}" ] && [ -f "$ck" ] && split -b 15m -d "$ck" "$OUT/${m}_seed${SEED}_checkpoint.pt.part"
    train $m --finish
  fi
  grep epoch "$RUNS/$m.log" | tail -n 2; tail -n 2 "$RUNS/$m.log"
done
[ -n "${OUT:-}" ] && (cd "$RUNS" && tar czf "$OUT/midx_seeds.tgz" --exclude checkpoint.pt .)
