"""`sweep` figures: a final metric against a swept setting, one line per series (MIDX Figs 3b, 7a-b:
perplexity vs codewords K, vs samples m; sampling time vs number of classes).

Every run (dataset, method) is one point: y = the seed mean of `render.y` (a metric key, or a
dotted path such as final.val_ppl), x = the method's `x:` field in the experiment file, or, with
`render.x_key`, a number the run recorded (e.g. `n` of a timing probe; then all datasets share one
panel). Points join into lines by the method's `series:` field (default: its label). Panels: one per
dataset (one in all with `x_key`). `render.baseline: <method>` draws that run's y (a method with no x,
e.g. the full softmax in an accuracy-vs-M figure) as a dashed horizontal line on its dataset's panel.
`render.by_device: true` (an x measured in time, e.g. ms per step): when the figure's runs come from more than
one device, each series splits into one line per device ("Optimal (cuda)"), so a GPU run's step time is never
joined to, or averaged with, a CPU run's. Points of several seeds carry the seeds' standard deviation of y as a bar.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.registry import RENDERERS
from xcbench.reporting import style
from xcbench.reporting.captions import footer
from xcbench.reporting.collect import aggregate, collect
from xcbench.reporting.figures import LINESTYLES, MARKERS, figure_pages
from xcbench.reporting.labels import method_label, pretty


def _device_groups(exp: dict, recs: list[dict]) -> list[tuple[str, list[dict]]]:
    """(series suffix, records): one group of all records, or, with `render.by_device` and runs from
    several devices, one per device (records without a `device` are CPU runs)."""
    devices = sorted({r.get("device") or "cpu" for r in recs})
    if not exp["render"].get("by_device") or len(devices) < 2:
        return [("", recs)]
    return [(f" ({dev})", [r for r in recs if (r.get("device") or "cpu") == dev]) for dev in devices]


def _series(exp: dict, m: str) -> str:
    """The line a method's point joins: its `series` name, else its label."""
    return exp["methods"][m].get("series", method_label(exp, m))


def sweep_points(exp: dict, recs: list[dict], dataset_groups: list[list[str]],
                 devices: list[tuple[str, list[dict]]] | None = None, spread: dict | None = None,
                 cut: dict | None = None) -> list[dict[str, list]]:
    """Per panel: {series: [(x, y), ...] sorted by x}; runs without a result are left out. `devices`:
    `_device_groups`' split of `recs` (computed here when not given). `spread`, when given, receives the seeds'
    standard deviation of y at each point of several seeds: {(panel's datasets, series, x): std}; `cut` the
    points with a run cut short by a time limit (not final): {(panel's datasets, series, x): the earliest epoch
    such a run was cut after}. Both are keyed by panel: one series' point at one x on two datasets' panels is
    two points, each with its own seeds."""
    opts, panels = exp["render"], []
    for datasets in dataset_groups:
        lines: dict[str, list] = {}
        for suffix, group in devices or _device_groups(exp, recs):
            for d in datasets:
                for m, spec in exp["methods"].items():
                    y = aggregate(group, d, m, opts["y"])
                    x = aggregate(group, d, m, opts["x_key"]) if opts.get("x_key") else {"mean": spec.get("x")}
                    if y is None or x is None or x["mean"] is None:
                        continue
                    series = _series(exp, m) + suffix
                    lines.setdefault(series, []).append((float(x["mean"]), y["mean"]))
                    if spread is not None and y["n"] > 1:
                        spread[(tuple(datasets), series, float(x["mean"]))] = y["std"]
                    if cut is not None and (e := [r["cut_short_after_epoch"] for r in group if r["dataset"] == d
                                                  and r["method"] == m and r.get("cut_short_after_epoch")]):
                        cut[(tuple(datasets), series, float(x["mean"]))] = min(e)
        panels.append({k: sorted(v) for k, v in lines.items()})
    return panels


def _baseline(exp: dict, recs: list[dict], datasets: list[str]) -> dict | None:
    """The `render.baseline` run's y on a one-dataset panel (None: no baseline, or no run of it there)."""
    opts = exp["render"]
    if not opts.get("baseline") or len(datasets) != 1:
        return None
    return aggregate(recs, datasets[0], opts["baseline"], opts["y"])


GRID_TICKS = 12  # a sweep of at most this many values ticks at each of them


