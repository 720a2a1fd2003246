"""Speed of the XC BOW reader: the vectorised path (xc_text.parse_fast: byte masks give each row's
label and feature counts, xc_text.decimals parses every number of the file at the byte level, no
per-row Python) against the line-by-line path (readers._parse_lines, per-token Python, kept to name
file:line on bad input), side by side on every XC BOW file in the mirror, with equal output checked;
and napkinxc's C++ reader where it is installed, with whether it rejects three malformed files (a
non-integer label, a token without ':', a line cut after 'f:'): it accepts all three silently, which is
why xcbench does not use it.

    python -P benchmarks/xc_reader.py [--mirror ../shared/data] [--repeats 3]

Writes benchmarks/out/xc_reader.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "out"


def bow_files(mirror: Path) -> list[Path]:
    out = []
    for f in sorted(mirror.glob("*/*.txt")):
        with open(f, encoding="utf-8", errors="replace") as fh:
            head = fh.readline().split()
        if len(head) == 3 and all(t.isdigit() for t in head):
            out.append(f)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mirror", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    from xcbench.data import readers, xc_text

    rows = []
    for f in bow_files(Path(a.mirror)):
        text = f.read_text(encoding="utf-8")
        t = {}
        for name, fn in (("fast", lambda: xc_text.parse_fast(text)), ("lines", lambda: readers._parse_lines(f, text))):
            times = []
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                res = fn()
                times.append(time.perf_counter() - t0)
            t[name] = (statistics.median(times), res)
        (Xf, Yf, _), (Xl, Yl, _) = t["fast"][1], t["lines"][1]
        same = all(np.array_equal(getattr(u, k), getattr(v, k)) for u, v in ((Xf, Xl), (Yf, Yl))
                   for k in ("indptr", "indices", "data"))
        rows.append({"file": f"{f.parent.name}/{f.name}", "rows": Xf.shape[0], "nnz": int(Xf.nnz),
                     "fast_s": t["fast"][0], "lines_s": t["lines"][0], "speedup": t["lines"][0] / t["fast"][0],
                     "identical": same})
        print(json.dumps(rows[-1]), flush=True)
    try:
        from napkinxc.datasets import load_libsvm_file
    except ImportError:
        load_libsvm_file = None
    if load_libsvm_file is not None:
        for r, f in zip(rows, bow_files(Path(a.mirror))):
            times = []
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                load_libsvm_file(str(f), labels_format="csr_matrix", sort_indices=True)
                times.append(time.perf_counter() - t0)
            r["napkinxc_s"] = statistics.median(times)
        import tempfile
        silent = []
        for body in ("2 5 4\n0 1:1\n0,x 1:1\n", "2 5 4\n0 1:1\n1 2-1\n", "2 5 4\n0 1:1\n1 4:"):
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as tf:
                tf.write(body)
            try:
                load_libsvm_file(tf.name, labels_format="csr_matrix")
                silent.append(True)
            except Exception:  # noqa: BLE001
                silent.append(False)
        rows.append({"napkinxc_accepts_malformed": silent})
    OUT.mkdir(exist_ok=True)
    (OUT / "xc_reader.json").write_text(json.dumps(rows, indent=1))
    md = ["# XC BOW reader: vectorised vs line-by-line (median of %d, same process, side by side)" % a.repeats, "",
          "| file | rows | nnz | vectorised s | line by line s | speed-up | identical |", "|---|---|---|---|---|---|---|"]
    md[2] = md[2].rstrip(" |") + " | napkinxc s |"
    md[3] += "---|"
    md += [f"| {r['file']} | {r['rows']:,} | {r['nnz']:,} | {r['fast_s']:.3f} | {r['lines_s']:.3f} | "
           f"{r['speedup']:.1f}x | {r['identical']} | {r.get('napkinxc_s', float('nan')):.3f} |" for r in rows if "file" in r]
    md += [f"\nnapkinxc accepts (no error) a non-integer label, a token without ':', a line cut after 'f:': "
           f"{r['napkinxc_accepts_malformed']}" for r in rows if "napkinxc_accepts_malformed" in r]
    (OUT / "xc_reader.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
