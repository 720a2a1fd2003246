"""Every run of the DAG at one scale on the CPU and on CUDA, side by side: does each method run on the
GPU, and does it give the CPU's numbers?

Three steps, the first and last anywhere, the second on the GPU machine:

    python benchmarks/device_parity.py commands --scale tiny > /tmp/cmds.txt    # the DAG's train commands (snakemake -n)
    python benchmarks/device_parity.py run --commands /tmp/cmds.txt --device cpu cuda --jobs 12 --root results_parity
    python benchmarks/device_parity.py compare --root results_parity --name device_parity

`compare --sides before after` compares two other folders under --root instead, e.g. two CPU sweeps (`run --device
cpu`, the folder renamed) of the code before and after a change: benchmarks/out/cpu_draws_unchanged.md.

`run` starts every train command once per device (its `--device` and `--out` replaced: the run goes to
<root>/<device>/<the DAG's results path>), `--jobs` at a time, one thread each, and records each run's exit
status and wall time beside it (parity_run.json). `compare` reads both trees and writes
benchmarks/out/<name>.{json,md}: per run the largest relative difference |a - b| / max(|a|, |b|, 1e-12) over
the numeric leaves of metrics.json's "metrics" (the test metrics; measured times left out), and the runs
that failed.

What the same numbers may not be expected from: every draw is made on a CPU generator and moved
(src/xcbench/seed.py), so runs should agree to float tolerance, except where a draw falls on a boundary
that CUDA rounds otherwise (a run then drifts apart) and in models with nn.LSTM's or
nn.TransformerEncoderLayer's own dropout (drawn on the GPU): those agree only in distribution. The table
marks each run's largest difference so the kinds show apart. (Before draws moved to CPU generators, at
4b8f977, every sampled run followed CUDA's own streams: 35 of 107 runs agreed.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import write_outputs

OUT = Path(__file__).resolve().parent / "out"
SAME = 1e-4  # relative difference under which two runs count as the same numbers
TIMING = re.compile(r"time|_s$|_ms|per_s|speed")  # measured times (timing tasks' metrics): not compared


def commands(scale: str) -> list[str]:
    """The train commands of every run of the DAG at `scale` (a forced dry run), interpreter as `python3`."""
    r = subprocess.run(["snakemake", "-n", "-p", "--forceall", "--nolock", "--config", f"scale={scale}"],
                       capture_output=True, text=True, check=True)
    lines = [ln.strip() for ln in r.stdout.splitlines() if " -m xcbench train " in ln]
    return sorted({"python3 " + ln.split(" -m ", 1)[1].split(" > ", 1)[0].replace("xcbench", "-m xcbench", 1)
                   for ln in lines})


def for_device(cmd: str, device: str, root: Path) -> tuple[list[str], Path]:
    """One command moved to `device`, its results under root/device/ (argv and output folder)."""
    argv = shlex.split(cmd)
    i, j = argv.index("--device"), argv.index("--out")
    argv[i + 1] = device
    argv[j + 1] = str(root / device / argv[j + 1])
    return argv, Path(argv[j + 1])


def run_all(cmds: list[str], devices: list[str], root: Path, jobs: int) -> None:
    """Every command on every device, `jobs` at a time, the devices interleaved (a sweep cut by a time
    limit leaves pairs, not one device's runs); each run's exit status and wall time land beside its
    results (parity_run.json), each device's name and torch in root/<device>/meta.json."""
    import torch

    from xcbench.device import device_name

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    for dev in devices:
        (root / dev).mkdir(parents=True, exist_ok=True)
        (root / dev / "meta.json").write_text(json.dumps({"device": device_name(torch.device(dev)),
                                                          "torch": torch.__version__, "jobs": jobs}))

    def one(argv_out):
        argv, out = argv_out
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(out / "train.log", "w") as log:
            rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        rec = {"rc": rc, "wall_s": time.perf_counter() - t0,
               "tail": "" if rc == 0 else (out / "train.log").read_text()[-1500:]}
        (out / "parity_run.json").write_text(json.dumps(rec))
        if rc:
            print(f"FAILED {out}\n{rec['tail']}", flush=True)
        return rc

    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        rcs = list(pool.map(one, [for_device(c, dev, root) for c in cmds for dev in devices]))
    print(f"{len(rcs)} runs on {devices} in {time.perf_counter() - t0:.0f} s, {sum(r != 0 for r in rcs)} failed", flush=True)


def leaves(x, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict / list, keyed by their path."""
    if isinstance(x, bool):
        return {}
    if isinstance(x, (int, float)):
        return {prefix: float(x)}
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in leaves(val, f"{prefix}.{key}" if prefix else str(key)).items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in leaves(val, f"{prefix}[{i}]").items()}
    return {}


def rel(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def compare(root: Path, a: str = "cpu", b: str = "cuda") -> tuple[list[dict], dict]:
    """Per run that finished or failed on either device: both exit statuses and the largest relative
    difference of the test metrics; and the two trees' meta (device names, torch)."""
    runs = {dev: {f.parent.relative_to(root / dev).as_posix(): json.loads(f.read_text())
                  for f in (root / dev).rglob("parity_run.json")} for dev in (a, b)}
    rows = []
    for key in sorted(set(runs[a]) | set(runs[b])):
        ra, rb = runs[a].get(key), runs[b].get(key)
        row = {"run": re.sub(r"^results/", "", key), f"{a}_rc": ra and ra["rc"], f"{b}_rc": rb and rb["rc"]}
        if ra and rb and ra["rc"] == 0 and rb["rc"] == 0:
            got = {dev: json.loads((root / dev / key / "metrics.json").read_text()) for dev in (a, b)}
            ma, mb = (leaves(got[dev].get("metrics", {})) for dev in (a, b))
            common = sorted(k for k in set(ma) & set(mb) if not TIMING.search(k))
            diffs = {k: rel(ma[k], mb[k]) for k in common}
            worst = max(diffs, key=diffs.get) if diffs else None
            row["commit"] = got[b].get("git_commit")
            row.update({"metrics": len(common), "worst": worst, "max_rel_diff": diffs.get(worst, 0.0),
                        f"{a}_value": ma.get(worst), f"{b}_value": mb.get(worst),
                        f"{a}_wall_s": ra["wall_s"], f"{b}_wall_s": rb["wall_s"]})
        else:
            row["error"] = next((r["tail"] for r in (rb, ra) if r and r["rc"]), "not run (the sweep's time limit)")
        rows.append(row)
    return rows, {dev: json.loads((root / dev / "meta.json").read_text()) for dev in (a, b)}


def render(rows: list[dict], name: str, meta: dict, a: str = "cpu", b: str = "cuda", note: str = "") -> None:
    """benchmarks/out/<name>.{json,md}, the sides titled by their folder names (cpu, cuda in capitals)."""
    ok = [r for r in rows if "max_rel_diff" in r]
    same = [r for r in ok if r["max_rel_diff"] <= SAME]
    A, B = (x.upper() if x in ("cpu", "cuda") else x for x in (a, b))
    lines = [f"# {A} vs {B}, every run of the DAG at scale {meta['scale']} ({A}: {meta[a]['device']}, torch "
             f"{meta[a]['torch']}; {B}: {meta[b]['device']}, torch {meta[b]['torch']}; one thread a run)", "",
             f"{len(rows)} runs; both finished: {len(ok)}; failed on a side: {len(rows) - len(ok)}. Same test metrics "
             f"(largest relative difference <= {SAME:g}): {len(same)}; exactly equal: "
             f"{sum(r['max_rel_diff'] == 0.0 for r in ok)}. Code ({B}'s runs): git "
             f"{', '.join(sorted({str(r.get('commit'))[:7] for r in ok}))} (the runs' metrics.json; a work tree may have "
             "held changes beyond it)." + (f" {note}" if note else ""), "",
             f"| run | metrics | largest relative difference | metric | {A} | {B} | wall {A} (s) | wall {B} (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "max_rel_diff" in r:
            lines.append(f"| {r['run']} | {r['metrics']} | {r['max_rel_diff']:.2e} | {r['worst']} | {r[f'{a}_value']:.6g} | "
                         f"{r[f'{b}_value']:.6g} | {r[f'{a}_wall_s']:.1f} | {r[f'{b}_wall_s']:.1f} |")
        else:
            err = (r.get("error") or "").strip().splitlines()[-1:] or ["?"]
            lines.append(f"| {r['run']} | failed ({a} rc {r[f'{a}_rc']}, {b} rc {r[f'{b}_rc']}) | | {err[0][:120]} | | | | |")
    OUT.mkdir(exist_ok=True)
    write_outputs(name, {"meta": meta, "rows": rows}, "\n".join(lines), OUT)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    c = sub.add_parser("commands")
    c.add_argument("--scale", default="tiny")
    r = sub.add_parser("run")
    r.add_argument("--commands", type=Path, required=True)
    r.add_argument("--device", nargs="+", default=["cpu", "cuda"])
    r.add_argument("--jobs", type=int, default=8)
    r.add_argument("--root", type=Path, default=Path("results_parity"))
    m = sub.add_parser("compare")
    m.add_argument("--root", type=Path, default=Path("results_parity"))
    m.add_argument("--name", default="device_parity")
    m.add_argument("--scale", default="tiny")
    m.add_argument("--sides", nargs=2, default=["cpu", "cuda"], metavar=("A", "B"),
                   help="the two folders under --root to compare (default: cpu cuda); e.g. `before after`, two CPU "
                        "sweeps of the code before and after a change, each made by `run --device cpu` and renamed")
    m.add_argument("--note", default="", help="a sentence for the table's header: what the two sides ran")
    a = p.parse_args()
    if a.verb == "commands":
        print("\n".join(commands(a.scale)))
    elif a.verb == "run":
        run_all([ln for ln in a.commands.read_text().splitlines() if ln.strip()], a.device, a.root, a.jobs)
    else:
        rows, meta = compare(a.root, *a.sides)
        render(rows, a.name, {"scale": a.scale, **meta}, *a.sides, note=a.note)


if __name__ == "__main__":
    sys.exit(main())
