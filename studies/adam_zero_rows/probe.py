"""Why a sampled head's first steps under dense Adam cost twice its later ones on the CPU (studies/adam_zero_rows).

Part 1: torch.sqrt over 25.6M float32 values (a 10^5 x 256 class table's second moments) that are all positive,
all zero, or zero in 5% / 77% of places, rounds alternating; and sqrt(max(v, tiny)), the bit-identical variant
(tiny is absorbed by Adam's eps). Part 2, given a prepared dataset: whole training steps of one method from its
seed-0 start, the median of each eighth of the steps.

    python studies/adam_zero_rows/probe.py [--experiment config/experiments/xcbench/xmc.yaml --scale paper \\
        --dataset synthetic-xmc-100k --method uniform --steps 160]

Writes studies/adam_zero_rows/out/probe.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "out"
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import write_outputs  # noqa: E402


def sqrt_cases(n: int, rounds: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    v = torch.rand(n, generator=g) * 1e-8                                    # (n,) positive second moments
    u = torch.rand(n, generator=g)
    tiny = torch.finfo(torch.float32).tiny
    cases = {"positive": v, "all zero": torch.zeros(n), "5% zero": v.masked_fill(u < 0.05, 0),
             "77% zero": v.masked_fill(u < 0.77, 0)}
    out, buf = torch.empty(n), torch.empty(n)
    fns = {}
    for name, x in cases.items():
        fns[f"sqrt, {name}"] = lambda x=x: torch.sqrt(x, out=out)
        fns[f"sqrt(max(v, tiny)), {name}"] = lambda x=x: torch.sqrt(torch.clamp_min(x, tiny, out=buf), out=out)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return [{"part": "sqrt", "case": k, "ms": 1e3 * statistics.median(t)} for k, t in times.items()]


def step_phases(a) -> list[dict]:
    """Each training step of one run from its seed-0 start, timed as built.weights_after_steps takes it."""
    from built import weights_after_steps

    d, times = a.dataset, []

    def timed(step) -> None:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)

    weights_after_steps(a.experiment, a.scale, d, str(ROOT / f"data/processed/{d}/dataset.npz"), a.method, a.steps,
                        timed, a.features or str(ROOT / f"data/features/{d}/tfidf_svd256.pt"))
    k = max(1, len(times) // 8)
    name = f"{Path(a.experiment).parent.name}/{Path(a.experiment).stem} {d} {a.method}"
    return [{"part": "train step", "case": f"{name}, steps {s + 1}-{s + k}", "ms": 1e3 * statistics.median(times[s:s + k])}
            for s in range(0, len(times) - k + 1, k)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=25_600_000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--experiment"), p.add_argument("--scale", default="paper"), p.add_argument("--dataset")
    p.add_argument("--features"), p.add_argument("--method", default="uniform")
    p.add_argument("--steps", type=int, default=160)
    a = p.parse_args()
    from xcbench.runtime import configure_process

    configure_process(1)
    rows = sqrt_cases(a.n, a.rounds) + (step_phases(a) if a.experiment else [])
    cpu = torch.backends.cpu.get_cpu_capability()
    md = [f"# torch.sqrt over zeros, and a sampled head's first steps (one thread, {cpu}, torch {torch.__version__})", "",
          "| part | case | ms |", "|---|---|---|"] + [f"| {r['part']} | {r['case']} | {r['ms']:.1f} |" for r in rows]
    write_outputs("probe", {"cpu": cpu, "rows": rows}, "\n".join(md), OUT)
    print("\n".join(md))


if __name__ == "__main__":
    main()
