"""Does a shape proxy step as its real set does? Delicious (983 labels, 19 labels a point) is both here.

For every method of an experiment that trains on Delicious at the paper scale, this times training steps on the
real prepared set and on its shape proxy (benchmarks/shape_proxy.py) in one process, alternating real and proxy
method by method and repeating the pair, so that both see the same machine load, and reports the proxy's step
over the real one's (median over the repeats) and the proxy's labels a row against the real set's.

    python studies/shape_proxy_check/check.py --threads 1      # -> studies/shape_proxy_check/out/check.{json,md}
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
OUT = Path(__file__).resolve().parent / "out"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="config/experiments/xcbench/xmc.yaml")
    p.add_argument("--dataset", default="delicious")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--note", default="")
    a = p.parse_args()
    from xcbench.runtime import configure_process

    configure_process(a.threads)
    import shape_proxy
    import torch
    from common import write_outputs
    from train_step import one

    from xcbench.catalogue import dataset_entry, features_path, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.data.datasets import load_npz
    from xcbench.device import deterministic_kernels
    from xcbench.tasks.base import make_task

    cpu = torch.device("cpu")
    deterministic_kernels(cpu)
    exp = resolve_experiment(load_experiment(REPO / a.experiment), "paper")
    entry = dataset_entry(a.dataset, load_datasets())
    real = (REPO / "data" / "processed" / a.dataset / "dataset.npz", REPO / features_path(exp["features"], entry))
    for f in real:
        if not f.exists():
            raise SystemExit(f"check: {f} does not exist; build it first: snakemake --cores 1 {f.relative_to(REPO)}")
    data = REPO / shape_proxy.PROXY
    processed = shape_proxy.prepared(entry, shape_proxy.XC_SIZES[a.dataset][0], data)
    proxy = (processed, shape_proxy.featurised(processed, exp["features"], a.dataset, data))
    tasks = {k: make_task(exp, entry, str(pr), str(fe), cpu, 0, dataset=a.dataset)
             for k, (pr, fe) in (("real", real), ("proxy", proxy))}
    Y = {k: load_npz(pr)[0]["train_Y"] for k, (pr, _) in (("real", real), ("proxy", proxy))}
    per_row = {k: float(y.nnz / y.shape[0]) for k, y in Y.items()}
    rows = []
    for method in exp["methods"]:
        steps = {"real": [], "proxy": []}
        for _ in range(a.repeats):
            for k in ("real", "proxy"):
                r = one(exp, tasks[k], a.dataset, method, cpu, a.steps, evaluate=False, warmup=3)
                steps[k].append(r["step_ms"])
        real_ms, proxy_ms = statistics.median(steps["real"]), statistics.median(steps["proxy"])
        rows.append({"method": method, "real_ms": real_ms, "proxy_ms": proxy_ms, "ratio": proxy_ms / real_ms,
                     "real_runs": steps["real"], "proxy_runs": steps["proxy"]})
        print(rows[-1], flush=True)
    ratios = sorted(r["ratio"] for r in rows)
    lines = [f"# Shape proxy against the real set: {exp['paper']}/{exp['artifact']} on {a.dataset} (paper scale, "
             f"{a.threads} CPU thread(s), median of {a.repeats} alternating repeats of {a.steps} steps)"
             + (f"; {a.note}" if a.note else ""), "",
             f"Labels a training row: real {per_row['real']:.2f}, proxy {per_row['proxy']:.2f}. Proxy step over real "
             f"step: median {statistics.median(ratios):.2f}x, range {ratios[0]:.2f}-{ratios[-1]:.2f}x.", "",
             "| method | real ms / step | proxy ms / step | proxy / real |", "|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['real_ms']:.1f} | {r['proxy_ms']:.1f} | {r['ratio']:.2f} |" for r in rows]
    write_outputs("check", {"rows": rows, "labels_per_row": per_row, "experiment": a.experiment,
                            "dataset": a.dataset, "threads": a.threads}, "\n".join(lines), OUT)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
