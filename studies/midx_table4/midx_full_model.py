"""Is MIDX Table 4's Full row far from the paper's 109.2 because of the model?

Table 4's paper setting trains the paper's LSTM (embedding 200, 2 layers of width 128, dropout 0.5)
with untied class embeddings; the public MIDX code's LSTM is 200 wide and ties the class embeddings
to its input table (Press & Wolf 2017). This script trains the full softmax,
loss = -log softmax(h C^T)_y, under Table 4's exact paper protocol (SGD lr 20, batch 20, clip 0.25,
zero-state windows of 35 tokens in training and evaluation) for a few epochs at constant lr with
each model, side by side, and writes the validation perplexity after every epoch to
studies/midx_table4/out/midx_full_model.{json,md}. About 4 CPU-minutes per epoch and model on one thread.

    python studies/midx_table4/midx_full_model.py --processed data/processed/ptb/dataset.npz --epochs 3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
MODELS = {  # name: (overrides of the LSTM encoder's params, tie_embeddings)
    "paper": ({}, False),
    "reference code": ({"hidden": 200}, True),
}


def one(name: str, processed: str, epochs: int) -> dict:
    from table4_run import build, paper_train, short_fit

    over, tie = MODELS[name]
    _, train, model_cfg, task, model = build("lstm_full", processed,
                                             model={"encoders": {"LSTM": over}, "tie_embeddings": tie})
    train_cfg = paper_train(train, epochs)
    hist, _ = short_fit(model, task, train_cfg)
    return {"model": name, "encoder": model_cfg["encoders"]["LSTM"], "tie_embeddings": tie,
            "train": {k: train_cfg[k] for k in ("batch_size", "optimizer", "lr", "grad_clip")},
            "parameters": sum(p.numel() for p in model.parameters()),
            "val_ppl": [h["val_ppl"] for h in hist], "epoch_s": [h["epoch_time_s"] for h in hist]}


def table(rows: list[dict]) -> str:
    epochs = max(len(r["val_ppl"]) for r in rows)
    head = " | ".join(f"epoch {e}" for e in range(epochs))
    lines = ["# Full softmax, PTB LSTM, Table 4's paper protocol: validation perplexity by model", "",
             "SGD lr 20 (constant here), batch 20, clip 0.25, every 35-token window from a zero state; one seed, "
             "one thread per run. Tied: the input table is the head's class embeddings (normal, std 0.01; the reference ties "
             "them to its xavier input table).", "", f"| model | encoder | tied | parameters | {head} |",
             "|---|---|---|---|" + "---|" * epochs]
    for r in rows:
        e = r["encoder"]
        lines.append(f"| {r['model']} | emb {e['emb']}, {e['layers']} x {e['hidden']}, dropout {e['dropout']} | "
                     f"{'yes' if r['tie_embeddings'] else 'no'} | {r['parameters']:,} | "
                     + " | ".join(f"{v:,.1f}" for v in r["val_ppl"]) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processed", default="data/processed/ptb/dataset.npz")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--render-only", action="store_true", help="rewrite the table from the saved JSON")
    a = p.parse_args()
    from xcbench.io import write_json, write_text
    from xcbench.runtime import configure_process

    if a.render_only:
        rows = json.loads((OUT / "midx_full_model.json").read_text())
    else:
        configure_process(1)
        rows = [one(m, a.processed, a.epochs) for m in a.models]
        write_json(OUT / "midx_full_model.json", rows)
    write_text(OUT / "midx_full_model.md", table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
