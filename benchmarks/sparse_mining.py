"""Implicit negative mining of the squared hinge (Schultheis & Babbar 2023, section 4): the share of
labels whose back-propagated signal is not all zero in a batch, and the step time, as training goes.

The squared hinge relu(1 - (2y - 1) o)^2 has exactly zero gradient for every label whose margin is
met, and the uniform sparse layer's backward pass skips labels whose gradient column is all zero;
BCE never gives an exact zero. Both losses train the paper's architecture (e -> I dense ReLU ->
uniform-sparse I -> m, fan-in s, batch 32, Adam 1e-3) for --steps steps on a fixed random problem
(Gaussian features, 5 random positive labels per row), and every --every steps the share of labels
back-propagated (the head's own counter) and the median step time of the last --every steps are
recorded. Writes benchmarks/out/sparse_mining.{json,md,png}.

    python benchmarks/sparse_mining.py                     # m = 131K, 1000 steps (~10 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from common import write_outputs

OUT = Path(__file__).resolve().parent / "out"


def run(loss: str, a) -> list[dict]:
    from xcbench.model import build_model

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    params = {"fan_in": a.fan_in, "rewire_interval": 0, "loss": loss}
    model = build_model({"encoder": {"name": "mlp", "hidden": a.intermediate}}, "uniform_sparse", params,
                        a.features, a.labels, 0).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(a.rows, a.features, generator=g).to(dev)                          # (N, e)
    Y = torch.randint(0, a.labels, (a.rows, 5), generator=g).to(dev)                   # (N, 5)
    model.train()
    rows, times, last = [], [], model.head.bwd_stats.clone()
    for step in range(1, a.steps + 1):
        b = torch.randint(0, a.rows, (a.batch,), generator=g).to(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model.loss(X[b], Y[b], None, None).backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        if step % a.every == 0:
            active, seen = (model.head.bwd_stats - last).tolist()
            last = model.head.bwd_stats.clone()
            rows.append({"loss": loss, "step": step, "backprop_share": active / seen,
                         "step_s": statistics.median(times[-a.every:]), "device": str(dev)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", type=int, default=131000)
    p.add_argument("--intermediate", type=int, default=16384)
    p.add_argument("--fan-in", type=int, default=32)
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rows", type=int, default=4096, help="size of the fixed random training set")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--every", type=int, default=100)
    a = p.parse_args()
    rows = run("sq_hinge", a) + run("bce", a)
    OUT.mkdir(exist_ok=True)
    by = {(r["loss"], r["step"]): r for r in rows}
    steps = sorted({r["step"] for r in rows})
    lines = [f"# Implicit negative mining: m = {a.labels:,}, I = {a.intermediate:,}, fan-in {a.fan_in}, batch {a.batch} "
             f"({rows[0]['device']})", "", "| step | sq. hinge: labels back-propagated | sq. hinge s/step | "
             "BCE: labels back-propagated | BCE s/step | BCE / sq. hinge step time |", "|---|---|---|---|---|---|"]
    for s in steps:
        h, c = by[("sq_hinge", s)], by[("bce", s)]
        lines.append(f"| {s} | {100 * h['backprop_share']:.1f}% | {h['step_s']:.3f} | {100 * c['backprop_share']:.1f}% | "
                     f"{c['step_s']:.3f} | {c['step_s'] / h['step_s']:.2f}x |")
    write_outputs("sparse_mining", rows, "\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(8, 3))
    for loss in ("sq_hinge", "bce"):
        ax[0].plot(steps, [100 * by[(loss, s)]["backprop_share"] for s in steps], marker="o", label=loss)
        ax[1].plot(steps, [by[(loss, s)]["step_s"] for s in steps], marker="o", label=loss)
    ax[0].set(xlabel="step", ylabel="labels back-propagated (%)")
    ax[1].set(xlabel="step", ylabel="s / step")
    ax[0].legend(frameon=False)
    fig.tight_layout()
    fig.savefig(OUT / "sparse_mining.png", dpi=120)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
