"""Sampler and sampled-softmax step benchmark (RF-softmax / MIDX scaling in the number of classes n).

1. Draws: time to draw m = 100 classes for each of B = 256 queries, d = 128, for every registered
   sampler, n from 10^3 to 10^6; the index build (`update`: tree sums, k-means, ...) is timed apart.
   Kernel trees store 2^ceil(log2 n) sums of D floats (left children); a tree above --max-tree-gib is
   skipped and its row says so (quadratic has D = d^2 + 1 = 16,385 at d = 128).
   Kernel trees compute their upper levels (up to 64 m nodes, kernel_tree.DENSE_PER_DRAW) by one
   matmul for all queries, which is faster than the tree on a CPU at these sizes; `rff (tree only)`
   times the pure O(D log n) descent (every level by per-draw gathers) for the scaling in n.
2. Steps: one training step of the class-embedding layer, sampled softmax (sampler + loss +
   backward + update, sparse row gradients) vs the full softmax, plain SGD (`row_sgd`), same B
   and d; the sampled step touches only the rows it uses.
Each configuration runs in a fresh subprocess (median of --repeats after a warm-up), --rounds times
in round-robin order; a row keeps its fastest round (the least disturbed by other load on a shared
machine: single runs of one configuration varied by 1.6x and more here). Ratios are taken within one
run of this script. Writes benchmarks/out/samplers.{json,md,png}.

    python benchmarks/samplers.py                   # n = 10^3 .. 10^6 (about 10 min on 2 cores)
    python benchmarks/samplers.py --classes 10000   # one size
    python benchmarks/samplers.py --name samplers_midx --dim 64 --classes 10000 100000 1000000 \
        --samplers uniform unigram lsh midx_pq midx_rq midx_learn_pq rff --steps   # the MIDX issue's goals
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from common import timed, write_outputs

OUT = Path(__file__).resolve().parent / "out"
RFF_D = 128  # RFF / Random Maclaurin features here (a D = 1024 RFF tree at n = 10^6 needs 8 GiB)


def one(cfg: dict) -> dict:
    import torch

    import xcbench.heads  # noqa: F401  (registers)
    import xcbench.optim  # noqa: F401
    import xcbench.samplers  # noqa: F401
    from xcbench.registry import HEADS, OPTIMIZERS, SAMPLERS

    torch.manual_seed(0)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    n, d, B, m = cfg["n"], cfg["d"], cfg["B"], cfg["m"]
    g = torch.Generator().manual_seed(0)  # on the CPU, as every run's (xcbench.seed)
    E = torch.nn.functional.normalize(torch.randn(n, d, device=dev), dim=1)
    h = torch.nn.functional.normalize(torch.randn(B, d, device=dev), dim=1)
    out = {**cfg, "device": str(dev)}
    if cfg["kind"] == "draw":
        params = {"D": RFF_D} if cfg["sampler"] in ("rff", "random_maclaurin") else {}
        params.update(cfg.get("params", {}))
        s = SAMPLERS.get(cfg["sampler"])(n, **params).to(dev)
        if hasattr(s, "phi"):
            D = s.phi(h[:1]).shape[1]
            gib = 2 ** math.ceil(math.log2(max(2, n))) * D * 4 / 2 ** 30
            if gib > cfg["max_tree_gib"]:
                return {**out, "skipped": f"tree needs {gib:.1f} GiB"}
        s.setup(torch.ones(n, dtype=torch.long, device=dev))
        t0 = time.perf_counter()
        s.update(E, g)
        sync()
        out["build_s"] = time.perf_counter() - t0
        out["draw_s"] = timed(lambda: s.sample(h, m, g), cfg["repeats"], sync)
        out["per_draw_us"] = 1e6 * out["draw_s"] / (B * m)
        return out
    # one training step of the output layer alone: h fixed, E trained
    if cfg["method"] == "full":
        head = HEADS.get("normalized_softmax")(d, n, torch.Generator().manual_seed(0), tau=10.0).to(dev)
    else:
        params = {"sampler_params": {"D": RFF_D}} if cfg["method"] == "rff" else {}
        head = HEADS.get("sampled_softmax")(d, n, torch.Generator().manual_seed(0), sampler=cfg["method"], m=m,
                                            tau=10.0, normalize=True, sparse_grad=True, **params).to(dev)
        head.setup({"label_counts": torch.ones(n, dtype=torch.long, device=dev), "n_train": n})
    opt = OPTIMIZERS.get("row_sgd")(head.parameters(), lr=0.1)  # plain SGD; sparse rows by index_add
    head.on_epoch_start(0, g)
    y = torch.randint(0, n, (B,), generator=g, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        head.loss(h, y, None, g).backward()
        opt.step()
        head.after_step(1, opt)

    out["step_s"] = timed(step, cfg["repeats"], sync)
    return out


def run_one(cfg: dict) -> dict:
    r = subprocess.run([sys.executable, __file__, "--one", json.dumps(cfg)], capture_output=True, text=True)
    if r.returncode != 0:
        return {**cfg, "skipped": "failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    draws = [r for r in rows if r["kind"] == "draw"]
    steps = [r for r in rows if r["kind"] == "step"]
    ns = sorted({r["n"] for r in rows})
    d = rows[0]["d"] if rows else "?"
    lines = [f"## Draws: ms to draw m = 100 classes for each of B = 256 queries (d = {d}); index build s in brackets",
             "", "| sampler | " + " | ".join(f"n = {n:,}" for n in ns) + " | per-draw time 10^6 / 10^4 |",
             "|---|" + "---|" * (len(ns) + 1)]
    name = lambda r: r["sampler"] + (f" ({r['variant']})" if r.get("variant") else "")  # noqa: E731
    for s in dict.fromkeys(name(r) for r in draws):
        by = {r["n"]: r for r in draws if name(r) == s}
        cells = [("– (" + by[n]["skipped"] + ")") if "skipped" in by.get(n, {"skipped": "not run"}) else
                 f"{1000 * by[n]['draw_s']:.1f} [{by[n]['build_s']:.2f}]" for n in ns]
        ok = all(n in by and "draw_s" in by[n] for n in (10_000, 1_000_000))
        ratio = f"{by[1_000_000]['draw_s'] / by[10_000]['draw_s']:.2f}x" if ok else "–"
        lines.append(f"| {s} | " + " | ".join(cells) + f" | {ratio} |")
    lines += ["", "## Steps: ms per training step of the output layer (sampler + loss + backward + SGD update)", "",
              "| method | " + " | ".join(f"n = {n:,}" for n in ns) + " | 10^6 / 10^4 | full / this at 10^6 |",
              "|---|" + "---|" * (len(ns) + 2)]
    full = {r["n"]: r.get("step_s") for r in steps if r["method"] == "full"}
    for meth in dict.fromkeys(r["method"] for r in steps):
        by = {r["n"]: r.get("step_s") for r in steps if r["method"] == meth}
        cells = [f"{1000 * by[n]:.1f}" if by.get(n) else "–" for n in ns]
        grow = f"{by[1_000_000] / by[10_000]:.2f}x" if by.get(1_000_000) and by.get(10_000) else "–"
        speed = f"{full[1_000_000] / by[1_000_000]:.0f}x" if by.get(1_000_000) and full.get(1_000_000) else "–"
        lines.append(f"| {meth} | " + " | ".join(cells) + f" | {grow} | {speed} |")
    dev = rows[0]["device"] if rows else "?"
    rounds = max((r.get("rounds", 1) for r in rows), default=1)
    return "\n".join(lines + ["", f"_Device: {dev}. Medians of repeated calls, fastest of {rounds} rounds; RFF and Random "
                                   f"Maclaurin with D = {RFF_D}._", ""])


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    name = lambda r: r["sampler"] + (f" ({r['variant']})" if r.get("variant") else "")  # noqa: E731
    for s in dict.fromkeys(name(r) for r in rows if r["kind"] == "draw"):
        pts = sorted((r["n"], r["per_draw_us"]) for r in rows if r["kind"] == "draw" and name(r) == s and "draw_s" in r)
        if pts:
            axes[0].loglog(*zip(*pts), marker="o", label=s)
    for meth in dict.fromkeys(r["method"] for r in rows if r["kind"] == "step"):
        pts = sorted((r["n"], 1000 * r["step_s"]) for r in rows if r["kind"] == "step" and r["method"] == meth and "step_s" in r)
        if pts:
            axes[1].loglog(*zip(*pts), marker="o", label=meth)
    axes[0].set(xlabel="classes n", ylabel="µs per draw", title="sampling")
    axes[1].set(xlabel="classes n", ylabel="ms per step", title="training step (output layer)")
    for ax in axes:
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", type=int, nargs="*", default=[1_000, 10_000, 100_000, 1_000_000])
    p.add_argument("--samplers", nargs="*", default=None, help="default: every registered sampler")
    p.add_argument("--steps", nargs="*", default=["full", "uniform", "rff"], help="methods of the step benchmark")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3, help="runs of every configuration; the fastest is kept")
    p.add_argument("--max-tree-gib", type=float, default=4.0)
    p.add_argument("--dim", type=int, default=128, help="embedding dimension d")
    p.add_argument("--name", default="samplers", help="output stem in benchmarks/out/")
    p.add_argument("--no-tree-only", action="store_true", help="skip the pure-tree RFF variant")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(json.loads(a.one))))
        return
    import xcbench.samplers  # noqa: F401
    from xcbench.registry import SAMPLERS

    base = {"d": a.dim, "B": 256, "m": 100, "repeats": a.repeats, "max_tree_gib": a.max_tree_gib}
    cfgs = [{**base, "kind": "draw", "sampler": s, "n": n} for s in (a.samplers or SAMPLERS.names()) for n in a.classes]
    # the pure tree (every level by per-draw gathers): the O(D log n) path without the matmul shortcut
    cfgs += [{**base, "kind": "draw", "sampler": "rff", "variant": "tree only", "params": {"dense_nodes": 1}, "n": n}
             for n in a.classes if not a.no_tree_only]
    cfgs += [{**base, "kind": "step", "method": meth, "n": n, "repeats": max(2, a.repeats // 2) if meth == "full" else a.repeats}
             for meth in a.steps for n in a.classes]
    best: dict[int, dict] = {}
    for r in range(a.rounds):
        for i, c in enumerate(cfgs):
            row = {**run_one(c), "rounds": r + 1}
            print(json.dumps(row), flush=True)
            time_key = "draw_s" if c["kind"] == "draw" else "step_s"
            if i not in best or row.get(time_key, math.inf) < best[i].get(time_key, math.inf):
                best[i] = row
            best[i]["rounds"] = r + 1
    rows = [best[i] for i in range(len(cfgs))]
    OUT.mkdir(exist_ok=True)
    write_outputs(a.name, rows, table(rows))
    plot(rows, OUT / f"{a.name}.png")
    print(table(rows))


if __name__ == "__main__":
    main()
