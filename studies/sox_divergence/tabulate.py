"""Tabulate the study's SOX runs (out/<method>/history.csv) into out/sox_divergence.md: per run, SOX's
moving-average weight gamma_t (optim/duals.py's SOX schedule: gamma + (1 - gamma)(1 + cos(pi t/T))/2), the
W learning rate, the SOX objective (train_loss: mean of exp(R - nu) over the batch's negatives), the full
training cross-entropy, validation top-1 and the largest score-minus-nu gap of an epoch's batches."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from xcbench.io import write_text
from xcbench.optim.duals import SOX

OUT = Path(__file__).parent / "out"
SHOWN = [1, 10, 20, 30, 40, 44, 45, 46, 47, 48, 49, 50]


def gamma(t: int, epochs: int, end: float) -> float:
    """SOX's moving-average weight in epoch t of `epochs`, as the training run set it."""
    sox = SOX(gamma=end)
    sox.set_progress(t, epochs)
    return sox.gamma


def table(run: Path) -> list[str]:
    rows = {int(r["epoch"]): r for r in csv.DictReader(open(run / "history.csv"))}
    cfg = yaml.safe_load(open(run / "config.resolved.yaml"))
    end, epochs = float(cfg["head_params"]["dual_params"]["gamma"]), int(cfg["train"]["epochs"])
    lines = [f"### {run.name} ({max(rows)} of {epochs} epochs; gamma from 1 to {end:g})", "",
             "| epoch | gamma | W lr | SOX objective | train CE | val top-1 | largest gap |", "|---|---|---|---|---|---|---|"]
    for t in (t for t in SHOWN if t in rows):
        r = rows[t]
        lines.append(f"| {t} | {gamma(t, epochs, end):.2e} | {float(r['lr']):.4f} | {float(r['train_loss']):.4g} | "
                     f"{float(r['train_ce']):.4g} | {float(r['val_top1']):.4f} | {float(r['train_loss_nu_gap_max']):.2f} |")
    return lines + [""]


def main() -> None:
    runs = sorted(p for p in OUT.iterdir() if (p / "history.csv").exists())
    text = ["# SOX to the end of its gamma schedule, 40K identities (studies/sox_divergence)", ""]
    for run in runs:
        text += table(run)
    write_text(OUT / "sox_divergence.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
