"""Does GRU4Rec leave the popularity plateau on Amazon Sports (MIDX Table 7, paper settings) under another
initialisation of its GRU? Trains `gru_uniform` of config/experiments/midx/table7.yaml for a few epochs, as
`xcbench train` builds it, once with the package's init (every GRU matrix ~ N(0, 0.02)) and once with the GRU's
matrices redrawn from torch's own default law, U(-1/sqrt(d), 1/sqrt(d)), from the run's generator, and prints
the training loss and validation NDCG@10 per epoch (one thread, CPU).

    python studies/gru4rec_plateau/probe.py --epochs 10   # -> studies/gru4rec_plateau/out/probe.{json,md}
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def torch_default_gru_(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Redraw every GRU weight and bias from U(-1/sqrt(hidden), 1/sqrt(hidden)) (nn.GRU's own init law)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.GRU):
                bound = 1.0 / math.sqrt(m.hidden_size)
                for p in m.parameters():
                    p.uniform_(-bound, bound, generator=gen)


def sports_task() -> tuple[dict, object]:
    """MIDX Table 7 at the paper scale and its Sports task, built once for every variant."""
    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.tasks.base import make_task

    exp = resolve_experiment(load_experiment(REPO / "config/experiments/midx/table7.yaml"), "paper")
    task = make_task(exp, dataset_entry("seqrec-sports", load_datasets()),
                     REPO / "data/processed/seqrec-sports/dataset.npz", None, torch.device("cpu"), 0,
                     dataset="seqrec-sports")
    return exp, task


def run(exp: dict, task, init: str, epochs: int, method: str, lr: float | None = None) -> list[dict]:
    from built import build

    from xcbench.seed import torch_generator
    from xcbench.step import evaluate_splits, train_step

    torch.manual_seed(0)
    _, cfg, model, opt = build(exp, task, "seqrec-sports", method, torch.device("cpu"))
    for group in opt.param_groups if lr else ():
        group["lr"] = lr
    if init == "torch_default":
        torch_default_gru_(model, torch_generator(0, "gru_init"))
    loss_gen, bs = torch_generator(0, "loss"), int(cfg["batch_size"])
    rows, gen, step = [], torch_generator(0, "batches"), 0
    for epoch in range(1, epochs + 1):
        model.head.on_epoch_start(epoch - 1, torch_generator(0, "index"))
        model.train()
        total, count, t0 = 0.0, 0, time.perf_counter()
        for x, y, idx in task.train_batches(bs, gen):
            total += train_step(model, opt, x, y, idx, loss_gen, step, cfg.get("grad_clip")).item() * x.shape[0]
            count, step = count + x.shape[0], step + 1
        model.eval()
        with torch.no_grad():
            ev = evaluate_splits(model, task)
        rows.append({"init": init, "lr": lr or cfg["lr"], "epoch": epoch, "train_loss": total / count, "val_ndcg@10": ev["val_ndcg@10"],
                     "epoch_s": time.perf_counter() - t0})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--method", default="gru_uniform")
    p.add_argument("--lr", type=float, default=None, help="Adam's lr instead of the experiment's 1e-3 (a third run, "
                   "package init)")
    a = p.parse_args()
    from common import write_outputs

    from xcbench.runtime import configure_process

    configure_process(1)
    exp, task = sports_task()
    rows = [r for init in ("package", "torch_default") for r in run(exp, task, init, a.epochs, a.method)]
    if a.lr:
        rows += run(exp, task, "package", a.epochs, a.method, a.lr)
    md = [f"# GRU4Rec on Amazon Sports ({a.method}, MIDX Table 7 paper settings): training loss and validation NDCG@10 "
          "per epoch under two GRU initialisations", "", "| epoch | loss, N(0, 0.02) | NDCG@10, N(0, 0.02) | "
          "loss, U(+-1/sqrt(d)) | NDCG@10, U(+-1/sqrt(d)) |" + (f" loss, lr {a.lr:g} | NDCG@10, lr {a.lr:g} |" if a.lr else ""),
          "|---|---|---|---|---|" + ("---|---|" if a.lr else "")]
    by = {(r["init"], r["lr"] == a.lr, r["epoch"]): r for r in rows}
    for e in range(1, a.epochs + 1):
        cells = [by[k] for k in (("package", False, e), ("torch_default", False, e), ("package", True, e)) if k in by]
        md.append(f"| {e} | " + " | ".join(f"{r['train_loss']:.3f} | {r['val_ndcg@10']:.4f}" for r in cells) + " |")
    for path in write_outputs("probe", rows, "\n".join(md), HERE / "out"):
        print("wrote", path)


if __name__ == "__main__":
    main()
