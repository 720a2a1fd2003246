"""`lr_grid` figures: a validation metric against the learning rate, one line per method (xcbench/lr_grid.py).

The figure is a `sweep` (x = each grid run's lr, y = the seed mean of `render.y`, e.g. final.val_P@1), and its
caption carries the setup check: per dataset and method, the grid's best lr (`render.better`: max or min)
against the lr the table it tunes (the file this one `extends`) runs that method at, so a table whose heads
were not run at their grid's best says so wherever it is read.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.config import load_experiment, resolve_experiment
from xcbench.lr_grid import selections, tuning_check
from xcbench.registry import RENDERERS
from xcbench.reporting.collect import aggregate, collect
from xcbench.reporting.labels import pretty
from xcbench.reporting.sweeps import draw_sweep
from xcbench.run import make_run


def tuned_lrs(exp: dict, keys) -> dict[tuple[str, str], float]:
    """{(dataset, method): lr} that the table this grid tunes (its `extends`) runs each method at."""
    if not exp.get("extends") or "source" not in exp:
        return {}
    parent = resolve_experiment(load_experiment(Path(exp["source"]).with_name(f"{exp['extends']}.yaml")),
                                exp["scale"], check_libraries=False)
    return {(d, m): float(make_run(parent, d, m, parent["seeds"][0]).train["lr"]) for d, m in keys
            if m in parent["methods"] and d in parent["datasets"]}


@RENDERERS.register("lr_grid")
def lr_grid_figure(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    recs = collect(results, exp)
    series = {spec["grid_of"]: spec["series"] for spec in exp["methods"].values()}  # method of the table -> its line
    means = {(d, m): a["mean"] for d in exp["datasets"] for m in exp["methods"]
             if (a := aggregate(recs, d, m, exp["render"]["y"])) is not None}
    chosen = {(pretty(d), m): c for (d, m), c in selections(exp, means).items()}
    runs_at = {(pretty(d), m): lr for (d, m), lr in tuned_lrs(exp, [(d, m) for d in exp["datasets"] for m in series]).items()}
    text = tuning_check(chosen, runs_at, exp.get("extends", exp["artifact"]), label=series.get)
    notes = " ".join(t for t in (exp.get("view_notes"), text) if t)
    return draw_sweep({**exp, "view_notes": notes}, recs, out, catalogue)
