"""Unstructured sparse linear layer (COO, int32 indices): the baseline of Schultheis & Babbar
(2023), with the same number of weights s * m placed uniformly at random over the (e, m) matrix.
    o[b, col_t] += v_t x[b, row_t]              for every non-zero t
    dv_t = sum_b g[b, col_t] x[b, row_t];       dx[b, row_t] += g[b, col_t] v_t
Runs over chunks of non-zeros with row gathers and index_add (scatter) on transposed (., B)
activations, never forming the dense matrix.
"""

from __future__ import annotations

import torch

CHUNK = 1 << 22


def coo_forward(x, v, rows, cols, m, c=None):
    """o^T[col_t] += v_t x^T[row_t] over chunks of non-zeros (rows of the transposed activations)."""
    xT = x.T.contiguous()                                                          # (e, B)
    oT = torch.zeros(m, x.shape[0], dtype=x.dtype, device=x.device)               # (m, B)
    step = max(1, CHUNK // x.shape[0])
    for a in range(0, v.numel(), step):
        r, k = rows[a:a + step].long(), cols[a:a + step].long()
        oT.index_add_(0, k, xT.index_select(0, r) * v[a:a + step].unsqueeze(1))    # (t, B) into (m, B)
    o = oT.T
    return o if c is None else o + c


def coo_backward(g, x, v, rows, cols, need_x=True):
    xT, gT = x.T.contiguous(), g.T.contiguous()                                    # (e, B), (m, B)
    dv = torch.empty_like(v)
    dxT = torch.zeros_like(xT) if need_x else None
    step = max(1, CHUNK // x.shape[0])
    for a in range(0, v.numel(), step):
        r, k = rows[a:a + step].long(), cols[a:a + step].long()
        gk = gT.index_select(0, k)                                                 # (t, B)
        dv[a:a + step] = (gk * xT.index_select(0, r)).sum(1)
        if need_x:
            dxT.index_add_(0, r, gk * v[a:a + step].unsqueeze(1))
    return (dxT.T if need_x else None), dv


class _COO(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, v, c, rows, cols, m):
        ctx.save_for_backward(x, v, rows, cols)
        return coo_forward(x, v, rows, cols, m, c)

    @staticmethod
    def backward(ctx, g):
        x, v, rows, cols = ctx.saved_tensors
        dx, dv = coo_backward(g.contiguous(), x, v, rows, cols, need_x=ctx.needs_input_grad[0])
        return dx, dv, g.sum(0), None, None, None


def coo_linear(x, v, c, rows, cols, m):
    return _COO.apply(x, v, c, rows, cols, m)


def random_positions(n_in: int, m: int, nnz: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """nnz distinct (row, col) positions uniformly at random, sorted by column; int32."""
    total = n_in * m
    picked = torch.empty(0, dtype=torch.long)
    while picked.numel() < nnz:  # rejection of duplicates; total >> nnz in practice
        extra = torch.randint(0, total, (int((nnz - picked.numel()) * 1.1) + 16,), generator=gen)
        picked = torch.unique(torch.cat([picked, extra]))
    picked = picked[torch.randperm(picked.numel(), generator=gen)[:nnz]].sort().values
    cols, rows = picked // n_in, picked % n_in
    return rows.int(), cols.int()
