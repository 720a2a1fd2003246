"""When did the plateau rule first cut each Table 4 run's learning rate, and how noisy was validation then?

Table 4's paper setting decays the rate on a plateau: lr <- lr / 4 once `patience` (2) epochs in a row fail
to lower the best validation perplexity by `min_delta` (0.1). A run whose validation perplexity moves by
more than that from one epoch to the next at a constant rate can be cut on noise. This script reads the
runs' own histories (metrics.json's curves, as history.csv: val_ppl and the lr each epoch trained at) and reports,
per run,

    first cut    = the last epoch trained at the starting rate (the rule fired after it),
    largest rise = max_t (v_t - v_{t-1}) over the epochs at the starting rate,
    best         = min_t v_t and its epoch,

beside the test perplexity the run recorded and the paper's value (the experiment's literature rows).
Nothing is trained: it reads finished or kept runs in a second. Writes studies/midx_table4/out/midx_schedule.{json,md}.

    python studies/midx_table4/midx_schedule.py reference/paper/results/paper/midx/table4/ptb/*/seed0
"""

from __future__ import annotations

import argparse
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def schedule_facts(val: list[float], lr: list[float]) -> dict:
    """Epochs 1..T with their validation perplexity and training rate (epoch 0, the untrained model, left out)."""
    at_start = [v for v, r in zip(val, lr) if r == lr[0]]   # the first rate's epochs, a prefix
    rises = [b - a for a, b in zip(at_start, at_start[1:])]
    best = min(val)
    return {"epochs": len(val), "lr0": lr[0], "first_cut_after": len(at_start) if len(at_start) < len(val) else None,
            "val_at_cut": min(at_start), "largest_rise": max([0.0, *rises]),
            "best_val": best, "best_epoch": val.index(best) + 1}


def run_row(run: Path) -> dict:
    from xcbench.io import read_json, read_yaml

    if not (run / "metrics.json").exists():
        raise SystemExit(f"{run}/metrics.json: not there; a run still training keeps its history in checkpoint.pt "
                         "(pass finished or kept runs)")
    rec, cfg = read_json(run / "metrics.json"), read_yaml(run / "config.resolved.yaml")
    curves = rec["curves"]                                   # per epoch, as history.csv; epoch 0 is the untrained model
    trained = [i for i, e in enumerate(curves["epoch"]) if e > 0]
    exp, method, encoder = cfg["experiment"], cfg["method"], cfg["model"]["encoder"]
    label = exp["methods"][method].get("label", method)
    paper = next((lit["values"].get(cfg["dataset"], {}).get(encoder) for lit in exp["render"].get("literature", [])
                  if lit["method"] == label), None)
    test = rec["metrics"]["ppl"]
    facts = schedule_facts([curves["val_ppl"][i] for i in trained], [curves["lr"][i] for i in trained])
    return {"run": str(run), "method": method, "label": label, "encoder": encoder, **facts,
            "test_ppl": test, "paper_ppl": paper, "test_over_paper": test / paper if paper else None}


def table(rows: list[dict]) -> str:
    fmt = lambda v, d=1: "-" if v is None else f"{v:,.{d}f}"  # noqa: E731
    head = ("| encoder | sampler | lr | first cut after epoch | val at cut | largest rise at lr | best val (epoch) | "
            "epochs | test PPL | paper | test / paper |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(
        f"| {r['encoder']} | {r['label']} | {r['lr0']:g} | {r['first_cut_after'] or '-'} | {fmt(r['val_at_cut'])} | "
        f"{fmt(r['largest_rise'])} | {fmt(r['best_val'])} ({r['best_epoch']}) | {r['epochs']} | {fmt(r['test_ppl'])} | "
        f"{fmt(r['paper_ppl'])} | {fmt(r['test_over_paper'], 2)} |" for r in rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (.../<method>/seed0) with metrics.json")
    ap.add_argument("--out", type=Path, default=OUT / "midx_schedule")
    args = ap.parse_args()
    from xcbench.io import write_json, write_text

    rows = sorted((run_row(r) for r in args.runs), key=lambda r: (r["encoder"], r["first_cut_after"] or 1e9))
    write_json(args.out.with_suffix(".json"), {"rows": rows})
    md = ("# Table 4's plateau schedule: each run's first learning-rate cut and its validation noise\n\n"
          "lr / 4 after 2 epochs without a 0.1 gain in validation perplexity (the paper setting). 'first cut after "
          "epoch': the last epoch at the starting rate; 'largest rise': the largest epoch-to-epoch increase of "
          "validation perplexity while at that rate; test PPL as each run recorded it (one seed).\n\n" + table(rows))
    write_text(args.out.with_suffix(".md"), md)
    print(md)


if __name__ == "__main__":
    main()
