"""Best-first probing of the hashing forest (not in Zhang et al. 2018; the priority search of Annoy and FLANN).

The paper's query walks each of the L trees once, taking the side of each boundary that the unit query x
falls on (selectors/forest.py). `probe` k > 0 adds k best-first rounds to the walk: every untaken side of
a step on the query's paths enters a heap with priority
    max over the boundaries crossed to reach it of |n . x - t| / |n|   (the query's distance to them),
and each round walks, by the same rule, from the L sides of lowest priority over all trees (ties: the side
met first), pushing the sides that those walks leave untaken. The pool is then L (1 + k) cells. The
paper's L cells miss most of a query's nearest classes at 10^6 (precision 0.22 with 10 trees; its
neighbours are split by boundaries it passes close to), and the far sides of the nearest boundaries hold
them: 0.61 / 0.75 / 0.87 with 7 / 15 / 31 rounds (benchmarks/out/selectors.md, which also measures the
re-rank's floor: every pooled class is a row gathered for one query, 10^4 of them per query cost 0.21 of
exact top-k there).

`probe_width` w > 1 pops the w L lowest sides a round, so the k L walks take k / w rounds: fewer rounds
of tensor operations, and more of the walks start from the sides along the query's first paths, whose
cells hold more of its nearest classes than the deeper sides that strict best-first reaches
(benchmarks/out/selectors.md, 10^6 classes, 10 trees, leaf 64, with `prefilter` 4: 15 rounds' walks find
0.75 with w = 1 and 0.80 with w = 5 from pools of the same size, in 0.28 and 0.26 of exact top-k's time;
16 at w = 8 find 0.84 in 0.28, where strict best-first needs 23 rounds and 0.45 for 0.82).
"""

from __future__ import annotations

import torch


def lowest(prio: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k lowest entries of each row and their columns, ordered by (value, column): what a stable sort's
    first k columns give, in time linear in the row (the heap is mostly inf: popped or never stepped).
    The k-th lowest value v comes from topk (its value is exact even where topk's order among ties is
    not); a row keeps its entries below v and its first k - #below entries equal to v.  (B, k) x2"""
    k = min(k, prio.shape[1])
    v = prio.topk(k, dim=1, largest=False).values[:, -1:]                                      # (B, 1)
    lt, eq = prio < v, prio == v
    keep = lt | (eq & (torch.cumsum(eq, 1) <= k - lt.sum(1, keepdim=True)))                  # k per row
    at = torch.nonzero(keep)[:, 1].view(len(prio), k)                                           # by column
    g, o = prio.gather(1, at).sort(dim=1, stable=True)
    return g, at.gather(1, o)


def best_first(forest, x: torch.Tensor, Q: int, probe: int, width: int = 1) -> torch.Tensor:
    """The nodes reached by the paper's walk in every tree of `forest` (a forest.Forest), then by rounds
    that walk (by the same rule, `forest.descend`) from the width x L untaken sides of lowest priority met
    so far, over all trees, until `probe` x L walks are made (the last round: what is left).
    x (B, d) unit rows -> nodes (B, <= L (1 + probe)), -1 where fewer sides were left."""
    node, sib, gap = forest.descend(x, Q, record=True)                                          # (B, L), (B, L, D) x2
    B, L = node.shape
    side, prio, ends = sib.reshape(B, -1), gap.reshape(B, -1), [node]                           # (B, H) the heap
    for done in range(0, probe, width):
        g, at = lowest(prio, L * min(width, probe - done))                                      # (B, k) lowest; ties: oldest
        ok = torch.isfinite(g)
        if not ok.any():
            break
        prio = prio.scatter(1, at, torch.inf)                                                   # popped
        end, s2, g2 = forest.descend(x, Q, start=torch.where(ok, side.gather(1, at), -1), record=True)
        ends.append(torch.where(ok, end, -1))
        g2 = torch.maximum(g2, g.unsqueeze(-1)).masked_fill(~ok.unsqueeze(-1), torch.inf)      # (B, k, D')
        side, prio = torch.cat([side, s2.reshape(B, -1)], 1), torch.cat([prio, g2.reshape(B, -1)], 1)
    return torch.cat(ends, 1)
