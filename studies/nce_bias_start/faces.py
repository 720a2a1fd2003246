"""NCE on a balanced task: where should the bias start? Train the xcbench faces experiment's NCE head (k = 100 uniform
noise classes, its scale's settings, seed 0) with each bias start (b = 0; b_c = log q_c = -log n) at each learning
rate of the faces_lr grid, and read what the table and its grid read after the last epoch:

    val_ident_top1      identification of unseen validation identities (the grid's selection metric)
    val_top1, val_ce    closed-set top-1 and cross-entropy of the full softmax over NCE's scores
    test ident_top1     identification of the test identities (the table's metric)

With uniform noise, NCE's data posterior is sigma(s_c - log(k q_c)) = sigma(s_c - log(k / n)). From b = 0 every class
starts 4.6 nats (log(n / k) at n = 10^4, k = 100) on the data side; from b = log q every class starts 4.6 nats on the
noise side. NCE's optimum s_c(x) = log p(c | x) is near log q_c on average for balanced classes, so the second start
is nearer it; the run says whether the steps care.

    python studies/nce_bias_start/faces.py [--scale quick] [--out studies/nce_bias_start/out]
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path

import torch

from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import write_json, write_text
from xcbench.run import make_run
from xcbench.tasks.base import task_of
from xcbench.train import fit, model_of

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
READ = ("val_ident_top1", "val_top1", "val_ce", "train_ce")


def train_one(exp: dict, dataset: str, processed: Path) -> dict:
    """The faces NCE run of `exp` (seed 0) trained in a temporary folder: its last epoch's validation and its test."""
    run = make_run(exp, dataset, "nce", 0)
    task = task_of(run, dataset_entry(dataset, load_datasets()), str(processed), None, CPU)
    with tempfile.TemporaryDirectory() as d:
        res = fit(model_of(run, task), task, run.train, Path(d), 0, CPU, spec=None)
    last = res["history"][-1]
    return {**{k: last[k] for k in READ}, "test_ident_top1": res["test"]["ident_top1"],
            "test_verif_tpr": res["test"]["verif_tpr"], "test_top1": res["test"]["top1"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="quick")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    torch.set_num_threads(1)
    experiments = REPO / "config" / "experiments" / "xcbench"
    exp = resolve_experiment(load_experiment(experiments / "faces.yaml"), a.scale)
    dataset = exp["datasets"][0]
    processed = REPO / "data" / "processed" / dataset / "dataset.npz"
    grid = sorted(m["train"]["lr"] for k, m in resolve_experiment(load_experiment(experiments / "faces_lr.yaml"),
                                                                  a.scale)["methods"].items() if k.startswith("nce.lr"))
    rows = []
    for bias_init in ("zero", "log_noise"):
        for lr in grid:
            e = copy.deepcopy(exp)
            e["methods"]["nce"].setdefault("params", {})["bias_init"] = bias_init
            e["methods"]["nce"].setdefault("train", {})["lr"] = lr
            rows.append({"bias_init": bias_init, "lr": lr, **train_one(e, dataset, processed)})
            print(rows[-1], flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / f"faces_{a.scale}.json", {"scale": a.scale, "dataset": dataset, "runs": rows})
    best = {b: max((r for r in rows if r["bias_init"] == b), key=lambda r: r["val_ident_top1"])
            for b in ("zero", "log_noise")}
    lines = [f"# NCE on {dataset} ({a.scale} scale, seed 0, k = 100 uniform noise): bias start and lr, after the last "
             "epoch; * = the start's best lr by validation identification (the faces_lr rule)", "",
             "| bias start | lr | val ident top-1 | val closed-set top-1 | val CE | train CE | test ident top-1 | "
             "test verif TPR |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        star = " *" if best[r["bias_init"]] is r else ""
        lines.append(f"| {r['bias_init']} | {r['lr']:g}{star} | {r['val_ident_top1']:.3f} | {r['val_top1']:.4f} | "
                     f"{r['val_ce']:.2f} | {r['train_ce']:.2f} | {r['test_ident_top1']:.3f} | "
                     f"{r['test_verif_tpr']:.3f} |")
    write_text(a.out / f"faces_{a.scale}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
