"""Does a job's peak memory read the same in a fresh process and in a fork of the warm server?

The fork server (src/xcbench/forkserver.py) is kept off at the quick and paper scales because the whole process's
peak resident set (getrusage's ru_maxrss, `memory.peak_rss_bytes`) reads lower in a fork. `xcbench train` now also
writes `memory.peak_rss_above_start_bytes`: the peak since the job began (VmHWM reset through /proc/self/clear_refs)
above the resident set it began with (runtime.mark_rss). This runs each job fresh (XCBENCH_FORKSERVER=0) and served
(=1), interleaved over rounds, and tabulates both measures side by side.

    python studies/fork_memory/fork_memory.py [--rounds 3]      # writes studies/fork_memory/out/fork_memory.{json,md}

The jobs need their processed sets: `snakemake --cores 1 --config scale=quick -- data/processed/<dataset>/dataset.npz`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from xcbench.io import write_json, write_text

REPO = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "out"
# (experiment, scale, dataset, method): quick-scale xcbench jobs of the heads with the smallest and largest
# memory, and a tiny one
JOBS = [
    ("xcbench/faces", "tiny", "synthetic-faces-tiny", "full"),
    ("xcbench/faces", "quick", "synthetic-faces-10k", "full"),
    ("xcbench/faces", "quick", "synthetic-faces-10k", "random"),
    ("xcbench/lm", "quick", "ptb", "full"),
    ("xcbench/lm", "quick", "ptb", "hsm"),
    ("xcbench/xmc", "quick", "synthetic-xmc-10k", "bce"),
]


def run_job(job, work: Path, served: bool) -> dict:
    exp, scale, dataset, method = job
    out = work / f"{exp.replace('/', '_')}_{scale}_{method}_{'served' if served else 'fresh'}"
    cfg = REPO / f"config/experiments/{exp}.yaml"
    features = []
    from xcbench.config import load_experiment, resolve_experiment

    spec = resolve_experiment(load_experiment(cfg), scale).get("features")
    if spec:
        features = ["--features", str(REPO / f"data/features/{dataset}/{spec['extractor']}{spec['dim']}.pt")]
    argv = [sys.executable, "-m", "xcbench", "train", "--experiment", str(cfg), "--scale", scale, "--dataset", dataset,
            "--method", method, "--seed", "0", "--processed", str(REPO / f"data/processed/{dataset}/dataset.npz"),
            *features, "--device", "cpu", "--threads", "1", "--no-reuse", "--out", str(out)]
    env = {**os.environ, "XCBENCH_FORKSERVER": "1" if served else "0"}
    subprocess.run(argv, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mem = json.loads((out / "metrics.json").read_text())["memory"]
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return {"peak_rss": mem["peak_rss_bytes"], "above_start": mem.get("peak_rss_above_start_bytes")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for job in JOBS:
            got = {"fresh": [], "served": []}
            for r in range(args.rounds):
                for served in ((False, True) if r % 2 == 0 else (True, False)):
                    got["served" if served else "fresh"].append(run_job(job, Path(tmp), served))
            med = {k: {m: statistics.median(x[m] for x in v) for m in ("peak_rss", "above_start")} for k, v in got.items()}
            rows.append({"job": " ".join(job), "rounds": args.rounds, "runs": got, "median": med})
            print(json.dumps(rows[-1]["median"]), job, flush=True)
    MB = 1e6
    lines = ["# Peak memory of one train job, fresh process against a fork of the warm server (median over rounds)", "",
             "| job (experiment, scale, dataset, method) | peak RSS fresh MB | peak RSS served MB | served - fresh | "
             "above start fresh MB | above start served MB | served - fresh | spread of above start over rounds MB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, s = r["median"]["fresh"], r["median"]["served"]
        spread = max(x["above_start"] for v in r["runs"].values() for x in v) - min(
            x["above_start"] for v in r["runs"].values() for x in v)
        lines.append(f"| {r['job']} | {f['peak_rss'] / MB:.0f} | {s['peak_rss'] / MB:.0f} | {(s['peak_rss'] - f['peak_rss']) / MB:+.0f} | "
                     f"{f['above_start'] / MB:.0f} | {s['above_start'] / MB:.0f} | "
                     f"{(s['above_start'] - f['above_start']) / MB:+.0f} | {spread / MB:.0f} |")
    lines += ["", "One CPU thread a job; rounds alternate which of the two runs first. peak RSS: getrusage's ru_maxrss of the "
              "whole process (`memory.peak_rss_bytes`); above start: `memory.peak_rss_above_start_bytes`."]
    write_json(OUT / "fork_memory.json", rows)
    write_text(OUT / "fork_memory.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
