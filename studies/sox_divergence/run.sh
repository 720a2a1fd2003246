#!/bin/bash
# Train the study's SOX runs one after the other (one thread each), then tabulate them.
set -e
cd "$(dirname "$0")/../.."
for m in "$@"; do
  python -m xcbench train --experiment studies/sox_divergence/sox_40k.yaml --scale quick --dataset synthetic-faces-40k \
    --method "$m" --processed data/processed/synthetic-faces-40k/dataset.npz --out "studies/sox_divergence/out/$m" --threads 1
done
python studies/sox_divergence/tabulate.py
