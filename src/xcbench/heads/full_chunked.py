"""The full softmax's exact loss without its (B, C) logits: classes in chunks, an online log-sum-exp.

Not from the five papers: the exact baseline as it can be computed since chunked / fused linear
cross-entropy (Cut Cross-Entropy, Liger, torch's `linear_cross_entropy`). Over chunks c of classes,

    o_c = h W_c^T + b_c                                  (B, |c|), one chunk at a time
    lse = log sum_c sum_j exp(o_cj)                      running: lse <- log(e^lse + sum_j e^(o_cj)), one chunk at a time
    l_i = lse_i - o_{i, y_i}                             single-label
    l_i = lse_i - 1/|y_i| sum_{l in y_i} o_il            multi-label (uniform target over the positives, as full_softmax)

and the backward pass recomputes each chunk's logits: with g_i = dL/dl_i and t_i the target distribution,
dO_c = g (softmax_c - t_c), then dh += dO_c W_c, dW_c = dO_c^T h, db_c = 1^T dO_c. Peak memory beyond the
weights and their gradient: B x chunk floats instead of B x C; the cost one extra (B, d) x (d, C) product
(four instead of three). Loss and gradients equal full_softmax's to float rounding (tests/test_heads.py).
"""

from __future__ import annotations

import torch

from xcbench.heads.base import check_param
from xcbench.heads.full_softmax import FullSoftmax
from xcbench.registry import HEADS


def _targets(y: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, labels, weights) of the target distribution, one entry per positive: its row, its class and
    the weight 1/|y_i| (1 for single-label y (B,)); rows of a padded y (B, Lmax) without a label have none."""
    if y.dim() == 1:
        return torch.arange(len(y), device=y.device), y, torch.ones(len(y), dtype=dtype, device=y.device)
    mask = y >= 0                                                                        # (B, Lmax)
    rows = mask.nonzero()[:, 0]
    return rows, y[mask], (1.0 / mask.sum(1).clamp(min=1).to(dtype))[rows]


class ChunkedSoftmaxCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, W, b, y, chunk):
        rows, labels, wt = _targets(y, h.dtype)
        keep = torch.zeros(len(h), dtype=torch.bool, device=h.device)
        keep[rows] = True
        lse = torch.full((len(h),), -torch.inf, dtype=h.dtype, device=h.device)         # (B,) running log-sum-exp
        for c0 in range(0, W.shape[0], chunk):
            o = torch.addmm(b[c0:c0 + chunk], h, W[c0:c0 + chunk].T)                    # (B, c)
            lse = torch.logaddexp(lse, torch.logsumexp(o, 1))
        o_t = (h[rows] * W[labels]).sum(1) + b[labels]                                  # (P,) target logits
        per = lse.clone()
        per.index_add_(0, rows, -wt * o_t)                                              # lse_i - sum_l t_il o_il
        n = keep.sum().clamp(min=1)
        ctx.save_for_backward(h, W, b, lse, rows, labels, wt, keep)
        ctx.chunk, ctx.n = chunk, n
        return per[keep].sum() / n

    @staticmethod
    def backward(ctx, grad):
        h, W, b, lse, rows, labels, wt, keep = ctx.saved_tensors
        g = (grad / ctx.n) * keep.to(h.dtype)                                            # (B,) dL/dl_i
        dh, dW, db = torch.zeros_like(h), torch.zeros_like(W), torch.zeros_like(b)
        for c0 in range(0, W.shape[0], ctx.chunk):
            o = torch.addmm(b[c0:c0 + ctx.chunk], h, W[c0:c0 + ctx.chunk].T)            # (B, c) recomputed
            dO = o.sub_(lse.unsqueeze(1)).exp_().mul_(g.unsqueeze(1))                  # g softmax, in place
            inside = (labels >= c0) & (labels < c0 + ctx.chunk)
            dO.index_put_((rows[inside], labels[inside] - c0), -(g[rows] * wt)[inside], accumulate=True)
            dh.addmm_(dO, W[c0:c0 + ctx.chunk])
            dW[c0:c0 + ctx.chunk] = dO.T @ h
            db[c0:c0 + ctx.chunk] = dO.sum(0)
        return dh, dW, db, None, None


@HEADS.register("full_chunked")
class FullChunked(FullSoftmax):
    """full_softmax's loss and gradients, computed over `chunk` classes at a time (no (B, C) logits)."""

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, init_std: float | None = None,
                 probe_ks: list[int] | None = None, chunk: int = 8192, bias_init: str = "zero") -> None:
        super().__init__(in_dim, n_classes, gen, init_std, probe_ks, bias_init)
        check_param("full_chunked", "chunk", chunk, 1)
        self.chunk = int(chunk)

    def loss(self, h, y, idx, gen):
        return ChunkedSoftmaxCE.apply(h, self.W, self.b, y, self.chunk)
