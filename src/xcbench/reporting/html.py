"""Self-contained HTML for the Snakemake report: every table, each paper's claims and the gathered
report as readable pages (not raw LaTeX or Markdown), figures embedded as data URIs, so a browser
shows them inside `snakemake --report report.html` without the files beside it."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

STYLE = ("<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin:.5em 0}"
         "th,td{border:1px solid #bbb;padding:3px 7px;text-align:right}th{background:#eee}"
         "td:first-child,th:first-child{text-align:left}caption{font-weight:bold;text-align:left;padding:.3em 0}"
         ".foot{font-size:90%;color:#333;max-width:60em}img{max-width:100%}</style>")


def _inline(s: str) -> str:
    """Markdown emphasis (**b**, _i_) of a table cell or paragraph to HTML, everything else escaped."""
    s = html.escape(s)
    s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
    return re.sub(r"(?<![\w])_(.+?)_(?![\w])", r"<i>\1</i>", s)


def table(header: list[str], rows: list[list[str]], caption: str = "") -> str:
    cap = f"<caption>{_inline(caption)}</caption>" if caption else ""
    head = "".join(f"<th>{_inline(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def foot(text: str) -> str:
    """A caption's footer (scale, seeds, setup, notes) under a table or figure."""
    return f"<p class='foot'><i>{html.escape(text)}</i></p>"


def page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{STYLE}</head>"
            f"<body>{body}</body></html>\n")


def image(png: str | Path, alt: str = "") -> str:
    data = base64.b64encode(Path(png).read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def markdown(md: str) -> str:
    """A Markdown page (a rendered table with its caption) as HTML, by the `markdown` package with its
    tables extension (the workflow extra)."""
    import markdown as md_lib

    return md_lib.markdown(md, extensions=["tables"], output_format="html")
