#!/bin/bash
# Copy a training run's checkpoint.pt to DEST/ckptNNN.pt each time the run rewrites it (after every epoch), until the
# run writes its metrics.json. Start it beside the run:  nohup studies/midx_kl_drift/watch.sh RUN_DIR DEST &
run=$1; dest=$2; mkdir -p "$dest"; last=""; i=0
while true; do
  f=$run/checkpoint.pt
  if [ -f "$f" ]; then
    t=$(stat -c %Y "$f")
    if [ "$t" != "$last" ]; then sleep 5; i=$((i + 1)); cp "$f" "$dest/ckpt$(printf %03d $i).pt"; last=$(stat -c %Y "$f"); fi
  fi
  [ -f "$run/metrics.json" ] && exit 0
  sleep 15
done
