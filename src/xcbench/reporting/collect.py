"""Read cached results (`results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>/metrics.json`)
and aggregate over seeds: mean, sample standard deviation and the number of seeds."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import read_json, read_yaml
from xcbench.reporting.drift import drift
from xcbench.reporting.stop_rule import as_today
from xcbench.run import expected_runs, make_run, run_dir


def collect(results: str | Path, exp: dict) -> list[dict]:
    """One record per finished run of the experiment at its scale; `drift`: where the settings it was trained
    with differ from today's run spec (reporting/drift.py)."""
    out = []
    for d, m, s in expected_runs(exp):
        p = run_dir(results, exp, d, m, s) / "metrics.json"
        if p.exists():
            rec = {**read_json(p), "dataset": d, "method": m, "seed": s}  # the name this experiment gives it
            cfg, res = p.with_name("config.resolved.yaml"), None
            if cfg.exists():  # the settings the run was trained with (captions describe these, not today's file)
                res = read_yaml(cfg) or {}
                rec["resolved"] = {k: v for k, v in res.items() if k != "experiment"}
                rec["resolved"]["notes"] = (res.get("experiment") or {}).get("notes")
            run = make_run(exp, d, m, s)
            rec = as_today(rec, run.train)  # trained past where today's stop rule ends it
            if res is not None and (moved := drift(res, run.spec, rec)):
                rec["drift"] = moved  # trained with settings other than today's (a kept tree after an edit)
            out.append(rec)
    return out


def for_rendering(path: str | Path, scale: str, results: str | Path) -> dict:
    """The experiment as rendered from `results`: a method whose optional library is not installed here
    stays when its runs are there (rendering reads their metrics.json, not the library), so a kept tree
    renders the same with or without faiss or annoy; `unavailable` (the caption's "Not run here") keeps the
    others."""
    raw = load_experiment(path)
    every = resolve_experiment(raw, scale, check_libraries=False)
    if all((run_dir(results, every, d, m, s) / "metrics.json").exists() for d, m, s in expected_runs(every)):
        return every  # every run there: no library to ask about (nor the registries, nor torch, imported)
    exp = resolve_experiment(raw, scale)
    if not exp.get("unavailable"):
        return exp
    ran = {m for d, m, s in expected_runs(every)
           if m in exp["unavailable"] and (run_dir(results, every, d, m, s) / "metrics.json").exists()}
    if not ran:
        return exp
    left = {m: why for m, why in exp["unavailable"].items() if m not in ran}
    out = {k: v for k, v in exp.items() if k != "unavailable"}
    out["methods"] = {m: spec for m, spec in every["methods"].items() if m in exp["methods"] or m in ran}
    return {**out, **({"unavailable": left} if left else {})}


def with_runs_only(exp: dict, records: list[dict]) -> dict:
    """The experiment narrowed to the datasets and methods that have runs among `records`: a kept
    results tree (reference/paper) that holds a few of an artifact's runs renders as a table of
    those, not one of empty cells; the caption says so, and `without_runs` lists the labels left out (a
    figure's title that names them says so). It renders what it holds whatever this machine
    has installed, so without `unavailable` (no "Not run here"). Unchanged when every run is there."""
    if "unavailable" in exp:
        exp = {k: v for k, v in exp.items() if k != "unavailable"}
    ds, ms = {r["dataset"] for r in records}, {r["method"] for r in records}
    if set(exp["datasets"]) <= ds and set(exp["methods"]) <= ms:
        return exp
    note = "Rendered from a kept results tree: only the datasets and methods that have runs there are shown."
    return {**exp, "datasets": [d for d in exp["datasets"] if d in ds],
            "methods": {m: spec for m, spec in exp["methods"].items() if m in ms},
            "notes": " ".join(filter(None, [exp.get("notes", "").strip(), note])),
            "without_runs": [(spec or {}).get("label") or m for m, spec in exp["methods"].items() if m not in ms]}


AT_EPOCH = re.compile(r"(.+)@epoch(\d+)")  # a curve's value after one epoch (not ndcg@50)


def record_value(r: dict, metric: str) -> float | None:
    """One run's number for a metric key: a test metric, a top-level number (wall_time_s) or a dotted path
    (final.step_ms, memory.peak_rss_bytes); `a|b`: the first of the keys the run reports (a GPU run's
    memory.cuda_max_allocated_bytes, else its peak_rss_bytes); `curves.<m>@epoch<e>`: a curve after epoch e; None where
    the run reports none."""
    if "|" in metric:
        return next((v for v in (record_value(r, k) for k in metric.split("|")) if v is not None), None)
    if at := AT_EPOCH.fullmatch(metric):  # curves.val_ppl@epoch4: the per-epoch curve's value after epoch 4
        e, epochs, vals = int(at[2]), r.get("curves", {}).get("epoch", []), _at_path(r, at[1])
        v = vals[epochs.index(e)] if isinstance(vals, list) and e in epochs else None
        return float(v) if isinstance(v, (int, float)) else None
    v = r["metrics"].get(metric, r.get(metric))
    if v is None and "." in metric:  # nested keys, e.g. memory.analytic_bytes
        v = _at_path(r, metric)
    return float(v) if isinstance(v, (int, float)) else None


def _at_path(r: dict, key: str):
    """The value at a dotted path of a run's record (memory.analytic_bytes, curves.val_ppl), None where it has none."""
    v = r
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return v


def aggregate(records: list[dict], dataset: str, method: str, metric: str) -> dict | None:
    """mean/std/n over seeds of a scalar: a test metric, or any top-level number (wall_time_s); `seeds`:
    the seeds of the runs that report it."""
    vals, seeds = [], []
    for r in records:
        if r["dataset"] == dataset and r["method"] == method:
            v = record_value(r, metric)
            if v is not None:
                vals.append(v)
                seeds.append(r.get("seed"))
    if not vals:
        return None
    return {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else 0.0, "n": len(vals),
            "seeds": seeds}
