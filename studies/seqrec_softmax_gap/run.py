"""Next item: why does every sampled softmax beat the exact one? Fewer negatives, or the head's parametrisation?

In the next-item table (`xcbench/seqrec`, SASRec) every sampled softmax (m = 100 negatives) ends above the full
softmax, whose validation NDCG@10 peaks first (claim seqrec_midx_beats_uniform's why_not); the full softmax's bias
start does not explain it (studies/full_bias_start). Two things differ between the heads:

1. The loss. For target y and m negatives c_j ~ q (uniform here, so the correction is the constant log(m/n)),
       l = -s_y + log( e^{s_y} + sum_{j=1..m} e^{s_{c_j} - log(m q_{c_j})} ),
   which tends to the full softmax's -s_y + log sum_c e^{s_c} as m grows. If the gap is the sampled loss's, test
   NDCG@10 falls towards Full's as m grows at a fixed lr.
2. The parametrisation. The full softmax scores s_c = h . w_c + b_c with w_c ~ N(0, 1/d) (heads/base.py); every
   sampled head scores s_c = h . e_c with no bias and e_c ~ N(0, 0.01^2) (heads/normalized_softmax.py). The exact
   softmax over the sampled heads' scores is `normalized_softmax` with `normalize: false`.

This trains, on this machine, three seeds of each row at each lr given (default: the table's rate for the method):
the Uniform sampled softmax at each m, the full softmax, the full softmax with the sampled heads' init (bias kept),
the exact softmax over the sampled heads' scores, and Uniform with the full softmax's init, and sets the test metric
(at the best validation epoch: the tables' reading), the best epoch and the best validation value side by side.
`--task lm` asks the same of the language-model table (`xcbench/lm`, PTB), where the order is the other way round,
and `--task xmc --dataset bibtex` of the XMC table, where the sampled heads lead too. There a third difference is the
multi-label reduction: the full softmax puts a row's other positives in each positive's denominator, a sampled head
masks them as accidental hits; row `full_masked` is the exact softmax with them masked (`other_positives: masked`).

    python studies/seqrec_softmax_gap/run.py --lr 0.003 0.03    # quick (MovieLens-100K, 822 items): 54 runs, 10 min
    python studies/seqrec_softmax_gap/run.py --scale paper --kept --m 100 --rows full full_init    # 3 runs, 1 h
    python studies/seqrec_softmax_gap/run.py --task lm --m --kept --rows full full_init uniform uniform_init
        # quick PTB: 6 runs, 8 min
    python studies/seqrec_softmax_gap/run.py --task xmc --scale paper --dataset bibtex --m --kept \
        --rows full full_masked uniform --lr 0.001 0.003 --tag masked     # 18 runs, 6 read from the kept table: 3-10 min
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xcbench.cli import configure_logging
from xcbench.io import write_json, write_text
from xcbench.run import make_run
from xcbench.runtime import configure_process
from xcbench.study import kept_metrics, mean_sd, table_experiment, train_changed

REPO = Path(__file__).resolve().parents[2]
# key -> (row label, (the table's method, head name set here or None, head params set here)); Uniform rows per m.
# init_std None is 1/sqrt(d) (heads/base.py class_weights)
ROWS = {
    "full": ("Full softmax (the table)", ("full", None, {})),
    "full_init": ("Full softmax, w ~ N(0, 0.01^2) (bias kept)", ("full", None, {"init_std": 0.01})),
    "scores": ("Exact softmax over the sampled heads' scores (no bias, e ~ N(0, 0.01^2))",
               ("full", "normalized_softmax", {"normalize": False})),
    "uniform": ("Sampled (Uniform) (the table)", ("uniform", None, {})),
    "uniform_init": ("Sampled (Uniform), e ~ N(0, 1/d)", ("uniform", None, {"init_std": None})),
    "full_masked": ("Full softmax, other positives masked (each positive against the row's negatives)",
                    ("full", None, {"other_positives": "masked"})),
}
# task -> the test metric the table reads, the validation curve, the better direction and the features file (or None)
TASKS = {"seqrec": ("ndcg@10", "val_ndcg@10", max, None), "lm": ("ppl", "val_ppl", min, None),
         "xmc": ("P@1", "val_P@1", max, "tfidf_svd256.pt")}


def train(task: str, scale: str, dataset: str, row: tuple[str, str | None, dict], lr: float, seed: int, work: Path,
          kept: bool = False) -> dict:
    """metrics.json of the table's run of the row's method with its head and params at `lr`, trained in work/ (read
    when there); with `kept`, the table's kept run (reference/<scale>) where the row is that run unchanged."""
    method, head, params = row
    exp = table_experiment(REPO, task, scale)
    run = make_run(exp, dataset, method, seed)
    if kept and head is None and params.items() <= run.head.get("params", {}).items() and lr == run.train["lr"]:
        return kept_metrics(REPO, exp, dataset, method, seed)
    name = ".".join([method, *([head] if head else []), *(f"{k}{v}" for k, v in params.items()), f"lr{lr:g}"])
    out = work / (scale if task == "seqrec" else f"{task}_{scale}") / dataset / name / f"seed{seed}"
    features = TASKS[task][3] and REPO / "data" / "features" / dataset / TASKS[task][3]
    return train_changed(exp, dataset, method, seed, out, REPO / "data" / "processed" / dataset / "dataset.npz",
                         features, head=head, params=params, lr=lr)


