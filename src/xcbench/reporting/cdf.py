"""`proposal_cdf` figures (MIDX Figure 5): cumulative sampling distributions of every sampler's
draws beside the softmax's, over the classes ordered by training frequency, after the first and the
last epoch (curves recorded by the sampled-softmax head, samplers/frequency.py). Each sampler's
curve comes from the model it trained; the dashed softmax curve is that of `render.softmax_of`'s
model (per panel), named in the legend.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.registry import RENDERERS
from xcbench.reporting import style
from xcbench.reporting.captions import footer
from xcbench.reporting.collect import collect
from xcbench.reporting.figures import LINESTYLES, figure_pages
from xcbench.reporting.labels import method_label, pretty

STAGES = {"first": "after epoch 1", "last": "after training"}


@RENDERERS.register("proposal_cdf")
def proposal_cdf(exp: dict, results: str, out: str, catalogue: dict) -> list[Path]:
    opts, recs = exp["render"], collect(results, exp)
    panels = [(d, st) for d in exp["datasets"] for st in STAGES]
    fig, axes = style.figure(len(panels))
    rows, palette = [], style.palette()
    drawn = [m for m in exp["methods"] if any(r["method"] == m and "cdf" in r.get("head", {}) for r in recs)]
    rank = {m: j for j, m in enumerate(drawn)}  # one colour and line style per method on every panel
    for ax, (d, stage) in zip(axes[0], panels):
        runs = {r["method"]: r["head"]["cdf"] for r in recs if r["dataset"] == d and "cdf" in r.get("head", {})}
        for meth, c in runs.items():
            j = rank[meth]
            ax.plot(c["ranks"], c[stage]["sampler"], label=method_label(exp, meth), linewidth=1,
                    linestyle=LINESTYLES[j % len(LINESTYLES)], color=palette[j % len(palette)])
            gap = max(abs(a - b) for a, b in zip(c[stage]["softmax"], c[stage]["sampler"]))
            rows.append(f"| {pretty(d)} | {STAGES[stage]} | {method_label(exp, meth)} | {gap:.3f} |")
        ref = runs.get(opts.get("softmax_of"))
        if ref:
            ax.plot(ref["ranks"], ref[stage]["softmax"], "k--", linewidth=1.5,
                    label=f"softmax ({method_label(exp, opts['softmax_of'])} model)")
        ax.set_xscale("log")
        ax.set(xlabel="classes by training frequency (rank)", ylabel="cumulative probability",
               title=f"{pretty(d)}: {STAGES[stage]}")
        if runs:
            ax.legend(frameon=False, fontsize=6)
    title, foot = exp.get("title", exp["artifact"]), footer(exp, catalogue, recs)
    style.title(fig, title)
    paths = style.save(fig, out)
    return paths + figure_pages(out, title, foot, "Largest gap between a sampler's curve and its own model's "
                                "softmax curve:\n\n| dataset | stage | sampler | max gap |\n|---|---|---|---|\n"
                                + "\n".join(rows) + "\n")
