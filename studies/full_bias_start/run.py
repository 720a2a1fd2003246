"""Does NCE lead the full softmax on PTB by its loss, or by where its bias starts?

The lm table's NCE (unigram noise) starts its output bias at the unigram log-probabilities (studies/nce_bias_start),
the full softmax at 0. This trains the lm table's Full run with only `bias_init: log_prior` changed
(b_c = log of the add-one training frequencies: heads/full_softmax.py) and sets its validation perplexity after each
epoch, and its test perplexity where the run is whole, beside the kept Full (bias 0) and NCE runs of the same seed.

    python studies/full_bias_start/run.py --scale quick --check --lr 0.003 0.01 0.1   # 3 seeds x 4 lrs, 8 min
    python studies/full_bias_start/run.py --scale paper --check --epochs 5            # seed 0, 5 of 40 epochs, 35 min

(--check: first bias 0's epoch 1 retrained, which must equal the kept run's.) The lm table has since taken the
log-prior start as its row `full_prior`; this script stays the record of how the question was answered.

Runs stay in work/ (a rerun reads a whole run and resumes a paused one); the table goes to out/bias_<scale>.md.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch

from xcbench.cli import configure_logging
from xcbench.io import read_json, write_json, write_text
from xcbench.runtime import configure_process
from xcbench.study import table_experiment, train_changed

REPO = Path(__file__).resolve().parents[2]


def kept(scale: str, method: str, seed: int) -> Path:
    return REPO / "reference" / scale / "results" / scale / "xcbench" / "lm" / "ptb" / method / f"seed{seed}"


def curve(folder: Path, epochs: int) -> list[float]:
    """Validation perplexity after epochs 1..`epochs` of a run folder (its history.csv, else its checkpoint's)."""
    if (folder / "history.csv").exists():
        with open(folder / "history.csv") as f:
            rows = [r for r in csv.DictReader(f) if int(r["epoch"]) >= 1]
        return [float(r["val_ppl"]) for r in rows][:epochs]
    ck = torch.load(folder / "checkpoint.pt", weights_only=True, map_location="cpu")
    return [h["val_ppl"] for h in ck["history"] if h["epoch"] >= 1][:epochs]


def train(scale: str, bias_init: str, seed: int, epochs: int | None, work: Path, lr: float | None = None) -> Path:
    """The lm table's Full run of `seed` with `bias_init` (and `lr`, else the table's), in work/; whole (epochs None)
    or paused after `epochs`."""
    out = work / scale / (f"full_{bias_init}" + (f".lr{lr:g}" if lr is not None else "")) / f"seed{seed}"
    train_changed(table_experiment(REPO, "lm", scale), "ptb", "full", seed, out,
                  REPO / "data" / "processed" / "ptb" / "dataset.npz", stop_after=epochs, params={"bias_init": bias_init},
                  lr=lr)
    return out


def held_out_ppl(folder: Path) -> float | None:
    """The run's test perplexity (at its best validation epoch) once it is whole, else None."""
    return read_json(folder / "metrics.json")["metrics"]["ppl"] if (folder / "metrics.json").exists() else None


def table(rows: list[dict], scale: str, epochs: int) -> str:
    out = [f"# xcbench lm ({scale} scale, PTB): the full softmax's bias start against NCE's", "",
           "Validation perplexity after each epoch; test perplexity at the best validation epoch where the run is whole. "
           f"Full (bias 0) and NCE: the kept runs (reference/{scale}); Full (bias log prior): trained here, the table's "
           "run but for `bias_init: log_prior`.", "",
           "| head | seed | " + " | ".join(str(e) for e in range(1, epochs + 1)) + " | test ppl |",
           "|---|---|" + "---|" * (epochs + 1)]
    for r in rows:
        v = [f"{x:,.1f}" for x in r["val_ppl"]] + ["–"] * (epochs - len(r["val_ppl"]))
        t = f"{r['test_ppl']:.1f}" if r["test_ppl"] is not None else "–"
        out.append(f"| {r['head']} | {r['seed']} | " + " | ".join(v) + f" | {t} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="quick", choices=["quick", "paper"])
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (quick), 0 (paper)")
    p.add_argument("--epochs", type=int, default=None, help="pause each run after this many epochs (default: whole)")
    p.add_argument("--lr", type=float, nargs="+", default=None, help="also train each seed with the log prior at these "
                   "learning rates (the lm_lr grid's), each in the table")
    p.add_argument("--check", action="store_true", help="first retrain seed 0 with bias 0 for one epoch: its "
                                                        "validation perplexity must equal the kept run's")
    p.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    configure_process(1)
    configure_logging()
    seeds = a.seeds if a.seeds is not None else ([0, 1, 2] if a.scale == "quick" else [0])
    n = a.epochs or len(curve(kept(a.scale, "full", seeds[0]), 10**6))
    if a.check:
        here, theirs = curve(train(a.scale, "zero", 0, 1, a.work), 1), curve(kept(a.scale, "full", 0), 1)
        if here != theirs:
            raise SystemExit(f"--check: bias 0 gives {here} here, {theirs} in {kept(a.scale, 'full', 0)}: "
                             "this study's runs are not the table's")
        print(f"check: Full seed 0 with bias 0 retrained = the kept run ({here})", flush=True)
    rows = []
    for s in seeds:
        mine = train(a.scale, "log_prior", s, a.epochs, a.work)
        for head, folder in (("Full (bias 0)", kept(a.scale, "full", s)), ("Full (bias log prior)", mine),
                             ("NCE (bias log q)", kept(a.scale, "nce", s))):
            if folder.exists():
                rows.append({"head": head, "seed": s, "val_ppl": curve(folder, n), "test_ppl": held_out_ppl(folder)})
    for lr in a.lr or []:
        for s in seeds:
            folder = train(a.scale, "log_prior", s, a.epochs, a.work, lr)
            rows.append({"head": f"Full (bias log prior), lr {lr:g}", "seed": s, "val_ppl": curve(folder, n),
                         "test_ppl": held_out_ppl(folder)})
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / f"bias_{a.scale}.json", {"scale": a.scale, "epochs": n, "rows": rows})
    write_text(a.out / f"bias_{a.scale}.md", table(rows, a.scale, n))
    print((a.out / f"bias_{a.scale}.md").read_text(), flush=True)


if __name__ == "__main__":
    main()