def summary(task: str, ms: list[dict]) -> dict:
    metric, curve, best, _ = TASKS[task]
    return {"test": [r["metrics"][metric] for r in ms], "best_epoch": [r["best_epoch"] for r in ms],
            "val_best": [best(r["curves"][curve]) for r in ms]}


def table(task: str, scale: str, dataset: str, n_classes: int, rows: list[dict]) -> str:
    metric, curve, best, _ = TASKS[task]
    digits = 4 if best is max else 1
    out = [f"# xcbench {task} ({scale} scale, {dataset}, {n_classes} classes): the sampled softmax against the exact "
           "one, three seeds, this machine", "",
           f"Test {metric} as the table reads it (seqrec, lm: at the epoch of best validation {metric}; xmc: after the "
           "last epoch), mean +- sd over the seeds. "
           "Uniform: log-q corrected negatives drawn with replacement, accidental hits masked, the sampled heads' "
           "scores h . e_c.", "",
           f"| head | m | lr | test {metric} | best epoch | {curve} best |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['head']} | {r['m']} | {r['lr']:g} | {mean_sd(r['test'], digits)} | "
                   f"{mean_sd(r['best_epoch'], 1)} | {mean_sd(r['val_best'], digits)} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), default="seqrec")
    p.add_argument("--scale", choices=["quick", "paper"], default="quick")
    p.add_argument("--dataset", help="default: the table's first at the scale")
    p.add_argument("--m", type=int, nargs="*", default=[10, 30, 100, 300, 1000], help="Uniform's m (none: no rows)")
    p.add_argument("--rows", nargs="*", choices=sorted(ROWS), default=["full", "full_init", "scores", "uniform_init"],
                   help="the other rows")
    p.add_argument("--kept", action="store_true", help="read the rows that are the table's runs unchanged from its "
                   "kept runs (reference/<scale>; their CPU: the table's caption) instead of training them")
    p.add_argument("--lr", type=float, nargs="+", default=None, help="every row at each (default: each row at the "
                   "table's rate for its method)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    p.add_argument("--tag", help="a suffix of the output files' name (gap_<task>_<dataset>_<scale>_<tag>)")
    a = p.parse_args()
    configure_process(1)
    configure_logging()
    exp = table_experiment(REPO, a.task, a.scale)
    dataset = a.dataset or exp["datasets"][0]
    rows, n_classes = [], None
    for given in a.lr or [None]:
        labelled = [("Sampled (Uniform)", str(m), ("uniform", None, {"m": m})) for m in a.m]
        labelled += [(ROWS[k][0], "100" if ROWS[k][1][0] == "uniform" else "all", ROWS[k][1]) for k in a.rows]
        for label, m, row in labelled:
            lr = given or make_run(exp, dataset, row[0], 0).train["lr"]              # None: the table's for the method
            ms = [train(a.task, a.scale, dataset, row, lr, s, a.work, a.kept) for s in a.seeds]
            n_classes = ms[0]["n_classes"]
            rows.append({"head": label, "m": m, "lr": lr, **summary(a.task, ms)})
    md = table(a.task, a.scale, dataset, n_classes, rows)
    name = "_".join(["gap", *([a.task] if a.task != "seqrec" else []), *([a.dataset] if a.dataset else []), a.scale,
                     *([a.tag] if a.tag else [])])
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / f"{name}.json", rows)
    write_text(a.out / f"{name}.md", md)
    print(md, flush=True)


if __name__ == "__main__":
    main()
