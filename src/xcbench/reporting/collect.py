"""Read cached results (`results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>/metrics.json`)
and aggregate over seeds: mean, sample standard deviation and the number of seeds."""

from __future__ import annotations

import statistics
from pathlib import Path

from xcbench.io import read_json, read_yaml


def run_location(exp: dict, method: str) -> tuple[str, str]:
    """(artifact, method key) of the run a method of this experiment reads: its own, the `runs_of`
    owner's, or another artifact's identical run named by the method's `same_run: <artifact>/<method>`
    (a sweep's point that another artifact already trains, e.g. Figure 5's largest L = Table 1's HF)."""
    same = (exp["methods"].get(method) or {}).get("same_run")
    if same:
        artifact, key = same.split("/")
        return artifact, key
    return exp.get("runs_of", exp["artifact"]), method


def run_dir(results: str | Path, exp: dict, dataset: str, method: str, seed: int) -> Path:
    """Runs live under the artifact that trains them (`runs_of` lets a figure reuse a table's runs)."""
    owner, key = run_location(exp, method)
    return Path(results) / exp["scale"] / exp["paper"] / owner / dataset / key / f"seed{seed}"


def expected_runs(exp: dict) -> list[tuple[str, str, int]]:
    """(dataset, method, seed) of every run; a method with `datasets: [...]` runs on those only."""
    return [(d, m, s) for d in exp["datasets"] for m, spec in exp["methods"].items()
            if d in spec.get("datasets", exp["datasets"]) for s in exp["seeds"]]


def collect(results: str | Path, exp: dict) -> list[dict]:
    """One record per finished run of the experiment at its scale."""
    out = []
    for d, m, s in expected_runs(exp):
        p = run_dir(results, exp, d, m, s) / "metrics.json"
        if p.exists():
            rec = {**read_json(p), "dataset": d, "method": m, "seed": s}  # the name this experiment gives it
            cfg = p.with_name("config.resolved.yaml")
            if cfg.exists():  # the settings the run was trained with (captions describe these, not today's file)
                res = read_yaml(cfg) or {}
                rec["resolved"] = {k: v for k, v in res.items() if k != "experiment"}
                rec["resolved"]["notes"] = (res.get("experiment") or {}).get("notes")
            out.append(rec)
    return out


def with_runs_only(exp: dict, records: list[dict]) -> dict:
    """The experiment narrowed to the datasets and methods that have runs among `records`: a kept
    results tree (reference/paper-cpu) that holds a few of an artifact's runs renders as a table of
    those, not one of empty cells; the caption says so. Unchanged when every run is there."""
    ds, ms = {r["dataset"] for r in records}, {r["method"] for r in records}
    if set(exp["datasets"]) <= ds and set(exp["methods"]) <= ms:
        return exp
    note = "Rendered from a kept results tree: only the datasets and methods that have runs there are shown."
    return {**exp, "datasets": [d for d in exp["datasets"] if d in ds],
            "methods": {m: spec for m, spec in exp["methods"].items() if m in ms},
            "notes": " ".join(filter(None, [exp.get("notes", "").strip(), note]))}


def aggregate(records: list[dict], dataset: str, method: str, metric: str) -> dict | None:
    """mean/std/n over seeds of a scalar: a test metric, or any top-level number (wall_time_s)."""
    vals = []
    for r in records:
        if r["dataset"] == dataset and r["method"] == method:
            v = r["metrics"].get(metric, r.get(metric))
            if v is None and "." in metric:  # nested keys, e.g. memory.analytic_bytes
                v = r
                for part in metric.split("."):
                    v = v.get(part) if isinstance(v, dict) else None
            if isinstance(v, (int, float)):
                vals.append(float(v))
    if not vals:
        return None
    return {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else 0.0, "n": len(vals)}
