"""The fixed fan-in sparse matmul's torch kernels: the CPU implementation and the reference that the
Triton kernels (sparse/ffi_triton.py) are tested against.

Schultheis & Babbar (ECML-PKDD 2023), section 4, Algorithms 1-3, with indices I (s, m) and weights W (s, m):
    forward   o[b, l] = sum_k W[k, l] x[b, I[k, l]] + c[l]                      (Alg. 1, gather)
    backward  dW[k, l] = sum_b g[b, l] x[b, I[k, l]]                            (Alg. 3)
              dx[b, i] = sum_{(k, l): I[k, l] = i} g[b, l] W[k, l]              (Alg. 2, scatter-add)
Labels whose column of g is all zero are skipped by the backward pass. Every pass loops over
cache-sized chunks of labels and, inside, over the s fan-in slots, so nothing larger than (m, B) is
formed. Indices are int64 here (index_select's type).

The forward returns o column-major (the (m, B) accumulator transposed, plus the bias). Writing it row-major
instead made a squared-hinge step at m = 10^5 10-15% faster, bit for bit, but it moves the order of BCE's
mean and of the bias gradient's sum over the batch (both follow o's layout), so kept BCE runs would not
reproduce (measured with benchmarks/reproduce_kept.py on sparse/table4's uniform_int_bce).
"""

from __future__ import annotations

import torch


def label_chunk(batch: int, budget: int = 1 << 18) -> int:
    """Labels per chunk so that a (chunk, B) block (the accumulator) stays cache-sized."""
    return max(1, budget // max(1, batch))


def ffi_forward(x: torch.Tensor, W: torch.Tensor, I: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
    """o = x W_sparse + c. Per chunk of labels and fan-in slot k: o^T[chunk] += W[k] * x^T[I[k]]
    (row gathers of x^T are contiguous copies of B values; nothing larger than (m, B) is formed)."""
    xT = x.T.contiguous()                                                          # (e, B)
    m, B = W.shape[1], x.shape[0]
    oT = torch.empty(m, B, dtype=x.dtype, device=x.device)                         # (m, B)
    step = label_chunk(B)
    for a in range(0, m, step):
        acc = torch.zeros(min(step, m - a), B, dtype=x.dtype, device=x.device)      # (c, B)
        Ic, Wc = I[:, a:a + step], W[:, a:a + step]
        for k in range(W.shape[0]):
            acc.addcmul_(Wc[k].unsqueeze(1), xT.index_select(0, Ic[k]))
        oT[a:a + step] = acc
    return oT.T if c is None else oT.T + c


def active_labels(g: torch.Tensor) -> torch.Tensor:
    """Labels (a,) whose column of g (B, m) is not all zero: the only ones the backward pass visits."""
    return (g != 0).any(0).nonzero().squeeze(1)


def ffi_backward(g: torch.Tensor, x: torch.Tensor, W: torch.Tensor, I: torch.Tensor,
                 need_x: bool = True) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(dx, dW, active labels); labels with an all-zero column of g are skipped entirely."""
    active = active_labels(g)                                                      # (a,)
    xT, gT = x.T.contiguous(), g.T                                                 # (e, B), (m, B)
    dW = torch.zeros_like(W)
    dxT = torch.zeros_like(xT) if need_x else None
    step = label_chunk(x.shape[0])
    for a in range(0, active.numel(), step):
        L = active[a:a + step]                                                     # (c,)
        gc, Ic, Wc = gT[L], I[:, L], W[:, L]                                       # (c, B), (s, c), (s, c)
        dWc = torch.empty_like(Wc)
        for k in range(W.shape[0]):
            dWc[k] = (gc * xT.index_select(0, Ic[k])).sum(1)                       # (c,)
            if need_x:
                dxT.index_add_(0, Ic[k], gc * Wc[k].unsqueeze(1))                  # (c, B) into (e, B)
        dW[:, L] = dWc
    return (dxT.T if need_x else None), dW, active
