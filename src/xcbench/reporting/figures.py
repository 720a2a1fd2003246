"""Figure renderers. `curves`: one panel per dataset, a per-epoch curve (e.g. val_P@1) per method,
mean over seeds with a min-max band, the caption's footer under the panels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xcbench.io import write_text
from xcbench.registry import RENDERERS
from xcbench.reporting import style
from xcbench.reporting.captions import footer
from xcbench.reporting.collect import collect
from xcbench.reporting.labels import pretty


@RENDERERS.register("curves")
def curves(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    opts = exp["render"]
    key, ylabel = opts["curve"], opts.get("ylabel", opts["curve"])
    recs = collect(results, exp)
    fig, axes = style.figure(len(exp["datasets"]))
    for ax, d in zip(axes[0], exp["datasets"]):
        for meth in exp["methods"]:
            ys = [r["curves"][key] for r in recs if r["dataset"] == d and r["method"] == meth and key in r["curves"]]
            if not ys:
                continue
            n = min(map(len, ys))
            Y = np.asarray([y[:n] for y in ys])                                       # (seeds, epochs)
            x = np.arange(1, n + 1)
            (line,) = ax.plot(x, Y.mean(0), label=pretty(meth), marker="o", markersize=2.5)
            if len(ys) > 1:
                ax.fill_between(x, Y.min(0), Y.max(0), color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(pretty(d))
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
    axes[0][0].legend(frameon=False)
    foot = footer(exp, catalogue)
    fig.suptitle(exp.get("title", exp["artifact"]), fontsize=9)
    paths = style.save(fig, out)
    write_text(f"{out}.caption.md", f"**{exp.get('title', exp['artifact'])}** _{foot}_\n")
    return paths + [Path(f"{out}.caption.md")]
