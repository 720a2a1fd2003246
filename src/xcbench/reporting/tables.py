"""Table writers (CSV with full precision, GitHub Markdown, LaTeX booktabs) and the
`metric_table` renderer: rows = methods, columns = dataset x metric, mean +- std over seeds,
optionally relative to a reference method and with published numbers as extra rows."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from xcbench.config import ConfigError, deep_merge
from xcbench.io import write_text
from xcbench.registry import RENDERERS
from xcbench.reporting import html as H
from xcbench.reporting.captions import footer
from xcbench.reporting.collect import aggregate, collect
from xcbench.reporting.labels import method_label, pretty


def _md_rows(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def to_markdown(header: list[str], rows: list[list[str]], caption: str, foot: str,
                extra: tuple[list[str], list[list[str]]] | None = None) -> str:
    """`extra`: a second (header, rows) block below the first (published numbers on other datasets)."""
    lines = [f"**{caption}**", ""] + _md_rows(header, rows)
    if extra and extra[1]:
        lines += ["", *_md_rows(*extra)]
    return "\n".join(lines + ["", f"_{foot}_", ""])


def to_html(header: list[str], rows: list[list[str]], caption: str, foot: str,
            extra: tuple[list[str], list[list[str]]] | None = None) -> str:
    body = H.table(header, rows, caption) + (H.table(*extra) if extra and extra[1] else "")
    return H.page(caption, body + H.foot(foot))


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("±", r"$\pm$"), ("@", "@")):
        s = s.replace(a, b)
    return s


def _tabular(header: list[str], rows: list[list[str]]) -> list[str]:
    line = lambda r: " & ".join(map(_tex_escape, r)) + r" \\"  # noqa: E731
    return [rf"\begin{{tabular}}{{l{'r' * (len(header) - 1)}}}", r"\toprule", line(header), r"\midrule",
            *map(line, rows), r"\bottomrule", r"\end{tabular}"]


def to_latex(header: list[str], rows: list[list[str]], caption: str, foot: str,
             extra: tuple[list[str], list[list[str]]] | None = None) -> str:
    block = [r"\par\medskip", *_tabular(*extra)] if extra and extra[1] else []
    return "\n".join([r"\begin{table}[t]", r"\centering", rf"\caption{{{_tex_escape(caption)}}}",
                      *_tabular(header, rows), *block, rf"\par\footnotesize {_tex_escape(foot)}", r"\end{table}", ""])


def to_csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def fmt(agg: dict | None, scale: float, digits: int, form: str | None = None) -> str:
    """mean +- std; `form` is a format spec such as ".2e" (default: fixed with `digits` decimals)."""
    if agg is None:
        return "–"
    spec = form or f".{digits}f"
    s = format(agg["mean"] * scale, spec)
    return s + (f" ± {format(agg['std'] * scale, spec)}" if agg["n"] > 1 else "")


def text_of(records: list[dict], dataset: str, method: str, key: str) -> str:
    """A string field of the runs (e.g. `device_name`), distinct values joined."""
    vals = dict.fromkeys(str(r.get(key)) for r in records if r["dataset"] == dataset and r["method"] == method
                         and r.get(key) is not None)
    return ", ".join(vals) or "–"


def metric_specs(opts: dict) -> list[dict]:
    """`render.metrics` entries: a key, or {key, label, scale, digits, format, text}; `percent` scales
    plain P@k-like keys; `format` is a Python format spec (".2e"); `text: true` shows a string field."""
    default_scale = 100.0 if opts.get("percent", True) else 1.0
    out = []
    for m in opts.get("metrics", ["P@1"]):
        m = {"key": m} if isinstance(m, str) else dict(m)
        m.setdefault("label", pretty(m["key"]))
        m.setdefault("scale", default_scale)
        m.setdefault("digits", opts.get("digits", 2))
        out.append(m)
    return out


def _scaled(a: dict | None, ref: dict | None) -> dict | None:
    if a is None or ref is None or ref["mean"] == 0:
        return None
    return {"mean": a["mean"] / ref["mean"], "std": a["std"] / abs(ref["mean"]), "n": a["n"]}


def _lit_value(v, group: str, key: str) -> str:
    """A published number from {metric: v}, or {group: {metric: v}} / {group: v} in a grouped table."""
    if group:
        v = v.get(group, {}) if isinstance(v, dict) else {}
        if not isinstance(v, dict):
            return str(v)
    return str(v.get(key, "–"))


def _published_row(lit: dict, datasets: list[str], specs: list[dict], groups) -> list[str] | None:
    """An entry's numbers under the table's columns ("–" where it has none), or None when it is flat values of
    another dataset than the table's only one (nothing of it can stand in a column)."""
    vals = lit.get("values", {})
    if all(isinstance(v, dict) for v in vals.values()):
        per = lambda d: vals.get(d, {})  # noqa: E731
    elif len(datasets) == 1 and lit.get("dataset", datasets[0]) == datasets[0]:
        per = lambda d: vals  # noqa: E731
    else:
        return None
    return [f"{lit['method']} (published)"] + [_lit_value(per(d), g, m["key"]) for d in datasets for g in groups for m in specs]


