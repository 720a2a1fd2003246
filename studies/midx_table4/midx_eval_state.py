"""How much of MIDX Table 4's perplexity is the evaluation protocol?

Table 4's paper setting evaluates as the public MIDX code does (`eval_state: zero`): the split is cut
into windows of bptt = 35 tokens and each is read from a zero LSTM state, so a token sees on average
17 tokens of history. The PyTorch word-language-model recipe (and most published PTB numbers)
carries the state over the whole split (`eval_state: carry`). This script takes trained Table 4
runs from their checkpoints (the weights of the best epoch by validation perplexity, as the test
uses) and scores the same model both ways:

    PPL = exp( (1/N) sum_t -log softmax(h_t C^T)_{w_{t+1}} ),   h_t from a zero state at each window
                                                                (zero) or from the whole history (carry).

The zero-state test perplexity must equal the run's own (its metrics.json in results/ or the kept tree) where
the run has ended (a finished run deletes its checkpoint: pass a copy in a folder .../<method>/seed0);
that column checks that the weights loaded are the ones tested. Writes studies/midx_table4/out/midx_eval_state.{json,md}.
About a minute per run on one thread.

    python studies/midx_table4/midx_eval_state.py --processed data/processed/ptb/dataset.npz \
        results/paper/midx/table4/ptb/lstm_full/seed0 ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from table4_run import EXPERIMENT, build

OUT = Path(__file__).resolve().parent / "out"
KEPT = Path("reference/paper")  # a run kept there after it was cut: its recorded test perplexity


def load_run(run_dir: Path, device: torch.device) -> tuple[dict, dict]:
    """(best-epoch weights, facts) of a Table 4 run from its checkpoint.pt."""
    ck = torch.load(run_dir / "checkpoint.pt", weights_only=True, map_location=device)
    sel = ck.get("select") or {}
    if "state" not in sel:
        raise SystemExit(f"{run_dir}/checkpoint.pt: no best-epoch weights (select.state); "
                         "this script needs a run trained with `select:` (Table 4's paper setting)")
    rel = Path("results/paper/midx/table4/ptb") / run_dir.parent.name / run_dir.name          # the run's own folder
    done = [f for f in (run_dir / "metrics.json", rel / "metrics.json", KEPT / rel / "metrics.json") if f.exists()]
    recorded = json.loads(done[0].read_text())["metrics"]["ppl"] if done else None
    return sel["state"], {"epochs_trained": ck["epoch"], "best_epoch": sel["best_epoch"],
                          "best_val_ppl_recorded": sel["best"], "test_ppl_recorded": recorded}


def score(run_dir: Path, processed: str) -> dict:
    from xcbench.tasks.lm import EVAL_STATES

    method = run_dir.parent.name                                     # .../<dataset>/<method>/seed0
    state, facts = load_run(run_dir, torch.device("cpu"))
    row = {"run": str(run_dir), "method": method, **facts}
    _, _, _, task, model = build(method, processed)
    model.load_state_dict(state)
    model.eval()
    for eval_state in EVAL_STATES:  # the same task and weights, read both ways
        task.eval_state = eval_state
        for split in ("val", "test"):
            row[f"{split}_ppl_{eval_state}"] = task.evaluate(model, split)["ppl"]
    row["test_ratio_carry_over_zero"] = row["test_ppl_carry"] / row["test_ppl_zero"]
    return row


def table(rows: list[dict]) -> str:
    head = ("| run | epochs trained | best epoch | val PPL zero (recorded) | val PPL zero | val PPL carry | "
            "test PPL zero (recorded) | test PPL zero | test PPL carry | carry / zero (test) |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    return head + "\n".join(
        f"| {r['method']} | {r['epochs_trained']} | {r['best_epoch']} | {fmt(r['best_val_ppl_recorded'])} | "
        f"{r['val_ppl_zero']:.1f} | {r['val_ppl_carry']:.1f} | {fmt(r['test_ppl_recorded'])} | "
        f"{r['test_ppl_zero']:.1f} | {r['test_ppl_carry']:.1f} | {r['test_ratio_carry_over_zero']:.3f} |"
        for r in rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="Table 4 run folders (.../ptb/<method>/seed0) with checkpoint.pt")
    ap.add_argument("--processed", default="data/processed/ptb/dataset.npz")
    ap.add_argument("--out", type=Path, default=OUT / "midx_eval_state")
    args = ap.parse_args()
    from xcbench.io import write_json, write_text
    from xcbench.runtime import configure_process

    configure_process(1)
    rows = [score(r, args.processed) for r in args.runs]
    write_json(args.out.with_suffix(".json"), {"experiment": EXPERIMENT, "rows": rows})
    md = ("# MIDX Table 4: the same trained models under zero-state and carried-state evaluation (PTB, LSTM)\n\n"
          "Weights of each run's best epoch by zero-state validation perplexity (its checkpoint). zero: every "
          "35-token window from a zero state (Table 4's protocol, the public MIDX code's); carry: the state carried "
          "over the split in 10 streams (the PyTorch word-LM recipe). 'recorded' is what the run itself logged.\n\n"
          + table(rows))
    write_text(args.out.with_suffix(".md"), md)
    print(md)


if __name__ == "__main__":
    main()
