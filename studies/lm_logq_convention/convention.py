"""Does the log-q convention set the sampled heads' gap to the full softmax in the xcbench lm table?

Until 2026-12-06 the lm table trained every sampled head with the head's default convention, `correct: negatives`
(RF-softmax eq. 5); for target t and m draws s_j from q,

    negatives:  loss = -log softmax([o_t,                 o_s_j - log(m q(s_j))])_0
    both:       loss = -log softmax([o_t - log(m q(t)),   o_s_j - log(m q(s_j))])_0     (the MIDX reference's loss)

(heads/sampled_softmax.py). MIDX Table 4 trains with `both`, and studies/midx_table4 measured that Uniform under
`negatives` diverges there (validation 134,404 after one epoch of SGD); in the lm table Uniform ended at 1,868 and
every sampled head 1.3-1.7x above Full. This study trains the lm table's run of a sampled head (its spec: dataset,
seed, model, optimiser, lr, windows) under `both` for its first epochs (`--stop-after`) and sets each epoch's
validation perplexity beside the kept `negatives` run's, the same seed (out/negatives/, copies of the table's runs
before it moved the head to `both`, else reference/<scale>). `--check HEAD` first trains HEAD one epoch under
`negatives` and requires it to equal the kept run's epoch 1 to the last digit: the study's run is the table's. After
the last epoch of each `both` run it measures the softmax's mass on the rarest 90% of the vocabulary on the
validation split against how often the next word is one of them (studies/selective_lm_mass), the mispricing
studies/midx_kl_drift found under `negatives`.

    python studies/lm_logq_convention/convention.py --scale quick --epochs 3 --check midx_rq      # 1 min
    python studies/lm_logq_convention/convention.py --epochs 5 --check unigram
        # paper scale: 2-5 min an epoch on one thread by load; a cut run resumes from work/
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
from pathlib import Path

import torch

from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.checkpoint import StopAfter
from xcbench.cli import configure_logging
from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import read_json, write_json, write_text
from xcbench.run import make_run
from xcbench.tasks.base import task_of
from xcbench.train import FitOptions, fit, model_of

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
_spec = importlib.util.spec_from_file_location("mass", REPO / "studies" / "selective_lm_mass" / "mass.py")
mass = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mass)


def kept(scale: str, method: str, seed: int) -> Path:
    """The kept `negatives` run of the lm table at `scale`: its copy in out/negatives/ for a head the table has
    trained under `both` since (history.csv, metrics.json, config.resolved.yaml), else reference/<scale>'s."""
    copy = Path(__file__).parent / "out" / "negatives" / scale / method / f"seed{seed}"
    return copy if copy.exists() else REPO / "reference" / scale / "results" / scale / "xcbench" / "lm" / "ptb" / method / f"seed{seed}"


def kept_history(scale: str, method: str, seed: int) -> list[dict]:
    """The kept run's history.csv rows (epoch 1 on), numbers as floats."""
    with open(kept(scale, method, seed) / "history.csv") as f:
        rows = [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]
    return [r for r in rows if r["epoch"] >= 1]


def train(scale: str, method: str, correct: str, epochs: int, seed: int, processed: Path,
          work: Path) -> tuple[list[dict], object, object]:
    """(history from epoch 1, model at the last epoch trained, task): the lm table's run of `method` under
    `correct`, paused after `epochs` epochs (`--stop-after`) in work/<scale>/<method>_<correct>_seed<seed>/ and
    resumed from there when cut. Its spec is the table's run's (its epochs too), so where the table trains the head
    under `correct`, that checkpoint is the table's run's after `epochs` epochs."""
    exp = resolve_experiment(load_experiment(REPO / "config" / "experiments" / "xcbench" / "lm.yaml"), scale)
    run = make_run(exp, "ptb", method, seed)
    run.head["params"]["correct"] = correct                                   # the spec's head_params too
    task = task_of(run, dataset_entry("ptb", load_datasets()), str(processed), None, CPU)
    model, folder = model_of(run, task), work / scale / f"{method}_{correct}_seed{seed}"
    try:
        fit(model, task, run.train, folder, run.seed, CPU, FitOptions(stop_after=epochs), spec=run.spec)
    except StopAfter:
        pass
    ck = torch.load(folder / "checkpoint.pt", weights_only=True, map_location="cpu")
    model.load_state_dict(ck["model"])
    return [h for h in ck["history"] if h["epoch"] >= 1][:epochs], model, task


