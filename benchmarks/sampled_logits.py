"""Where a sampled softmax should score every class: `logits: gather` against `logits: all`, beside Full.

A sampled head's 1 + m logits per row can be read two ways (heads/sampled_softmax.py):
    gather: h_b . E[s_bj] for the B (1 + m) drawn rows: B m d multiply-adds, but B m rows of d floats moved
            four times (gather, dots, two backward products) and a sparse gradient of B m rows to coalesce;
    all:    H E^T (B, n) by one product, then each row's 1 + m picked: B n d multiply-adds, as Full's.
One training step of the output layer alone (uniform draws, lazy Adam on sparse rows, as MIDX Table 9), for
B = 256, d = 128 and n = 13,330 (AmazonCat-13K), over m, so that B m / n runs from about 1 to 19. Each
configuration is timed in one process, the three heads alternating, median of --repeats steps after a warm-up;
ratios are taken within a row. Writes benchmarks/out/sampled_logits.{json,md}.

    python benchmarks/sampled_logits.py                       # about 3 min on one CPU thread
    python benchmarks/sampled_logits.py --classes 100000 --draws 100 1000
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import write_outputs


def step_times(n: int, d: int, B: int, m: int, repeats: int) -> dict[str, float]:
    """Median seconds of one step of Full, the gathering and the all-class sampled head, run alternately."""
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

    heads = {k: head(k) for k in ("full", "gather", "all")}
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


def table(rows: list[dict], threads: int) -> str:
    lines = ["# Sampled softmax: gathered rows against one product with every class (`logits`)", "",
             "| n | m | B m / n | Full ms | gather ms | all ms | gather / Full | all / Full | faster |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, ga, al = r["full_s"], r["gather_s"], r["all_s"]
        lines.append(f"| {r['n']:,} | {r['m']:,} | {r['B'] * r['m'] / r['n']:.1f} | {1e3 * f:.1f} | {1e3 * ga:.1f} | "
                     f"{1e3 * al:.1f} | {ga / f:.2f} | {al / f:.2f} | {'all' if al < ga else 'gather'} |")
    b, d = (rows[0]["B"], rows[0]["d"]) if rows else ("?", "?")
    return "\n".join(lines + ["", f"_B = {b}, d = {d}, uniform draws, lazy Adam on sparse rows; {threads} CPU thread(s); "
                                  "median step of the heads run alternately in one process._", ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", type=int, nargs="*", default=[13_330])
    p.add_argument("--draws", type=int, nargs="*", default=[50, 100, 200, 400, 1000], help="m, draws per row")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--name", default="sampled_logits", help="output stem in benchmarks/out/")
    a = p.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    rows = []
    for n in a.classes:
        for m in a.draws:
            t = step_times(n, a.dim, a.batch, m, a.repeats)
            rows.append({"n": n, "m": m, "B": a.batch, "d": a.dim, "threads": a.threads, **{f"{k}_s": v for k, v in t.items()}})
            print(rows[-1], flush=True)
    write_outputs(a.name, rows, table(rows, a.threads))
    print(table(rows, a.threads))


if __name__ == "__main__":
    main()
