"""How a sampled softmax should compute its logits: `logits: gather`, `all` and `sparse`, beside Full.

A sampled head's 1 + m logits per row can be read three ways (heads/sampled_softmax.py, heads/row_dots.py):
    gather: h_b . E[s_bj] for the B (1 + m) drawn rows: B m d multiply-adds, but B m rows of d floats moved
            four times (gather, dots, two backward products) and a sparse gradient of B m rows to coalesce;
    all:    H E^T (B, n) by one product, then each row's 1 + m picked: B n d multiply-adds, as Full's;
    sparse: the drawn (row, class) pairs as a sparse (B, n) pattern: a sampled product forward and two sparse-dense
            products backward, B m d multiply-adds and no (B, m, d) rows.
One training step of the output layer alone (uniform draws, lazy Adam on sparse rows, as MIDX Table 9), for
B = 256, d = 128 and n = 13,330 (AmazonCat-13K), over m, so that B m / n runs from about 1 to 19. Each
configuration is timed in one process, the four heads alternating, median of --repeats steps after a warm-up;
ratios are taken within a row. Writes benchmarks/out/sampled_logits.{json,md}.

    python benchmarks/sampled_logits.py                       # about 3 min on one CPU thread
    python benchmarks/sampled_logits.py --classes 100000 --draws 100 1000
    python benchmarks/sampled_logits.py --classes 10000 --draws 100 --batch 700 --dim 200 --name sampled_logits_ptb
                                                              # the xcbench lm table's paper shape (PTB)
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import write_outputs


def step_times(n: int, d: int, B: int, m: int, repeats: int) -> dict[str, float]:
    """Median seconds of one step of Full and the sampled head by each `logits` route, run alternately."""
    import torch

    import xcbench.heads  # noqa: F401  (registers)
    import xcbench.optim  # noqa: F401
    from xcbench.registry import HEADS, OPTIMIZERS

    def head(kind: str):
        gen = torch.Generator().manual_seed(0)
        if kind == "full":
            return HEADS.get("normalized_softmax")(d, n, gen, normalize=False, init_std=0.05)
        return HEADS.get("sampled_softmax")(d, n, gen, sampler="uniform", m=m, sparse_grad=True, init_std=0.05,
                                            logits=kind)

    heads = {k: head(k) for k in ("full", "gather", "all", "sparse")}
    opts = {k: OPTIMIZERS.get("lazy_adam")(v.parameters(), lr=2e-3) for k, v in heads.items()}
    g = torch.Generator().manual_seed(1)
    H, y = torch.randn(B, d, generator=g), torch.randint(0, n, (B,), generator=g)
    times: dict[str, list[float]] = {k: [] for k in heads}
    for r in range(repeats + 2):  # two warm-up rounds
        for k, hd in heads.items():
            t0 = time.perf_counter()
            h = H.clone().requires_grad_(True)
            loss = hd.loss(h, y, None, torch.Generator().manual_seed(r))
            opts[k].zero_grad(set_to_none=True)
            loss.backward()
            opts[k].step()
            if r >= 2:
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def table(rows: list[dict], threads: int, note: str = "") -> str:
    routes = ("gather", "all", "sparse")
    lines = ["# Sampled softmax: gathered rows, one product with every class, or a sparse pattern (`logits`)", "",
             "| n | m | B m / n | Full ms | " + " | ".join(f"{k} ms" for k in routes) + " | "
             + " | ".join(f"{k} / Full" for k in routes) + " | fastest |",
             "|---|---|---|---|" + "---|" * (2 * len(routes) + 1)]
    for r in rows:
        f, t = r["full_s"], {k: r[f"{k}_s"] for k in routes if f"{k}_s" in r}
        lines.append(f"| {r['n']:,} | {r['m']:,} | {r['B'] * r['m'] / r['n']:.1f} | {1e3 * f:.1f} | "
                     + " | ".join(f"{1e3 * t[k]:.1f}" if k in t else "-" for k in routes) + " | "
                     + " | ".join(f"{t[k] / f:.2f}" if k in t else "-" for k in routes) + f" | {min(t, key=t.get)} |")
    b, d = (rows[0]["B"], rows[0]["d"]) if rows else ("?", "?")
    return "\n".join(lines + ["", f"_B = {b}, d = {d}, uniform draws, lazy Adam on sparse rows; {threads} CPU thread(s); "
                                  "median step of the heads run alternately in one process" + (f"; {note}" if note else "")
                                  + "._", ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", type=int, nargs="*", default=[13_330])
    p.add_argument("--draws", type=int, nargs="*", default=[50, 100, 200, 400, 1000], help="m, draws per row")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--name", default="sampled_logits", help="output stem in benchmarks/out/")
    p.add_argument("--note", default="", help="the conditions of the measurement, appended to the table's footnote")
    a = p.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    rows = []
    for n in a.classes:
        for m in a.draws:
            t = step_times(n, a.dim, a.batch, m, a.repeats)
            rows.append({"n": n, "m": m, "B": a.batch, "d": a.dim, "threads": a.threads, **{f"{k}_s": v for k, v in t.items()}})
            print(rows[-1], flush=True)
    write_outputs(a.name, rows, table(rows, a.threads, a.note))
    print(table(rows, a.threads, a.note))


if __name__ == "__main__":
    main()
