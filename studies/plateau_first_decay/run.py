"""Does the plateau rule's first lr decay, not the sampler's setting, order MIDX's LSTM runs on PTB?

Reads the kept paper-scale runs (reference/paper) of MIDX Table 4's LSTM recipe (SGD lr 20, the lr
divided by 4 after `patience` epochs without a gain of 0.1 in validation perplexity): Table 4, its
second seeds, Table 5 and Figure 3(b). For each run: the epoch of the first decay, the best validation
perplexity before any run decayed (a common window), and the test perplexity at the selected epoch.
Writes out/first_decay.md and out/first_decay.json. Torch-free; reads only the reference tree.

    python studies/plateau_first_decay/run.py
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "reference/paper/results/paper/midx"
OUT = Path(__file__).resolve().parent / "out"
# (artifact, method) -> (sampler family, K); K = 32 is Table 4's and Table 5's setting
GROUPS = {("table4", "lstm_midx_pq"): ("MIDX-pq", 32), ("table4", "lstm_midx_rq"): ("MIDX-rq", 32),
          ("table4_seeds", "lstm_midx_pq"): ("MIDX-pq", 32), ("table4_seeds", "lstm_midx_rq"): ("MIDX-rq", 32),
          ("table5", "midx_learn_pq"): ("MIDX-Learn-pq", 32), ("table5", "midx_learn_rq"): ("MIDX-Learn-rq", 32)}
FAMILY = {"pq": "MIDX-pq", "rq": "MIDX-rq", "learn_pq": "MIDX-Learn-pq", "learn_rq": "MIDX-Learn-rq"}


def runs() -> list[tuple[str, str, int, Path]]:
    """(family, label, K, run dir) of every kept run in the groups above and Figure 3(b)."""
    found = []
    for (art, meth), (fam, K) in GROUPS.items():
        for d in sorted((RUNS / art / "ptb" / meth).glob("seed*")):
            found.append((fam, f"{art}/{meth}/{d.name}", K, d))
    for d in sorted((RUNS / "fig3b" / "ptb").glob("*_K*/seed*")):
        stem, K = d.parent.name.rsplit("_K", 1)
        found.append((FAMILY[stem], f"fig3b/{d.parent.name}/{d.name}", int(K), d))
    return found


def epochs(d: Path) -> list[dict]:
    """A run's trained epochs (history.csv without its epoch-0 evaluation)."""
    return [r for r in csv.DictReader(open(d / "history.csv")) if int(r["epoch"]) >= 1]


def first_decay(rows: list[dict]) -> int:
    """The first epoch trained below the starting lr (a run that never cut it: the epoch after its last)."""
    return next((int(r["epoch"]) for r in rows if float(r["lr"]) < float(rows[0]["lr"])), int(rows[-1]["epoch"]) + 1)


def summary(d: Path, rows: list[dict], window: int) -> dict:
    """First decay epoch, best validation ppl in epochs 1..window, selected and test ppl of one run."""
    lr0 = float(rows[0]["lr"])
    m = json.load(open(d / "metrics.json"))
    pre = min(float(r["val_ppl"]) for r in rows if int(r["epoch"]) <= window)
    at_lr0 = [float(r["val_ppl"]) for r in rows if float(r["lr"]) == lr0]
    rise = max(b - a for a, b in zip(at_lr0[7:], at_lr0[8:]))   # largest epoch-on-epoch rise from epoch 9 at lr0
    return {"first_decay": first_decay(rows), "pre_decay_best_val": pre, "largest_rise_at_lr0": rise,
            "best_epoch": m["best_epoch"], "val_ppl": m["best"]["val_ppl"], "test_ppl": m["metrics"]["ppl"],
            "epochs": m["epochs"]}


def main() -> int:
    found = runs()
    if not found:
        sys.exit(f"no kept runs under {RUNS}: check out the reference tree (git checkout reference/)")
    history = [epochs(d) for *_, d in found]
    window = min(map(first_decay, history)) - 1                  # epochs every run trained at lr 20
    table = [{"family": f, "run": lab, "K": K, **summary(d, rows, window)}
             for (f, lab, K, d), rows in zip(found, history)]
    table.sort(key=lambda r: (r["family"], r["K"], r["run"]))
    fd = np.array([r["first_decay"] for r in table])
    te = np.array([r["test_ppl"] for r in table])
    pre = np.array([r["pre_decay_best_val"] for r in table])
    lk = np.log2([r["K"] for r in table])
    stats = {"window": window, "n_runs": len(table),
             "spearman_test_vs_first_decay": float(spearmanr(fd, te)[0]),
             "spearman_test_vs_pre_decay_val": float(spearmanr(pre, te)[0]),
             "spearman_test_vs_log2K": float(spearmanr(lk, te)[0])}
    X = np.column_stack([np.ones_like(lk), lk, fd])              # test ppl ~ a + b log2 K + c first decay
    coef, *_ = np.linalg.lstsq(X, te, rcond=None)
    for r, fit in zip(table, X @ coef):
        r["ols_residual"] = float(r["test_ppl"] - fit)
    stats["ols_test_ppl"] = {"intercept": float(coef[0]), "per_doubling_K": float(coef[1]),
                             "per_epoch_later_decay": float(coef[2])}
    OUT.mkdir(exist_ok=True)
    tmp = OUT / "first_decay.json.tmp"
    tmp.write_text(json.dumps({"stats": stats, "runs": table}, indent=1))
    os.replace(tmp, OUT / "first_decay.json")
    lines = ["| sampler | K | run | first lr decay (epoch) | best val ppl, epochs 1-%d | largest val rise at lr 20 "
             "(from epoch 9) | selected epoch | val ppl | test ppl | residual of the fit below |" % window,
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['family']} | {r['K']} | {r['run']} | {r['first_decay']} | {r['pre_decay_best_val']:.1f} | "
              f"{r['largest_rise_at_lr0']:.1f} | {r['best_epoch']} | {r['val_ppl']:.1f} | {r['test_ppl']:.1f} | {r['ols_residual']:+.1f} |"
              for r in table]
    s, o = stats, stats["ols_test_ppl"]
    lines += ["", f"{s['n_runs']} runs. Spearman rho of test ppl against: the first decay's epoch "
              f"{s['spearman_test_vs_first_decay']:.2f}, the best validation ppl of epochs 1-{window} "
              f"{s['spearman_test_vs_pre_decay_val']:.2f}, log2 K {s['spearman_test_vs_log2K']:.2f}.",
              f"Least squares: test ppl = {o['intercept']:.1f} {o['per_doubling_K']:+.2f} log2 K "
              f"{o['per_epoch_later_decay']:+.2f} x (first decay epoch)."]
    tmp = OUT / "first_decay.md.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, OUT / "first_decay.md")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
