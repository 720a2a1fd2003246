"""Read cached results (`results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>/metrics.json`)
and aggregate over seeds: mean, sample standard deviation and the number of seeds."""

from __future__ import annotations

import functools
import re
import statistics
from pathlib import Path

from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import read_json, read_yaml
from xcbench.runspec import run_spec, spec_hash


def _identity(spec: dict) -> str:
    """What a run computes, whatever its artifact and method key are called."""
    return spec_hash({k: v for k, v in spec.items() if k not in ("artifact", "method")})


def _order(exp: dict) -> tuple:
    """Tables train before figures, then artifacts in natural order (table4 < table10)."""
    name = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", exp["artifact"])]
    return exp.get("render", {}).get("kind") != "table", name


@functools.lru_cache(maxsize=64)
def _trainers(folder: str, scale: str, stamp: tuple) -> dict[str, tuple[str, str]]:
    exps = [resolve_experiment(load_experiment(f), scale, check_libraries=False)  # where a run lives: not what is installed
            for f in sorted(Path(folder).glob("*.yaml"))]
    owners: dict[str, tuple[str, str]] = {}
    for exp in sorted((e for e in exps if "runs_of" not in e), key=_order):
        for d, m, s in expected_runs(exp):
            owners.setdefault(_identity(run_spec(exp, d, m, s)), (exp["artifact"], m))
    return owners


def trainers(folder: str | Path, scale: str) -> dict[str, tuple[str, str]]:
    """{run identity: (artifact, method key) of the run that trains it} for one paper's folder at a
    scale: runs of equal settings in several artifacts (a sweep's point that a table also shows) train
    once, under the first table that has them (cached until a file of the folder changes)."""
    files = sorted(Path(folder).glob("*.yaml"))
    return _trainers(str(folder), scale, tuple((str(f), f.stat().st_mtime_ns) for f in files))


def run_location(exp: dict, dataset: str, method: str, seed: int) -> tuple[str, str]:
    """(artifact, method key) of the run that one (dataset, method, seed) of this experiment reads:
    the run of identical settings (runspec.run_spec, names aside) that trains first in the paper's
    folder (`trainers`), else its own (a `runs_of` view: its owner's)."""
    own = (exp.get("runs_of", exp["artifact"]), method)
    if "source" not in exp:  # an experiment built in code, not loaded from a folder
        return own
    return trainers(Path(exp["source"]).parent, exp["scale"]).get(_identity(run_spec(exp, dataset, method, seed)), own)


def run_dir(results: str | Path, exp: dict, dataset: str, method: str, seed: int) -> Path:
    """Runs live under the artifact that trains them (`run_location`)."""
    owner, key = run_location(exp, dataset, method, seed)
    return Path(results) / exp["scale"] / exp["paper"] / owner / dataset / key / f"seed{seed}"


def expected_runs(exp: dict) -> list[tuple[str, str, int]]:
    """(dataset, method, seed) of every run; a method with `datasets: [...]` runs on those only."""
    return [(d, m, s) for d in exp["datasets"] for m, spec in exp["methods"].items()
            if d in spec.get("datasets", exp["datasets"]) for s in exp["seeds"]]


def view_runs(path: str | Path, scale: str) -> set[tuple[str, str, int]]:
    """(dataset, method, seed) that the views of one experiment file (`runs_of` it, same folder) ask of it
    beyond its own runs: a view may add seeds of its owner's runs (table2_seeds), which the owner then trains
    under its folder (the DAG's train rule names the owner's file)."""
    path = Path(path)
    out = set()
    for f in sorted(path.parent.glob("*.yaml")):
        if f != path and (read_yaml(f) or {}).get("runs_of") == path.stem:
            out |= set(expected_runs(resolve_experiment(load_experiment(f), scale, check_libraries=False)))
    return out


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
    results tree (reference/paper-cpu) that holds a few of an artifact's runs renders as a table of
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


def aggregate(records: list[dict], dataset: str, method: str, metric: str) -> dict | None:
    """mean/std/n over seeds of a scalar: a test metric, or any top-level number (wall_time_s); `seeds`:
    the seeds of the runs that report it."""
    vals, seeds = [], []
    for r in records:
        if r["dataset"] == dataset and r["method"] == method:
            v = r["metrics"].get(metric, r.get(metric))
            if v is None and "." in metric:  # nested keys, e.g. memory.analytic_bytes
                v = r
                for part in metric.split("."):
                    v = v.get(part) if isinstance(v, dict) else None
            if isinstance(v, (int, float)):
                vals.append(float(v))
                seeds.append(r.get("seed"))
    if not vals:
        return None
    return {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else 0.0, "n": len(vals),
            "seeds": seeds}
