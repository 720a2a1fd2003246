"""Lazy face batches per second with read-ahead threads (data/prefetch.py), with numpy's BLAS left at its
default thread count and at one thread per process (OPENBLAS_NUM_THREADS=1 etc., set before numpy loads:
each setting runs in its own process).

Rows of the 87K-identity set (data/faces.py, 512 a batch, random indices) are generated for `--batches`
batches through `read_ahead` with 0 (inline), 1, 2, 4 and 8 threads; nothing else runs, so the number is
the most a training loop could draw. Writes studies/read_ahead/out/<name>.{json,md}.

    python studies/read_ahead/read_ahead.py --name read_ahead
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def child(workers: list[int], batches: int) -> list[dict]:
    import time

    import numpy as np

    from xcbench.data.faces import FaceModel, LazyRows
    from xcbench.data.prefetch import read_ahead

    rows = LazyRows(FaceModel(0, 87000, 256, {"train": 50}, 1000, latent_dim=32, sigma=0.7, lazy=True), "train")
    rng = np.random.default_rng(0)
    idx = [rng.integers(0, len(rows), 512) for _ in range(batches)]
    out = []
    for w in workers:
        t = time.perf_counter()
        n = sum(1 for _ in read_ahead(rows.__getitem__, idx, w))
        out.append({"workers": w, "ms_per_batch": 1e3 * (time.perf_counter() - t) / n})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4, 8])
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--name", default="read_ahead")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.workers, a.batches)))
        return
    rows = []
    for blas in ("default", "1"):
        env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
        env.update({k: "1" for k in BLAS_VARS} if blas == "1" else {})
        cmd = [sys.executable, __file__, "--child", "--batches", str(a.batches), "--workers", *map(str, a.workers)]
        res = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        rows += [{"blas_threads": blas, **r} for r in res]
        print(rows[-len(res):], flush=True)
    cores = os.cpu_count()
    lines = [f"# Lazy 87K-face batches (512 rows) through read_ahead ({cores} cores; {a.batches} batches)", "",
             "| numpy BLAS threads | read-ahead threads | ms / batch | vs inline |", "|---|---|---|---|"]
    for r in rows:
        base = next(x["ms_per_batch"] for x in rows if x["blas_threads"] == r["blas_threads"] and x["workers"] == 0)
        lines.append(f"| {r['blas_threads']} | {r['workers']} | {r['ms_per_batch']:.2f} | {base / r['ms_per_batch']:.2f}x |")
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.name}.json").write_text(json.dumps({"cores": cores, "rows": rows}, indent=1))
    (OUT / f"{a.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