def literature_rows(literature: list[dict], datasets: list[str], specs: list[dict], groups: list[str] = ("",)):
    """Published numbers: (rows for the main table, (header, rows) of a separate block, every entry's numbers
    under the table's columns for the comparison with ours: `published_gaps`).

    An entry's `values` are {metric: v} (with an optional `dataset` they come from) or per dataset
    {dataset: {metric: v}}; in a table with column groups, per dataset {dataset: {group: v}} or
    {dataset: {group: {metric: v}}}. It joins the main table only where each number lands in its own
    dataset's column: per-dataset values whose datasets are all columns, or flat values (of no
    other named dataset) in a one-dataset table. Every other entry (the paper's datasets differ
    from this scale's) goes to the block, one row per (method, dataset, group), so no number stands
    under another dataset's name."""
    inline, block, aligned = [], [], []
    for lit in literature:
        vals, label = lit.get("values", {}), f"{lit['method']} (published)"
        per_dataset, row = all(isinstance(v, dict) for v in vals.values()), _published_row(lit, datasets, specs, groups)
        aligned += [row] if row else []
        if row and (not per_dataset or set(vals) <= set(datasets)):
            inline.append(row)
            continue
        for d, v in (vals.items() if per_dataset else [(lit.get("dataset"), vals)]):
            for g in groups:
                block.append([label, " ".join(filter(None, [pretty(d) if d else "–", g]))]
                             + [_lit_value(v, g, m["key"]) for m in specs])
    return inline, (["Published", "Dataset"] + [m["label"] for m in specs], block), aligned


def column_groups(exp: dict, key: str | None) -> list[tuple[str, dict[str, str]]]:
    """Methods grouped for the table: without `column_key`, one group (rows = methods); with
    `column_key: encoder`, one column group per named encoder (`model.encoder` of each method), rows
    = method labels, so a sampler's LSTM and Transformer runs share a row (MIDX Table 4)."""
    if not key:
        return [("", {m: method_label(exp, m) for m in exp["methods"]})]
    groups: dict[str, dict[str, str]] = {}
    for m, spec in exp["methods"].items():
        g = deep_merge(exp.get("model", {}), spec.get("model", {})).get(key)
        if not isinstance(g, str):
            raise ConfigError(f"{exp['artifact']}: render.column_key {key!r} needs model.{key} to be a name "
                              f"(an entry of model.{key}s) for every method; {m} has {g!r}")
        groups.setdefault(g, {})[m] = method_label(exp, m)
    return list(groups.items())


GAP = 0.15  # at the paper scale a published number further than this (relative) from ours is named in the caption


def _number(cell: str) -> float | None:
    """The mean of a printed cell ("127.4 ± 0.3", "3,500"), None for a dash or text."""
    try:
        return float(cell.split(" ±")[0].replace(",", ""))
    except ValueError:
        return None


