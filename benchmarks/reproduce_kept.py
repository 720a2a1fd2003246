"""Does today's code give a kept tree's numbers? Retrain some of `reference/<scale>`'s runs and compare.

The drift check (src/xcbench/reporting/drift.py) holds a kept run's *settings* to today's experiment files;
this script holds its *numbers* to today's code: it retrains kept runs with `xcbench train --no-reuse` (same
experiment, dataset, method and seed, on the CPU, one thread) into a scratch folder and compares the test
metrics and per-epoch curves (the training loss among them) of metrics.json with the kept ones, exactly
(CPU runs are deterministic for a seed). A difference means the code computes something else than when the
run was kept: an intended change (then retrain the kept runs it touches) or a regression, as when the
encoders' dropout drew its mask in another memory order (found by hand, docs/results.md).

    python benchmarks/reproduce_kept.py --root reference/quick --scale quick --data /path/to/data --max-seconds 10 \
        --cpu-capability avx2

Bits depend on the vector instruction set of torch's CPU kernels (`torch.backends.cpu.get_cpu_capability()`):
MIDX Table 7's GRU4Rec Full on MovieLens-100K gave the same validation and test metrics under AVX2 and AVX512
and a training loss 4e-7 apart in three of its ten epochs. A retrain runs under the
capability its kept run recorded (`versions.cpu_capability`), else under --cpu-capability, and oneDNN's kernels
(the LSTM's) capped at the same level (ONEDNN_MAX_CPU_ISA).

Picks the cheapest kept run of every (head, encoder, dropout on or off) family whose recorded wall time is
at most --max-seconds (or the runs named by --runs, paths under <root>/results/<scale>/), skips runs whose
data are not prepared under --data, and writes benchmarks/out/reproduce_kept_<scale>.{json,md}.

The kept numbers hold on the machine that made them: MKL and oneDNN pick kernels by CPU model, not only by
instruction set, so on an Intel Xeon capped at AVX2 twelve of twenty quick families give other last bits than on the
AMD EPYC that kept them (benchmarks/out/reproduce_kept_quick_vs_4ead4522.md). `--baseline REV` asks the question a
code change raises on any machine: each picked run is trained twice here, by REV's code and experiment files (a git
worktree) and by today's, and today's numbers are compared with REV's (output reproduce_kept_<scale>_vs_<REV>).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import OUT, write_outputs

REPO = Path(__file__).resolve().parents[1]


def numbers(rec: dict) -> dict:
    """What a run computed: its test metrics and its per-epoch curves (the training loss among them, which a
    change of the last float bit moves where ranking metrics may not); wall-clock numbers are not in either."""
    return {**{f"metrics.{k}": v for k, v in rec["metrics"].items()},
            **{f"curves.{k}": v for k, v in rec.get("curves", {}).items()}}


def kept_runs(results: Path) -> list[dict]:
    """Every kept run trained (not copied) with its record and settings."""
    from xcbench.io import read_yaml
    from xcbench.runspec import encoder_config

    out = []
    for f in sorted(results.glob("*/*/*/*/seed*/metrics.json")):
        rec = json.loads(f.read_text())
        cfg = read_yaml(f.with_name("config.resolved.yaml")) or {}
        if rec.get("reused_from") or not rec.get("wall_time_s") or not cfg.get("train"):
            continue
        paper, artifact, dataset, method, seed = f.parent.relative_to(results).parts
        enc = encoder_config(cfg.get("model") or {})
        out.append({"path": str(f.parent.relative_to(results)), "paper": paper, "artifact": artifact, "dataset": dataset,
                    "method": method, "seed": int(seed[4:]), "wall_s": rec["wall_time_s"], "numbers": numbers(rec),
                    "cpu_capability": rec.get("versions", {}).get("cpu_capability"), "inputs": rec.get("inputs"),
                    "features": cfg.get("features"), "family": (cfg.get("head"), enc.get("name"),
                                                                float(enc.get("dropout") or 0) > 0)})
    return out


def cheapest_per_family(runs: list[dict], max_s: float) -> list[dict]:
    best: dict = {}
    for r in sorted(runs, key=lambda r: r["wall_s"]):
        if r["wall_s"] <= max_s:
            best.setdefault(r["family"], r)
    return list(best.values())


# torch's own CPU kernels follow ATEN_CPU_CAPABILITY; oneDNN's (nn.LSTM's mkldnn_rnn_layer) follow ONEDNN_MAX_CPU_ISA:
# both capped at the kept run's level (PTB's LSTM runs kept under AVX2 differ on an AVX512 CPU without the second)
ONEDNN_ISA = {"default": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE"}


def retrain(r: dict, scale: str, data: Path, scratch: Path, capability: str | None = None, code: Path = REPO,
            against: dict | None = None) -> dict:
    """Retrain one kept run with the package and experiment files under `code` (a checkout) and compare with the
    kept numbers, or with `against` (another retrain's row: its numbers and input digests); under
    ATEN_CPU_CAPABILITY=`capability` (the vector instruction set of torch's CPU kernels, which moves the last bits:
    the kept run's own where it recorded one, else the caller's), oneDNN's capped at the same level. The row's
    `now` holds the numbers computed."""
    from xcbench.catalogue import dataset_entry, features_path, load_datasets

    processed = data / "processed" / r["dataset"] / "dataset.npz"
    if not processed.exists():
        return {**r, "status": f"skipped: {processed} not prepared"}
    out = scratch / ("now" if code == REPO else "base") / r["path"]
    cmd = [sys.executable, "-m", "xcbench", "train", "--experiment",
           str(code / "config" / "experiments" / r["paper"] / f"{r['artifact']}.yaml"), "--scale", scale,
           "--dataset", r["dataset"], "--method", r["method"], "--seed", str(r["seed"]), "--processed", str(processed),
           "--device", "cpu", "--threads", "1", "--no-reuse", "--out", str(out)]
    features = features_path(r["features"], dataset_entry(r["dataset"], load_datasets()), data)
    if features is not None:
        if not Path(features).exists():
            return {**r, "status": f"skipped: {features} not prepared"}
        cmd += ["--features", features]
    env = {**os.environ, **({"ATEN_CPU_CAPABILITY": capability.lower(),
                             "ONEDNN_MAX_CPU_ISA": ONEDNN_ISA.get(capability.lower(), "ALL")} if capability else {}),
           **({"PYTHONPATH": str(code / "src")} if code != REPO else {})}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=code, env=env)
    if done.returncode != 0:
        return {**r, "status": "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]}
    now_rec = json.loads((out / "metrics.json").read_text())
    now = numbers(now_rec)
    ref, ref_inputs = (r["numbers"], r.get("inputs")) if against is None else (against["now"], against["now_inputs"])
    diff, added = compare(now, ref)
    return {**r, "status": status(diff, ref_inputs, now_rec.get("inputs")), "differences": diff, "added": added,
            "ran_capability": now_rec.get("versions", {}).get("cpu_capability"), "now": now,
            "now_inputs": now_rec.get("inputs")}


def compare(now: dict, kept: dict) -> tuple[dict, list[str]]:
    """The numbers the kept run has that today's run gives otherwise, or lacks ({key: (kept, now)}), and the keys
    today's code computes that the kept record predates (a metric added since, such as the XMC task's
    `softmax_loss`): those are listed, not counted as a difference."""
    diff = {k: (v, now.get(k)) for k, v in sorted(kept.items()) if now.get(k) != v}
    return diff, sorted(set(now) - set(kept))


LOSS_SUM_RTOL = 1e-7   # float32's last bit: a per-batch loss summed in another order or precision moves this much


def _relative(x: float | None, y: float | None) -> float:
    """|x - y| relative to the larger; an epoch with a value on one side only (None on the other) differs wholly."""
    if x == y:
        return 0.0
    if x is None or y is None:
        return math.inf
    return abs(x - y) / max(abs(x), abs(y), 1e-30)


def status(diff: dict, kept_inputs: dict | None, now_inputs: dict | None) -> str:
    """'identical'; 'metrics identical' where only the training loss's per-epoch means moved, by at most
    LOSS_SUM_RTOL (float32's last bits: the weights may differ as little, which ranking metrics do not see); else
    'differs' and why it may."""
    if not diff:
        return "identical"
    if all(k.startswith("curves.train_loss") and isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
           for k, (a, b) in diff.items()):
        rel = max(_relative(x, y) for a, b in diff.values() for x, y in zip(a, b))
        if rel <= LOSS_SUM_RTOL:
            return (f"metrics identical: every test metric and validation curve; the training loss's epoch means "
                    f"differ by at most {rel:.1e} relative (float32's last bits)")
    return "differs" + inputs_note(kept_inputs, now_inputs)


def inputs_note(kept: dict | None, now: dict | None) -> str:
    """Why a retrained run may differ though the code did not change: its input files (metrics.json `inputs`,
    records.input_digests) are not those the kept run read, or the kept run did not record them."""
    if not kept:
        return " (the kept run recorded no digests of its input files: they may differ)"
    other = [k for k in sorted(set(kept) | set(now or {})) if kept.get(k) != (now or {}).get(k)]
    return f" (other input files: {', '.join(other)}; rebuild them as the kept run's were, then compare)" if other else ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default="reference/quick")
    p.add_argument("--scale", default="quick")
    p.add_argument("--data", default="data", help="the folder holding processed/ and features/ (the DAG's data=)")
    p.add_argument("--max-seconds", type=float, default=10.0, help="kept runs whose recorded wall time is at most this")
    p.add_argument("--runs", nargs="*", help="run folders under <root>/results/<scale>/ instead of the cheapest per family")
    p.add_argument("--cpu-capability", default=None, help="ATEN_CPU_CAPABILITY (avx2, avx512, default) for kept runs that "
                   "recorded none: a run kept under AVX2 gives other last bits under AVX512 (runs record theirs since "
                   "2026-11-29; the quick tree before that was kept under avx2)")
    p.add_argument("--baseline", metavar="REV", help="compare with the numbers of REV's code (a commit), trained here too, "
                   "instead of the kept ones: a code change, separated from the machine's last bits")
    p.add_argument("--out-dir", default=OUT)
    a = p.parse_args()
    results = (REPO / a.root / "results" / a.scale).resolve()
    runs = kept_runs(results)
    picked = [r for r in runs if r["path"] in set(a.runs)] if a.runs else cheapest_per_family(runs, a.max_seconds)
    data, against = Path(a.data).resolve(), a.baseline or "kept"
    with tempfile.TemporaryDirectory() as scratch:
        code = Path(scratch) / "baseline"
        if a.baseline:
            subprocess.run(["git", "worktree", "add", "--detach", str(code), a.baseline], cwd=REPO, check=True,
                           capture_output=True)
        try:
            rows = []
            for r in picked:
                cap, base = r["cpu_capability"] or a.cpu_capability, None
                if a.baseline:
                    base = retrain(r, a.scale, data, Path(scratch), cap, code=code)
                rows.append(base if base and "now" not in base else retrain(r, a.scale, data, Path(scratch), cap, against=base))
                print(f"{rows[-1]['path']}: {rows[-1]['status']}", flush=True)
        finally:
            if a.baseline:
                subprocess.run(["git", "worktree", "remove", "--force", str(code)], cwd=REPO, capture_output=True)
    by = "today's code" + (f" and by {a.baseline}'s, on one machine" if a.baseline else "")
    md = [f"# Kept {a.scale}-scale runs retrained by {by} (CPU, one thread): the same numbers?", "",
          f"| run | head | encoder | dropout | kept wall s | kept / rerun CPU capability | result | first difference ({against} vs now) |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        first = next(iter(r.get("differences", {}).items()), None)
        md.append(f"| {r['path']} | {r['family'][0]} | {r['family'][1]} | {'on' if r['family'][2] else 'off'} | "
                  f"{r['wall_s']:.1f} | {r['cpu_capability'] or '-'} / {r.get('ran_capability') or '-'} | {r['status']} | "
                  f"{f'{first[0]}: {first[1][0]} vs {first[1][1]}' if first else ''} |")
    same = sum(r["status"] == "identical" for r in rows)
    model = sum(r["status"].startswith("metrics identical") for r in rows)
    ref = f"{a.baseline}'s" if a.baseline else "their kept"
    md += ["", f"{same} of {len(rows)} runs give {ref} test metrics and per-epoch curves (training loss, validation metrics) exactly"
           + (f"; {model} more give every test metric and validation curve exactly and their "
              "training loss to float32's last bits" if model else "") +
           ". Picked: the cheapest kept run of each (head, encoder, dropout on/off) family"
           f"{' named by --runs' if a.runs else f' with a recorded wall time of at most {a.max_seconds:g} s'}."]
    rows = [{**{k: v for k, v in r.items() if k != "now"}, "family": list(r["family"])} for r in rows]
    name = f"reproduce_kept_{a.scale}" + (f"_vs_{a.baseline}" if a.baseline else "")
    for path in write_outputs(name, rows, "\n".join(md), a.out_dir):
        print("wrote", path)


if __name__ == "__main__":
    main()
