"""Uniform sparse layer alone on the GPU: the Triton kernels (sparse/ffi_triton.py) against the torch
gather path (sparse/uniform.py), forward and forward+backward, at the paper's sizes (Schultheis &
Babbar 2023: I = 16K/32K inputs, m up to 670K labels, fan-in 32/64, batch 32). The backward pass
gets the squared-hinge gradient of random sparse targets, so most labels back-propagate (the
worst case for zero-skipping). Issue goal: the kernel >= 2x faster than the torch path.
Needs a CUDA device (the kernels are GPU code; on a CPU they only run in Triton's interpreter, which
the tests use for correctness, not speed). Writes benchmarks/out/ffi_kernels.{json,md}.

    python benchmarks/ffi_kernels.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from common import timed, write_outputs

OUT = Path(__file__).resolve().parent / "out"


def one(m: int, e: int, s: int, B: int, repeats: int) -> dict:
    from xcbench.registry import LOSSES
    from xcbench.sparse import ffi_torch, ffi_triton, uniform

    g = torch.Generator().manual_seed(0)
    I32 = uniform.distinct_random_indices(e, s, m, g).cuda()                            # (s, m)
    I64 = I32.long()
    W = (torch.randn(s, m, generator=g) / s ** 0.5).cuda()
    x = torch.relu(torch.randn(B, e, generator=g)).cuda()
    Y = torch.zeros(B, m, device="cuda")
    Y[torch.arange(B).repeat_interleave(5), torch.randint(0, m, (5 * B,), generator=g).cuda()] = 1
    o = ffi_torch.ffi_forward(x, W, I64).requires_grad_(True)
    grad = torch.autograd.grad(LOSSES.get("sq_hinge")(o, Y), o)[0].contiguous()            # (B, m)
    row = {"m": m, "e": e, "s": s, "B": B, "backprop_share": float((grad != 0).any(0).float().mean()),
           "device": torch.cuda.get_device_name()}
    for name, fwd, bwd, I in (("torch", ffi_torch.ffi_forward, ffi_torch.ffi_backward, I64),
                              ("triton", ffi_triton.ffi_forward, ffi_triton.ffi_backward, I32)):
        row[f"{name}_fwd_ms"] = 1e3 * timed(lambda: fwd(x, W, I), repeats, torch.cuda.synchronize, warmup=1)
        row[f"{name}_step_ms"] = 1e3 * timed(lambda: (fwd(x, W, I), bwd(grad, x, W, I)), repeats, torch.cuda.synchronize,
                                          warmup=1)
    dx, dW, _ = ffi_triton.ffi_backward(grad, x, W, I32)
    rx, rW, _ = ffi_torch.ffi_backward(grad, x, W, I64)
    row["max_abs_diff_dW"] = float((dW - rW).abs().max())
    row["max_abs_diff_dx"] = float((dx - rx).abs().max())
    return row


def table(rows: list[dict]) -> str:
    lines = [f"# Uniform sparse layer: Triton kernel vs torch gather path ({rows[0]['device']})", "",
             "| m | I | s | fwd torch ms | fwd triton ms | speed-up | fwd+bwd torch ms | fwd+bwd triton ms | speed-up | "
             "labels back-propagated |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['m']:,} | {r['e']:,} | {r['s']} | {r['torch_fwd_ms']:.2f} | {r['triton_fwd_ms']:.2f} | "
                     f"{r['torch_fwd_ms'] / r['triton_fwd_ms']:.2f}x | {r['torch_step_ms']:.2f} | {r['triton_step_ms']:.2f} | "
                     f"{r['torch_step_ms'] / r['triton_step_ms']:.2f}x | {100 * r['backprop_share']:.1f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", type=int, nargs="*", default=[131000, 670000])
    p.add_argument("--intermediate", type=int, nargs="*", default=[16384, 32768])
    p.add_argument("--fan-in", type=int, nargs="*", default=[32, 64])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("ffi_kernels: no CUDA device here; the Triton kernels are timed on a GPU only "
                         "(tests/test_ffi_triton.py checks them on the CPU in Triton's interpreter)")
    OUT.mkdir(exist_ok=True)
    rows = []
    for m in a.labels:  # smallest first; the files are rewritten after every row, so a cut run keeps what it timed
        for e in a.intermediate:
            for s in a.fan_in:
                rows.append(one(m, e, s, a.batch, a.repeats))
                print(json.dumps(rows[-1]), flush=True)
                write_outputs("ffi_kernels", rows, table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
