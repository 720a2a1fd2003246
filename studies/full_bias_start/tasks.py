"""The same question on XMC and next-item recommendation: does the full softmax trail because its bias starts at 0?

Two tables of the output-layer benchmark have the exact softmax below a cheaper head at the paper setting:
- XMC (`xcbench/xmc`): OvA BCE above the full softmax on Bibtex and Delicious (test P@1 0.659 against 0.652, 0.661
  against 0.643, three seeds; claim xmc_softmax_above_ova_bce), the softmax learning slower on Bibtex.
- next item (`xcbench/seqrec`, SASRec on Amazon Sports): every sampled softmax above it (Uniform's test NDCG@10 0.0253
  against 0.0218, three seeds; claim seqrec_midx_beats_uniform's why_not), Full's validation peaking first (epochs 9-12).

This trains, on this machine, the table's Full runs with bias 0 and with `bias_init: log_prior` (b_c = log of the
add-one count of class c over the training targets), each at the table's lr for that head and dataset (`--lr`: the
log-prior start at other rates too), three seeds, beside the head that beats it: XMC's BCE trained here, next item's
Uniform read from the table's kept runs. It sets them side by side: XMC's test P@1 / P@5 after the last epoch (the
table's reading) and validation P@1 after epoch 5; next item's test NDCG@10 / Recall@10 at the best validation epoch
(the table's reading), that epoch and the validation peak. The Full runs are trained here, not read from the kept
runs, which may have run on another CPU model (AMD EPYC; float sums differ in the last bits).

    python studies/full_bias_start/tasks.py --task xmc       # 18 runs of 5-30 s on one thread
    python studies/full_bias_start/tasks.py --task seqrec    # 6 runs of 15-30 min on one thread (Uniform: kept runs)
    python studies/full_bias_start/tasks.py --task seqrec --scale quick --lr 0.003 0.01 0.1    # 12 runs, 2 min

(data: snakemake --cores 1 data/features/bibtex/tfidf_svd256.pt data/features/delicious/tfidf_svd256.pt
 data/processed/seqrec-sports/dataset.npz)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xcbench.cli import configure_logging
from xcbench.io import write_json, write_text
from xcbench.runtime import configure_process
from xcbench.study import kept_metrics, mean_sd, table_experiment, train_changed

REPO = Path(__file__).resolve().parents[2]
FULL = {"Full (bias 0)": ("full", {}), "Full (bias log prior)": ("full", {"bias_init": "log_prior"})}
# task -> the paper setting's datasets, features file (None: none), row label -> (method, head params set here),
# row label -> method read from the table's kept runs (reference/; not retrained: 40 epochs of Uniform are 4 h of the
# study's 5), and the columns: header -> (read from metrics.json, digits)
TASKS = {
    "xmc": {"datasets": ["bibtex", "delicious"], "features": "tfidf_svd256.pt",
            "variants": {**FULL, "OvA BCE": ("bce", {})},
            "reading": "test P@1 and P@5 after the last epoch (the table's reading), validation P@1 after epoch 5",
            "columns": {"test P@1": (lambda m: m["metrics"]["P@1"], 4), "test P@5": (lambda m: m["metrics"]["P@5"], 4),
                        "val P@1 after epoch 5": (lambda m: m["curves"]["val_P@1"][m["curves"]["epoch"].index(5)], 4)}},
    "seqrec": {"datasets": ["seqrec-sports"], "features": None, "variants": FULL,
               "kept": {"Sampled (Uniform), the table's kept runs": "uniform"},
               "reading": "test NDCG@10 and Recall@10 at the epoch of best validation NDCG@10 (the table's reading), "
                          "that epoch and the validation peak",
               "columns": {"test NDCG@10": (lambda m: m["metrics"]["ndcg@10"], 4),
                           "test Recall@10": (lambda m: m["metrics"]["recall@10"], 4),
                           "best epoch": (lambda m: m["best_epoch"], 1),
                           "val NDCG@10 peak": (lambda m: max(m["curves"]["val_ndcg@10"]), 4)}},
}


def train(task: str, scale: str, dataset: str, label: str, seed: int, work: Path, lr: float | None = None) -> dict:
    """metrics.json of the table's run of the variant's method with its params (and `lr`, else the table's), trained
    in work/ (read when there)."""
    method, params = TASKS[task]["variants"][label]
    out = (work / (task if scale == "paper" else f"{task}_{scale}") / dataset
           / (label.replace(" ", "_").replace("(", "").replace(")", "") + (f".lr{lr:g}" if lr else "")) / f"seed{seed}")
    features = TASKS[task]["features"] and REPO / "data" / "features" / dataset / TASKS[task]["features"]
    return train_changed(table_experiment(REPO, task, scale), dataset, method, seed, out,
                         REPO / "data" / "processed" / dataset / "dataset.npz", features, params=params, lr=lr)


def table(task: str, scale: str, result: dict) -> str:
    cols = list(TASKS[task]["columns"])
    setting = "paper setting" if scale == "paper" else f"{scale} scale"
    out = [f"# xcbench {task} ({setting}): the full softmax's bias start against the head above it, three seeds, "
           "this machine", "",
           f"{TASKS[task]['reading'][0].upper()}{TASKS[task]['reading'][1:]}; mean +- sd over the seeds; every run "
           "trained here at the table's lr for its head and dataset, except the rows of kept runs (their CPU: the "
           "table's caption).", "",
           "| dataset | head | lr | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    for dataset, rows in result.items():
        for label, r in rows.items():
            cells = [mean_sd(r[c], digits) for c, (_, digits) in TASKS[task]["columns"].items()]
            out.append(f"| {dataset} | {label} | {r['lr']:g} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), default="xmc")
    p.add_argument("--scale", choices=["quick", "paper"], default="paper")
    p.add_argument("--datasets", nargs="+", help="default: the task's at the paper setting, the table's at another")
    p.add_argument("--variants", nargs="+", help="row labels to train (default: all); the table needs all")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--lr", type=float, nargs="+", default=[], help="also train the log-prior start at these learning "
                   "rates (a start nearer the answer may want another rate), each a row")
    p.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    configure_process(1)
    configure_logging()
    t = TASKS[a.task]
    result = {}
    datasets = a.datasets or (t["datasets"] if a.scale == "paper" else table_experiment(REPO, a.task, a.scale)["datasets"])
    for d in datasets:
        result[d] = {}
        rows = [(label, label, None) for label in a.variants or t["variants"]]
        rows += [(f"Full (bias log prior), lr {lr:g}", "Full (bias log prior)", lr) for lr in a.lr]
        rows += [(row, None, None) for row in t.get("kept", {}) if not a.variants]
        for row, label, lr in rows:
            ms = [train(a.task, a.scale, d, label, s, a.work, lr) if label
                  else kept_metrics(REPO, table_experiment(REPO, a.task, a.scale), d, t["kept"][row], s)
                  for s in a.seeds]
            result[d][row] = {c: [f(m) for m in ms] for c, (f, _) in t["columns"].items()}
            result[d][row]["lr"] = ms[0]["curves"]["lr"][-1]
    if a.variants:
        return
    a.out.mkdir(parents=True, exist_ok=True)
    name = f"bias_{a.task}_{a.scale}"
    write_json(a.out / f"{name}.json", result)
    write_text(a.out / f"{name}.md", table(a.task, a.scale, result))
    print((a.out / f"{name}.md").read_text(), flush=True)


if __name__ == "__main__":
    main()
