"""Does a seqrec shape proxy's epoch count what the real set's does? Counted on every time-ordered set here.

benchmarks/shape_proxy.py gives MIDX Table 7's fetched sets (MovieLens-10M, Gowalla, Amazon-books) a proxy in which
every user has the real set's mean length L, and projects the epoch by the users' ratio. Real users have mixed
lengths, so the real set's training windows (the batches of an epoch), its training queries (the rows every head
scores: non-padding targets) and its validation queries (the evaluation's rows) can differ from users x the counts
of one user of length L. This counts the three on each real prepared set exactly as tasks/seqrec.py cuts it, beside
the mean-length projection, and writes their ratios. No timing: a pure count.

    python studies/shape_proxy_check/seqrec_counts.py    # -> studies/shape_proxy_check/out/seqrec_counts.{json,md}
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
OUT = Path(__file__).resolve().parent / "out"
SETS = ["movielens-100k", "seqrec-lastfm", "seqrec-beauty", "seqrec-sports", "seqrec-video"]


def counts(lengths: np.ndarray, T: int) -> dict:
    """(training windows, training queries, validation queries) of users of these lengths, cut as tasks/seqrec.py
    cuts them: windows of <= T + 1 items from the end of the training part, a query per non-padding target."""
    from xcbench.tasks.seqrec import split_points, window_ends

    w = q = v = 0
    for L in lengths.tolist():
        tr, va = split_points(L)
        ends = window_ends(tr, T)
        w += len(ends)
        q += sum(min(T, e - 1) for e in ends)  # a window of min(T + 1, e) items holds min(T, e - 1) targets
        v += va - tr
    return {"windows": w, "queries": q, "val": v}


def main() -> None:
    from common import write_outputs

    from xcbench.data.datasets import load_npz

    rows = []
    for name in SETS:
        arrays, _ = load_npz(REPO / "data" / "processed" / name / "dataset.npz")
        lengths = np.diff(arrays["seq_indptr"])
        real = counts(lengths, 20)
        L = int(round(lengths.sum() / len(lengths)))
        one = counts(np.array([L]), 20)
        proxy = {k: len(lengths) * v for k, v in one.items()}
        rows.append({"dataset": name, "users": len(lengths), "mean_length": float(lengths.mean()), "L": L,
                     "median_length": float(np.median(lengths)), "real": real, "proxy": proxy,
                     "ratio": {k: proxy[k] / real[k] for k in real}})
    lines = ["# Seqrec shape proxy: the epoch's counts by one mean-length user x users, against the real set's", "",
             "Counted as tasks/seqrec.py cuts each set (max_len 20). Ratio: proxy / real.", "",
             "| dataset | users | mean length (L) | median length | windows real | proxy / real | training queries real | "
             "proxy / real | validation queries real | proxy / real |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        R, q = r["real"], r["ratio"]
        lines.append(f"| {r['dataset']} | {r['users']:,} | {r['mean_length']:.1f} ({r['L']}) | {r['median_length']:.0f} | "
                     f"{R['windows']:,} | {q['windows']:.2f} | {R['queries']:,} | {q['queries']:.2f} | {R['val']:,} | "
                     f"{q['val']:.2f} |")
    write_outputs("seqrec_counts", rows, "\n".join(lines) + "\n", OUT)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
