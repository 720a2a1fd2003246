"""Uniform (fixed fan-in) sparse linear layer: every output label has exactly s inputs.

Schultheis & Babbar, "Towards Memory-Efficient Training for Extremely Large Output Spaces"
(ECML-PKDD 2023), section 4, Algorithms 1-3. Indices I (s, m) int32 and weights W (s, m):
    forward   o[b, l] = sum_k W[k, l] x[b, I[k, l]] + c[l]                      (Alg. 1, gather)
    backward  dW[k, l] = sum_b g[b, l] x[b, I[k, l]]                            (Alg. 3)
              dx[b, i] = sum_{(k, l): I[k, l] = i} g[b, l] W[k, l]              (Alg. 2, scatter-add)
Labels whose back-propagated signal g[:, l] is exactly zero for the whole batch are skipped in
the backward pass (with the squared hinge, every label whose margin is met: implicit negative
mining). Every pass loops over cache-sized chunks of labels and, inside, over the s fan-in slots,
so nothing larger than (m, B) is formed and no dense (e, m) matrix ever exists. `ffi_impl` picks the
kernels: the torch ones (sparse/ffi_torch.py, int64 indices) on the CPU and the reference, the Triton
ones (sparse/ffi_triton.py, int32 indices) for CUDA tensors.
"""

from __future__ import annotations

import functools

import torch

from xcbench.sparse.ffi_torch import ffi_backward, ffi_forward


@functools.cache
def _triton_kernels():
    try:
        from xcbench.sparse import ffi_triton
    except ImportError:  # a CUDA torch without triton: the torch path runs on the GPU too
        return None
    return ffi_triton


def ffi_impl(device: torch.device):
    """(forward, backward, index dtype) for tensors on `device`: the Triton kernels on CUDA when
    triton is installed, else the torch kernels of sparse/ffi_torch.py."""
    k = _triton_kernels() if device.type == "cuda" else None
    if k is not None:
        return k.ffi_forward, k.ffi_backward, torch.int32
    return ffi_forward, ffi_backward, torch.int64


class _FFI(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, W, c, I, stats):
        fwd, ctx.bwd, _ = ffi_impl(x.device)
        ctx.save_for_backward(x, W, I)
        ctx.stats = stats
        return fwd(x, W, I, c)

    @staticmethod
    def backward(ctx, g):
        x, W, I = ctx.saved_tensors
        dx, dW, active = ctx.bwd(g.contiguous(), x, W, I, need_x=ctx.needs_input_grad[0])
        if ctx.stats is not None:  # [labels back-propagated, labels seen]: the implicit-negative-mining share
            ctx.stats += torch.tensor([active.numel(), W.shape[1]], dtype=ctx.stats.dtype, device=ctx.stats.device)
        return dx, dW, g.sum(0), None, None


def ffi_linear(x: torch.Tensor, W: torch.Tensor, c: torch.Tensor, I: torch.Tensor,
               stats: torch.Tensor | None = None) -> torch.Tensor:
    """o = x W_sparse + c with I of `ffi_impl(x.device)`'s index dtype."""
    return _FFI.apply(x, W, c, I, stats)


def distinct_random_indices(n_in: int, s: int, m: int, gen: torch.Generator) -> torch.Tensor:
    """(s, m) int32: for every label, s distinct inputs drawn uniformly without replacement.

    Draw with replacement, then redraw the later copies of any repeated input of a label until
    none is left (uniform over s-subsets by symmetry); for s close to n_in use a top-s of noise."""
    if s > n_in:
        raise ValueError(f"fan-in {s} exceeds the number of inputs {n_in}")
    if 4 * s > n_in:
        out = torch.empty(s, m, dtype=torch.int32)
        step = max(1, (1 << 23) // n_in)
        for a in range(0, m, step):
            c = min(step, m - a)
            out[:, a:a + c] = torch.rand(c, n_in, generator=gen).topk(s, dim=1).indices.T.int()
        return out
    I = torch.randint(0, n_in, (s, m), generator=gen)
    while True:
        srt, order = I.sort(0)
        dup_sorted = torch.zeros_like(srt, dtype=torch.bool)
        dup_sorted[1:] = srt[1:] == srt[:-1]                                       # later copies
        if not dup_sorted.any():
            return I.int()
        dup = torch.zeros_like(dup_sorted).scatter_(0, order, dup_sorted)
        I[dup] = torch.randint(0, n_in, (int(dup.sum()),), generator=gen)
