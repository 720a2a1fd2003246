"""Do a step's blocks above glibc's mmap threshold page-fault on every step, and does serving them from the
heap (never trimmed) remove that without changing a bit?

`xcbench train` sets glibc's allocator so that freed blocks stay in the process for reuse (xcbench.runtime:
mmap threshold 1 GiB, trim threshold 2 GiB - 1). A block above that threshold still gets a fresh mapping each
time, so its pages fault again (and are zeroed by the kernel) at every step; and once more than 2 GiB lie free
at the heap's top, it is trimmed and faulted in again. MIDX Table 7's Full step on
Amazon Sports holds (21,073 x 18,357) logits, 1.55 GB each. For each allocator setting, in a fresh process,
this runs `--steps` training steps and reports each step's minor page faults, CPU time, wall time and the
resident set after it (does it keep growing?), the peak resident set, and a hash of the weights after the
last step. Writes out/<name>.json and out/<name>.md.

    python studies/malloc_big_blocks/probe.py --method sas_full --steps 6
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SETTINGS = {  # mallopt calls after xcbench.runtime's own: (param, value)
    "runtime: mmap above 1 GiB, trim above 2 GiB": [],
    "no mmap, never trim": [(-4, 0), (-1, -1)],   # M_MMAP_MAX = 0; a trim threshold of -1 turns trimming off
}

CHILD = """
import ctypes, ctypes.util, json, resource, sys, time
sys.path.insert(0, "benchmarks")
from built import weights_after_steps
from xcbench.runtime import configure_process
experiment, scale, dataset, processed, method, steps, calls = sys.argv[1:8]
configure_process(1)
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
ok = [libc.mallopt(p, v) for p, v in json.loads(calls)]
rows = []


def measured(step):
    f0, t0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter(), time.process_time()
    step()
    rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1e6  # GB
    rows.append({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
                 "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0, "rss_gb": rss})


weights = weights_after_steps(experiment, scale, dataset, processed, method, int(steps), measured)
print(json.dumps({"mallopt_ok": ok, "steps": rows, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
                  "weights": weights}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="config/experiments/midx/table7.yaml")
    p.add_argument("--scale", default="paper")
    p.add_argument("--dataset", default="seqrec-sports")
    p.add_argument("--processed", default="data/processed/seqrec-sports/dataset.npz")
    p.add_argument("--method", default="sas_full")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--name", default=None)
    a = p.parse_args()
    out = {"experiment": a.experiment, "scale": a.scale, "dataset": a.dataset, "method": a.method, "settings": {}}
    for name, calls in SETTINGS.items():
        r = subprocess.run([sys.executable, "-c", CHILD, a.experiment, a.scale, a.dataset, a.processed, a.method,
                            str(a.steps), json.dumps(calls)], cwd=REPO, check=True, capture_output=True, text=True,
                           env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
        out["settings"][name] = json.loads(r.stdout.strip().splitlines()[-1])
        print(name, out["settings"][name], flush=True)
    name = a.name or f"{Path(a.experiment).stem}_{a.dataset}_{a.method}"
    keys = list(out["settings"].values())
    out["same_weights"] = all(r["weights"] == keys[0]["weights"] for r in keys)
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / f"{name}.json").write_text(json.dumps(out, indent=1))
    lines = [f"# Allocator settings: {a.experiment} ({a.scale}) on {a.dataset}, {a.method}, one thread, {a.steps} steps "
             "in a fresh process each", "",
             "| setting | minor faults a step | CPU s a step | wall s a step | resident GB after each step | peak RSS GB | weights |",
             "|---|---|---|---|---|---|---|"]
    for s, r in out["settings"].items():
        col = lambda k, f: ", ".join(f.format(st[k]) for st in r["steps"])  # noqa: E731
        lines.append(f"| {s} | {col('faults', '{:,}')} | {col('cpu_s', '{:.1f}')} | {col('wall_s', '{:.1f}')} | "
                     f"{col('rss_gb', '{:.2f}')} | {r['peak_rss_gb']:.2f} | `{r['weights']}` |")
    (HERE / "out" / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
