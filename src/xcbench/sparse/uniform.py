"""Uniform (fixed fan-in) sparse linear layer: every output label has exactly s inputs.

Schultheis & Babbar, "Towards Memory-Efficient Training for Extremely Large Output Spaces"
(ECML-PKDD 2023), section 4, Algorithms 1-3. Indices I (s, m) int32 and weights W (s, m):
    forward   o[b, l] = sum_k W[k, l] x[b, I[k, l]] + c[l]                      (Alg. 1, gather)
    backward  dW[k, l] = sum_b g[b, l] x[b, I[k, l]]                            (Alg. 3)
              dx[b, i] = sum_{(k, l): I[k, l] = i} g[b, l] W[k, l]              (Alg. 2, scatter-add)
Labels whose back-propagated signal g[:, l] is exactly zero for the whole batch are skipped in
the backward pass (with the squared hinge, every label whose margin is met: implicit negative
mining). Every pass loops over the s fan-in slots, so nothing larger than (m, B) is formed and no
dense (e, m) matrix ever exists; indices are int64 in memory only during a call. This torch path
is the CPU implementation and the reference for any GPU kernel.
"""

from __future__ import annotations

import torch


def ffi_forward(x: torch.Tensor, W: torch.Tensor, I: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
    """o = x W_sparse + c, one fan-in slot k at a time: o^T += W[k] * x^T[I[k]] (row gathers of x^T
    are contiguous copies of B values, and nothing larger than (m, B) is ever formed)."""
    xT = x.T.contiguous()                                                          # (e, B)
    oT = torch.zeros(W.shape[1], x.shape[0], dtype=x.dtype, device=x.device)       # (m, B)
    for k in range(W.shape[0]):
        oT.addcmul_(W[k].unsqueeze(1), xT.index_select(0, I[k]))                   # (m, B)
    o = oT.T
    return o if c is None else o + c


def ffi_backward(g: torch.Tensor, x: torch.Tensor, W: torch.Tensor, I: torch.Tensor,
                 need_x: bool = True) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(dx, dW, active labels); labels with an all-zero column of g are skipped entirely."""
    active = (g != 0).any(0).nonzero().squeeze(1)                                  # (a,)
    xT = x.T.contiguous()                                                          # (e, B)
    gT = g.T[active].contiguous()                                                  # (a, B)
    Ia, Wa = I[:, active], W[:, active]                                            # (s, a)
    dW = torch.zeros_like(W)
    dxT = torch.zeros_like(xT) if need_x else None
    for k in range(W.shape[0]):
        dW[k, active] = (gT * xT.index_select(0, Ia[k])).sum(1)                    # (a,)
        if need_x:
            dxT.index_add_(0, Ia[k], gT * Wa[k].unsqueeze(1))                      # (a, B) into (e, B)
    return (dxT.T if need_x else None), dW, active


class _FFI(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, W, c, I, stats):
        ctx.save_for_backward(x, W, I)
        ctx.stats = stats
        return ffi_forward(x, W, I, c)

    @staticmethod
    def backward(ctx, g):
        x, W, I = ctx.saved_tensors
        dx, dW, active = ffi_backward(g.contiguous(), x, W, I, need_x=ctx.needs_input_grad[0])
        if ctx.stats is not None:  # [labels back-propagated, labels seen]: the implicit-negative-mining share
            ctx.stats += torch.tensor([active.numel(), W.shape[1]], dtype=ctx.stats.dtype, device=ctx.stats.device)
        return dx, dW, g.sum(0), None, None


def ffi_linear(x: torch.Tensor, W: torch.Tensor, c: torch.Tensor, I: torch.Tensor,
               stats: torch.Tensor | None = None) -> torch.Tensor:
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
