"""The loss layer alone: time of one step (loss and backward) and the loss's own peak memory (beyond the
weights, their gradient and the batch), materialised (`full_softmax`), class-chunked (`full_chunked`) and
torch's `linear_cross_entropy` with its default chunking options, at n classes; beside them the sampled
and selective heads of the registry (`--heads`: sampled softmax with m = 100 Uniform or MIDX-rq (K = 32)
negatives, selective softmax over 1% of the classes, drawn at random or
HF's (50 trees, leaves of 16: class selection Fig. 2)), each step after its index build, whose
time and memory are reported apart (it is paid once an epoch, not once a step).

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
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from common import write_outputs

OUT = Path(__file__).resolve().parent / "out"
METHODS = ("materialised", "chunked", "torch_lce")
HEADS = {  # name -> (registry key, params): the heads' steps beside the exact losses
    "sampled_uniform": ("sampled_softmax", {"sampler": "uniform", "m": 100}),
    "sampled_midx_rq": ("sampled_softmax", {"sampler": "midx_rq", "sampler_params": {"K": 32}, "m": 100}),
    "selective_random": ("selective_softmax", {"selector": "random", "M_frac": 0.01}),
    "selective_hf": ("selective_softmax", {"selector": "hf", "selector_params": {"trees": 50, "leaf": 16}, "M_frac": 0.01}),
}


def rss_mb() -> float:
    """This process's peak resident size so far (ru_maxrss), MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best_step(step, zero_grads, repeats: int) -> tuple[float, object]:
    """(best seconds over `repeats` of loss = step(); loss.backward(), the last loss), each from no gradient."""
    best, loss = float("inf"), None
    for _ in range(repeats):
        zero_grads()
        t0 = time.perf_counter()
        loss = step()
        loss.backward()
        best = min(best, time.perf_counter() - t0)
    return best, loss


def one_head(name: str, n: int, d: int, B: int, repeats: int) -> dict:
    """A registry head's step in this process: its build (`prepare`: statistics, first index) timed and
    measured apart, then best-of-repeats loss + backward; floor: the class rows its gradient reaches."""
    import torch

    from xcbench.heads.sampled_softmax import grad_rows
    from xcbench.registry import HEADS as REGISTRY
    from xcbench.runtime import mark_rss

    key, params = HEADS[name]
    g = torch.Generator().manual_seed(0)
    head = REGISTRY.get(key)(d, n, g, **params)
    h = torch.randn(B, d, generator=g).requires_grad_()
    y = torch.randint(0, n, (B,), generator=g)
    idx = torch.arange(B)
    before = rss_mb()
    t0 = time.perf_counter()
    head.prepare(torch.ones(n), n_train=n, batch_size=B, seed=0)
    build_s, build_mb = time.perf_counter() - t0, rss_mb() - before
    mark_rss()  # the peak so far (the build's) reset to the resident set, so that the step's own peak shows
    grads = [torch.ones_like(t) for t in (*head.parameters(), h)]  # the gradients' memory, as for the losses
    del grads
    base = rss_mb()

    def zero_grads() -> None:
        head.zero_grad(set_to_none=True)
        h.grad = None
    best, loss = best_step(lambda: head.loss(h, y, idx, head._gen), zero_grads, repeats)
    rows = max((len(grad_rows(p.grad, h.device)) for p in head.parameters() if p.dim() == 2 and p.shape[0] == n),
               default=0)
    return {"method": name, "n": n, "d": d, "B": B, "chunk": None, "step_s": best, "loss": loss.item(),
            "own_peak_mb": rss_mb() - base, "build_s": build_s, "build_mb": build_mb,
            "inputs_mb": (2 * sum(p.numel() for p in head.parameters()) + 2 * B * d) * 4 / 2 ** 20,
            "floor_mb_touched": 3 * rows * d * 4 / 2 ** 20, "threads": torch.get_num_threads()}


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
    base = rss_mb()
    step = {"materialised": lambda: F.cross_entropy(h @ W.T + b, y),
            "chunked": lambda: ChunkedSoftmaxCE.apply(h, W, b, y, chunk),
            "torch_lce": lambda: F.linear_cross_entropy(h, W, y, linear_bias=b,
                                                        options=torch.nn.LinearCrossEntropyOptions())}[method]

    def zero_grads() -> None:  # zero_grad(set_to_none=True), torch's default
        W.grad = b.grad = h.grad = None
    best, loss = best_step(step, zero_grads, repeats)
    return {"method": method, "n": n, "d": d, "B": B, "chunk": chunk, "step_s": best, "loss": float(loss),
            "own_peak_mb": rss_mb() - base, "inputs_mb": (2 * n * d + 2 * n + 2 * B * d) * 4 / 2 ** 20,
            "floor_mb_touched": 3 * n * d * 4 / 2 ** 20, "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--heads", nargs="*", default=list(HEADS), choices=list(HEADS),
                   help="registry heads measured beside the exact losses (none: --heads)")
    p.add_argument("--torch-lce-max", type=int, default=100_000, help="largest n for torch_lce (150 s a step at 10^6)")
    p.add_argument("--hf-max", type=int, default=100_000,
                   help="largest n for selective_hf (its 50 trees held 2.4 GB and took 96 s to build at 10^5)")
    p.add_argument("--name", default="loss_layer")
    p.add_argument("--note", default="", help="appended to the title: the conditions (e.g. 'beside two trainings')")
    p.add_argument("--one", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)  # a child process's case
    a = p.parse_args()
    if a.one:
        m, n = a.one[0], int(a.one[1])
        r = one_head(m, n, a.dim, a.batch, a.repeats) if m in HEADS else one(m, n, a.dim, a.batch, a.chunk, a.repeats)
        print(json.dumps(r))
        return
    ram_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9  # the machine's, kept with its rows
    rows = []
    for n in a.classes:
        for m in [*a.methods, *a.heads]:
            if (m == "torch_lce" and n > a.torch_lce_max) or (m == "selective_hf" and n > a.hf_max):
                continue
            cmd = [sys.executable, __file__, "--one", m, str(n), "--dim", str(a.dim), "--batch", str(a.batch),
                   "--chunk", str(a.chunk), "--repeats", str(a.repeats)]
            rows.append({**json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout),
                         "machine_ram_gb": ram_gb})
            print(rows[-1], flush=True)
    OUT.mkdir(exist_ok=True)
    md = table(rows, a.note)
    write_outputs(a.name, rows, md)
    print(md)


