"""One run as a value: an experiment's (dataset, method, seed) with every setting resolved once.

    Run(exp, dataset, method, seed, head, train, model, task, task_params, spec)
      .head                     the method's {head, params, label, ...} after the dataset's overrides
      .train, .model            its train and model settings (runspec.method_config)
      .task, .task_params       its task's name and params as written (runspec.task_config)
      .spec, .hash              the run spec: what changes what the run computes, and its digest
                                (the DAG's train rule and a checkpoint are keyed by it)
      .folder(results)          where its result folder lives: under the artifact that trains it

`make_run` is the one factory: `xcbench train`, the DAG, the benchmarks and the tests build runs
with it. Which runs an experiment has (`expected_runs`, and the seeds its views add: `view_runs`)
and where each one lives (`run_location`: runs of equal settings in several artifacts of one paper
train once, under the first table that has them) are here too.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from xcbench import __version__
from xcbench.config import ConfigError, load_experiment, resolve_experiment
from xcbench.io import read_yaml
from xcbench.runspec import method_config, spec_hash, task_config


@dataclass(frozen=True)
class Run:
    exp: dict
    dataset: str
    method: str
    seed: int
    head: dict
    train: dict
    model: dict
    task: str
    task_params: dict
    spec: dict

    @property
    def hash(self) -> str:
        return spec_hash(self.spec)

    @property
    def label(self) -> str:
        return f"{self.dataset}/{self.method}"

    @property
    def location(self) -> tuple[str, str]:
        """(artifact, method key) of the run that trains these settings (`run_location`)."""
        return _location(self.exp, self.method, lambda: self.spec)

    def folder(self, results: str | Path) -> Path:
        return _folder(results, self.exp, self.dataset, self.location, self.seed)


def make_run(exp: dict, dataset: str, method: str, seed: int) -> Run:
    """The run of a resolved experiment: its settings after every override (runspec), derived once."""
    if method not in exp["methods"]:
        raise ConfigError(f"{exp['paper']}/{exp['artifact']}: method {method!r} is not in this experiment at scale "
                          f"{exp['scale']}; its methods: {', '.join(exp['methods'])}")
    head, train, model = method_config(exp, dataset, method)
    task, params = task_config(exp, dataset)
    spec = {"paper": exp["paper"], "artifact": exp["artifact"], "scale": exp["scale"], "dataset": dataset,
            "method": method, "seed": seed, "head": head.get("head"), "head_params": head.get("params", {}),
            "train": train, "model": model,
            "task": {"name": task, "params": params}, "features": exp.get("features"), "xcbench": __version__}
    return Run(exp, dataset, method, seed, head, train, model, task, params, spec)


def job_run(path: str | Path, exp: dict, dataset: str, method: str, seed: int) -> Run:
    """The run a train job names, checked to be one of the experiment's runs (its own, or a seed
    that a view of it adds): a stale target fails with what the method does run."""
    if method not in exp["methods"]:
        raise ConfigError(f"{path}: method {method!r} is not in this experiment at scale {exp['scale']}; "
                          f"its methods: {', '.join(exp['methods'])}")
    runs = expected_runs(exp)
    if (dataset, method, seed) not in runs:
        runs += sorted(view_runs(path, exp["scale"]))
    if (dataset, method, seed) not in runs:
        on = sorted({d for d, m, _ in runs if m == method})
        raise ConfigError(f"{path}: no run of method {method!r} on dataset {dataset!r} with seed {seed} at scale "
                          f"{exp['scale']} (a stale target?); this method runs on {', '.join(on) or 'no dataset'} "
                          f"with seeds {exp['seeds']}")
    return make_run(exp, dataset, method, seed)


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


NAMES = ("artifact", "method", "xcbench")  # where a run lives and which package version wrote it: not what it computes


def identity(spec: dict, like: dict | None = None) -> str:
    """What a run computes, whatever its artifact and method key are called and whichever package version wrote
    it. With `like` (today's spec of the run), `spec` (an older record) is read with `like`'s keys: a key the
    record lacks reads None, which is what such keys are today where they change nothing (`features` where a
    task has none); a key set today that the record lacks then differs."""
    return spec_hash({k: spec.get(k) for k in (spec if like is None else like) if k not in NAMES})


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
            owners.setdefault(identity(make_run(exp, d, m, s).spec), (exp["artifact"], m))
    return owners


def trainers(folder: str | Path, scale: str) -> dict[str, tuple[str, str]]:
    """{run identity: (artifact, method key) of the run that trains it} for one paper's folder at a
    scale: runs of equal settings in several artifacts (a sweep's point that a table also shows) train
    once, under the first table that has them (cached until a file of the folder changes)."""
    files = sorted(Path(folder).glob("*.yaml"))
    return _trainers(str(folder), scale, tuple((str(f), f.stat().st_mtime_ns) for f in files))


def _location(exp: dict, method: str, spec_of) -> tuple[str, str]:
    """The owner of a run's settings; `spec_of()` gives its spec, asked only where there is a folder to search."""
    own = (exp.get("runs_of", exp["artifact"]), method)
    if "source" not in exp:  # an experiment built in code, not loaded from a folder: its own runs
        return own
    return trainers(Path(exp["source"]).parent, exp["scale"]).get(identity(spec_of()), own)


def _folder(results: str | Path, exp: dict, dataset: str, location: tuple[str, str], seed: int) -> Path:
    owner, key = location
    return Path(results) / exp["scale"] / exp["paper"] / owner / dataset / key / f"seed{seed}"


def run_location(exp: dict, dataset: str, method: str, seed: int) -> tuple[str, str]:
    """(artifact, method key) of the run that one (dataset, method, seed) of this experiment reads:
    the run of identical settings that trains first in the paper's folder (`trainers`), else its own
    (a `runs_of` view: its owner's)."""
    return _location(exp, method, lambda: make_run(exp, dataset, method, seed).spec)


def run_dir(results: str | Path, exp: dict, dataset: str, method: str, seed: int) -> Path:
    """Runs live under the artifact that trains them (`run_location`)."""
    return _folder(results, exp, dataset, run_location(exp, dataset, method, seed), seed)
