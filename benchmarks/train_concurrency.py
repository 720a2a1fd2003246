"""How many training runs should share one GPU: k copies of one run's training step at once.

`snakemake --cores all --config scale=paper device=cuda` starts as many training jobs as there are
cores unless `--resources gpu=K` caps them, and every one of them lands on the same GPU. The paper-scale
language models take 3-20 ms a step on an H200 (benchmarks/out/train_step_*_cuda.md): small kernels,
so one run leaves most of the GPU idle and several runs may share it for free, or time-slice it.
This starts k processes of benchmarks/train_step.py (same experiment, dataset and method, each its own
CUDA context, no MPS) at once for each k, and reads each one's median step time. Throughput of k
runs = k / (median of their step times); speedup = that over one run's throughput, measured in the
same call. The timed windows overlap when `--steps` is long against the processes' start-up spread
(the table gives each group's wall time beside its steps).

    python benchmarks/train_concurrency.py --experiment config/experiments/midx/table4.yaml \\
        --dataset wikitext-2 --processed data/processed/wikitext-2/dataset.npz --method tf_midx_pq

Writes benchmarks/out/<name>.{json,md} (--name, default train_concurrency; the H100 run: benchmarks/out/train_concurrency_cuda.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import write_outputs
from train_step import run_args

OUT = Path(__file__).resolve().parent / "out"
STEP = Path(__file__).resolve().parent / "train_step.py"


def group(k: int, a: argparse.Namespace, tmp: Path) -> dict:
    """k concurrent train_step processes; their rows and the group's wall time."""
    cmd = [sys.executable, str(STEP), "--experiment", a.experiment, "--scale", a.scale, "--dataset", a.dataset,
           "--processed", a.processed, "--methods", a.method, "--steps", str(a.steps), "--device", a.device,
           "--out-dir", str(tmp), "--skip-eval", "--draws", a.draws, "--threads", "1"]  # one CPU thread a run, as the DAG's jobs
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd + ["--name", f"k{k}_{i}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for i in range(k)]
    errs = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - t0
    for p, e in zip(procs, errs):
        if p.returncode:
            raise SystemExit(f"train_concurrency: a train_step process failed (k = {k}):\n{e[-2000:]}")
    rows = [json.loads((tmp / f"k{k}_{i}.json").read_text())[0] for i in range(k)]
    ms, chained = [r["step_ms"] for r in rows], [r["chained_step_ms"] for r in rows]
    return {"k": k, "step_ms_median": statistics.median(ms), "step_ms_min": min(ms), "step_ms_max": max(ms),
            "chained_ms_median": statistics.median(chained), "draws": a.draws,
            "wall_s": wall, "device": rows[0]["device"], "torch": rows[0]["torch"]}


def table(rows: list[dict], a: argparse.Namespace) -> str:
    solo, solo_c = rows[0]["step_ms_median"], rows[0].get("chained_ms_median", float("nan"))
    lines = [f"# Runs sharing one GPU: {a.method} ({a.experiment}, scale {a.scale}, {a.dataset}; draws {a.draws}; "
             f"{rows[0]['device']}, torch {rows[0]['torch']})", "",
             f"k processes of benchmarks/train_step.py at once, each timing {a.steps} steps after a warm-up "
             "(median per process; min-max over the k processes), each step alone (synchronised) and the same steps "
             "chained (one synchronisation at the end, as the training loop runs). Throughput = k / step time; "
             "speedup against k = 1 in the same call.", "",
             "| k runs | ms / step (median) | min - max | steps / s, all runs | speedup vs one run | chained ms / step | "
             "chained steps / s, all runs | chained speedup | wall (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        thr, c = r["k"] * 1e3 / r["step_ms_median"], r.get("chained_ms_median", float("nan"))
        lines.append(f"| {r['k']} | {r['step_ms_median']:.1f} | {r['step_ms_min']:.1f} - {r['step_ms_max']:.1f} | "
                     f"{thr:.0f} | {thr * solo / 1e3:.2f} | {c:.1f} | {r['k'] * 1e3 / c:.0f} | {r['k'] * solo_c / c:.2f} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run_args(p)
    p.add_argument("--method", required=True)
    p.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--device", default="cuda")
    p.add_argument("--draws", default="cpu", choices=["cpu", "device"], help="train.draws of every run")
    p.add_argument("--name", default="train_concurrency")
    a = p.parse_args()
    if a.k[0] != 1:
        raise SystemExit("train_concurrency: --k must start with 1 (the baseline of the speedups)")
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for k in a.k:
            rows.append(group(k, a, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    OUT.mkdir(exist_ok=True)
    write_outputs(a.name, rows, table(rows, a))
    print(table(rows, a))


if __name__ == "__main__":
    main()