def table(rows: list[dict], note: str = "") -> str:
    r0 = rows[0]
    chunk = next((r["chunk"] for r in rows if r["chunk"]), None)
    lines = [f"# The loss layer: one step (loss + backward), d = {r0['d']}, B = {r0['B']}, chunk {chunk}, "
             f"{r0['threads']} threads, best of the repeats; each case in its own process" + (f"; {note}" if note else ""), "",
             "| n | method | step s | x materialised | loss's own peak MB | / materialised | index build s | "
             "index MB | inputs MB | class rows touched MB (floor) |", "|---|---|---|---|---|---|---|---|---|---|"]
    ref = {r["n"]: r for r in rows if r["method"] == "materialised"}
    for r in rows:
        m = ref.get(r["n"])
        x = f"{r['step_s'] / m['step_s']:.2f}" if m else "-"
        mem = f"{r['own_peak_mb'] / max(m['own_peak_mb'], 1):.3f}" if m else "-"
        build = f"{r['build_s']:.2f} | {r['build_mb']:,.0f}" if "build_s" in r else "- | -"
        lines.append(f"| {r['n']:,} | {r['method']} | {r['step_s']:.3f} | {x} | {r['own_peak_mb']:,.0f} | {mem} | "
                     f"{build} | {r['inputs_mb']:,.0f} | {r['floor_mb_touched']:,.0f} |")
    lines += ["", "Loss's own peak: the process's peak resident memory after the step minus its peak after allocating "
              "the weights, the batch and tensors the size of their gradients (the materialised loss keeps (B, n) logits "
              "and their softmax; the chunked one B x chunk); for a registry head, minus its peak after its index "
              "build as well (the build's own growth is `index MB`, its time `index build s`, paid once an epoch). "
              "Floor: the class rows a step must touch, read in the forward pass, read again and their gradient "
              "written in the backward (3 x rows x d x 4 bytes): all n for an exact loss, the rows its gradient "
              "reaches for a registry head."]
    ram = f" (this machine: {r0['machine_ram_gb']:.0f} GB of memory)" if "machine_ram_gb" in r0 else ""
    for n in sorted({r["n"] for r in rows} - set(ref)):  # sizes where the materialised loss was not run: its count
        lines += ["", f"n = {n:,}: the materialised loss was not run; its (B, n) logits and their softmax alone would "
                  f"hold 2 x {r0['B']} x {n:,} x 4 bytes = {2 * r0['B'] * n * 4 / 1e9:.1f} GB{ram}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
