"""What the studies (studies/<topic>/) share: a table's run with one setting changed, trained in the study's folder.

A study asks what one setting does to a table's run: it takes the run the experiment trains (run.make_run), changes
its head, the head's params or the lr, trains it on one CPU thread in the study's `work/` (a rerun reads the finished
run, resumes a cut one), and sets it beside the table's kept run (reference/<scale>).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.checkpoint import StopAfter
from xcbench.config import load_experiment, resolve_experiment
from xcbench.device import pick_device
from xcbench.io import read_json
from xcbench.run import Run, make_run
from xcbench.tasks.base import task_of
from xcbench.train import FitOptions, execute


def table_experiment(repo: Path, artifact: str, scale: str) -> dict:
    """The xcbench table `artifact` (config/experiments/xcbench/<artifact>.yaml) resolved at `scale`."""
    return resolve_experiment(load_experiment(repo / "config" / "experiments" / "xcbench" / f"{artifact}.yaml"), scale)


def changed(run: Run, head: str | None = None, params: dict | None = None, lr: float | None = None) -> Run:
    """`run` with the head (None: its own), head params merged over its own, and the lr (None: its own), in its spec
    too (the run's hash and config.resolved.yaml name what trained)."""
    if head:
        run.head["head"] = run.spec["head"] = head
    if params is not None:
        run.head["params"] = run.spec["head_params"] = {**run.head.get("params", {}), **params}
    if lr:
        run.train["lr"] = lr                                                  # run.spec["train"] is this dict
    return run


def train_changed(exp: dict, dataset: str, method: str, seed: int, out: Path, processed: Path,
                  features: Path | None = None, stop_after: int | None = None, **change) -> dict | None:
    """metrics.json of the experiment's run of `method` with `change` (head, params, lr: `changed`), trained on the
    CPU in `out` (read when it is there; a cut run resumes from its checkpoint). With `stop_after` the run pauses
    after that many epochs, its checkpoint kept, and this returns None until it is whole."""
    if (out / "metrics.json").exists():
        return read_json(out / "metrics.json")
    run = changed(make_run(exp, dataset, method, seed), **change)
    device = pick_device("cpu")
    task = task_of(run, dataset_entry(dataset, load_datasets()), str(processed), str(features) if features else None,
                   device, source=exp["source"])
    try:
        return execute(run, task, out, device, FitOptions(stop_after=stop_after))
    except StopAfter:
        return None


def kept_metrics(repo: Path, exp: dict, dataset: str, method: str, seed: int) -> dict:
    """metrics.json of the table's kept run (reference/<scale>; its CPU: its `device_name`)."""
    scale = exp["scale"]
    return read_json(repo / "reference" / scale / "results" / scale / exp["paper"] / exp["artifact"] / dataset / method
                     / f"seed{seed}" / "metrics.json")


def mean_sd(xs: list[float], digits: int = 4) -> str:
    """'mean +- sample sd' of a study's seeds; one seed's value alone (no sd), as a study run on seed 0 first reads."""
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f} (one seed)"
    return f"{statistics.mean(xs):.{digits}f} +- {statistics.stdev(xs):.{digits}f}"