def published_gaps(header: list[str], rows: list[list[str]], published: list[list[str]]) -> list[str]:
    """"<method> <column>: ours against published (+x%)" for every published number under a column of the table
    (`published` rows, "<method> (published)", aligned with `header`; in the table itself or its block) more than
    GAP away, relatively, from the mean in our row of that method and column, both as the table prints them."""
    ours, out = {r[0]: r for r in rows}, []
    for lit in published:
        method = lit[0].removesuffix(" (published)")
        for col, pub, our in zip(header[1:], lit[1:], ours.get(method, [])[1:]):
            p, o = _number(pub), _number(our)
            if p and o is not None and abs(o / p - 1) > GAP:
                out.append(f"{method} {col}: {our.split(' ±')[0]} against {pub} ({o / p - 1:+.0%})")
    return out


def table_rows(exp: dict, recs: list[dict]):
    """(header, our rows, long rows for the CSV, published rows inline, published block, every published entry
    under the table's columns) of `metric_table`."""
    opts = exp["render"]
    specs, rel = metric_specs(opts), opts.get("relative_to")
    groups = column_groups(exp, opts.get("column_key"))
    labels = list(dict.fromkeys(lab for _, g in groups for lab in g.values()))
    header = ["Method"] + [" ".join(filter(None, [pretty(d), g, m["label"]]))
                           for d in exp["datasets"] for g, _ in groups for m in specs]
    rows, long = [], []
    for lab in labels:
        row = [lab]
        for d in exp["datasets"]:
            for _, members in groups:
                meth = next((m for m, mlab in members.items() if mlab == lab), None)
                for m in specs:
                    if meth is None:
                        row.append("–")
                        continue
                    if m.get("text"):
                        row.append(text_of(recs, d, meth, m["key"]))
                        continue
                    a = aggregate(recs, d, meth, m["key"])
                    if rel:
                        a = _scaled(a, aggregate(recs, d, rel, m["key"]))
                    row.append(fmt(a, 1.0 if rel else m["scale"], m["digits"], m.get("format")))
                    long.append([d, meth, m["key"], *(("", "", 0) if a is None else (a["mean"], a["std"], a["n"]))])
        rows.append(row)
    inline, published, aligned = literature_rows(opts.get("literature", []), exp["datasets"], specs,
                                                 tuple(g for g, _ in groups))
    return header, rows, long, inline, published, aligned


@RENDERERS.register("metric_table")
def metric_table(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    """Rows = methods, columns = dataset x metric; with `relative_to: <method>` every value is
    divided by that method's mean on the same dataset (the paper's 'relative to dense' tables);
    with `column_key` the columns are dataset x method group x metric (`column_groups`). At the paper
    scale the caption names every published number more than GAP from ours, then `render.gaps`: why."""
    opts, recs = exp["render"], collect(results, exp)
    header, rows, long, inline, published, aligned = table_rows(exp, recs)
    caption, foot = exp.get("title", exp["artifact"]), footer(exp, catalogue, recs)
    if opts.get("relative_to"):
        foot = f"Values relative to {method_label(exp, opts['relative_to'])} on the same dataset (1.00 = equal). " + foot
    gaps = published_gaps(header, rows, aligned) if exp["scale"] == "paper" else []
    if gaps:
        foot += (f" More than {GAP:.0%} from the published number: " + "; ".join(gaps) + ". "
                 + (opts.get("gaps") or "No `render.gaps` in the experiment file says why.").strip())
    rows += inline
    write_text(f"{out}.md", to_markdown(header, rows, caption, foot, published))
    write_text(f"{out}.tex", to_latex(header, rows, caption, foot, published))
    write_text(f"{out}.csv", to_csv(["dataset", "method", "metric", "mean", "std", "n_seeds"], long))
    write_text(f"{out}.html", to_html(header, rows, caption, foot, published))
    return [Path(f"{out}.{e}") for e in ("md", "tex", "csv", "html")]
