"""What a job costs beyond its work: tiny train and render jobs run as fresh processes and through the fork
server (src/xcbench/forkserver.py), interleaved, side by side in one run.

Each round runs every job once fresh (XCBENCH_FORKSERVER=0) and once served (=1), alternating which goes
first; a job's time is the wall clock of its whole `python -m xcbench ...` command. The served jobs of the
first round include starting the servers. Writes benchmarks/out/job_startup.{json,md}.

    python benchmarks/job_startup.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import write_outputs

REPO = Path(__file__).resolve().parents[1]
TRAIN = [("midx/table4", "lstm_full"), ("midx/table4", "lstm_midx_rq"), ("rff/fig1", "rff_t05")]
DATASET = "synthetic-lm-tiny"


def jobs(work: Path, npz: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) of each job. A train run writes where the DAG would put it under work/results (a finished
    run leaves no checkpoint, so the next round trains it again), where the render finds rff/fig1's run."""
    out = []
    for exp, method in TRAIN:
        run_dir = work / "results/tiny" / exp / DATASET / method / "seed0"
        out.append((f"train {exp} {method}", ["train", "--experiment", str(REPO / f"config/experiments/{exp}.yaml"),
                    "--scale", "tiny", "--dataset", DATASET, "--method", method, "--seed", "0", "--processed", str(npz),
                    "--device", "cpu", "--threads", "1", "--no-reuse", "--out", str(run_dir)]))
    out.append(("render rff/fig1", ["render", "--experiment", str(REPO / "config/experiments/rff/fig1.yaml"), "--scale",
                                    "tiny", "--results", str(work / "results"), "--out", str(work / "fig" / "fig1")]))
    return out


def run(args: list[str], served: bool) -> float:
    env = {**os.environ, "XCBENCH_FORKSERVER": "1" if served else "0"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "xcbench", *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from xcbench.catalogue import load_datasets
    from xcbench.data.datasets import prepare
    from xcbench.data.synthetic import generate

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        entry = load_datasets()[DATASET]
        generate(entry, work / "raw")
        prepare(entry, work / "raw", work / "dataset.npz")
        times = {}
        for r in range(a.rounds):
            for name, argv in jobs(work, work / "dataset.npz"):
                for served in ((False, True) if r % 2 == 0 else (True, False)):
                    times.setdefault(name, {}).setdefault("served" if served else "fresh", []).append(run(argv, served))
    rows = []
    for name, by_mode in times.items():
        f, s = by_mode["fresh"], by_mode["served"]
        rows.append({"job": name, "fresh_s": f, "served_s": s, "fresh_median_s": statistics.median(f),
                     "served_median_s": statistics.median(s), "ratio": statistics.median(s) / statistics.median(f)})
    lines = [f"# Job start-up: fresh process vs fork server, tiny jobs, {a.rounds} rounds interleaved",
             "", "| job | fresh s (median) | served s (median) | served / fresh | first round fresh / served s |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['job']} | {row['fresh_median_s']:.2f} | {row['served_median_s']:.2f} | {row['ratio']:.2f} | "
                     f"{row['fresh_s'][0]:.2f} / {row['served_s'][0]:.2f} |")
    lines += ["", "Wall clock of the whole `python -m xcbench ...` command, on this machine as loaded when it ran; the "
              "first round's served jobs include starting the servers (torch's import for train, matplotlib's for render)."]
    for p in write_outputs("job_startup", {"rounds": a.rounds, "rows": rows}, "\n".join(lines)):
        print("wrote", p)


if __name__ == "__main__":
    main()
