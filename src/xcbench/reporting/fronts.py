"""Which output layer: per dataset, the methods on the accuracy-cost Pareto front (xcbench's own benchmark,
no paper has it).

A method (mean over seeds of accuracy y and cost c) is on the front when no other method has y' >= y and
c' <= c with one of the two strict. Read from the cheapest: for a budget B, the method to use is the last
front member with c <= B, and each step along the front buys the accuracy it shows for the cost it shows.
`render: {renderer: front_table, y: <accuracy key>, ylabel, better: max|min, costs: [{key, label, scale, digits}]}` renders
one row per dataset and cost: the number of classes, the front cheapest first with the numbers behind each
cell, and which runs (methods x seeds) the cell rests on. `better: min` reads y as a loss (perplexity): the
front is then that of -y.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from xcbench.io import write_text
from xcbench.registry import RENDERERS
from xcbench.reporting.captions import footer
from xcbench.reporting.collect import aggregate, collect
from xcbench.reporting.labels import method_label, pretty
from xcbench.reporting.tables import to_csv, to_html, to_latex, to_markdown


def pareto_front(points: dict[str, tuple[float, float]], better: str = "max") -> list[str]:
    """Names on the front of {name: (y, cost)} (y higher, or lower with better="min"; cost lower), cheapest
    first; of equal points both stay."""
    sign = {"max": 1.0, "min": -1.0}[better]
    pts = {k: (sign * y, c) for k, (y, c) in points.items()}

    def dominated(a: tuple[float, float]) -> bool:
        return any(b[0] >= a[0] and b[1] <= a[1] and b != a for b in pts.values())

    return sorted((k for k, v in pts.items() if not dominated(v)), key=lambda k: (pts[k][1], -pts[k][0]))


def runs_cell(labels: dict[str, int]) -> str:
    """"k methods, r runs" for {method label: its runs}; where the methods have unequal numbers of seeds, which have
    how many, since their means then rest on different draws (the commonest count as "the others")."""
    cell = f"{len(labels)} methods, {sum(labels.values())} runs"
    seeds = Counter(labels.values())                                               # {seeds: methods with as many}
    if len(seeds) < 2:
        return cell
    common = max(seeds, key=lambda n: (seeds[n], n))
    odd = ", ".join(f"{m} on {n}" for m, n in labels.items() if n != common)
    return f"{cell}; {odd} seeds, the others on {common}"


def _n_classes(recs: list[dict], dataset: str) -> str:
    n = {r.get("n_classes") for r in recs if r["dataset"] == dataset and r.get("n_classes")}
    return f"{n.pop():,}" if len(n) == 1 else "–"


@RENDERERS.register("front_table")
def front_table(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    opts = exp["render"]
    y, ylab, better = opts["y"], opts.get("ylabel", opts["y"]), opts.get("better", "max")
    recs = collect(results, exp)
    header = ["Dataset", "classes", "cost", f"front, cheapest first: method ({ylab}, cost)", "runs"]
    rows, long = [], []
    for d in exp["datasets"]:
        for c in opts["costs"]:
            scale, digits = float(c.get("scale", 1.0)), int(c.get("digits", 1))
            points, runs = {}, {}
            for m in exp["methods"]:
                a, b = aggregate(recs, d, m, y), aggregate(recs, d, m, c["key"])
                if a and b:
                    points[m] = (a["mean"], b["mean"] * scale)
                    runs[method_label(exp, m)] = min(a["n"], b["n"])
            front = pareto_front(points, better)
            cells = [f"{method_label(exp, m)} ({points[m][0]:.3f}, {points[m][1]:.{digits}f})" for m in front]
            rows.append([pretty(d), _n_classes(recs, d), c["label"], "; ".join(cells) or "–",
                         runs_cell(runs)])
            long += [[d, c["key"], m, points[m][0], points[m][1], m in front] for m in points]
    caption = exp.get("title", exp["artifact"])
    as_good = "is at least as accurate" if better == "max" else f"has a {ylab} at most as high"
    foot = (f"A method is on the front when no other {as_good} and is at most as costly (means over seeds). "
            "For a budget, use the last front member within it. " + footer(exp, catalogue, recs))
    write_text(f"{out}.md", to_markdown(header, rows, caption, foot))
    write_text(f"{out}.tex", to_latex(header, rows, caption, foot))
    write_text(f"{out}.csv", to_csv(["dataset", "cost", "method", "accuracy", "cost_value", "on_front"], long))
    write_text(f"{out}.html", to_html(header, rows, caption, foot))
    return [Path(f"{out}.{e}") for e in ("md", "tex", "csv", "html")]
