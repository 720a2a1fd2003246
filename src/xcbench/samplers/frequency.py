"""Cumulative sampling distributions (MIDX paper, section 6.2.4, Figure 5): how close a proposal's
draws are to the softmax it stands for, seen over the classes ordered by training frequency.

For probe queries h_1..h_Q and classes sorted by decreasing training count, at ranks r (log-spaced
from 1 to n):
  softmax:  F_p(r) = (1/Q) sum_q sum_{i in top r} softmax(o(h_q))_i
  sampler:  F_q(r) = share of S draws per query (Q S in all) that fall in the top r classes
(empirical frequencies of real draws, as the paper's figure; a fixed generator, so reproducible).
"""

from __future__ import annotations

import numpy as np
import torch

RANKS = 32  # points of a curve


def ranks(n: int) -> torch.Tensor:
    return torch.from_numpy(np.unique(np.geomspace(1, n, RANKS).round().astype(np.int64)))          # (R',) <= R


@torch.no_grad()
def cumulative_curves(p: torch.Tensor, draws: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """(2, R) [softmax F_p, sampler F_q] at `ranks(n)` (padded with 1.0 to RANKS) from the queries'
    mean softmax p (n,), their draws (Q, S) and `order` (n,) the classes by decreasing training frequency."""
    n = len(p)
    pos = torch.empty_like(order)
    pos[order] = torch.arange(n, device=order.device)                                               # rank of each class
    f = torch.bincount(pos[draws.flatten()], minlength=n).double() / draws.numel()                 # (n,) by rank
    r = ranks(n).to(p.device) - 1
    out = torch.ones(2, RANKS, dtype=torch.float64, device=p.device)
    out[0, : len(r)], out[1, : len(r)] = p.double()[order].cumsum(0)[r], f.cumsum(0)[r]
    return out.float()
