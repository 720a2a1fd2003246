"""Does Table 4's paper-setting optimiser train the Transformer?

Table 4's paper setting trains every model with the PyTorch word-language-model recipe (SGD on the
mean token loss, lr 20, batch 20, global norm clipped to 0.25), measured for the LSTM
(benchmarks/midx_protocols.py). This script runs the paper scale's Transformer (2 layers, 4 heads,
feed-forward 1,024, embedding 200, dropout 0.5) on PTB under that recipe at several learning rates,
each at a constant rate for a few epochs, with the Table 4 loss (`correct: both`) and zero-state
evaluation windows, and writes the validation perplexity after every epoch:

    val PPL = exp( (1/N) sum_t -log softmax(h_t C^T)_{w_{t+1}} )   (full softmax, every sampler)

A learning rate whose curve jumps back up (or diverges) does not train this model; the table says
which rates do. About 4 CPU-minutes per epoch and run for Uniform on one thread (Full about twice).

    python benchmarks/midx_transformer_lr.py --processed data/processed/ptb/dataset.npz \
        --methods tf_uniform --lrs 20 5 1 --epochs 3
Writes benchmarks/out/midx_transformer_lr.{json,md}.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def one(args: tuple) -> dict:
    method, lr, processed, epochs = args
    from table4_run import build, paper_train, short_fit
    from xcbench.runtime import configure_process

    configure_process(1)
    _, train, model_cfg, task, model = build(method, processed)
    train_cfg = paper_train(train, epochs, lr=lr)
    hist, note = short_fit(model, task, train_cfg)
    return {"method": method, "lr": lr, "train": train_cfg, "model": model_cfg, "note": note,
            "val_ppl": [h["val_ppl"] for h in hist], "train_loss": [h["train_loss"] for h in hist],
            "epoch_s": [h["epoch_time_s"] for h in hist]}


def table(rows: list[dict], epochs: int) -> str:
    head = " | ".join(f"epoch {e}" for e in range(epochs + 1))
    lines = ["# Table 4's Transformer on PTB under the paper setting's SGD recipe: validation perplexity by learning rate",
             "", "Paper-scale Transformer (2 layers, 4 heads, feed-forward 1,024, embedding 200, dropout 0.5); SGD on the "
             "mean token loss, batch 20, gradient norm clipped to 0.25, constant learning rate; `correct: both`; zero-state "
             "evaluation windows of 35 tokens. One thread per run, 2-core CPU (benchmarks/midx_transformer_lr.py).",
             "", f"| method | lr | {head} | seconds / epoch | note |", "|---|---|" + "---|" * (epochs + 1) + "---|---|"]
    for r in rows:
        v = [f"{x:,.1f}" if x < 1e6 else f"{x:.1e}" for x in r["val_ppl"]] + ["–"] * (epochs + 1 - len(r["val_ppl"]))
        secs = f"{sum(r['epoch_s'][1:]) / max(1, len(r['epoch_s']) - 1):.0f}"
        lines.append(f"| {r['method']} | {r['lr']:g} | {' | '.join(v)} | {secs} | {r['note'][:120]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processed", default="data/processed/ptb/dataset.npz")
    p.add_argument("--methods", nargs="+", default=["tf_uniform"])
    p.add_argument("--lrs", type=float, nargs="+", default=[20.0, 5.0, 1.0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--render-only", action="store_true", help="rewrite the table from the saved JSON")
    a = p.parse_args()
    if a.render_only:
        rows = json.loads((OUT / "midx_transformer_lr.json").read_text())
        (OUT / "midx_transformer_lr.md").write_text(table(rows, len(rows[0]["val_ppl"]) - 1))
        return
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(one, [(m, lr, a.processed, a.epochs) for m in a.methods for lr in a.lrs]))
    OUT.mkdir(exist_ok=True)
    (OUT / "midx_transformer_lr.json").write_text(json.dumps(rows, indent=1))
    (OUT / "midx_transformer_lr.md").write_text(table(rows, a.epochs))
    print(table(rows, a.epochs))


if __name__ == "__main__":
    main()