def table(rows: list[dict], epochs: int, scale: str, seed: int) -> str:
    head = " | ".join(f"{e}" for e in range(1, epochs + 1))
    out = [f"# xcbench lm ({scale} scale, PTB, seed {seed}): validation perplexity after each epoch by log-q convention", "",
           f"negatives: the kept lm-table run (out/negatives/ or reference/{scale}); both: trained here, the table's run "
           "under `correct: both` (the same settings but the convention, and the lr where the table's grid picked another "
           "one for it). "
           "Mass on the rarest 90% of the words (by training count) against how often they come next: the validation "
           "split, after the `both` run's last epoch here.", "",
           f"| head | convention | lr | {head} | val acc (last) | rare mass / freq |", "|---|---|---|" + "---|" * epochs + "---|---|"]
    for r in rows:
        v = [f"{x:,.1f}" for x in r["val_ppl"]] + ["–"] * (epochs - len(r["val_ppl"]))
        m = f"{r['mass_rare']:.3f} / {r['freq_rare']:.3f}" if "mass_rare" in r else "–"
        lr = f"{r['lr']:g}" if "lr" in r else "–"
        out.append(f"| {r['method']} | {r['correct']} | {lr} | {' | '.join(v)} | {r['val_acc'][-1]:.4f} | {m} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=["uniform", "unigram", "midx_pq", "midx_rq"])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", default="paper", help="quick | paper: the lm table's scale (its kept runs in reference/)")
    p.add_argument("--check", default=None, help="first train this head one epoch under `negatives`: it must equal the "
                                                 "kept run's epoch 1")
    p.add_argument("--render-only", action="store_true", help="rewrite out/'s table from its JSON (and the kept "
                   "Full run's history), training nothing")
    p.add_argument("--processed", type=Path, default=REPO / "data" / "processed" / "ptb" / "dataset.npz")
    p.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    torch.set_num_threads(1)
    configure_logging()                                                       # the runs' progress lines
    a.out.mkdir(parents=True, exist_ok=True)
    saved, md = a.out / f"convention_{a.scale}.json", a.out / f"convention_{a.scale}.md"
    result = read_json(saved) if saved.exists() else {"check": None, "rows": []}
    if a.check:
        hist, _, _ = train(a.scale, a.check, "negatives", 1, a.seed, a.processed, a.work)
        mine, theirs = hist[0]["val_ppl"], kept_history(a.scale, a.check, a.seed)[0]["val_ppl"]
        result["check"] = {"method": a.check, "epoch1_val_ppl_here": mine, "epoch1_val_ppl_kept": theirs}
        if mine != theirs:
            raise SystemExit(f"--check {a.check}: epoch 1 gives validation perplexity {mine!r} here, {theirs!r} in the "
                             f"kept run {kept(a.scale, a.check, a.seed)}: this study's run is not the table's")
        print(f"check: {a.check} epoch 1 under negatives = kept run's ({mine})", flush=True)
    rows = {(r["method"], r["correct"]): r for r in result["rows"]}
    h = kept_history(a.scale, "full", a.seed)[: a.epochs]                      # the yardstick: the full softmax
    rows[("full", "–")] = {"method": "full", "correct": "–", "val_ppl": [r["val_ppl"] for r in h],
                           "val_acc": [r["val_acc"] for r in h], "lr": h[0]["lr"]}
    for method in sorted({m for m, _ in rows if m != "full"} | set(a.methods)):              # the kept runs
        h = kept_history(a.scale, method, a.seed)[: a.epochs]
        rows[(method, "negatives")] = {"method": method, "correct": "negatives", "val_ppl": [r["val_ppl"] for r in h],
                                       "val_acc": [r["val_acc"] for r in h], "lr": h[0]["lr"]}

    def save() -> None:                                                        # the JSON and its table, rows in order
        result["rows"] = sorted(rows.values(), key=lambda r: (r["method"] != "full", r["method"], r["correct"] == "both"))
        write_json(saved, result)
        write_text(md, table(result["rows"], a.epochs, a.scale, a.seed))

    if a.render_only:
        save()
        return
    count = None
    for method in a.methods:
        hist, model, task = train(a.scale, method, "both", a.epochs, a.seed, a.processed, a.work)
        if count is None:
            count = torch.bincount(task.tokens["train"].long(), minlength=task.n_classes)       # (n,)
        rare = count.argsort()[: int(0.9 * task.n_classes)]                                    # the rarest 90%
        val = mass.measure(model, task, rare, torch.zeros(task.n_classes), 1)  # the last epoch's weights
        rows[(method, "both")] = {"method": method, "correct": "both", "val_ppl": [r["val_ppl"] for r in hist],
                                  "lr": hist[0]["lr"],
                                  "val_acc": [r["val_acc"] for r in hist], "mass_rare": val["mass_rare"],
                                  "freq_rare": val["freq_rare"], "last_val_ppl_remeasured": val["ppl"]}
        save()
        print(md.read_text(), flush=True)


if __name__ == "__main__":
    main()
