#!/bin/bash
# Paper-scale runs of one experiment on a lent GPU (15-minute leases, a bare machine each time): the
# METHODS run side by side on the one GPU for at most $LIMIT seconds; a run the limit cuts is ended with
# --finish (its selected epoch tested, marked cut). Results in $RUNS/<method>/seed<SEED>, packed into
# $OUT/$NAME.tgz (checkpoints left out); the checkpoint of a cut run goes back beside it in 15 MiB parts when it
# is at most 90 MiB (an 87K-class faces run's, weights and Adam's moments, is 341 MiB: it stays there)
# (cat <method>_seed<S>_checkpoint.pt.part* > results/.../<method>/seed<S>/checkpoint.pt, then `xcbench
# train` with that --out continues it). SEED: one of the file's `seeds:` or of a view of it (table2_seeds adds
# seeds 1 and 2 to fig2's runs). STOP_AFTER=N: stop each run after epoch N (`xcbench train --stop-after`), then --finish
# (a budgeted run: one epoch of a 30-epoch setting, as the kept CPU runs). READ_AHEAD: threads generating lazy face
# batches ahead (`xcbench train --read-ahead`). CKPT_MIN=m: checkpoint inside an epoch every m minutes (`xcbench train
# --checkpoint-minutes`), so a run cut inside its first epoch returns its progress; FINISH_CUT=0: return a cut run's
# checkpoint without ending it (to go on elsewhere, e.g. one CPU core: its epoch was not done).
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
    ${CKPT_MIN:+--checkpoint-minutes $CKPT_MIN} \
    --out "$RUNS/$1/seed$SEED" "${@:2}" >> "$RUNS/$1.log" 2>&1
}
mkdir -p "$RUNS"
for m in $METHODS; do (TMO=$LIMIT train "$m"; echo $? > "$RUNS/$m.rc") & done
wait
for m in $METHODS; do
  ck="$RUNS/$m/seed$SEED/checkpoint.pt"
  if [ ! -f "$RUNS/$m/seed$SEED/metrics.json" ]; then
    case $(cat "$RUNS/$m.rc") in
      124|137)  # cut by the limit: its checkpoint back in parts while they fit the lease's 8 files of $OUT
        if [ -n "${OUT:-}" ] && [ -f "$ck" ]; then
          if [ "$(stat -c %s "$ck")" -le $((90 * 1024 * 1024)) ]; then split -b 15m -d "$ck" "$OUT/${m}_seed${SEED}_checkpoint.pt.part"
          else echo "$m: checkpoint of $(($(stat -c %s "$ck") >> 20)) MiB is too large to come back (6 parts of 15 MiB at most)"; fi
        fi
        [ "${FINISH_CUT:-1}" = 1 ] && train "$m" --finish ;;
      *) train "$m" --finish ;;  # stopped by STOP_AFTER (a budgeted run): end it here
    esac
  fi
  echo "== $m"; grep epoch "$RUNS/$m.log" | tail -n 2; tail -n 2 "$RUNS/$m.log"
done
[ -n "${OUT:-}" ] && (cd "$RUNS" && tar czf "$OUT/$NAME.tgz" --exclude checkpoint.pt .)
exit 0
