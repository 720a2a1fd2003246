"""Step rates for the paper-scale runs whose data is a manual download, measured on shape proxies.

A training step reads its data only through shapes: the batch's fixed features (B, d), the label count n of
the output layer and, for a multi-label loss, the labels a row carries. Every other cost of a step (the head's
(B, n) scores or its sampled columns, its optimizer's n x d state, an index over the n class rows) follows
from those. So a synthetic set with the real one's n, labels per row and feature width steps as the real one
does, and its rows count only in how many steps an epoch takes, which `train_step.py --epoch-rows` projects
from the real set's training rows (and the evaluation, linear in its rows, from its validation rows).

The proxy is drawn by the `synthetic-xmc` generator (data/synthetic.py: power-law label priors, learnable
words) with the real set's label count and mean labels per point, a 20,000-word vocabulary (the features are
its tf-idf + SVD to the experiment's width, as for the real set) and `--rows` training rows; it is written
under data/shape_proxy/ and reused. Its records carry `shape_proxy` (the rows projected and the proxy's), and
paper_cost.md marks their rates. What a proxy cannot give: a run's accuracy, and costs that follow the real
label distribution's tail (none of the heads measured here has one: their steps touch every class row, or a
fixed number of sampled ones).

The real sets' sizes are the Extreme Classification Repository's table (Bhatia et al. 2016,
manikvarma.github.io/downloads/XC/XMLRepository.html): training points, test points, labels per point.

Sequential recommendation (MIDX Table 7's MovieLens-10M, Gowalla, Amazon-books, fetched from their URLs): a step
reads an item count n and (B, max_len) windows of item ids, nothing else. The proxy has the real set's n items and
every user its mean length L = interactions / users (sizes from the MIDX paper's Table 6), items drawn from a Zipf
prior with every item present, and enough users for the timed batches; the real set is F = users / proxy users
copies of it, so its windows and validation queries are F times the proxy's (`train_step.py --epoch-scale F`).
Real users have mixed lengths: counted on the five time-ordered sets here, the mean-length projection gives 0.83-1.00x
the real windows (an epoch's batches), 0.98-1.08x its training queries (the rows a head scores) and 0.82-1.06x its
validation queries; the 0.83 is LastFM's heavy tail (mean 48, median 19): studies/shape_proxy_check/out/seqrec_counts.md.

    python benchmarks/shape_proxy.py amazon-670k --threads 1        # every experiment that trains on it
    python benchmarks/shape_proxy.py gowalla --experiments config/experiments/midx/table7.yaml
    python benchmarks/shape_proxy.py wiki10-31k --experiments config/experiments/sparse/table1.yaml
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from cost_next import is_lr_grid, paper_experiments
from proxy_sizes import SEQ_SIZES, XC_SIZES

REPO = Path(__file__).resolve().parents[1]
PROXY = "data/shape_proxy"


def seq_windows(L: int, max_len: int) -> int:
    """The training windows of one user of L items, as tasks/seqrec.py cuts them."""
    from xcbench.tasks.seqrec import split_points, window_ends

    return len(window_ends(split_points(L)[0], max_len))


def seq_proxy(entry: dict, batch: int, max_len: int, data: Path, batches: int = 5, zipf: float = 0.8) -> tuple[Path, float]:
    """(data/shape_proxy/processed/<dataset>/proxy_seq_<digest>.npz, F): the dataset's items, every user of its mean
    length, enough users for `batches` batches of windows, prepared as a `seq_lines` set; F = real users / proxy's."""
    import hashlib

    import torch

    from xcbench.data.datasets import prepare
    from xcbench.io import write_text

    name = entry["name"]
    users, n, inter = SEQ_SIZES[name]
    L = round(inter / users)
    u = -(-batches * batch // seq_windows(L, max_len))
    digest = hashlib.sha256(repr((u, n, L, zipf)).encode()).hexdigest()[:8]
    out = data / "processed" / name / f"proxy_seq_{digest}.npz"
    if not out.exists():
        g = torch.Generator().manual_seed(0)
        prior = torch.arange(1, n + 1, dtype=torch.float64) ** -zipf
        S = torch.multinomial(prior, u * L, replacement=True, generator=g)                 # (u L,)
        S[torch.randperm(u * L, generator=g)[:n]] = torch.arange(n)                      # every item occurs
        raw = data / "raw" / name / f"proxy_seq_{digest}"
        raw.mkdir(parents=True, exist_ok=True)
        lines = (" ".join(map(str, [k + 1, *row])) for k, row in enumerate((S.view(u, L) + 1).tolist()))
        write_text(raw / "sequences.txt", "\n".join(lines) + "\n")  # atomically: a cut run leaves no half file
        prepare({**entry, "format": "seq_lines", "splits": {"all": "sequences.txt"}, "files": []}, raw, out)
    return out, users / u


def expected_labels(a: float, n: int, zipf: float = 1.0) -> float:
    """The mean labels a row of `synthetic-xmc` carries at its `avg_labels` a: a row draws k = 1 + Poisson(a - 1)
    labels from the prior p (Zipf over n labels) and keeps the distinct ones, so label l is in it with probability
    1 - E[(1 - p_l)^k] = 1 - (1 - p_l) exp(-(a - 1) p_l), and a row carries the sum of these over l (below a:
    the head labels are drawn twice)."""
    import numpy as np

    p = np.arange(1, n + 1, dtype=np.float64) ** -zipf
    p /= p.sum()
    return float(np.sum(1.0 - (1.0 - p) * np.exp(-(a - 1.0) * p)))


def avg_labels_for(per_point: float, n: int) -> float:
    """The generator's `avg_labels` whose rows carry `per_point` distinct labels on average (bisection on
    expected_labels, increasing in a)."""
    lo, hi = per_point, 4.0 * per_point
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_labels(mid, n) < per_point else (lo, mid)
    return (lo + hi) / 2


def proxy_entry(entry: dict, rows: int, vocab: int = 20_000) -> dict:
    """The catalogue entry of `entry`'s shape proxy: synthetic-xmc data with its label count and labels per
    point, `rows` training rows and a fifth as many test rows."""
    name = entry["name"]
    if name not in XC_SIZES:
        raise SystemExit(f"shape_proxy: no sizes for {name!r}; add its XC repository row to XC_SIZES in benchmarks/proxy_sizes.py")
    _, _, per_point = XC_SIZES[name]
    n = int(entry["n_classes"])
    params = {"seed": 0, "n_train": rows, "n_test": max(1, rows // 5), "n_labels": n, "n_features": vocab,
              "avg_labels": round(avg_labels_for(per_point, n), 4), "doc_len": 80}
    return {**entry, "generator": "synthetic-xmc", "params": params, "available": True,
            "splits": {"train": "train.txt", "test": "test.txt"}, "files": []}


def prepared(entry: dict, rows: int, data: Path) -> Path:
    """data/shape_proxy/processed/<dataset>/proxy_<digest>.npz, drawn and prepared once per generator setting
    (the digest of its parameters)."""
    import hashlib
    import json

    from xcbench.data.datasets import prepare
    from xcbench.data.synthetic import generate

    proxy = proxy_entry(entry, rows)
    digest = hashlib.sha256(json.dumps(proxy["params"], sort_keys=True).encode()).hexdigest()[:8]
    out = data / "processed" / entry["name"] / f"proxy_{digest}.npz"
    if not out.exists():
        raw = data / "raw" / entry["name"] / f"proxy_{digest}"
        generate(proxy, raw)
        prepare(proxy, raw, out)
    return out


def featurised(processed: Path, features: dict, dataset: str, data: Path) -> Path:
    """The proxy's fixed features at the experiment's width, extracted by `xcbench features`. Always tf-idf + SVD:
    a step reads only their width, and the label-centroid SVD (`label_svd`, sparse table1_cascade) of a 670K-label
    set needs more than this machine's 23 GB (its (n, k) range finder in float64, and copies)."""
    dim = str(features.get("dim", 512))
    out = data / "features" / dataset / f"{processed.stem}_tfidf_svd{dim}.pt"
    if not out.exists():
        subprocess.run([sys.executable, "-m", "xcbench", "features", "--dataset", dataset, "--processed",
                        str(processed), "--extractor", "tfidf_svd", "--dim", dim, "--threads", "1", "--out", str(out)],
                       check=True, cwd=REPO)
    return out


def experiments_on(dataset: str, only: list[str] | None) -> list[tuple[Path, dict]]:
    """The paper-scale experiments that train on `dataset` and own their runs (views and learning-rate grids
    step as the experiments they show or extend, so those are measured)."""
    from xcbench.registry import TASKS

    out = []
    for f, exp in zip(*paper_experiments()):
        if only and str(f.relative_to(REPO)) not in only and str(f) not in only:
            continue
        if exp.get("runs_of") or is_lr_grid(exp) or dataset not in exp.get("datasets", []):
            continue
        if getattr(TASKS.get(exp["task"]["name"]), "trains", True):
            out.append((f, exp))
    return out


def proxy_args(entry: dict, exp: dict, rows: int, data: Path, dry_run: bool) -> tuple[list[str], str]:
    """train_step's arguments for `exp` on `entry`'s shape proxy, and the proxy's description."""
    from xcbench.runspec import method_config, task_config

    name = entry["name"]
    if name in SEQ_SIZES:
        users, n, inter = SEQ_SIZES[name]
        batch = max(int(method_config(exp, name, m)[1]["batch_size"]) for m in exp["methods"])
        max_len = int(task_config(exp, name)[1].get("max_len", 20))
        processed, F = (None, float("nan")) if dry_run else seq_proxy(entry, batch, max_len, data)
        return (["--processed", str(processed), "--epoch-scale", f"{F:.6g}"],
                f"shape proxy of {name}: its {n:,} items, every user of its mean {round(inter / users)} items, "
                f"epochs projected at its {users:,} users")
    n_train, _, per_point = XC_SIZES[name]
    processed = None if dry_run else prepared(entry, rows, data)
    feats = None if dry_run else featurised(processed, exp["features"], name, data)
    return (["--processed", str(processed), "--features", str(feats), "--epoch-rows", str(n_train)],
            f"shape proxy of {name}: synthetic-xmc with its {int(entry['n_classes']):,} labels and {per_point} labels "
            f"a point, {rows:,} rows, epochs projected at its {n_train:,} training points")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=sorted({*XC_SIZES, *SEQ_SIZES}))
    p.add_argument("--experiments", nargs="*", default=None, help="experiment files (default: every one on the dataset)")
    p.add_argument("--methods", nargs="*", default=None, help="default: every method of each experiment")
    p.add_argument("--exclude", nargs="*", default=[], help="methods left out (e.g. a dense head over a wide "
                   "intermediate layer whose n x 32,768 weights and Adam state do not fit beside other work)")
    p.add_argument("--rows", type=int, default=2400, help="XMC: the proxy's training rows (enough for the timed batches)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--note", default="", help="the conditions of the measurement, appended to each table's title")
    p.add_argument("--dry-run", action="store_true", help="print the train_step commands, run nothing")
    a = p.parse_args()
    from xcbench.catalogue import dataset_entry, load_datasets

    entry, data = dataset_entry(a.dataset, load_datasets()), REPO / PROXY
    exps = experiments_on(a.dataset, a.experiments)
    if not exps:
        raise SystemExit(f"shape_proxy: no paper-scale experiment trains on {a.dataset}")
    for f, exp in exps:
        methods = [m for m in exp["methods"] if (not a.methods or m in a.methods) and m not in a.exclude]
        if not methods:
            continue
        args, note = proxy_args(entry, exp, a.rows, data, a.dry_run)
        cmd = [sys.executable, "benchmarks/train_step.py", "--experiment", str(f.relative_to(REPO)), "--scale", "paper",
               "--dataset", a.dataset, *args, "--steps", str(a.steps), "--threads", str(a.threads),
               "--name", f"train_step_{exp['paper']}_{exp['artifact']}_paper_{a.dataset}",
               "--note", note + (f"; {a.note}" if a.note else ""),
               "--merge", "--methods", *methods]  # --merge: a method measured apart keeps its row
        print(" ".join(cmd), flush=True)
        if not a.dry_run:
            subprocess.run(cmd, check=True, cwd=REPO)


if __name__ == "__main__":
    main()