@RENDERERS.register("sweep")
def sweep(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    return draw_sweep(exp, collect(results, exp), out, catalogue)


def draw_sweep(exp: dict, recs: list[dict], out: str, catalogue: dict) -> list[Path]:
    """The sweep figure and its pages from the runs' records (`collect`), for renderers that read them already."""
    opts = exp["render"]
    groups = [exp["datasets"]] if opts.get("x_key") else [[d] for d in exp["datasets"]]
    devices = _device_groups(exp, recs)
    spread: dict = {}
    cut: dict = {}
    panels = sweep_points(exp, recs, groups, devices, spread, cut)
    if not opts.get("x_key"):  # datasets without a point (e.g. a text column of a face sweep) get no panel
        keep = [i for i, p in enumerate(panels) if p] or [0]
        groups, panels = [groups[i] for i in keep], [panels[i] for i in keep]
    names = dict.fromkeys(_series(exp, m) for m in exp["methods"])
    look = {name + suffix: (name, k) for k, (suffix, _) in enumerate(devices) for name in names}  # series -> (name, device)
    fig, axes = style.figure(len(panels))
    palette = style.palette()
    drawn = {look[series][0] for lines in panels for series in lines}
    rank = {name: j for j, name in enumerate(n for n in names if n in drawn)}  # one style per series on every panel
    for ax, datasets, lines in zip(axes[0], groups, panels):
        for series, pts in lines.items():  # the same colour and marker on every panel and device; hollow off the first
            name, k = look[series]
            j = rank[name]
            color = palette[j % len(palette)]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=series, marker=MARKERS[j % len(MARKERS)],
                    markersize=3, linestyle=LINESTYLES[j % len(LINESTYLES)], color=color,
                    markerfacecolor="none" if k else color)
            bars = [(x, y, spread[(tuple(datasets), series, x)]) for x, y in pts if (tuple(datasets), series, x) in spread]
            if bars:  # the seeds' spread of y (one standard deviation)
                ax.errorbar([b[0] for b in bars], [b[1] for b in bars], yerr=[b[2] for b in bars], fmt="none",
                            ecolor=color, elinewidth=0.8, capsize=2)
        rings = [(x, y) for series, pts in lines.items() for x, y in pts if (tuple(datasets), series, x) in cut]
        if rings:  # runs cut short by a time limit: their points are not final (drawn last: last in the legend)
            ax.scatter([r[0] for r in rings], [r[1] for r in rings], s=40, facecolors="none", edgecolors="0.3",
                       linewidths=0.8, zorder=3, label="cut short: not final")
        b = _baseline(exp, recs, datasets)
        if b is not None:
            ax.axhline(b["mean"], color="0.35", linestyle="--", linewidth=1, label=method_label(exp, opts["baseline"]))
        if opts.get("logx", True):
            ax.set_xscale("log")
            grid = sorted({x for pts in lines.values() for x, _ in pts})  # the swept values, when a few
            style.log_ticks(ax, "x", grid if not opts.get("x_key") and len(grid) <= GRID_TICKS else None)
        if opts.get("logy"):
            ax.set_yscale("log")
            style.log_ticks(ax, "y")
        ax.set_xlabel(opts.get("xlabel", opts.get("x_key", "x")))
        ax.set_ylabel(opts.get("ylabel", opts["y"]))
        if not opts.get("x_key"):
            ax.set_title(pretty(datasets[0]))
    style.legend(fig, axes[0], max((len(lines) for lines in panels), default=0) + bool(opts.get("baseline")) + bool(cut))
    title, foot = exp.get("title", exp["artifact"]), footer(exp, catalogue, recs)
    if len(devices) > 1:
        foot += (f" Runs from {len(devices)} devices: one line per device ("
                 + ", ".join(s.strip(" ()") for s, _ in devices) + "), a step time measured on one is not joined to another's.")
    style.title(fig, title)
    paths = style.save(fig, out)
    rows = [f"| {pretty(ds[0]) if len(ds) == 1 else 'all'} | {s} | {x:g} | {y:.4g}"
            + (f" (cut short after epoch {cut[(tuple(ds), s, x)]:g}: not final)" if (tuple(ds), s, x) in cut else "") + " |"
            for ds, lines in zip(groups, panels) for s, pts in lines.items() for x, y in pts]
    rows += [f"| {pretty(ds[0])} | {method_label(exp, opts['baseline'])} | all | {b['mean']:.4g} |" for ds in groups
             if (b := _baseline(exp, recs, ds)) is not None]
    return paths + figure_pages(out, title, foot, "| panel | series | x | y |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
