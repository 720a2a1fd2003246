"""Does the log-q convention move the sampled heads on the faces, XMC and sequential-recommendation tables too?

studies/lm_logq_convention moved the lm table's Uniform and MIDX heads to `correct: both` (for target t and m draws
s_j from q, the positive's logit corrected as the negatives' are: o_t - log(m q(t)), the MIDX reference's loss)
from the head's default `negatives` (RF-softmax eq. 5: o_t left alone), which had priced PTB's rare words about a
hundred times their share under a uniform q. The other three xcbench tables keep `negatives`. This study trains
each of their sampled heads (Uniform, Unigram, MIDX-pq, MIDX-rq) at the quick scale under `both`, with the table's
own spec otherwise (dataset, seeds, model, optimiser, lr, epochs) through the same job path as `xcbench train`, and
trains it under `negatives` here too (float sums differ between CPU models and a few epochs
turn 1e-8 into 1e-3: the kept XMC runs ran on an AMD EPYC), and sets the two side by side with the full softmax's kept
runs (reference/quick): test metrics and the validation metric at the selected epoch, mean and sample standard
deviation over the seeds. `--check ARTIFACT:HEAD` requires that head's seed 0 under `negatives` here to
equal the kept run's test metrics exactly, where the kept run ran on this CPU model: the study's runs are the table's.

    python studies/logq_convention_tasks/tasks.py --check faces/synthetic-faces-10k:uniform  # 40 min, one thread
    python studies/logq_convention_tasks/tasks.py --scale paper --tables xmc/bibtex xmc/delicious   # 30 min
    python studies/logq_convention_tasks/tasks.py --scale paper --tables seqrec/seqrec-sports --methods midx_rq  # 2 h
    python studies/logq_convention_tasks/tasks.py --render-only      # out/'s table from the runs in work/
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from xcbench.cli import configure_logging
from xcbench.io import read_json, write_json, write_text
from xcbench.reporting.claim_values import clears_seeds
from xcbench.runtime import configure_process
from xcbench.study import table_experiment, train_changed

REPO = Path(__file__).resolve().parents[2]
HEADS = ("uniform", "unigram", "midx_pq", "midx_rq")
# artifact -> (features file or None, the table's accuracy columns: the first decides, on validation)
ARTIFACTS = {
    "faces": (None, ("ident_top1", "verif_tpr")),
    "xmc": ("tfidf_svd256.pt", ("P@1", "P@5")),
    "seqrec": (None, ("ndcg@10", "recall@10")),
}
# scale -> the (artifact, dataset) tables measured: every quick one; at the paper scale the XMC sets that take seconds a
# run, and Amazon Sports (20 min a run on one thread: `--tables seqrec/seqrec-sports --methods midx_rq`)
TABLES = {
    "quick": [("faces", "synthetic-faces-10k"), ("xmc", "synthetic-xmc-10k"), ("seqrec", "movielens-100k")],
    "paper": [("xmc", "bibtex"), ("xmc", "delicious"), ("seqrec", "seqrec-sports")],
}


def kept(scale: str, artifact: str, dataset: str, method: str, seed: int) -> Path:
    """The table's kept run (under the convention the table trains it with)."""
    return REPO / "reference" / scale / "results" / scale / "xcbench" / artifact / dataset / method / f"seed{seed}"


def train(scale: str, artifact: str, dataset: str, method: str, correct: str, seed: int, work: Path) -> dict:
    """metrics.json of the table's run of `method` under `correct`, trained in work/ (kept there: a rerun reads it)."""
    features = ARTIFACTS[artifact][0]
    return train_changed(table_experiment(REPO, artifact, scale), dataset, method, seed,
                         work / scale / artifact / dataset / f"{method}_{correct}" / f"seed{seed}",
                         REPO / "data" / "processed" / dataset / "dataset.npz",
                         REPO / "data" / "features" / dataset / features if features else None,
                         params={"correct": correct})


def spread(xs: list[float]) -> tuple[float, float]:
    """(mean, sample standard deviation; 0 for one value)."""
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def paired(both: list[float], negatives: list[float]) -> str:
    """both - negatives paired over the seeds: the mean, two standard errors, and whether it is beyond the seeds (every
    difference of one sign and the mean beyond 2 SE: the claims' `beyond_seed_noise`, reporting/claim_values.py)."""
    d = [b - n for b, n in zip(both, negatives)]
    if len(d) < 2:
        return "–"
    up, mean, se = clears_seeds(d)
    beyond = up or clears_seeds([-x for x in d])[0]
    return f"{mean:+.4f} (2 SE {2 * se:.4f}){' beyond' if beyond else ''}"


