"""Learning rate per method from a stated grid (the `xcbench/` benchmark's protocol: equal epochs, the lr
of each head tuned on validation, issue #53).

An experiment with `lr_grid: [l_1, ..., l_G]` (usually a file that `extends` the table it tunes, with
`seeds: [0]`) runs every method m at every l_g: the run `m.lr<l_g>` is m with `train.lr = l_g`, drawn at
x = l_g on the line of m (a `sweep`-style figure, renderer `lr_grid`). The selection rule, per dataset d
and method m, on the mean over the grid's seeds of a validation metric y (the last epoch's: equal epochs):

    l*(d, m) = argbest_g  y(d, m, l_g)      (ties: the smaller lr)

The table the grid tunes states each method's lr in its own file (`train: {lr: ...}`; where the datasets'
bests differ, in `per_dataset.<d>.methods.<m>.train`, which every grid point of m takes less the lr), so its runs are
fixed before any training (a static DAG), and its seed-0 run at l* is the grid's run at l*: runs of equal
settings train once (run.trainers). `tuning_check` is the check rendered in the grid's caption: for each
(d, m), l*, the lr the tuned table runs m at, and whether they agree, or l* sits at an edge of the grid.
"""

from __future__ import annotations

import copy


def grid_name(method: str, lr: float) -> str:
    """The run name of one grid point: `full.lr0.003`."""
    return f"{method}.lr{lr:g}"


def expand(methods: dict[str, dict], grid: list[float], exp: dict) -> dict[str, dict]:
    """Every method at every lr of the grid, in the grid's order: {grid_name: spec with train.lr, x, series}."""
    if not grid or any(not isinstance(v, (int, float)) or v <= 0 for v in grid):
        raise ValueError(f"{exp.get('paper')}/{exp.get('artifact')}: lr_grid must list positive learning rates, "
                          f"got {grid!r}")
    out: dict[str, dict] = {}
    for m, spec in methods.items():
        spec = spec or {}
        label = spec.get("label") or spec.get("series") or m
        for lr in sorted(grid):  # each point its own copy of the method's settings, as a scale's override gives
            point = copy.deepcopy(spec)
            out[grid_name(m, lr)] = {**point, "train": {**(point.get("train") or {}), "lr": float(lr)}, "x": float(lr),
                                     "series": spec.get("series", label), "label": f"{label}, lr {lr:g}", "grid_of": m}
    return out


def per_dataset_points(per_dataset: dict, points: dict[str, dict]) -> dict:
    """A dataset's overrides of a method (`per_dataset.<d>.methods.<m>`) given to every grid point of m, less
    their `train.lr`: the point's lr is the grid's. The table a grid tunes states l*(d, m) there when the
    datasets' bests differ; its other per-dataset settings (m's params, batch) hold at every point."""
    out = {}
    for d, block in per_dataset.items():
        block = dict(block or {})
        over = block.pop("methods", None) or {}
        if over:
            block["methods"] = {g: _without_lr(over[p["grid_of"]]) for g, p in points.items() if p["grid_of"] in over}
        out[d] = block
    return out


def _without_lr(spec: dict | None) -> dict:
    spec = copy.deepcopy(spec or {})
    train = {k: v for k, v in (spec.pop("train", None) or {}).items() if k != "lr"}
    return {**spec, **({"train": train} if train else {})}


def best_lr(points: dict[float, float], better: str) -> float:
    """The lr of the best mean metric among {lr: y}; ties go to the smaller lr."""
    if better not in ("max", "min"):
        raise ValueError(f"render.better must be max or min, got {better!r}")
    sign = -1.0 if better == "max" else 1.0
    return min(sorted(points), key=lambda lr: sign * points[lr])


def selections(exp: dict, means: dict[tuple[str, str], float]) -> dict[tuple[str, str], dict]:
    """{(dataset, method of the tuned table): {best, grid: {lr: y}, edge}} from the grid runs' seed means
    `means` {(dataset, grid run name): y}; a method with no finished grid point is left out."""
    grid = sorted({spec["x"] for spec in exp["methods"].values()})
    per: dict[tuple[str, str], dict[float, float]] = {}
    for (d, name), y in means.items():
        spec = exp["methods"][name]
        per.setdefault((d, spec["grid_of"]), {})[spec["x"]] = y
    out = {}
    for key, pts in per.items():
        b = best_lr(pts, exp["render"].get("better", "max"))
        out[key] = {"best": b, "grid": pts, "edge": len(grid) > 1 and b in (grid[0], grid[-1]),
                    "complete": len(pts) == len(grid)}
    return out


def _by_dataset(items: list[tuple[str, str]]) -> str:
    """'d1: a, b; d2: c' from [(dataset, text), ...], in their order."""
    groups: dict[str, list[str]] = {}
    for d, text in items:
        groups.setdefault(d, []).append(text)
    return "; ".join(f"{d}: {', '.join(texts)}" for d, texts in groups.items())


def tuning_check(chosen: dict[tuple[str, str], dict], runs_at: dict[tuple[str, str], float], tuned: str,
                 label=lambda m: m) -> str:
    """Caption text: per (dataset, method), in `chosen`'s order, the grid's best lr against the lr that table
    `tuned` runs it at (`runs_at`), naming disagreements, unfinished grids and bests at an edge of the grid."""
    if not chosen:
        return f"No grid run has finished yet: the lr of each method in {tuned} is not checked."
    agree, differ, edge, partial = [], [], [], []
    for (d, m), c in chosen.items():
        at = runs_at.get((d, m))
        if at is None:
            continue
        if abs(at - c["best"]) <= 1e-9 * c["best"]:
            agree.append((d, f"{label(m)} {c['best']:g}"))
        else:
            differ.append((d, f"{label(m)} {c['best']:g} (runs at {at:g})"))
        if c["edge"]:
            edge.append((d, label(m)))
        if not c["complete"]:
            partial.append((d, label(m)))
    parts = [f"Best lr on validation, where the {tuned} table runs the method at it: "
             + (_by_dataset(agree) if agree else "none") + "."]
    if differ:
        parts.append(f"Not tuned (the {tuned} table runs another lr than the grid's best): {_by_dataset(differ)}.")
    if partial:
        parts.append(f"Grid not finished (chosen among the finished lrs): {_by_dataset(partial)}.")
    if edge:
        parts.append(f"Best at an edge of the grid (a wider grid may do better): {_by_dataset(edge)}.")
    return " ".join(parts)
