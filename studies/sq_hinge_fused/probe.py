"""The OvA squared hinge as autograd's chain of element-wise ops against the fused function of heads/ova.py
(studies/sq_hinge_fused): loss + backward time and peak memory over (B, n) scores, and whether the two agree bit
for bit. Each case runs in its own process (peak resident memory is per process), cases alternating.

    python studies/sq_hinge_fused/probe.py [--n 100000 1000000] [--batch 256] [--rounds 2]

Writes studies/sq_hinge_fused/out/probe.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "out"
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import write_outputs  # noqa: E402


def chain(o: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The squared hinge as the package computed it before the fused function."""
    return torch.relu(1 - (2 * t - 1) * o).square().mean()


def one_case(kind: str, n: int, B: int) -> dict:
    """Loss + backward of one implementation on seeded scores and 5 labels a row; peak resident set above the
    inputs (the scores and targets), and a digest of the loss and gradient to compare across processes."""
    from xcbench.heads.base import multi_hot
    from xcbench.heads.ova import sq_hinge_loss

    g = torch.Generator().manual_seed(0)
    o = torch.randn(B, n, generator=g).requires_grad_()                          # (B, n)
    t = multi_hot(torch.randint(0, n, (B, 5), generator=g), n)                   # (B, n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    loss = (chain if kind == "chain" else sq_hinge_loss)(o, t)
    loss.backward()
    s = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    digest = [loss.item(), o.grad.double().sum().item(), o.grad.abs().double().sum().item()]
    return {"kind": kind, "n": n, "B": B, "s": s, "peak_above_inputs_gb": peak_kb * 1024 / 1e9, "digest": digest}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--case", nargs=3, metavar=("KIND", "N", "B"), help=argparse.SUPPRESS)  # one case, in a child
    a = p.parse_args()
    from xcbench.runtime import configure_process

    configure_process(1)
    if a.case:
        print(json.dumps(one_case(a.case[0], int(a.case[1]), int(a.case[2]))))
        return
    rows = []
    for n in a.n:
        for _ in range(a.rounds):
            for kind in ("chain", "fused"):
                done = subprocess.run([sys.executable, __file__, "--case", kind, str(n), str(a.batch)],
                                      capture_output=True, text=True, check=True)
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    md = [f"# Squared hinge, loss + backward over (B, n) scores, B = {a.batch} (one thread, "
          f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__})", "",
          "| n | implementation | s | peak above the inputs (GB) | same loss and gradient as the chain |",
          "|---|---|---|---|---|"]
    for r in rows:
        ref = next(c for c in rows if c["n"] == r["n"] and c["kind"] == "chain")
        md.append(f"| {r['n']:,} | {r['kind']} | {r['s']:.2f} | {r['peak_above_inputs_gb']:.2f} | "
                  f"{'yes' if r['digest'] == ref['digest'] else 'NO'} |")
    write_outputs("probe", {"rows": rows}, "\n".join(md), OUT)
    print("\n".join(md))


if __name__ == "__main__":
    main()