def table(result: dict, scale: str) -> str:
    out = [f"# xcbench sampled heads by log-q convention ({scale} scale): test metrics, mean +- sd over seeds", "",
           "Both conventions trained here, the table's runs but for `correct`: negatives (the table's; o_t uncorrected, "
           "RF-softmax eq. 5) and both (the positive corrected too, the MIDX reference's loss). Full: the table's kept "
           f"full softmax (reference/{scale}). "
           "val_: the validation metric at the selected epoch; the others: test. The last column pairs the seeds: "
           "`beyond` where every seed moves one way and the mean is beyond two standard errors.", ""]
    order = [f"{t}/{d}" for t, d in TABLES[scale]]                             # the JSON's keys come back sorted
    for name in sorted(result["tables"], key=order.index):
        rows = result["tables"][name]
        artifact = name.split("/")[0]
        keys = (f"val_{ARTIFACTS[artifact][1][0]}", *ARTIFACTS[artifact][1])
        out += [f"## {name}", "",
                "| head | convention | seeds | " + " | ".join(keys) + f" | {keys[0]}: both - negatives |",
                "|---|---|---|" + "---|" * (len(keys) + 1)]
        neg = {r["method"]: r for r in rows if r["correct"] == "negatives"}
        for r in rows:
            cells = [f"{m:.4f} +- {s:.4f}" for m, s in (spread(r[k]) for k in keys)]
            margin = paired(r[keys[0]], neg[r["method"]][keys[0]]) if r["correct"] == "both" else ""
            out.append(f"| {r['method']} | {r['correct']} | {len(r[keys[0]])} | " + " | ".join(cells) + f" | {margin} |")
        out.append("")
    if result.get("check"):
        c = result["check"]
        out.append(f"Check: {c['artifact']}:{c['method']} seed 0 retrained here under `negatives` gives the kept run's "
                   f"test metrics exactly ({c['key']} {c['here']!r}).")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="quick", choices=list(TABLES))
    p.add_argument("--methods", nargs="+", default=list(HEADS), choices=list(HEADS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--tables", nargs="+", default=None, help="ARTIFACT/DATASET ...: these of the scale's tables only "
                                                             "(default: all of them)")
    p.add_argument("--check", default=None, help="ARTIFACT/DATASET:HEAD: its seed 0 under `negatives` here must equal "
                                                 "the kept run's test metrics")
    p.add_argument("--render-only", action="store_true", help="the table from the runs already in work/")
    p.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    configure_process(1)
    configure_logging()                                                       # the runs' progress lines
    saved, md = a.out / f"convention_tasks_{a.scale}.json", a.out / f"convention_tasks_{a.scale}.md"
    result = read_json(saved) if saved.exists() else {"check": None, "tables": {}}
    if a.check:
        name, method = a.check.split(":")
        artifact, dataset = name.split("/")
        key = ARTIFACTS[artifact][1][0]
        here = train(a.scale, artifact, dataset, method, "negatives", 0, a.work)["metrics"]
        theirs = read_json(kept(a.scale, artifact, dataset, method, 0) / "metrics.json")["metrics"]
        if here != theirs:
            raise SystemExit(f"--check {a.check}: test metrics {here} here, {theirs} in the kept run "
                             f"{kept(a.scale, artifact, dataset, method, 0)}: this study's runs are not the table's")
        result["check"] = {"artifact": artifact, "method": method, "key": key, "here": here[key]}
        print(f"check: {a.check} seed 0 under negatives = the kept run's ({key} {here[key]})", flush=True)
    names = [f"{t}/{d}" for t, d in TABLES[a.scale]]
    unknown = set(a.tables or []) - set(names)
    if unknown:
        raise SystemExit(f"--tables {sorted(unknown)}: not tables of the {a.scale} scale: {names}")
    for name, (artifact, dataset) in zip(names, TABLES[a.scale]):
        if a.tables and name not in a.tables:
            continue
        keys = ARTIFACTS[artifact][1]

        def row(method: str, correct: str, metrics: list[dict]) -> dict:
            return {"method": method, "correct": correct, **{k: [m["metrics"][k] for m in metrics] for k in keys},
                    f"val_{keys[0]}": [m["best"][f"val_{keys[0]}"] for m in metrics]}

        rows = [row("full", "–", [read_json(kept(a.scale, artifact, dataset, "full", s) / "metrics.json")
                                  for s in a.seeds])]
        for method in a.methods:
            for correct in ("negatives", "both"):
                done = [s for s in a.seeds if not a.render_only or (a.work / a.scale / artifact / dataset
                        / f"{method}_{correct}" / f"seed{s}" / "metrics.json").exists()]
                if done:
                    rows.append(row(method, correct, [train(a.scale, artifact, dataset, method, correct, s, a.work)
                                                      for s in done]))
            result["tables"][f"{artifact}/{dataset}"] = rows
            write_json(saved, result)
            write_text(md, table(result, a.scale))
    print(md.read_text(), flush=True)


if __name__ == "__main__":
    main()
