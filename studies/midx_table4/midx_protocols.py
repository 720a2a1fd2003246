"""Why did Uniform reach a test perplexity of 79,022 in the first paper-setting PTB-LSTM column?

Runs the Table 4 Uniform sampler (m = 20) for a few epochs under each log-q convention of the
sampled-softmax head (`correct: negatives`, RF-softmax eq. 5; `correct: both`, the public MIDX
code's loss) and each training protocol:
- `wlm`: the earlier column's protocol: SGD lr 20 on the mean token loss, batch 20, global norm
  clipped to 0.25, evaluation carrying the LSTM state over the split;
- `ref`: the public MIDX code's protocol (Table 4's paper setting now): Adam lr 1e-3, batch 256,
  every evaluation window from a zero state;
- `ref_lstm_yaml`: the reference's LSTM file taken literally: Adam with lr 1 and batch 20.
Full softmax runs under each protocol as the yardstick. Every run uses the paper scale's model (LSTM
2 x 128, embedding 200, dropout 0.5) on the whole PTB training text. Writes the validation perplexity
after every epoch to studies/midx_table4/out/midx_protocols.{json,md}. About 25 CPU-minutes per protocol on
one thread; `--jobs 2` runs two at once.

    python studies/midx_table4/midx_protocols.py --processed data/processed/ptb/dataset.npz --epochs 3 --jobs 2
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
PROTOCOLS = {
    "wlm": ({"batch_size": 20, "optimizer": "sgd", "lr": 20.0, "grad_clip": 0.25}, "carry"),
    "ref": ({"batch_size": 256, "optimizer": "adam", "lr": 1e-3}, "zero"),
    "ref_lstm_yaml": ({"batch_size": 20, "optimizer": "adam", "lr": 1.0}, "zero"),
}
RUNS = [("wlm", "negatives"), ("wlm", "both"), ("ref", "negatives"), ("ref", "both"), ("ref_lstm_yaml", "both"),
        ("wlm", "full"), ("ref", "full")]


def one(args: tuple) -> dict:
    protocol, correct, processed, epochs = args
    from table4_run import build, short_fit

    from xcbench.runtime import configure_process

    configure_process(1)
    train, eval_state = PROTOCOLS[protocol]
    method = "lstm_full" if correct == "full" else "lstm_uniform"
    _, _, _, task, model = build(method, processed, params=None if correct == "full" else {"correct": correct},
                                 eval_state=eval_state)
    train_cfg = {**train, "epochs": epochs, "schedule": "constant"}
    hist, note = short_fit(model, task, train_cfg)
    return {"protocol": protocol, "correct": correct, "train": train_cfg, "eval_state": eval_state, "note": note,
            "val_ppl": [h["val_ppl"] for h in hist], "train_loss": [h["train_loss"] for h in hist],
            "epoch_s": [h["epoch_time_s"] for h in hist]}


def table(rows: list[dict], epochs: int) -> str:
    head = " | ".join(f"epoch {e}" for e in range(epochs + 1))
    lines = ["# Uniform (m = 20) vs Full, PTB LSTM (paper model): validation perplexity by protocol and log-q convention",
             "", "wlm: SGD lr 20, batch 20, clip 0.25, state carried in evaluation; ref: Adam lr 1e-3, batch 256, zero-state "
             "evaluation windows; ref_lstm_yaml: Adam lr 1, batch 20 (the reference's LSTM file). One thread per run, 2-core CPU.",
             "", f"| protocol | convention | {head} | note |", "|---|---|" + "---|" * (epochs + 1) + "---|"]
    for r in rows:
        v = [f"{x:,.1f}" if x < 1e6 else f"{x:.1e}" for x in r["val_ppl"]] + ["–"] * (epochs + 1 - len(r["val_ppl"]))
        lines.append(f"| {r['protocol']} | {r['correct']} | {' | '.join(v)} | {r['note'][:120]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processed", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--runs", nargs="*", default=None, help="protocol:convention pairs (default: all)")
    p.add_argument("--render-only", action="store_true", help="rewrite the table from the saved JSON")
    a = p.parse_args()
    if a.render_only:
        rows = json.loads((OUT / "midx_protocols.json").read_text())
        (OUT / "midx_protocols.md").write_text(table(rows, len(rows[0]["val_ppl"]) - 1))
        return
    runs = [tuple(r.split(":")) for r in a.runs] if a.runs else RUNS
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(one, [(pr, c, a.processed, a.epochs) for pr, c in runs]))
    OUT.mkdir(exist_ok=True)
    (OUT / "midx_protocols.json").write_text(json.dumps(rows, indent=1))
    (OUT / "midx_protocols.md").write_text(table(rows, a.epochs))
    print(table(rows, a.epochs))


if __name__ == "__main__":
    main()
