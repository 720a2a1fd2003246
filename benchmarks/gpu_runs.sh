#!/bin/bash
# Paper-scale runs of one experiment on a lent GPU (15-minute leases, a bare machine each time): the
# METHODS run side by side on the one GPU for at most $LIMIT seconds; a run the limit cuts is ended with
# --finish (its selected epoch tested, marked cut). Results in $RUNS/<method>/seed<SEED>, packed into
# $OUT/$NAME.tgz (checkpoints left out); the checkpoint of a cut run goes back beside it in 15 MiB parts
# (cat <method>_seed<S>_checkpoint.pt.part* > results/.../<method>/seed<S>/checkpoint.pt, then `xcbench
# train` with that --out continues it). SEED: one of the file's `seeds:` or of a view of it (table2_seeds adds
# seed 1 to fig2's runs). STOP_AFTER=N: stop each run after epoch N (`xcbench train --stop-after`), then --finish
# (a budgeted run: one epoch of a 30-epoch setting, as the kept CPU runs). READ_AHEAD: threads generating lazy face
# batches ahead (`xcbench train --read-ahead`).
# Carry data/processed/$DATASET (and .whl, benchmarks/gpu_env.sh).
#
#   EXP=config/experiments/class_selection/table2_epochs.yaml DATASET=synthetic-faces-87k METHODS="full random_1 hf_a" \
#     LIMIT=420 bash benchmarks/gpu_runs.sh
#   EXP=... SCALE=tiny DATASET=synthetic-faces-tiny DEVICE=cpu LIMIT=30 bash benchmarks/gpu_runs.sh   # the script's own check
set -u
: "${EXP:?EXP=config/experiments/<paper>/<artifact>.yaml}" "${METHODS:?METHODS=\"m1 m2 ...\"}"
SEED=${SEED:-0} LIMIT=${LIMIT:-420} SCALE=${SCALE:-paper} DATASET=${DATASET:-ptb} DEVICE=${DEVICE:-cuda}
NAME=${NAME:-$(basename "$EXP" .yaml)} RUNS=${RUNS:-/tmp/gpu_runs}
. benchmarks/gpu_env.sh
train() {  # [TMO=seconds] train METHOD [--finish]
  ${TMO:+timeout $TMO} python3 -m xcbench train --experiment "$EXP" --scale "$SCALE" --dataset "$DATASET" --method "$1" \
    --seed "$SEED" --processed "data/processed/$DATASET/dataset.npz" --device "$DEVICE" --threads 1 ${READ_AHEAD:+--read-ahead $READ_AHEAD} ${STOP_AFTER:+--stop-after $STOP_AFTER} \
    --out "$RUNS/$1/seed$SEED" "${@:2}" >> "$RUNS/$1.log" 2>&1
}
mkdir -p "$RUNS"
for m in $METHODS; do TMO=$LIMIT train "$m" & done
wait
for m in $METHODS; do
  ck="$RUNS/$m/seed$SEED/checkpoint.pt"
  if [ ! -f "$RUNS/$m/seed$SEED/metrics.json" ]; then
    [ -n "${OUT:-}" ] && [ -f "$ck" ] && split -b 15m -d "$ck" "$OUT/${m}_seed${SEED}_checkpoint.pt.part"
    train "$m" --finish
  fi
  echo "== $m"; grep epoch "$RUNS/$m.log" | tail -n 2; tail -n 2 "$RUNS/$m.log"
done
[ -n "${OUT:-}" ] && (cd "$RUNS" && tar czf "$OUT/$NAME.tgz" --exclude checkpoint.pt .)
exit 0
