"""Does backing the heap with transparent huge pages (glibc's `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, which
madvises malloc's memory as MADV_HUGEPAGE) make a CPU training step faster, with the same numbers?

Each round runs benchmarks/train_step.py once without and once with the tunable, in fresh processes (the tunable
is read at process start), alternating which goes first; the ratio is taken within a round, so load that changes
between rounds cancels. Then, for the bits: `--steps` steps of each method in a fresh process in each setting, and the
hashes of the weights compared. Writes out/<name>.json and out/<name>.md.

    python studies/hugepages/probe.py --experiment config/experiments/midx/table7.yaml --scale paper \\
        --dataset seqrec-sports --processed data/processed/seqrec-sports/dataset.npz --methods sas_full --rounds 2
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TUNABLE = "glibc.malloc.hugetlb=1"


def env(huge: bool) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    return {**e, "GLIBC_TUNABLES": TUNABLE} if huge else e


def step_ms(a, method: str, huge: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(REPO / "benchmarks" / "train_step.py"), "--experiment", a.experiment, "--scale",
               a.scale, "--dataset", a.dataset, "--processed", a.processed, "--methods", method, "--steps",
               str(a.steps), "--skip-eval", "--threads", str(a.threads), "--name", "probe", "--out-dir", tmp]
        subprocess.run(cmd, env=env(huge), cwd=REPO, check=True, capture_output=True, text=True)
        return json.loads((Path(tmp) / "probe.json").read_text())[0]["step_ms"]


BITS = """
import sys
sys.path.insert(0, "benchmarks")
from built import weights_after_steps
from xcbench.runtime import configure_process
configure_process(1)
experiment, scale, dataset, processed, method, steps = sys.argv[1:7]
print(weights_after_steps(experiment, scale, dataset, processed, method, int(steps)))
"""


def same_bits(a, method: str) -> bool:
    """`steps` training steps of `method` in each setting, in fresh processes: the same weights, bit for bit?"""
    got = [subprocess.run([sys.executable, "-c", BITS, a.experiment, a.scale, a.dataset, a.processed, method,
                           str(a.steps)], env=env(huge), cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.split()[-1] for huge in (False, True)]
    return got[0] == got[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", required=True)
    p.add_argument("--scale", default="paper")
    p.add_argument("--dataset", required=True)
    p.add_argument("--processed", required=True)
    p.add_argument("--methods", nargs="+", required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--name", default="probe")
    a = p.parse_args()
    rows = []
    for method in a.methods:
        pairs = []
        for r in range(a.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            t = {huge: step_ms(a, method, huge) for huge in order}
            pairs.append((t[False], t[True]))
            print(f"{method} round {r + 1}: {t[False]:.0f} ms without, {t[True]:.0f} ms with huge pages", flush=True)
        rows.append({"method": method, "pairs_ms": pairs, "same_weights": same_bits(a, method),
                     "ratio_median": statistics.median(h / b for b, h in pairs)})
    out = {"experiment": a.experiment, "scale": a.scale, "dataset": a.dataset, "threads": a.threads, "steps": a.steps,
           "tunable": TUNABLE, "rows": rows,
           "thp": Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / f"{a.name}.json").write_text(json.dumps(out, indent=1))
    lines = [f"# Huge pages: {a.experiment} ({a.scale}) on {a.dataset}, {a.threads} thread(s), median of {a.steps} "
             f"steps a process, {a.rounds} alternating rounds", "",
             f"THP setting: `{out['thp']}`. Same weights: the model's state after {a.steps} steps in a fresh process "
             "with and without, hashed.", "",
             "| method | ms a step without (per round) | ms a step with | with / without (median of rounds) | same weights |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {', '.join(f'{b:.0f}' for b, _ in r['pairs_ms'])} | "
                     f"{', '.join(f'{h:.0f}' for _, h in r['pairs_ms'])} | {r['ratio_median']:.2f} | {r['same_weights']} |")
    (HERE / "out" / f"{a.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
