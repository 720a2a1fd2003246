"""The selector benchmark's outputs (benchmarks/selector_bench.py): precision against selection time per n
(figure and table), the re-rank's floor, the training-step and k-means tables, written as OUT/<name>.{json,md,png}.
"""

from __future__ import annotations

from pathlib import Path

from common import write_outputs
from selector_costs import STEP_SELECTORS

OUT = Path(__file__).resolve().parent / "out"


def family(tag: str) -> str:
    """A row's marker group: the selector's name, HF's best-first walks apart."""
    name = tag.split()[0]
    return "hf best-first" if name == "hf" and "probe=" in tag else name


def where(meta: dict) -> str:
    """The header's machine: the GPU's name on CUDA, else the CPU threads (older JSON has no device)."""
    dev = meta.get("device", "")
    return f"CUDA, {dev}, torch {meta['torch']}" if meta.get("cuda") else f"{meta['threads']} CPU threads, {meta['machine']}"


def mixture_mass(rows: list[dict]) -> str:
    """Why the mass column is near 0 on the mixture, with optimal's and random's shares from `rows`."""
    mass = {(r["n"], r["selector"]): r["mass"] for r in rows if "mass" in r}
    ns = sorted(n for n, sel in mass if sel == "optimal" and (n, "random") in mass)
    if not ns:
        return ""
    ratios = [mass[n, "optimal"] / mass[n, "random"] for n in ns]
    shares = [mass[n, sel] for n in ns for sel in ("optimal", "random")]
    span = f"{min(ratios):.1f}" if f"{min(ratios):.1f}" == f"{max(ratios):.1f}" else f"{min(ratios):.1f}-{max(ratios):.1f}"
    return (" On the mixture the logits W h are of unit scale, so the softmax spreads over all n classes and any "
            f"selection holds about |S_i| / n of it (optimal's top-q {span}x random's share, "
            f"both {share(min(shares))} to {share(max(shares))}): the column tells the selectors apart on trained "
            "embeddings (`--trained`, selectors_trained.md), not here.")


def share(m: float) -> str:
    """A share in [0, 1] to three decimals, or to two significant digits where three decimals would print 0."""
    return f"{m:.3f}" if m >= 0.0005 else f"{m:.1e}"


def selector_table(rows: list[dict], name: str, meta: dict) -> list[str]:
    """Precision vs selection time: the figure OUT/<name>.png and the table's markdown lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns), 3.4), squeeze=False)
    for ax, n in zip(axes[0], ns):
        for fam, mk in (("optimal", "*"), ("random", "x"), ("pca_hash", "s"), ("kmeans", "D"), ("hf", "o"),
                        ("hf best-first", "P"), ("faiss_ivf", "^"), ("annoy", "v")):
            pts = [(1000 * r["select_s"], r["precision"]) for r in rows if r["n"] == n and family(r["selector"]) == fam]
            if pts:
                ax.scatter(*zip(*pts), marker=mk, label=fam, s=22)
        ax.set_xscale("log")
        ax.set_xlabel("selection time per batch (ms)")
        ax.set_ylabel("precision vs optimal")
        ax.set_title(f"n = {n:,}, M = 1%")
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=130)
    lines = [f"# Selectors: precision vs selection time ({where(meta)})", "",
             meta.get("embeddings", "Class embeddings: a mixture of n/100 clusters (benchmarks/selector_bench.py docstring)") +
             f"; B = {rows[0]['B']} queries, M = 1% of n, precision = share of each query's exact top-q negatives "
             "(q = ceil(M / B)) in its own selection.", "",
             "Mass: the share of each query's softmax mass over its negatives, sum_{c != y} softmax(W h)_c, that its "
             "own selection covers (the part of the negatives' gradient the restricted softmax keeps)." +
             ("" if "embeddings" in meta else mixture_mass(rows)), "",
             "Pooled: HF's distinct classes re-ranked per query.", "",
             "| n | selector | build (s) | selection (ms / batch) | precision | mass | selected (batch) | pooled / query | "
             "selection / optimal's |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n in ns:
        opt = next(r["select_s"] for r in rows if r["n"] == n and r["selector"] == "optimal")
        for r in (r for r in rows if r["n"] == n):
            mass = share(r["mass"]) if "mass" in r else "-"  # runs before the column was added
            pooled = f"{r['pooled']:,.0f}" if "pooled" in r else "-"
            lines.append(f"| {n:,} | {r['selector']} | {r['build_s']:.2f} | {1000 * r['select_s']:.1f} | "
                         f"{r['precision']:.3f} | {mass} | {r['selected']} | {pooled} | {r['select_s'] / opt:.3f} |")
    return lines


def render(rows: list[dict], steps: list[dict], km: list[dict], name: str, meta: dict, floor: list[dict] = ()) -> None:
    lines = selector_table(rows, name, meta) if rows else [
        f"# The re-rank's floor ({where(meta)}; benchmarks/selector_bench.py --floor-only)"]
    for fl in floor:
        lines += ["", f"The re-rank's floor at n = {fl['n']:,} (B = {fl['B']}, d = {fl['d']}): P sorted random rows gathered "
                  f"per query and multiplied by it (`rerank_floor`), against exact top-k ({1000 * fl['exact_s']:.0f} ms, one "
                  f"(B, n) product):", "", "| rows per query P | re-rank (ms) | / exact top-k |", "|---|---|---|"]
        lines += [f"| {int(P):,} | {1000 * s:.0f} | {s / fl['exact_s']:.2f} |" for P, s in fl["pools"].items()]
        if fl.get("storage"):
            lines += ["", "Gathers of P rows per query from cheaper copies of W (a first pass; an exact re-rank of a "
                      "short list would follow), side by side in the same run:", "",
                      "| rows read as | rows per query P | first pass (ms) | / exact top-k |", "|---|---|---|---|"]
            lines += [f"| {k} | {v['P']:,} | {1000 * v['s']:.0f} | {v['s'] / fl['exact_s']:.2f} |" for k, v in fl["storage"].items()]
    for st in steps:
        lines += ["", f"One training step at n = {st['n']:,} (loss, backward, lazy Adam; B = {st['B']}, d = {st['d']}, "
                  f"M = {st['M']:,}; index built beforehand):", "",
                  "| head | selector setting | step (s) | speed-up vs full |", "|---|---|---|---|",
                  f"| full softmax | - | {st['full_step_s']:.3f} | 1.0x |"]
        lines += [f"| selective | {k} {STEP_SELECTORS[k][1]} | {st[k + '_step_s']:.3f} | {v:.1f}x |"
                  for k, v in st["speedup"].items()]
    if km:
        lines += ["", "k-means: xcbench.kmeans (torch Lloyd) vs faiss.Kmeans, same initial centroids, then every row assigned:", "",
                  "| n | d | K | rows fitted | iterations | ours (s) | faiss (s) | ours / faiss | MSE ours | MSE faiss |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['n']:,} | {r['d']} | {r['K']} | {r['fit_rows']:,} | {r['iters']} | {r['ours_s']:.2f} | {r['faiss_s']:.2f} | "
                  f"{r['ours_s'] / r['faiss_s']:.2f} | {r['ours_mse']:.4f} | {r['faiss_mse']:.4f} |" for r in km]
    data = {"meta": meta, "rows": rows, "steps": steps, "kmeans": km, "floor": list(floor)}
    write_outputs(name, data, "\n".join(lines))
