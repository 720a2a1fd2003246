"""The exact softmax loss layer alone: time of one step (loss and backward) and the loss's own peak memory
(beyond the weights, their gradient and the batch), materialised (`full_softmax`), class-chunked
(`full_chunked`) and torch's `linear_cross_entropy` with its default chunking options, at n classes.

Each case runs in its own process: peak memory is the process's peak resident size after the step minus
its peak after allocating W, b, h and (then freed) tensors the size of their gradients (ru_maxrss, CPU);
the step starts with no gradient (zero_grad's default), so its backward allocates them as training does. Floor: the
bytes of the class rows a
step must touch, W read in the forward pass, read again and its gradient written in the backward
(3 n d 4 bytes), beside the measured time. Ratios are side by side in one run.

    python benchmarks/loss_layer.py --classes 10000 100000 1000000   # -> benchmarks/out/loss_layer.{json,md}
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from common import write_outputs

OUT = Path(__file__).resolve().parent / "out"
METHODS = ("materialised", "chunked", "torch_lce")


def one(method: str, n: int, d: int, B: int, chunk: int, repeats: int) -> dict:
    """One case in this process: best-of-repeats step time and the step's peak memory beyond its inputs."""
    import torch
    import torch.nn.functional as F

    from xcbench.heads.full_chunked import ChunkedSoftmaxCE

    g = torch.Generator().manual_seed(0)
    W = (torch.randn(n, d, generator=g) * d ** -0.5).requires_grad_()
    b = torch.zeros(n, requires_grad=True)
    h = torch.randn(B, d, generator=g).requires_grad_()
    y = torch.randint(0, n, (B,), generator=g)
    grads = [torch.ones_like(t) for t in (W, b, h)]  # the gradients' memory counted in the baseline, then freed:
    del grads                                        # each step's backward allocates them as a training step does
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step = {"materialised": lambda: F.cross_entropy(h @ W.T + b, y),
            "chunked": lambda: ChunkedSoftmaxCE.apply(h, W, b, y, chunk),
            "torch_lce": lambda: F.linear_cross_entropy(h, W, y, linear_bias=b,
                                                        options=torch.nn.LinearCrossEntropyOptions())}[method]
    best, loss = float("inf"), None
    for _ in range(repeats):
        W.grad = b.grad = h.grad = None  # zero_grad(set_to_none=True), torch's default
        t0 = time.perf_counter()
        loss = step()
        loss.backward()
        best = min(best, time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "n": n, "d": d, "B": B, "chunk": chunk, "step_s": best, "loss": float(loss),
            "own_peak_mb": (peak - base) / 1024, "inputs_mb": (2 * n * d + 2 * n + 2 * B * d) * 4 / 2 ** 20,
            "floor_mb_touched": 3 * n * d * 4 / 2 ** 20, "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--torch-lce-max", type=int, default=100_000, help="largest n for torch_lce (150 s a step at 10^6)")
    p.add_argument("--name", default="loss_layer")
    p.add_argument("--one", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)  # a child process's case
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.dim, a.batch, a.chunk, a.repeats)))
        return
    rows = []
    for n in a.classes:
        for m in a.methods:
            if m == "torch_lce" and n > a.torch_lce_max:
                continue
            cmd = [sys.executable, __file__, "--one", m, str(n), "--dim", str(a.dim), "--batch", str(a.batch),
                   "--chunk", str(a.chunk), "--repeats", str(a.repeats)]
            rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
            print(rows[-1], flush=True)
    OUT.mkdir(exist_ok=True)
    write_outputs(a.name, rows, table(rows))
    print(table(rows))


def table(rows: list[dict]) -> str:
    r0 = rows[0]
    lines = [f"# The exact softmax loss layer: one step (loss + backward), d = {r0['d']}, B = {r0['B']}, "
             f"chunk {r0['chunk']}, {r0['threads']} threads, best of the repeats; each case in its own process", "",
             "| n | method | step s | x materialised | loss's own peak MB | / materialised | inputs MB | "
             "class rows touched MB (floor) |", "|---|---|---|---|---|---|---|---|"]
    ref = {r["n"]: r for r in rows if r["method"] == "materialised"}
    for r in rows:
        m = ref.get(r["n"])
        lines.append(f"| {r['n']:,} | {r['method']} | {r['step_s']:.3f} | {r['step_s'] / m['step_s']:.2f} | "
                     f"{r['own_peak_mb']:,.0f} | {r['own_peak_mb'] / max(m['own_peak_mb'], 1):.3f} | "
                     f"{r['inputs_mb']:,.0f} | {r['floor_mb_touched']:,.0f} |" if m else
                     f"| {r['n']:,} | {r['method']} | {r['step_s']:.3f} | - | {r['own_peak_mb']:,.0f} | - | "
                     f"{r['inputs_mb']:,.0f} | {r['floor_mb_touched']:,.0f} |")
    lines += ["", "Loss's own peak: the process's peak resident memory after the step minus its peak after allocating "
              "W, b, h and tensors the size of their gradients (the materialised loss keeps (B, n) logits and their "
              "softmax; the chunked one B x chunk)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
