"""Which optimiser and model train Table 4's Transformer?

Table 4's paper setting trains every model with the PyTorch word-language-model recipe (SGD on the
mean token loss, lr 20, batch 20, global norm clipped to 0.25), measured for the LSTM
(studies/midx_table4/midx_protocols.py). This script runs the paper scale's Transformer (2 layers, 4 heads,
feed-forward 1,024, embedding 200, dropout 0.5) on PTB at several learning rates, under that SGD
recipe or Adam (`--optimizer adam`: the reference code's optimiser, at the recipe's batch 20), with
untied or tied (`--tie`: the reference code's model) class embeddings, with our pre-norm blocks or
the reference code's post-norm GELU blocks with output dropout (`--encoder transformer_lm_post`),
each at a constant rate for a few epochs, with the Table 4 loss (`correct: both`) and zero-state evaluation windows, and writes
the validation perplexity after every epoch:

    val PPL = exp( (1/N) sum_t -log softmax(h_t C^T)_{w_{t+1}} )   (full softmax, every sampler)

A learning rate whose curve jumps back up (or diverges) does not train this model; the table says
which rates do. About 4 CPU-minutes per epoch and run for Uniform on one thread (Full about twice).
Each call adds its rows to the saved table (a rerun of the same method, optimiser, lr, tying and blocks
replaces its row).

    python studies/midx_table4/midx_transformer_lr.py --processed data/processed/ptb/dataset.npz \
        --methods tf_uniform --lrs 20 5 1 --epochs 3
    python studies/midx_table4/midx_transformer_lr.py --methods tf_full --optimizer adam --lrs 1e-3
    python studies/midx_table4/midx_transformer_lr.py --methods tf_full --lrs 5 --tie
    python studies/midx_table4/midx_transformer_lr.py --methods tf_full --lrs 5 --tie --encoder transformer_lm_post
Writes studies/midx_table4/out/midx_transformer_lr.{json,md}.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def one(args: tuple) -> dict:
    method, optimizer, lr, processed, epochs, tie, encoder = args
    from table4_run import build, paper_train, short_fit

    from xcbench.runtime import configure_process

    configure_process(1)
    over = {"encoders": {"Transformer": {"name": encoder}}, **({"tie_embeddings": True} if tie else {})}
    _, train, model_cfg, task, model = build(method, processed, model=over)
    train_cfg = paper_train(train, epochs, lr=lr, optimizer=optimizer)
    hist, note = short_fit(model, task, train_cfg)
    return {"method": method, "optimizer": optimizer, "lr": lr, "tie": tie, "encoder": encoder,
            "train": train_cfg, "model": model_cfg, "note": note,
            "val_ppl": [h["val_ppl"] for h in hist], "train_loss": [h["train_loss"] for h in hist],
            "epoch_s": [h["epoch_time_s"] for h in hist]}


def table(rows: list[dict]) -> str:
    epochs = max(len(r["val_ppl"]) for r in rows) - 1
    head = " | ".join(f"epoch {e}" for e in range(epochs + 1))
    lines = ["# Table 4's Transformer on PTB: validation perplexity by optimiser, learning rate, class-embedding tying and block",
             "", "Paper-scale Transformer (2 layers, 4 heads, feed-forward 1,024, embedding 200, dropout 0.5); SGD on the "
             "mean token loss or Adam, batch 20, gradient norm clipped to 0.25, constant learning rate; `correct: both`; zero-state "
             "evaluation windows of 35 tokens. Blocks: `transformer_lm` (pre-norm, ReLU, final LayerNorm; ours) or `transformer_lm_post` "
             "(the reference code's: post-norm, GELU, dropout on the output). One thread per run, 2-core CPU "
             "(studies/midx_table4/midx_transformer_lr.py).",
             "", f"| method | optimiser | lr | class embeddings | blocks | {head} | seconds / epoch | note |",
             "|---|---|---|---|---|" + "---|" * (epochs + 1) + "---|---|"]
    for r in rows:
        v = [f"{x:,.1f}" if x < 1e6 else f"{x:.1e}" for x in r["val_ppl"]] + ["–"] * (epochs + 1 - len(r["val_ppl"]))
        secs = f"{sum(r['epoch_s'][1:]) / max(1, len(r['epoch_s']) - 1):.0f}"
        tie = "tied" if r.get("tie") else "untied"
        lines.append(f"| {r['method']} | {r.get('optimizer', 'sgd')} | {r['lr']:g} | {tie} | {r.get('encoder', 'transformer_lm')} | "
                     f"{' | '.join(v)} | {secs} | {r['note'][:120]} |")
    return "\n".join(lines) + "\n"


def from_run(run: Path) -> dict:
    """A row from a finished Table 4 run's own history (`--add-run`): its epochs up to the first
    learning-rate change, where its plateau schedule still ran at a constant rate."""
    import csv
    from itertools import takewhile

    from xcbench.io import read_yaml

    cfg = read_yaml(run / "config.resolved.yaml")
    hist = list(csv.DictReader((run / "history.csv").open()))
    lr = float(cfg["train"]["lr"])
    rows = [hist[0], *takewhile(lambda h: float(h["lr"]) == lr, hist[1:])]                 # epoch 0, then lr constant
    model = cfg.get("model", {})
    return {"method": cfg["method"], "optimizer": cfg["train"]["optimizer"], "lr": lr,
            "tie": bool(model.get("tie_embeddings", False)), "encoder": encoder_name(model), "note": f"the run {run} (lr {lr:g} until "
            f"epoch {len(rows) - 1})", "val_ppl": [float(h["val_ppl"]) for h in rows],
            "train_loss": [float(h["train_loss"]) if h["train_loss"] else None for h in rows],
            "epoch_s": [float(h["epoch_time_s"]) for h in rows]}


def encoder_name(model_cfg: dict) -> str:
    from xcbench.runspec import encoder_config

    return encoder_config(model_cfg)["name"]


def key(r: dict) -> tuple:
    return r["method"], r.get("optimizer", "sgd"), r["lr"], r.get("tie", False), r.get("encoder", "transformer_lm")


def merge(path: Path, new: list[dict]) -> list[dict]:
    """The saved rows with `new` added (a rerun of the same method, optimiser, lr, tying and blocks replaces its row)."""
    from xcbench.io import read_json

    old = read_json(path) if path.exists() else []
    done = {key(r) for r in new}
    return [r for r in old if key(r) not in done] + new


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processed", default="data/processed/ptb/dataset.npz")
    p.add_argument("--methods", nargs="+", default=["tf_uniform"])
    p.add_argument("--lrs", type=float, nargs="+", default=[20.0, 5.0, 1.0])
    p.add_argument("--optimizer", default="sgd", help="sgd (the paper setting's recipe) or adam (the reference code's)")
    p.add_argument("--tie", action="store_true", help="tie the class embeddings to the input table (the reference code's model)")
    p.add_argument("--encoder", default="transformer_lm",
                   help="transformer_lm (ours: pre-norm) or transformer_lm_post (the reference code's post-norm GELU blocks)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--render-only", action="store_true", help="rewrite the table from the saved JSON")
    p.add_argument("--add-run", type=Path, help="add a finished Table 4 run's own curve (its constant-rate epochs) to the table")
    a = p.parse_args()
    from xcbench.io import read_json, write_json, write_text

    saved = OUT / "midx_transformer_lr.json"
    if a.render_only:
        rows = read_json(saved)
    else:
        if a.add_run:
            new = [from_run(a.add_run)]
        else:
            with ProcessPoolExecutor(a.jobs) as ex:
                new = list(ex.map(one, [(m, a.optimizer, lr, a.processed, a.epochs, a.tie, a.encoder)
                                        for m in a.methods for lr in a.lrs]))
        rows = merge(saved, new)
        write_json(saved, rows)
    md = table(rows)
    write_text(OUT / "midx_transformer_lr.md", md)
    if not (a.render_only or a.add_run):
        print(md)

if __name__ == "__main__":
    main()
