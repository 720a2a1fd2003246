"""Figure renderers. `curves`: one panel per (dataset, curve key), a per-epoch curve per method,
mean over seeds with a min-max band; `metric_curves`: several keys of one method as the lines of a
panel; the caption (scale, seeds, substitutions) beside it."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from xcbench.io import write_text
from xcbench.registry import RENDERERS
from xcbench.reporting import html as H
from xcbench.reporting import style
from xcbench.reporting.captions import footer
from xcbench.reporting.collect import collect
from xcbench.reporting.labels import method_label, pretty

MARKERS = ("o", "s", "^", "D", "v", "x", "*", "P")
LINESTYLES = ("-", "--", "-.", ":")


COINCIDE = 0.01  # two curves closer than this fraction of the panel's height at every epoch read as one line


def coincide(means: dict[str, tuple[tuple, np.ndarray]], ylim: tuple[float, float], log: bool) -> list[tuple[str, str]]:
    """Pairs of methods whose mean curves share their epochs and lie within COINCIDE of the panel's height
    (`ylim`, on a log axis in decades) at every epoch where both are finite and inside it: drawn, the later
    covers the earlier, which the caption then says."""
    f = (lambda y: np.log10(np.where(y > 0, y, np.nan))) if log else (lambda y: y)  # noqa: E731
    lo, hi = f(np.asarray(ylim, float))
    out = []
    for (a, (xa, ya)), (b, (xb, yb)) in itertools.combinations(means.items(), 2):
        if xa != xb:
            continue
        ua, ub = f(ya), f(yb)
        ok = np.isfinite(ua) & np.isfinite(ub) & (np.minimum(ua, ub) <= hi) & (np.maximum(ua, ub) >= lo)
        if ok.any() and np.all(np.abs(ua[ok] - ub[ok]) < COINCIDE * (hi - lo)):
            out.append((a, b))
    return out


@RENDERERS.register("curves")
def curves(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    """Panels: every dataset x every key of `render.curves` (e.g. [train_ce, val_ce]); `logy`; `clip_above_start: f`
    keeps the y axis below f x the largest first value (a diverging run leaves the frame, its numbers are in the table);
    `from_epoch: k` draws epochs k.. only (1: leave out the untrained epoch 0, whose perplexity of ~n flattens the
    trained curves into one band). Long curves mark every (n // 12)-th point."""
    opts = exp["render"]
    keys = opts["curves"]
    ylabels = opts.get("ylabels", keys)
    recs = collect(results, exp)
    fig, axes = style.figure(len(exp["datasets"]) * len(keys))
    panels = [(d, k, yl) for d in exp["datasets"] for k, yl in zip(keys, ylabels)]
    palette = style.palette()
    drawn = [m for m in exp["methods"] if any(r["method"] == m for r in recs)]  # one style per method on every panel
    clip = opts.get("clip_above_start")  # y axis up to this factor x the largest epoch-0 value (divergent runs leave the frame)
    same = []  # pairs of curves a reader cannot tell apart (named in the caption)
    for ax, (d, key, ylabel) in zip(axes[0], panels):
        starts, means = [], {}
        for j, meth in enumerate(drawn):
            runs = [r["curves"] for r in recs if r["dataset"] == d and r["method"] == meth and key in r["curves"]]
            if not runs:
                continue
            n = min(len(c[key]) for c in runs)
            Y = np.asarray([[np.nan if v is None else v for v in c[key][:n]] for c in runs], float)  # (seeds, T)
            x = np.asarray(runs[0].get("epoch", range(1, n + 1))[:n], float)
            keep = x >= opts.get("from_epoch", -np.inf)
            x, Y = x[keep], Y[:, keep]
            if not len(x):
                continue
            every = max(1, len(x) // 12)  # markers staggered by method, so curves that coincide show every marker
            (line,) = ax.plot(x, Y.mean(0), label=method_label(exp, meth), marker=MARKERS[j % len(MARKERS)], markersize=3,
                              linestyle=LINESTYLES[j % len(LINESTYLES)], markevery=(j * every // len(drawn), every),
                              color=palette[j % len(palette)])
            means[meth] = (tuple(x), Y.mean(0))
            if len(runs) > 1:
                ax.fill_between(x, Y.min(0), Y.max(0), color=line.get_color(), alpha=0.2, linewidth=0)
            starts.append(np.nanmax(Y[:, 0]))
        ax.set_title(f"{pretty(d)}" + (f": {ylabel}" if len(keys) > 1 else ""))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(_integer_ticks())  # epochs are whole numbers
        if opts.get("logy"):
            ax.set_yscale("log")
        if clip and starts and np.isfinite(max(starts)):
            ax.set_ylim(top=clip * max(starts))
        ax.set_ylabel(ylabel)
        same += [f"{method_label(exp, a)} and {method_label(exp, b)} ({pretty(d)}, {ylabel})"
                 for a, b in coincide(means, ax.get_ylim(), bool(opts.get("logy")))]
    style.legend(fig, axes[0], len(exp["methods"]))
    foot = footer(exp, catalogue, recs)
    if same:
        foot += (f" Within {COINCIDE:.0%} of the panel's height of each other at every epoch, one line over the "
                 f"other (their markers alternate): " + "; ".join(same) + ".")
    missing = exp.get("without_runs", [])  # a kept tree without some methods' runs (collect.with_runs_only)
    style.title(fig, exp.get("title", exp["artifact"]) + (f" ({', '.join(missing)}: no runs here)" if missing else ""))
    paths = style.save(fig, out)
    return paths + figure_pages(out, exp.get("title", exp["artifact"]), foot)


@RENDERERS.register("metric_curves")
def metric_curves(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    """Several per-epoch keys of one method as lines in one panel (Zhang et al. Figure 1: CP_K for
    several K): one row per dataset, one panel per entry of `render.groups: [{label, keys, names}]`."""
    opts, recs = exp["render"], collect(results, exp)
    method = next(iter(exp["methods"]))
    groups = opts["groups"]
    fig, axes = style.figure(len(groups), len(exp["datasets"]))
    palette = style.palette()
    rows = []
    for i, d in enumerate(exp["datasets"]):
        runs = [r["curves"] for r in recs if r["dataset"] == d and r["method"] == method]
        for ax, g in zip(axes[i], groups):
            for j, (key, name) in enumerate(zip(g["keys"], g.get("names", g["keys"]))):
                if not runs or key not in runs[0]:
                    continue
                pts = [(e, v) for e, v in zip(runs[0]["epoch"], runs[0][key]) if v is not None]
                Y = np.asarray([[dict(zip(c["epoch"], c[key])).get(e) for e, _ in pts] for c in runs], float)
                ax.plot([e for e, _ in pts], Y.mean(0), label=name, marker=MARKERS[j % len(MARKERS)], markersize=3,
                        linestyle=LINESTYLES[j % len(LINESTYLES)], color=palette[j % len(palette)])
                rows.append(f"| {pretty(d)} | {g['label']}, {name} | " + ", ".join(f"{v:.4f}" for v in Y.mean(0)) + " |")
            ax.set_title(f"{pretty(d)}: {g['label']}")
            ax.set_xlabel("epoch")
            ax.set_ylabel(g["label"])
            ax.xaxis.set_major_locator(_integer_ticks())
            ax.legend(frameon=False, fontsize=7)
    title, foot = exp.get("title", exp["artifact"]), footer(exp, catalogue, recs)
    style.title(fig, title)
    paths = style.save(fig, out)
    table = "| dataset | curve | per epoch |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    return paths + figure_pages(out, title, foot, table)


def figure_pages(out: str, title: str, foot: str, extra_md: str = "") -> list[Path]:
    """A figure's caption (markdown, with an optional table of its numbers) and its HTML page."""
    write_text(f"{out}.caption.md", f"**{title}** _{foot}_\n" + (f"\n{extra_md}" if extra_md else ""))
    write_text(f"{out}.html", H.page(title, f"<h3>{H.html.escape(title)}</h3>{H.image(f'{out}.png', title)}"
                                            + H.foot(foot)))
    return [Path(f"{out}.caption.md"), Path(f"{out}.html")]


def _integer_ticks():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)
